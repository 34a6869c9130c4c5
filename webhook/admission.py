"""Admission for Troupe's four contracts: the pure core of the webhook.

:func:`mutate` takes a decoded AdmissionReview v1 (a plain dict, as ``json.loads`` gives it)
and the :class:`~troupe.config.Config`, and returns the AdmissionReview v1 to send back. It
does no I/O, makes no API calls, reads no clock and never raises: a malformed review gets
a denial, an unexpected bug an ``error`` denial (HTTP-level framing is the Flask adapter's
job, ``webhook/app.py``).

What it admits, denies, gates and stamps is the contract's, and ``docs/contract.md`` is its
authority: "Pod annotations a user sets" and "Limits of the webhook" (the keys of
``seeds/001`` and ``seeds/002``, the updates refused), "Which pods form a gang" (Kueue's
topology annotations and Kueue for quota, pod groups at admission, groups a peer scheduler
makes), "Gates", "What the reconciler writes" (the protected keys, mirror pods), "Shared
device groups" (``seeds/000``) and "Bounds on what one tenant's objects may cost". This module reads a CREATE of a pod in that order: protected
keys, then what declares its gang (:mod:`webhook.declared`, with :mod:`webhook.podgroups`),
then the gang, topology and device-group keys (:mod:`webhook.checks`, the parsers of
:mod:`troupe.contract` the reconciler shares), then the gate and the patch; an UPDATE is only
checked, never patched, so the reconciler's own writes pass unchanged.

Always untouched: pods in ``excludedNamespaces``, other resources, subresources and
operations. Idempotent: calling :func:`mutate` again on the patched pod
(``reinvocationPolicy: IfNeeded``) adds nothing. ``dryRun`` requests get the same answer;
there is nothing else to skip, since the webhook has no side effects.

The patch is built directly as RFC 6902 operations (no deep copy and diff; :mod:`webhook.patches`): see
``docs/decisions/002-webhook.md`` for the measurement. JSON objects are recognised as
``dict`` (what ``json.loads`` gives), which is several times cheaper to test than ``Mapping``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson

from troupe import kueue
from troupe.bounds import pod_terms_error
from troupe.config import Config
from troupe.contract import (
    DEVICE_GROUP,
    GATE,
    MIRROR_POD_ANNOTATION,
    TOPOLOGY_KEYS,
    GangKeys,
    GangSpec,
    device_env_var,
    is_reserved_annotation,
    parse_gang,
    parse_topology_request,
)
from troupe.errors import ContractError
from troupe.layers import TOPOLOGY_SLICE_SIZE, check_gang_size, check_min_size
from troupe.policies import (
    AS_CREATED,
    FAILURE_POLICY,
    GANG_POLICY_KEYS,
    RELEASE_MODE,
    parse_failure_policy,
    parse_release_mode,
)
from webhook.checks import API_VERSION, KIND, MAX_CONTAINERS, container_count_error, envelope_error
from webhook.declared import read_declaration
from webhook.patches import (
    Malformed,
    PatchOp,
    env_ops,
    gate_ops,
    pointer,
    shared_resource_requests,
    toleration_ops,
)
from webhook.podgroups import group_errors, group_warnings, reference_changes

__all__ = ["API_VERSION", "KIND", "MAX_CONTAINERS", "Admission", "admit", "container_count_error", "envelope_error",
           "mutate", "outcome_of", "patch_of"]

#: What a review ended as, for metrics and logs: no patch, a patch, a denial, or an error
#: (malformed envelope or a bug).
Outcome = Literal["allowed", "patched", "denied", "error"]

#: A DNS-1123 subdomain: what a cluster-scoped object name (a SharedDeviceGroup) must be.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MISSING = object()
#: The kubelet's identity (the Node authorizer's convention,
#: https://kubernetes.io/docs/reference/access-authn-authz/node/): user ``system:node:<name>``
#: in group ``system:nodes``. Only it makes real mirror pods.
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
class Admission(NamedTuple):
    """The verdict on one admission request, before it is put in an AdmissionReview.

    ``ops`` is the JSON Patch to apply (empty: none); ``code``/``reason``/``message`` are
    the denial's ``status`` (only when ``allowed`` is False); ``warnings`` go back to the
    client as admission warnings either way. (A NamedTuple: built once per request, it is
    several times cheaper to create than a frozen dataclass.)
    """

    allowed: bool
    ops: tuple[PatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    code: int = 200
    reason: str = ""
    message: str = ""


_ALLOW = Admission(True)

def _deny(code: int, message: str) -> Admission:
    reason = {400: "BadRequest", 403: "Forbidden"}.get(code, "InternalError")
    return Admission(False, code=code, reason=reason, message=message)


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``obj.metadata.annotations``: {} when absent, None when present but not a map."""
    meta = obj.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        return None
    ann = meta.get("annotations")
    if ann is None:
        return {}
    return ann if isinstance(ann, dict) else None


