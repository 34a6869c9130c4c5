"""The JSON Patch operations (RFC 6902) a pod with Troupe keys gets on CREATE, built
directly, without a deep copy and a diff (``docs/decisions/002-webhook.md``): Troupe's gate
and the toleration of its nominated-node taint, the device env entries and the shared-node toleration of a SharedDeviceGroup member, the
``<prefix>-size: auto`` of a namespace opted in, the gang keys of a pod that asks with
Kueue's topology annotations; and the check that a group member does
not request a shared resource itself. The rules are in :mod:`webhook.admission`.

A part of the pod the patch must touch that has the wrong JSON type raises
:class:`Malformed` (the admission denies the pod with its message). :func:`apply_ops`
applies these operations to a pod as the API server does, for ``kubectl troupe plan``
(docs/decisions/051-plan-admits-with-the-webhook.md).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from troupe import kueue
from troupe.config import Config
from troupe.contract import (
    AUTO_SIZE,
    DEVICE_ENV_PREFIX,
    DEVICE_GROUP,
    DEVICE_SHARED_TAINT_EFFECT,
    DEVICE_SHARED_TAINT_KEY,
    DEVICE_SHARED_TAINT_VALUE,
    GATE,
    NOMINATED_TAINT_EFFECT,
    NOMINATED_TAINT_KEY,
    GangKeys,
    created_by_workload,
    device_shared_toleration,
    nominated_toleration,
    pod_labels,
)
from troupe.errors import ContractError

#: One JSON Patch operation (RFC 6902), e.g. ``{"op": "add", "path": "/x", "value": 1}``.
PatchOp = dict[str, Any]
#: A resource quantity that is zero (``0``, ``0m``, ``0.0``, ``0Gi``): requesting none of a
#: shared resource is harmless.
_ZERO_QUANTITY = re.compile(r"^\+?(0+(\.0*)?|\.0+)[A-Za-z]*$")


def pointer(*parts: str | int) -> str:
    """A JSON Pointer (RFC 6901) from unescaped path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def device_env_entry(var: str) -> dict[str, Any]:
    """The container env entry for ``var``: taken by the Downward API from the pod's
    ``deviceshare.io/env.<var>`` annotation, which the reconciler writes before release."""
    return {
        "name": var,
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": _field_path(var)}},
    }


def _field_path(var: str) -> str:
    return f"metadata.annotations['{DEVICE_ENV_PREFIX}{var}']"


def _is_ours(entry: Mapping[str, Any], var: str) -> bool:
    vf = entry.get("valueFrom")
    ref = vf.get("fieldRef") if isinstance(vf, dict) else None
    return isinstance(ref, dict) and ref.get("fieldPath") == _field_path(var)


class Malformed(Exception):
    """A part of the pod the patch must touch has the wrong JSON type."""


def gate_ops(spec: Mapping[str, Any]) -> list[PatchOp]:
    """The op that adds Troupe's gate (none when the pod has it). Raises :class:`Malformed`."""
    gates = spec.get("schedulingGates")
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    if not isinstance(gates, list):
        raise Malformed("spec.schedulingGates: must be a list")
    if any(isinstance(g, dict) and g.get("name") == GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]


def env_ops(spec: Mapping[str, Any], wanted: tuple[str, ...]) -> tuple[list[PatchOp], list[str]]:
    """The ops that give every container and init container one env entry per variable of
    ``wanted`` (:func:`device_env_entry`), and one warning per variable a container sets
    itself (kept). Raises :class:`Malformed`."""
    ops: list[PatchOp] = []
    warnings: list[str] = []
    if not wanted:
        return ops, warnings
    for list_name in ("initContainers", "containers"):
        containers = spec.get(list_name)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise Malformed(f"spec.{list_name}: must be a list")
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                raise Malformed(f"spec.{list_name}[{i}]: must be an object")
            env = c.get("env")
            if env is None:
                ops.append({
                    "op": "add",
                    "path": pointer("spec", list_name, i, "env"),
                    "value": [device_env_entry(v) for v in wanted],
                })
                continue
            if not isinstance(env, list):
                raise Malformed(f"spec.{list_name}[{i}].env: must be a list")
            existing = {
                e["name"]: e for e in env if isinstance(e, dict) and isinstance(e.get("name"), str)
            }
            for var in wanted:
                entry = existing.get(var)
                if entry is None:
                    ops.append({
                        "op": "add",
                        "path": pointer("spec", list_name, i, "env", "-"),
                        "value": device_env_entry(var),
                    })
                elif not _is_ours(entry, var):
                    name = c.get("name")
                    warnings.append(
                        f"container {name if isinstance(name, str) else i!s}: env {var} is already set "
                        f"and was kept, so it will not carry the devices of {DEVICE_GROUP}"
                    )
    return ops, warnings


