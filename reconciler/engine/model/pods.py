"""Pods as the engine sees them, parsed from plain Kubernetes objects (dicts in the JSON
shape, camelCase keys): :class:`PodInfo` and its ``from_object`` (nodes are
:mod:`.nodes`). A pod's annotations that the reconciler writes (its pin, its stamps, the
plan and nomination records of :mod:`.records`, its selected devices) are parsed here once,
into fields; :class:`~reconciler.engine.ledger.snapshot.Snapshot` keeps the capacity ledger over
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar
from weakref import WeakValueDictionary

import troupe.kueue as kueue
from reconciler.engine.model.devicegroups import Devices, parse_selected
from reconciler.engine.model.fields import (
    filled,
    item,
    mapping,
    path,
    sequence,
    shared,
    string,
    string_map,
)
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.podterms import PodTerms, parse_pod_terms
from reconciler.engine.model.records import Nomination, Plan
from reconciler.engine.model.resources import PODS
from reconciler.engine.model.selectors import NodeFilter
from reconciler.engine.model.specs import SpecValues, scheduling_group, spec_values
from troupe.contract import (
    ASSIGNED_NODE,
    DEVICE_GROUP,
    GANG_CONDITION,
    GANG_MIN_SIZE_SUFFIX,
    GANG_NAME_SUFFIX,
    GANG_SIZE_SUFFIX,
    GANG_TIMEOUT_SUFFIX,
    NOMINATION,
    PLAN,
    PLANNED_AT,
    RELEASED_AT,
    SELECTED_DEVICES,
    TOPOLOGY_KEYS,
    is_troupe_gate,
    pod_meta,
)
from troupe.errors import MAX_QUOTED, quoted
from troupe.podgroups import PodGroupRef, group_ref_from_meta
from troupe.policies import GANG_POLICY_KEYS, RELEASE_MODE
from troupe.ranks import rank_key_of, rank_problem

T = TypeVar("T")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Owner:
    """A pod's controlling owner reference (``controller: true``): the object that
    recreates the pod when it is deleted (a Job, a ReplicaSet...)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, eq=False, slots=True)