@dataclass(frozen=True)
class _Keys:
    """What :func:`admit` derives from a configuration, computed once per Config."""

    troupe: tuple[str, ...]
    gang_timeout: str
    gang_min_size: str
    env_vars: tuple[str, ...]


_keys_cache: dict[int, tuple[Config, _Keys]] = {}


def _keys(config: Config) -> _Keys:
    hit = _keys_cache.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    gang = GangKeys.for_prefix(config.gang_annotation_prefix)
    keys = _Keys(
        troupe=(*gang.all(), *TOPOLOGY_KEYS, *GANG_POLICY_KEYS, DEVICE_GROUP),
        gang_timeout=gang.timeout,
        gang_min_size=gang.min_size,
        env_vars=tuple(dict.fromkeys(device_env_var(r) for r in config.shared_device_resources)),
    )
    if len(_keys_cache) > 64:  # a process normally has one Config; tests make many
        _keys_cache.clear()
    _keys_cache[id(config)] = (config, keys)
    return keys


def _protected_changes(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> Iterable[tuple[str, str]]:
    """(key, verb) for each protected annotation added, changed or removed, by key."""
    keys = sorted(k for k in {*old, *new} if isinstance(k, str) and is_reserved_annotation(k))
    for k in keys:
        before, after = old.get(k, _MISSING), new.get(k, _MISSING)
        if before is _MISSING and after is not _MISSING:
            yield k, "add"
        elif before is not _MISSING and after is _MISSING:
            yield k, "remove"
        elif before != after:
            yield k, "change"


def _protection_message(key: str, verb: str, user: str, config: Config) -> str:
    return (
        f"annotation {key}: only Troupe's reconciler ({config.reconciler_username}) may {verb} it, "
        f"because it records Troupe's decisions; requested by {user or 'an unknown user'}"
    )


def _gate_names(pod: object) -> set[str]:
    """Names of a pod's scheduling gates (empty for anything malformed)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    if not isinstance(gates, list):
        return set()
    return {g["name"] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)}


def _troupe_key_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], config: Config
) -> list[str]:
    """One message per Troupe key (gang keys of the prefix, topology levels, device group)
    that an UPDATE adds, changes or removes. They are fixed at creation
    (``docs/decisions/013-update-rules.md``): the reconciler groups and places pods by them."""
    problems = []
    for k in _keys(config).troupe:
        before, after = old.get(k, _MISSING), new.get(k, _MISSING)
        if before == after:
            continue
        if before is _MISSING:
            what = f"cannot be added after the pod is created, got {after!r}"
        elif after is _MISSING:
            what = f"cannot be removed after the pod is created (it is {before!r})"
        else:
            what = f"cannot change after the pod is created, from {before!r} to {after!r}"
        problems.append(f"annotation {k}: {what}; delete the pod and create it again with the value wanted")
    return problems


def _review_update(
    request: Mapping[str, Any], new_ann: Mapping[str, Any], user: str, config: Config, status: bool
) -> Admission:
    """An UPDATE of a pod (``status``: of its ``pods/status`` subresource, whose strategy
    resets the spec but keeps metadata, so annotations can change there too)."""
    old = request.get("oldObject")
    if not isinstance(old, dict):
        return _deny(400, "request.oldObject: must be the existing Pod on UPDATE")
    old_ann = _annotations(old) or {}
    if user == config.reconciler_username:
        return _ALLOW
    problems = [_protection_message(k, verb, user, config) for k, verb in _protected_changes(old_ann, new_ann)]
    if not status and GATE in _gate_names(old) and GATE not in _gate_names(request.get("object")):
        problems.append(
            f"scheduling gate {GATE}: only Troupe's reconciler ({config.reconciler_username}) may remove it, "
            f"because it releases a whole gang at once; requested by {user or 'an unknown user'}"
        )
    if problems:
        return _deny(403, "; ".join(problems))
    changed = _troupe_key_changes(old_ann, new_ann, config)
    if GATE in _gate_names(old):
        changed.extend(reference_changes(old, request.get("object")))
    if changed:
        return _deny(400, "; ".join(changed))
    return _ALLOW


def _contract_errors(
    pod: Mapping[str, Any], ann: Mapping[str, Any], config: Config
) -> tuple[GangSpec | None, list[str]]:
    """The pod's gang (None without gang keys) and every contract violation, one per contract."""
    errors: list[str] = []
    gang = None
    try:
        gang = parse_gang(pod, config)
    except ContractError as e:
        errors.append(str(e))
    if any(key in ann for key in TOPOLOGY_KEYS) or kueue.asks(ann):
        try:
            topology = parse_topology_request(pod, config)
            if gang is not None and not gang.auto:
                check_gang_size(topology.slices, gang.size, str(kueue.as_troupe(ann).get(TOPOLOGY_SLICE_SIZE)))
            if gang is not None and gang.min_size is not None and topology.slices:
                check_min_size(topology.slices, gang.min_size, _keys(config).gang_min_size)
        except ContractError as e:
            errors.append(str(e if e.key.startswith("kueue.") or not kueue.asks(ann) else kueue.rekeyed(e, ann)))
    if RELEASE_MODE in ann:
        try:
            parse_release_mode(ann, AS_CREATED)
        except ContractError as e:
            errors.append(str(e))
    if FAILURE_POLICY in ann:
        try:
            parse_failure_policy(ann)
        except ContractError as e:
            errors.append(str(e))
    if DEVICE_GROUP in ann:
        group = ann[DEVICE_GROUP]
        if not isinstance(group, str) or len(group) > 253 or not _DNS_SUBDOMAIN.fullmatch(group):
            errors.append(str(ContractError(DEVICE_GROUP, group if isinstance(group, str) else str(group),
                                            "must name a SharedDeviceGroup (lower-case letters, digits, '-' and '.', "
                                            "at most 253 characters)")))
    return gang, errors


def _review_create(
    pod: Mapping[str, Any], ann: Mapping[str, Any], user: str, config: Config, gang_mode_auto: bool = False
) -> Admission:
    if user != config.reconciler_username and any(map(is_reserved_annotation, ann)):
        reserved = sorted(k for k in ann if is_reserved_annotation(k))
        return _deny(403, "; ".join(_protection_message(k, "set", user, config) for k in reserved))
    read = read_declaration(pod, ann, config, gang_mode_auto, _keys(config).troupe)
    if isinstance(read, str):
        return _deny(400, read)
    pod, ann, auto_ops, groups, adopt_ops = read.pod, read.ann, read.ops, read.groups, read.adopt_ops
    spec = pod.get("spec")
    refused = (read.peer.refused,) if read.peer.refused else ()
    if not read.troupe_keys and not read.asks_kueue and not groups and not read.peer.gate:
        # No Troupe key, no group, no peer's group to gang it by: untouched but for an adopted
        # scheduler name, including pods created with a GKE topology gate, which the
        # reconciler handles as they are (seeds/002), and the pods Kueue manages.
        return Admission(True, ops=tuple(adopt_ops), warnings=refused) if adopt_ops or refused else _ALLOW
    gang, errors = _contract_errors(pod, ann, config)
    errors.extend(group_errors(groups))
    if errors:
        return _deny(400, "; ".join(errors))
    if not isinstance(spec, dict):
        return _deny(400, "spec: a Pod with Troupe annotations or a pod group must have a spec object")
    too_many = container_count_error(spec) or pod_terms_error(spec)
    if too_many is not None:
        return _deny(400, too_many)
    try:
        ops = [*auto_ops, *adopt_ops, *gate_ops(spec), *toleration_ops(spec, shared=DEVICE_GROUP in ann)]
        if gang is not None:
            key = _keys(config).gang_timeout
            want = str(gang.timeout_seconds)
            if ann.get(key) != want:
                op = "replace" if key in ann else "add"
                ops.append({"op": op, "path": pointer("metadata", "annotations", key), "value": want})
        warnings = [*group_warnings(groups), *refused]
        if DEVICE_GROUP in ann:
            requested = shared_resource_requests(spec, config)
            if requested:
                return _deny(400, "; ".join(requested))
            device_ops, device_warnings = env_ops(spec, _keys(config).env_vars)
            ops.extend(device_ops)
            warnings.extend(device_warnings)
    except Malformed as e:
        return _deny(400, str(e))
    return Admission(True, ops=tuple(ops), warnings=tuple(warnings))


def admit(request: Mapping[str, Any], config: Config, gang_mode_auto: bool = False) -> Admission:
    """The :class:`Admission` for one ``AdmissionReview.request`` (see the module docstring
    for the rules; ``gang_mode_auto``: the request came through the namespace opt-in
    entry). Never raises for malformed input of any JSON shape; bugs aside."""
    resource = request.get("resource")
    if isinstance(resource, dict) and (
        resource.get("group", "") != "" or resource.get("resource", "pods") != "pods"
    ):
        return _ALLOW
    sub = request.get("subResource")
    if sub and sub != "status":
        return _ALLOW
    operation = request.get("operation")
    if operation != "UPDATE" and (sub or operation != "CREATE"):
        return _ALLOW
    pod = request.get("object")
    if not isinstance(pod, dict):
        return _deny(400, f"request.object: must be a Pod object for {operation}")
    ann = _annotations(pod)
    if ann is None:
        return _deny(400, "metadata.annotations: must be a map of strings to strings")
    meta = pod.get("metadata")
    namespace = request.get("namespace") or (meta.get("namespace") if isinstance(meta, dict) else None)
    if namespace in config.excluded_namespaces:
        return _ALLOW
    user_info = request.get("userInfo")
    username = user_info.get("username") if isinstance(user_info, dict) else None
    user = username if isinstance(username, str) else ""
    if operation == "UPDATE":
        return _review_update(request, ann, user, config, status=bool(sub))
    if MIRROR_POD_ANNOTATION in ann and _is_node(user, user_info):
        # A static pod's mirror, made by its kubelet: never gated or mutated (the kubelet runs
        # it whatever the API says), but it may not carry Troupe's decisions either.
        reserved = sorted(k for k in ann if isinstance(k, str) and is_reserved_annotation(k))
        if reserved:
            return _deny(403, "; ".join(_protection_message(k, "set", user, config) for k in reserved))
        return _ALLOW
    return _review_create(pod, ann, user, config, gang_mode_auto)


def _is_node(user: str, user_info: object) -> bool:
    """Whether the requester is a kubelet: ``system:node:<name>`` in group ``system:nodes``.
    Anyone else's ``kubernetes.io/config.mirror`` annotation is not trusted."""
    if not user.startswith(NODE_USER_PREFIX) or not isinstance(user_info, dict):
        return False
    groups = user_info.get("groups")
    return isinstance(groups, list) and NODES_GROUP in groups


def _response(uid: str, d: Admission) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": uid, "allowed": d.allowed}
    if d.ops:
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(orjson.dumps(d.ops)).decode("ascii")
    if d.warnings:
        out["warnings"] = list(d.warnings)
    if not d.allowed:
        out["status"] = {"status": "Failure", "code": d.code, "reason": d.reason, "message": d.message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": out}


def mutate(review: object, config: Config, gang_mode_auto: bool = False) -> dict[str, Any]:
    """Answer one AdmissionReview v1: ``review`` in (decoded JSON), AdmissionReview v1 out.

    ``gang_mode_auto``: the review came through the namespace opt-in entry
    (:data:`webhook.registration.MUTATE_AUTO_PATH`), so its pod's namespace is labelled
    ``troupe.io/gang-mode: auto`` (module docstring).

    The response echoes ``request.uid``; when allowed it may carry ``patchType: JSONPatch``
    and a base64 ``patch`` (decode it with :func:`patch_of`) and ``warnings``; when denied,
    ``status`` with ``code`` 400 (bad input), 403 (protected annotation) or 500 (a bug here),
    and a message naming the key and the value. Never raises. A review whose envelope is
    invalid (see :func:`envelope_error`) is denied with code 400 and ``uid`` "" when it has
    none.
    """
    problem = envelope_error(review)
    if problem is not None:
        uid = ""
        if isinstance(review, dict) and isinstance(review.get("request"), dict):
            raw = review["request"].get("uid")
            uid = raw if isinstance(raw, str) else ""
        return _response(uid, _deny(400, problem))
    assert isinstance(review, dict)
    request = review["request"]
    try:
        admission = admit(request, config, gang_mode_auto)
    except Exception as e:  # noqa: BLE001  the webhook must answer, never crash: a bug becomes a denial
        admission = _deny(500, f"internal error in Troupe's webhook ({type(e).__name__}); see its logs")
    return _response(request["uid"], admission)


def patch_of(review_response: Mapping[str, Any]) -> list[PatchOp]:
    """The JSON Patch operations of a :func:`mutate` result ([] when it has none)."""
    resp = review_response.get("response")
    if not isinstance(resp, dict) or "patch" not in resp:
        return []
    ops: list[PatchOp] = json.loads(base64.b64decode(resp["patch"]))
    return ops


def outcome_of(review_response: Mapping[str, Any]) -> Outcome:
    """How a :func:`mutate` result ended: ``allowed`` (no patch), ``patched``, ``denied``,
    or ``error`` (status code 500: a bug here). A malformed envelope never gets this far in
    the adapter, which answers it with HTTP 400 and counts it as ``error`` itself."""
    resp = review_response.get("response")
    if not isinstance(resp, dict):
        return "error"
    if resp.get("allowed"):
        return "patched" if "patch" in resp else "allowed"
    status = resp.get("status")
    return "error" if isinstance(status, dict) and status.get("code") == 500 else "denied"

