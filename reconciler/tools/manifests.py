"""The pods a manifest would create, as they would reach the reconciler: ``kubectl troupe plan``.

A manifest (YAML or JSON: one object, a ``List``, or several documents) holds what users
apply: Pods, the workloads whose controllers make pods (every kind of
:data:`EXPANDERS`: Jobs, JobSets, Deployments, ReplicaSets, StatefulSets,
LeaderWorkerSets, and the operators' kinds the registry knows: RayClusters, RayJobs, MPIJobs), and the
objects of the gang APIs Troupe reads. :func:`expand` makes the pods their controllers
would create, as those controllers make them (:mod:`reconciler.tools.controllers`,
:mod:`reconciler.tools.operators`):

- a **Pod** is itself;
- a **PodGroup** (the upstream Workload API's, Volcano's, coscheduling's or KAI's) is
  itself, read with the pods that name it (docs/decisions/056-pod-groups.md);
- an upstream **Workload** (``scheduling.k8s.io``) is a policy template: kube-scheduler
  and Troupe read the PodGroups made from it, not it, so it is taken and said so;
- a ConfigMap, Service and the like (:data:`PODLESS_KINDS`) make no pod: passed over, said so;
- an object with ``metadata.generateName`` and no name is named as the API server names
  it (the prefix and five characters; deterministic here), and said so.

Then what the API server does at creation that the decision reads: the namespace (the
manifest's, else the one given), ``spec.priority`` from ``priorityClassName`` or the global
default PriorityClass, ``creationTimestamp`` (now), a ``uid``; and the webhook's admission,
by the webhook's own function, its patch applied (:func:`admit`: the pods are exactly those
the webhook would let through, as it would mutate them;
docs/decisions/051-plan-admits-with-the-webhook.md). The pods the webhook leaves alone are
said to be left to kube-scheduler, per object, with why (:attr:`Expanded.left`;
docs/decisions/077-plan-takes-what-users-apply.md).

Pure: objects and a clock value in, objects out; nothing is created anywhere.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.tools import controllers, operators
from reconciler.tools.expansion import ManifestError, mapping, suffix, uid
from troupe import contract
from troupe.adoption import APPS_OWNER_KINDS
from troupe.config import Config
from troupe.workloadkinds import KIND_OF
from webhook.admission import admit as webhook_admit
from webhook.patches import apply_ops

__all__ = ["KINDS", "Context", "Expanded", "ManifestError", "admit", "created", "expand"]

#: Each kind's expansion, by ``kind``: Kubernetes' and the workload projects' controllers
#: (:mod:`reconciler.tools.controllers`), then the operators' (:mod:`reconciler.tools.operators`).
EXPANDERS = {**controllers.EXPANDERS, **operators.EXPANDERS}
#: The gang APIs' objects a manifest may hold besides workloads: ``PodGroup`` (of any
#: source Troupe reads, docs/decisions/056-pod-groups.md) and the upstream ``Workload``.
GROUP_KINDS = ("PodGroup", "Workload")
#: Kinds a manifest may hold beside its workloads that make no pod and that no decision
#: reads (a RayJob's sample ships its script as a ConfigMap): passed over, and said so.
PODLESS_KINDS = ("ConfigMap", "Secret", "Service", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy",
                 "PersistentVolumeClaim", "ResourceClaimTemplate")
#: The kinds a manifest may hold.
KINDS = ("Pod", *EXPANDERS, *GROUP_KINDS, *PODLESS_KINDS)
#: The kinds the reconciler reads of what a manifest creates (the rest are only expanded).
READ_KINDS = frozenset({*KIND_OF, "PodGroup", *APPS_OWNER_KINDS})


@dataclass(frozen=True)
class Expanded:
    """What a manifest creates: ``pods`` (admitted: as the reconciler would see them),
    ``workloads`` (``(kind, object)`` of the objects the reconciler reads: its Jobs,
    JobSets, the registry's kinds, ReplicaSets and StatefulSets, and its PodGroups, which
    declare gangs), ``managed``: the keys (``namespace/name``) of the pods that carry a
    Troupe gate once admitted (the reconciler manages them); ``notes``: lines saying what
    was done with objects that make no pod of their own (a ``Workload``) and which names
    were generated; ``left``: per manifest object (``Deployment ml/web``), its pods the
    webhook leaves alone and why (kube-scheduler places them, one by one)."""

    pods: tuple[dict[str, Any], ...]
    workloads: tuple[tuple[str, dict[str, Any]], ...]
    managed: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)
    left: tuple[tuple[str, tuple[str, ...], str], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Context:
    """What admission reads besides the object: the Troupe ``config``, the ``namespace``
    of objects that name none, namespace labels by name (a namespace's
    ``troupe.io/gang-mode: auto`` opts its workloads' pods in), PriorityClasses by name
    (``(value, globalDefault)``), ``now`` (seconds since the epoch: creation time) and
    the requesting ``user`` (the webhook refuses Troupe's reserved annotations from
    anyone but the reconciler)."""

    config: Config
    namespace: str = "default"
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority_classes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    now: float = 0.0
    user: str = ""


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def expand(objects: Sequence[tuple[str, str, Mapping[str, Any]]], ctx: Context) -> Expanded:
    """The pods and workloads of a manifest's objects (``(where, kind, object)``, as
    :func:`reconciler.objects.snapshot_io.read_objects` gives them): :func:`created`, each
    pod then admitted (:func:`admit`). Raises :class:`ManifestError` naming the object: an
    unsupported kind, a malformed field, a pod admission refuses."""
    notes: list[str] = []
    origins: dict[str, str] = {}
    pods, workloads = created(objects, ctx, notes, origins)
    admitted, managed = [], []
    left: dict[str, list[str]] = {}
    for pod in pods:
        done, gated = admit(pod, ctx)
        admitted.append(done)
        if gated:
            managed.append(_key(done))
        else:
            left.setdefault(origins.get(_key(done), f"Pod {_key(done)}"), []).append(_key(done))
    return Expanded(tuple(admitted), tuple(workloads), tuple(managed), tuple(notes),
                    tuple((origin, tuple(keys), _left_why(origin, keys, ctx)) for origin, keys in left.items()))


def _left_why(origin: str, keys: Sequence[str], ctx: Context) -> str:
    """Why the webhook leaves the pods ``keys`` of ``origin`` (``Kind namespace/name``) alone."""
    kind = origin.partition(" ")[0]
    namespace = keys[0].partition("/")[0]
    opted = ctx.namespaces.get(namespace, {}).get(contract.GANG_MODE_LABEL) == contract.GANG_MODE_AUTO
    if not opted:
        return (f"no Troupe gang key or pod group names them, and namespace {namespace} is not opted in "
                f"({contract.GANG_MODE_LABEL}: {contract.GANG_MODE_AUTO})")
    return (f"no Troupe gang key or pod group names them, and the opt-in of namespace {namespace} makes members "
            f"only of the pods of {', '.join(KIND_OF)} (a {kind}'s are not)")


def _named(where: str, kind: str, meta: dict[str, Any], namespace: str, k: int, notes: list[str]) -> str:
    """``meta``'s name, or the name the API server makes of its ``generateName`` (noted)."""
    name = meta.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        raise ManifestError(f"{where} ({kind}): metadata.name or metadata.generateName is required")
    name = prefix + suffix(namespace, kind, prefix, k)
    notes.append(f"{kind} {namespace}/{name}: named from metadata.generateName {prefix!r} as the API server "
                 f"names it (five random characters: each `kubectl create` makes another)")
    return name