def auto_size(pod: Mapping[str, Any], ann: Mapping[str, Any], config: Config) -> tuple[
        Mapping[str, Any], Mapping[str, Any], list[PatchOp]]:
    """A namespace opted in with ``troupe.io/gang-mode: auto``: the pod as if it said
    ``<prefix>-size: auto``, its annotations, and the op that writes it; unchanged (and
    no op) when the pod names a gang or a size itself, or no supported workload made it."""
    gang = GangKeys.for_prefix(config.gang_annotation_prefix)
    if gang.name in ann or gang.size in ann or not created_by_workload(pod):
        return pod, ann, []
    return with_annotations(pod, ann, {gang.size: AUTO_SIZE})


def kueue_gang(pod: Mapping[str, Any], ann: Mapping[str, Any], config: Config) -> tuple[
        Mapping[str, Any], Mapping[str, Any], list[PatchOp]]:
    """A pod that asks for a placement with Kueue's topology annotations and names no gang
    (docs/decisions/039-kueue-annotations.md): the pod as if it named the gang Kueue would
    have admitted together, its annotations, and the ops that write them: a Kueue plain-pod
    group (``kueue.x-k8s.io/pod-group-name`` label, ``-total-count`` annotation) is the gang
    of that name and size; a pod a supported workload made gets ``<prefix>-size: auto``;
    any other pod is left a gang of one. Raises :class:`ContractError` naming the
    ``kueue.x-k8s.io/pod-group-total-count`` annotation when it is not a size."""
    gang = GangKeys.for_prefix(config.gang_annotation_prefix)
    if gang.name in ann or gang.size in ann:
        return pod, ann, []
    group = kueue.pod_group(pod_labels(pod), ann)
    if group is None:
        return auto_size(pod, ann, config)
    name, count = group
    if not (count.isascii() and count.isdigit() and 0 < len(count) <= 9 and int(count) >= 1):
        raise ContractError(kueue.POD_GROUP_TOTAL_COUNT, count,
                            f"must be the size of the group {name!r}, an integer >= 1 of at most 9 digits")
    return with_annotations(pod, ann, {gang.name: name, gang.size: str(int(count))})


def with_annotations(pod: Mapping[str, Any], ann: Mapping[str, Any], added: Mapping[str, str]) -> tuple[
        Mapping[str, Any], Mapping[str, Any], list[PatchOp]]:
    """The pod with annotations ``added`` (keys it does not carry), its annotations, and the
    ops that add them."""
    meta = pod.get("metadata") or {}
    if meta.get("annotations") is None:
        ops: list[PatchOp] = [{"op": "add", "path": "/metadata/annotations", "value": dict(added)}]
    else:
        ops = [{"op": "add", "path": pointer("metadata", "annotations", k), "value": v} for k, v in added.items()]
    ann = {**ann, **added}
    return {**pod, "metadata": {**meta, "annotations": ann}}, ann, ops