class PodInfo:
    """A pod as the engine sees it: the values parsed from its object, not the object.
    ``requests`` is in units and includes one ``pods``.

    ``node_name`` is ``spec.nodeName`` (bound); ``assigned_node`` the reconciler's
    annotation (a node name); ``rank`` is
    :func:`troupe.ranks.rank_key`. ``planned_at`` and ``released_at`` are the
    reconciler's annotations of a released member (RFC 3339 strings, ``""`` when absent),
    ``plan`` the release record the pod carries, if any; ``nomination`` a preemptor's
    nomination it carries, if any. ``deleting``: a
    ``deletionTimestamp`` is set (the pod still uses its node until it is gone).
    ``device_group``: the SharedDeviceGroup it joins (``deviceshare.io/group``, ``""``);
    ``devices``: the IDs the reconciler gave it (``deviceshare.io/selected-devices``), None
    when it has none (or an unreadable value). ``grace_seconds``: its
    ``terminationGracePeriodSeconds`` (30 when unset, the API default). ``condition``:
    its ``troupe.io/Gang`` condition as ``(status, reason, message)``, None without one;
    ``scheduled``: kube-scheduler's ``PodScheduled`` condition, the same way (a refusal:
    ``("False", "Unschedulable", why)``, :mod:`reconciler.engine.gangs.refusals`). ``terms``: its required pod
    (anti-)affinity, spread constraints, host ports and claims
    (:class:`~reconciler.engine.model.podterms.PodTerms`), None when it has none of them; what
    of it the engine does not model is :func:`~reconciler.engine.filters.unmodeled.unmodeled`.
    ``malformed``: why a label or annotation Troupe reads from the pod cannot be read (a
    rank index, a plan or nomination record, the selected devices), naming the key and
    quoting the value, or why the pod's object cannot be read at all
    (:func:`unreadable_pod`); ``""`` when all can. Its gang is held with that reason
    (:func:`~reconciler.engine.gangs.gang.build_gang`); the field that could not be read reads
    as absent.

    ``gang_annotations`` is the one raw value kept, and only the part of the annotations
    that :mod:`reconciler.engine.gangs.gang` reads: the keys that may be gang annotations (any
    key ending in ``-name``, ``-size`` or ``-schedule-timeout-seconds``) and the topology
    keys (``troupe.io/topology-required-level``, ``-preferred-level``, the slice,
    placement and exclusive keys: :data:`troupe.contract.TOPOLOGY_KEYS`), the release
    mode (``troupe.io/release``), Kueue's topology annotations and the annotation Kueue
    marks the pods of its workloads with (:mod:`troupe.kueue`). They stay raw
    because reading them needs the configuration, which a pod is parsed without: the gang
    keys are those of the configured ``gangAnnotationPrefix`` (seeds/001), and a topology
    level must be one of the configured levels; the reconciler's own annotations are
    parsed into the fields above and not kept.
    """

    namespace: str
    name: str
    requests: Mapping[str, int] = field(default_factory=lambda: {PODS: 1})
    node_filter: NodeFilter = field(default_factory=NodeFilter)
    labels: Mapping[str, str] = field(default_factory=dict)
    gang_annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    assigned_node: str = ""
    phase: str = "Pending"
    gates: tuple[str, ...] = ()
    creation_timestamp: str = ""
    rank: tuple[Any, ...] = ()
    priority: int = 0
    uid: str = ""
    resource_version: str = ""
    deleting: bool = False
    owner: Owner | None = None
    planned_at: str = ""
    released_at: str = ""
    plan: Plan | None = None
    nomination: Nomination | None = None
    device_group: str = ""
    devices: Devices | None = None
    grace_seconds: int = 30
    condition: tuple[str, str, str] | None = None
    scheduled: tuple[str, str, str] | None = None
    #: The reason of the pod's ``DisruptionTarget`` condition when it is ``True`` (KEP-3329:
    #: ``PreemptionByScheduler``, ``EvictionByEvictionAPI``, ``DeletionByTaintManager``,
    #: ``DeletionByPodGC``, Troupe's own rollback), ``""`` without one.
    disruption: str = ""
    terms: PodTerms | None = None
    malformed: str = ""
    #: Its ``spec.resourceClaims`` (DRA): ``(entry name, claim name, template name)``, the
    #: claim name from ``resourceClaimName`` or, for a template's claim, from
    #: ``status.resourceClaimStatuses`` once kube-controller-manager made it (``""`` until then).
    claims: tuple[tuple[str, str, str], ...] = ()
    #: The pod group it names (the upstream Workload API's ``spec.schedulingGroup``,
    #: Volcano's, coscheduling's or KAI's key: :func:`troupe.podgroups.pod_group_ref`), None
    #: when it names none (docs/decisions/056-pod-groups.md).
    pod_group: PodGroupRef | None = None
    #: Its ``status.startTime`` (RFC 3339, set by the kubelet when it accepts the pod),
    #: ``""`` before it starts: what its ``spec.activeDeadlineSeconds`` counts from.
    started_at: str = ""
    #: What its ``requests``, ``node_filter``, ``gates``, ``priority`` and ``grace_seconds``
    #: were read from (:func:`~.specs.spec_values`), held so that the spec memo keeps them
    #: while the pod is held, and no longer; None for a pod not parsed from an object.
    spec_values: SpecValues | None = field(default=None, repr=False)
    #: ``namespace/name`` (:class:`~.keys.PodKey`), made once.
    key: PodKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PodKey(self.namespace, self.name))

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: uses nothing, counts for nothing."""
        return self.phase in TERMINAL_PHASES

    @property
    def active(self) -> bool:
        """Neither terminal nor being deleted: the pod counts as a gang member."""
        return not self.terminal and not self.deleting

    @property
    def gated(self) -> bool:
        """Still carries a gate Troupe removes on release (its own or a GKE auto gate)."""
        return bool(self.gates) and any(is_troupe_gate(gate) for gate in self.gates)  # most pods have none

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PodInfo:
        """A Pod object; raises :class:`~reconciler.engine.model.fields.ObjectError` naming the
        bad field."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec", required=True)
        status = mapping(obj, "status")
        name = string(meta, "name", "metadata", required=True)
        annotations = string_map(meta, "annotations", "metadata")
        labels = string_map(meta, "labels", "metadata", share=True)
        namespace = shared(string(meta, "namespace", "metadata", default="default"))
        of_spec = spec_values(spec)
        problems = [problem for problem in (of_spec.terms_error, rank_problem(labels, annotations)) if problem]
        plan, nomination = _record(annotations, PLAN, Plan, problems), _record(annotations, NOMINATION, Nomination, problems)
        conditions = _conditions(status)
        return filled(cls, {
            "namespace": namespace,
            "key": PodKey(namespace, name),
            "name": name,
            "requests": of_spec.requests,
            "node_filter": of_spec.node_filter,
            "labels": labels,
            "gang_annotations": _gang_annotations(annotations),
            "node_name": shared(string(spec, "nodeName", "spec")),
            "assigned_node": shared(annotations.get(ASSIGNED_NODE, "")),
            "phase": shared(string(status, "phase", "status", default="Pending")),
            "gates": of_spec.gates,
            "creation_timestamp": shared(str(meta.get("creationTimestamp") or "")),
            "rank": rank_key_of(name, labels, annotations),
            "priority": of_spec.priority,
            "uid": str(meta.get("uid") or ""),
            "resource_version": str(meta.get("resourceVersion") or ""),
            "deleting": meta.get("deletionTimestamp") is not None,
            "owner": _controller_owner(meta),
            "planned_at": shared(annotations.get(PLANNED_AT, "")),
            "released_at": shared(annotations.get(RELEASED_AT, "")),
            "plan": plan,
            "nomination": nomination,
            "device_group": shared(annotations.get(DEVICE_GROUP, "")),
            "devices": _selected(annotations, problems),
            "grace_seconds": of_spec.grace_seconds,
            "condition": conditions.get(GANG_CONDITION),
            "scheduled": conditions.get(POD_SCHEDULED),
            "disruption": _disruption(conditions),
            "terms": parse_pod_terms(namespace, name, labels, spec) if of_spec.may_have_terms else None,
            "malformed": "; ".join(problems),
            "claims": _resource_claims(spec, status),
            "pod_group": group_ref_from_meta(annotations, labels, of_spec.scheduling_group),
            "spec_values": of_spec,
            "started_at": shared(str(status.get("startTime") or "")),
        })