def _workload_note(obj: Mapping[str, Any], name: str, namespace: str) -> str:
    """What ``plan`` does with an upstream ``Workload`` (https://kubernetes.io/docs/concepts/workloads/workload-api/)."""
    spec = obj.get("spec")
    templates = spec.get("podGroupTemplates") if isinstance(spec, Mapping) else None
    named = [str(t.get("name")) for t in templates if isinstance(t, Mapping)] if isinstance(templates, list) else []
    listed = f" (templates {', '.join(named)})" if named else ""
    return (f"Workload {namespace}/{name} ({obj.get('apiVersion', 'scheduling.k8s.io')}){listed}: a policy template; "
            f"Troupe, as kube-scheduler, reads the PodGroups made from it and the pods naming them, not the Workload")


def created(objects: Sequence[tuple[str, str, Mapping[str, Any]]], ctx: Context,
            notes: list[str] | None = None, origins: dict[str, str] | None = None) -> tuple[
        list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """The pods of a manifest's objects as their controllers send them to the API server
    (named and namespaced, not yet admitted), and its workloads (``(kind, object)`` of the
    kinds the reconciler reads, :data:`READ_KINDS`: a JobSet's Jobs, a Deployment's
    ReplicaSet included, and its PodGroups). Appends to ``notes`` what was done with
    objects that make no pod (a ``Workload``) and the names generated, and fills
    ``origins`` (pod key -> ``Kind namespace/name`` of the manifest object it comes from).
    Raises :class:`ManifestError` naming the object: an unsupported kind, a malformed field."""
    notes = [] if notes is None else notes
    origins = {} if origins is None else origins
    pods: list[dict[str, Any]] = []
    workloads: list[tuple[str, dict[str, Any]]] = []
    for k, (where, kind, obj) in enumerate(objects):
        if kind not in KINDS:
            raise ManifestError(f"{where}: kind {kind!r} cannot be planned (supported: {', '.join(KINDS)})")
        meta = mapping(obj.get("metadata"), f"{where}: metadata")
        namespace = str(meta.get("namespace") or ctx.namespace)
        name = _named(where, kind, meta, namespace, k, notes)
        meta = {**meta, "name": name, "namespace": namespace}
        meta.pop("generateName", None)
        if kind == "Pod":
            pod = copy.deepcopy(dict(obj))
            pod["metadata"] = meta
            pods.append(pod)
            continue
        whole = {**copy.deepcopy(dict(obj)), "metadata": {**meta, "uid": uid(namespace, kind, name)}}
        if kind == "Workload":
            notes.append(_workload_note(whole, name, namespace))
            continue
        if kind in PODLESS_KINDS:
            notes.append(f"{kind} {namespace}/{name}: makes no pod; passed over")
            continue
        if kind == "PodGroup":
            workloads.append(("PodGroup", whole))
            continue
        made = EXPANDERS[kind](whole, f"{where} ({kind} {name})")
        for pod in made.pods:
            origins[_key(pod)] = f"{kind} {namespace}/{name}"
        pods += made.pods
        workloads += [(k2, o) for k2, o in made.workloads if k2 in READ_KINDS]
    return pods, workloads


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod))