def shared_resource_requests(spec: Mapping[str, Any], config: Config) -> list[str]:
    """One message per shared resource (``sharedDeviceResources``) that a device-group pod
    requests itself, in a container's, an init container's or the pod-level ``resources``:
    the device plugin would hand it devices of its own choosing, not the group's, and the
    group's accounting would not see them (issue: shared device groups, accounting)."""
    shared = config.shared_device_resources
    places: list[tuple[str, object]] = []
    for list_name in ("initContainers", "containers"):
        containers = spec.get(list_name)
        if isinstance(containers, list):
            for i, c in enumerate(containers):
                if isinstance(c, dict):
                    name = c.get("name")
                    label = f"{'init container' if list_name == 'initContainers' else 'container'} " + (
                        name if isinstance(name, str) and name else f"#{i}")
                    places.append((label, c.get("resources")))
    places.append(("the pod-level resources", spec.get("resources")))
    problems = []
    for label, resources in places:
        if not isinstance(resources, dict):
            continue
        for field in ("requests", "limits"):
            amounts = resources.get(field)
            if not isinstance(amounts, dict):
                continue
            for resource in shared:
                amount = amounts.get(resource)
                if amount is None or (isinstance(amount, str) and _ZERO_QUANTITY.fullmatch(amount)) or amount == 0:
                    continue
                problems.append(
                    f"{label}: resources.{field}[{resource}] = {amount!r}: a pod in {DEVICE_GROUP} gets "
                    f"{resource} from its SharedDeviceGroup and must not request it itself (the device plugin "
                    f"would hand it other devices than the group's)"
                )
    return problems


def _tolerates(toleration: object, key: str, value: str, effect: str) -> bool:
    """Whether ``toleration`` already tolerates the taint ``key=value:effect``, by
    kube-scheduler's rule (``v1.Toleration.ToleratesTaint``: an empty effect matches every
    effect; ``Exists`` any value; an empty key with ``Exists`` every taint)."""
    if not isinstance(toleration, dict):
        return False
    if (toleration.get("effect") or "") not in ("", effect):
        return False
    toleration_key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return toleration_key in ("", key)
    return operator == "Equal" and toleration_key == key and (toleration.get("value") or "") == value


def toleration_ops(spec: Mapping[str, Any], shared: bool) -> list[PatchOp]:
    """Add the toleration of Troupe's nominated-node taint (every pod Troupe gates:
    docs/decisions/033-nominated-nodes-are-tainted.md) and, when ``shared`` (a
    SharedDeviceGroup member), of the shared-node taint, each unless one already
    tolerates it (so a reinvocation adds nothing)."""
    tolerations = spec.get("tolerations")
    if tolerations is not None and not isinstance(tolerations, list):
        raise Malformed("spec.tolerations: must be a list")
    present = tolerations or []
    wanted = [(NOMINATED_TAINT_KEY, "", NOMINATED_TAINT_EFFECT, nominated_toleration())]
    if shared:
        wanted.append((DEVICE_SHARED_TAINT_KEY, DEVICE_SHARED_TAINT_VALUE, DEVICE_SHARED_TAINT_EFFECT,
                       device_shared_toleration()))
    missing = [toleration for key, value, effect, toleration in wanted
               if not any(_tolerates(t, key, value, effect) for t in present)]
    if not missing:
        return []
    if tolerations is None:
        return [{"op": "add", "path": "/spec/tolerations", "value": missing}]
    return [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in missing]


def apply_ops(document: dict[str, Any], ops: Iterable[PatchOp]) -> None:
    """Apply the operations this module builds to ``document`` (a decoded pod), in place,
    as the API server applies the webhook's patch: RFC 6902 ``add`` (to an object member,
    an array index, or ``-``, the end of an array) and ``replace`` (of an existing member),
    at RFC 6901 pointers. Values are copied, so no two documents share one. Raises
    ``ValueError`` naming the operation for any other operation, a path that does not lead
    into the document, or a ``replace`` of a member that is not there: the webhook never
    builds those. (Only ``kubectl troupe plan`` applies a patch in process; the tests check
    this against the ``jsonpatch`` library.)"""
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if kind not in ("add", "replace") or not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"JSON Patch operation {op!r}: only add and replace at a pointer are applied")
        *parents, last = (t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/"))
        target: Any = document
        for token in parents:
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise ValueError(f"JSON Patch operation {op!r}: {path} does not lead into the document")
        value = copy.deepcopy(op.get("value"))
        if isinstance(target, dict) and (kind == "add" or last in target):
            target[last] = value
        elif isinstance(target, list) and kind == "add" and last == "-":
            target.append(value)
        elif isinstance(target, list) and last.isdigit() and int(last) < len(target) + (kind == "add"):
            if kind == "add":
                target.insert(int(last), value)
            else:
                target[int(last)] = value
        else:
            raise ValueError(f"JSON Patch operation {op!r}: {path} does not lead into the document")