def _resource_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """``spec.resourceClaims`` as ``(entry, claim, template)`` triples (see
    :attr:`PodInfo.claims`). Raises :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field."""
    raw = sequence(spec, "resourceClaims", "spec")
    if not raw:
        return ()
    made = {s.get("name"): s.get("resourceClaimName") for s in sequence(status, "resourceClaimStatuses", "status")
            if isinstance(s, Mapping)}
    out = []
    for i in range(len(raw)):
        entry = item(raw, i, "spec.resourceClaims")
        where = path("spec.resourceClaims", i)
        name = string(entry, "name", where, required=True)
        template = string(entry, "resourceClaimTemplateName", where)
        claim = string(entry, "resourceClaimName", where) or (str(made.get(name) or "") if template else "")
        out.append((name, claim, template))
    return tuple(out)


def unreadable_pod(obj: Mapping[str, Any], why: str) -> PodInfo:
    """A pod whose object :meth:`PodInfo.from_object` cannot read (``why``): what names
    it and its gang, read defensively (a value of the wrong type reads as absent), with
    ``malformed`` saying why. Its gang is held with that reason instead of waiting for a
    member it cannot see; it counts for no capacity (the cache keeps it out of snapshots,
    as before it was read at all). The cache calls it under the same guard as
    :meth:`PodInfo.from_object` (``reconciler/daemon/cache/unreadable.py``)."""
    meta = pod_meta(obj)
    spec, status = _plain(obj.get("spec")), _plain(obj.get("status"))
    annotations, labels = _plain(meta.get("annotations")), _plain(meta.get("labels"))
    raw_gates = spec.get("schedulingGates")
    gates = tuple(g["name"] for g in raw_gates if isinstance(g, Mapping) and isinstance(g.get("name"), str)) \
        if isinstance(raw_gates, list) else ()
    return PodInfo(namespace=_text(meta.get("namespace")) or "default", name=_text(meta.get("name")),
                   labels={k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
                   gang_annotations=_gang_annotations({k: v for k, v in annotations.items()
                                                       if isinstance(k, str) and isinstance(v, str)}),
                   phase=_text(status.get("phase")) or "Pending", gates=gates, uid=_text(meta.get("uid")),
                   creation_timestamp=_text(meta.get("creationTimestamp")),
                   resource_version=_text(meta.get("resourceVersion")),
                   deleting=meta.get("deletionTimestamp") is not None, owner=_controller_owner(meta),
                   condition=_condition(status, GANG_CONDITION), malformed=f"the pod cannot be read: {why}",
                   pod_group=group_ref_from_meta(annotations, labels, scheduling_group(spec)))


def _plain(value: Any) -> Mapping[Any, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


#: How every gang annotation key ends, whatever the configured prefix (:class:`troupe.contract.GangKeys`).
_GANG_KEY_ENDS = (GANG_NAME_SUFFIX, GANG_SIZE_SUFFIX, GANG_TIMEOUT_SUFFIX, GANG_MIN_SIZE_SUFFIX)
_TOPOLOGY_KEYS = frozenset((*TOPOLOGY_KEYS, RELEASE_MODE, *GANG_POLICY_KEYS, *kueue.TOPOLOGY_KEYS,
                            kueue.WORKLOAD_ANNOTATION))


def _gang_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """The annotations :attr:`PodInfo.gang_annotations` keeps (see there)."""
    return {shared(key): shared(value) for key, value in annotations.items()
            if key.endswith(_GANG_KEY_ENDS) or key in _TOPOLOGY_KEYS}


def _selected(annotations: Mapping[str, str], problems: list[str]) -> Devices | None:
    """The pod's ``deviceshare.io/selected-devices``, or None (absent or unreadable: only
    the reconciler writes it, so an unreadable value claims nothing, and why is added to
    ``problems``)."""
    raw = annotations.get(SELECTED_DEVICES)
    if raw is None:
        return None
    try:
        return parse_selected(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep
        problems.append(f"annotation {SELECTED_DEVICES}: {_why(e)}, got {quoted(raw)}")
        return None


#: kube-scheduler's pod condition (:mod:`reconciler.engine.gangs.refusals`).
POD_SCHEDULED = "PodScheduled"

R = TypeVar("R", Plan, Nomination)


def _record(annotations: Mapping[str, str], key: str, kind: type[R], problems: list[str]) -> R | None:
    """The record (:class:`~reconciler.engine.model.records.Plan` or
    :class:`~reconciler.engine.model.records.Nomination`) in annotation ``key``, or None when
    absent or unreadable (then why is added to ``problems``: only the reconciler writes
    these, so an unreadable one reserves nothing and holds its gang)."""
    raw = annotations.get(key)
    if raw is None:
        return None
    record = kind.decode(raw)
    if record is None:
        problems.append(f"annotation {key}: not a {kind.__name__.lower()} record the reconciler wrote, got {quoted(raw)}")
    return record


def _why(error: BaseException) -> str:
    """An error's message cut to :data:`~troupe.errors.MAX_QUOTED` characters (a JSON
    error quotes the document)."""
    text = str(error) or type(error).__name__
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "..."


def _condition(status: Mapping[str, Any], kind: str) -> tuple[str, str, str] | None:
    """The pod condition of type ``kind`` as ``(status, reason, message)``, or None."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return (str(condition.get("status") or ""), str(condition.get("reason") or ""),
                    str(condition.get("message") or ""))
    return None


#: The pod conditions a parsed pod keeps (:func:`_conditions`).
_KEPT_CONDITIONS = frozenset((GANG_CONDITION, POD_SCHEDULED, "DisruptionTarget"))


def _conditions(status: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    """The conditions :class:`PodInfo` keeps, by type, each as :func:`_condition` reads it
    (the first of its type), in one pass over ``status.conditions``."""
    conditions = status.get("conditions")
    found: dict[str, tuple[str, str, str]] = {}
    if not isinstance(conditions, list):
        return found
    for condition in conditions:
        if isinstance(condition, Mapping):
            kind = condition.get("type")
            if isinstance(kind, str) and kind in _KEPT_CONDITIONS and kind not in found:
                found[kind] = (str(condition.get("status") or ""), str(condition.get("reason") or ""),
                               str(condition.get("message") or ""))
    return found


def _disruption(conditions: Mapping[str, tuple[str, str, str]]) -> str:
    """The reason of a ``DisruptionTarget`` condition whose status is ``True``, else ``""``
    (``conditions``: :func:`_conditions`)."""
    found = conditions.get("DisruptionTarget")
    return (found[1] or "DisruptionTarget") if found is not None and found[0] == "True" else ""


#: Equal owners are one value: a Job's or a ReplicaSet's pods all name it. Held weakly:
#: an owner is remembered while a parsed pod names it (docs/decisions/063-memos-held-by-their-users.md).
_owners: WeakValueDictionary[tuple[str, str, str, str], Owner] = WeakValueDictionary()


def _owner(api_version: str, kind: str, name: str, uid: str) -> Owner:
    key = (api_version, kind, name, uid)
    found = _owners.get(key)
    if found is None:
        found = _owners[key] = Owner(api_version, kind, name, uid)
    return found


def _controller_owner(meta: Mapping[str, Any]) -> Owner | None:
    """The owner reference with ``controller: true``, or None (malformed entries are
    skipped: an owner that cannot be read is no owner Troupe may rely on)."""
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return None
    for reference in owners:
        if isinstance(reference, Mapping) and reference.get("controller") is True:
            api_version, kind, name, uid = (reference.get("apiVersion"), reference.get("kind"), reference.get("name"),
                                            reference.get("uid"))
            if (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind
                    and isinstance(name, str) and name and isinstance(uid, str) and uid):
                return _owner(str(api_version), str(kind), str(name), str(uid))
    return None


#: The fields of :class:`PodInfo` no decision reads: its version, and the ``troupe.io/Gang``
#: condition the reconciler itself writes (what it told the pod, not what it decides on).
_NOT_DECIDED_ON = frozenset({"resource_version", "condition"})
_DECIDED_ON = tuple(f.name for f in fields(PodInfo) if f.name not in _NOT_DECIDED_ON)


def same_for_decisions(a: PodInfo, b: PodInfo) -> bool:
    """Whether two parses of a pod agree on everything a decision reads (all but
    :data:`_NOT_DECIDED_ON`): a new version that changes none of it (the reconciler's own
    condition written, say) gives its gang nothing to decide again
    (docs/decisions/068-release-pipeline.md)."""
    return all(getattr(a, name) == getattr(b, name) for name in _DECIDED_ON)