def _request(pod: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """The ``request`` of the AdmissionReview v1 the API server sends the webhook for the
    creation of ``pod`` by ``ctx.user`` (a dry run: nothing is stored)."""
    meta = pod["metadata"]
    return {"uid": uid(meta["namespace"], "AdmissionReview", meta["name"]),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta["name"], "namespace": meta["namespace"], "operation": "CREATE",
            "userInfo": {"username": ctx.user}, "object": pod, "dryRun": True}


def admit(pod: Mapping[str, Any], ctx: Context) -> tuple[dict[str, Any], bool]:
    """``pod`` as the API server would store it, and whether it carries a Troupe gate then
    (Troupe's own or a GKE auto gate: the reconciler manages it).

    The API server's part: ``spec.priority`` from ``priorityClassName`` (or the global
    default class; its Priority admission plugin runs before the webhooks),
    ``creationTimestamp`` (``ctx.now``), a ``uid``, ``status.phase: Pending``. The
    webhook's part is the webhook's own admission function
    (:func:`webhook.admission.admit`, which its HTTPS server calls; every key it reads:
    Troupe's, the configured gang prefix's, Kueue's) over the AdmissionReview request the
    API server would send, and its JSON Patch applied as the API server applies it
    (:func:`webhook.patches.apply_ops`): the pod gets exactly what the webhook adds (gate,
    tolerations, timeout, ``<prefix>-size: auto``, the gang keys of a Kueue plain-pod group,
    device env vars). In a namespace labelled ``troupe.io/gang-mode: auto`` the request goes
    through the opt-in entry (``gang_mode_auto``), which the API server calls for a
    workload's pods that name no gang; it applies the main entry's rules too, so the pod
    ends as after both entries (docs/decisions/051-plan-admits-with-the-webhook.md). Raises
    :class:`ManifestError` with the webhook's message for a pod it would deny, or the API
    server's for an unknown PriorityClass."""
    out = copy.deepcopy(dict(pod))
    meta = out["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    spec = out["spec"] = mapping(out.get("spec"), f"pod {namespace}/{name}: spec")
    klass = spec.get("priorityClassName")
    if klass:
        if klass not in ctx.priority_classes and klass not in ("system-cluster-critical", "system-node-critical"):
            raise ManifestError(f"pod {namespace}/{name}: spec.priorityClassName: no PriorityClass with name "
                                f"{klass} was found")
        spec["priority"] = ctx.priority_classes.get(klass, (2000000000, False))[0]
    elif "priority" not in spec:
        default = [v for v, is_default in ctx.priority_classes.values() if is_default]
        spec["priority"] = default[0] if default else 0
    opted = ctx.namespaces.get(namespace, {}).get(contract.GANG_MODE_LABEL) == contract.GANG_MODE_AUTO
    answer = webhook_admit(_request(out, ctx), ctx.config, gang_mode_auto=opted)
    if not answer.allowed:
        raise ManifestError(f"pod {namespace}/{name}: denied by Troupe's webhook: {answer.message}")
    apply_ops(out, answer.ops)
    meta["creationTimestamp"] = _rfc3339(ctx.now)
    meta["uid"] = uid(namespace, "Pod", name)
    out.setdefault("status", {"phase": "Pending"})
    return out, _gated(out)
