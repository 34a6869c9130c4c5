"""Which pod group a pod names: the upstream Workload API's and the peer schedulers' ways
of joining a gang, read from the pod alone (docs/decisions/056-pod-groups.md).

Users who come to Troupe already declare their gangs with a group object and a reference
to it on every member:

=================  ==========================================  ===============================================
source             the group object                             how a pod joins it
=================  ==========================================  ===============================================
``workload``       ``scheduling.k8s.io`` ``PodGroup``           ``spec.schedulingGroup.podGroupName``
                   (KEP-4671; ``v1beta1`` in 1.37,
                   ``v1alpha2`` in 1.36)
``volcano``        ``scheduling.volcano.sh/v1beta1``            annotation ``scheduling.k8s.io/group-name``
                   ``PodGroup``
``coscheduling``   ``scheduling.x-k8s.io/v1alpha1``             label ``scheduling.x-k8s.io/pod-group``
                   ``PodGroup`` (scheduler-plugins)
``kai``            ``scheduling.run.ai/v2alpha2`` ``PodGroup``  annotation ``pod-group-name``
=================  ==========================================  ===============================================

A pod naming several is read by the first row it matches, in this order (kube-scheduler
itself acts on the upstream reference, so it wins). Each row is one :class:`GroupAPI` of
:data:`GROUP_APIS`, which holds everything Troupe knows of a source (its API, how a pod
names a group, its reader, its minimum's field); the reference lists, the webhook's match
keys and the reconciler's informers are derived from it.

The group objects themselves are read by :func:`parse_pod_group` into one
:class:`PodGroupSpec` whatever their source: the minimum count, the topology level asked
(node label keys of configured levels), whether the gang is evicted only whole, its
priority and timeout.

Plain values only: no Kubernetes client, no I/O; the webhook and the reconciler both
call :func:`pod_group_ref`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from troupe.config import Config
from troupe.contract import TopologyRequest
from troupe.errors import MAX_QUOTED, quoted
from troupe.layers import HOSTNAME_LABEL

#: The source names, as they appear in a gang key (``<namespace>/<source>:<group>``).
WORKLOAD = "workload"
VOLCANO = "volcano"
COSCHEDULING = "coscheduling"
KAI = "kai"

#: Volcano's pod annotation naming the PodGroup.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
#: scheduler-plugins coscheduling's pod label naming the PodGroup.
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: KAI scheduler's pod annotation naming the PodGroup.
KAI_GROUP_ANNOTATION = "pod-group-name"


@dataclass(frozen=True, slots=True, order=True)
class PodGroupRef:
    """A pod's reference to a group object: ``source`` (one of :data:`WORKLOAD`,
    :data:`VOLCANO`, :data:`COSCHEDULING`, :data:`KAI`) and the group's ``name`` in the
    pod's own namespace."""

    source: str
    name: str

    @property
    def api(self) -> GroupAPI:
        """The API serving this source's group objects."""
        return API_BY_SOURCE[self.source]

    def gang_name(self) -> str:
        """``<source>:<name>``: the gang's name within its namespace (a ``:`` never
        appears in a Troupe gang name, so it cannot collide with one)."""
        return f"{self.source}:{self.name}"


# --- the group objects ------------------------------------------------------------------
#: The largest count or priority the APIs hold (int32).
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """What a group object declares of its gang, whatever its source.

    ``ref``: which group (source and name); ``namespace``: its namespace. ``min_count``:
    the members needed before the first release (upstream ``gang.minCount``, the peers'
    ``minMember``), None for a group that is not a gang (upstream ``basic: {}``: each pod
    alone). ``required_level`` / ``preferred_level``: node label keys of configured levels
    (or ``kubernetes.io/hostname``), None when not asked. ``whole_victim``: the gang is
    evicted only whole (upstream ``disruptionMode`` ``{all: {}}``, v1alpha2's ``PodGroup``). ``priority``: the group's
    ``priority`` (int32) when it states one, else None (the members' ``spec.priority``
    stands); ``priority_class_name``: as written (``""``), not resolved.
    ``timeout_seconds``: coscheduling's ``scheduleTimeoutSeconds``, None when not given.
    ``error``: why the object cannot be read as written, naming the group, the field and
    the value (``""`` when it can); its gang is held with it.
    """

    ref: PodGroupRef
    namespace: str
    min_count: int | None = 1
    required_level: str | None = None
    preferred_level: str | None = None
    whole_victim: bool = False
    priority: int | None = None
    priority_class_name: str = ""
    timeout_seconds: int | None = None
    error: str = ""

    @property
    def gang(self) -> bool:
        """The group asks for a gang (it is not upstream's ``basic`` policy)."""
        return self.min_count is not None

    def describe(self) -> str:
        """``PodGroup team/train (scheduling.k8s.io)``: how messages name the group."""
        return f"{self.ref.api.kind} {self.namespace}/{self.ref.name} ({self.ref.api.group})"


def _shown(value: Any) -> str:
    """A value for a message: a string quoted (:func:`~troupe.errors.quoted`), anything
    else as Python writes it, cut the same way."""
    if isinstance(value, str):
        return quoted(value)
    text = repr(value)
    return text if len(text) <= MAX_QUOTED else f"{text[:MAX_QUOTED]}... ({len(text)} characters)"


class _Bad(ValueError):
    """A field of a group object that cannot be read: ``field`` and ``why``."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")


def _mapping(value: Any, field: str, required: bool = False) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(field, f"must be an object, got {_shown(value)}")
    return value


def _int_field(obj: Mapping[str, Any], key: str, where: str, minimum: int, default: int | None) -> int | None:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _INT32_MAX:
        raise _Bad(f"{where}.{key}", f"must be an integer from {minimum} to {_INT32_MAX}, got {_shown(value)}")
    return value


def _level(value: Any, field: str, config: Config) -> str | None:
    """A level given as a node label key: a configured level or ``kubernetes.io/hostname``."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and (config.level_depth(value) is not None or value == HOSTNAME_LABEL):
        return value
    known = ", ".join((*config.all_levels, HOSTNAME_LABEL))
    raise _Bad(field, f"must name a configured topology level ({known}), got {_shown(value)}")


def volcano_tier_level(tier: int, config: Config) -> str | None:
    """The level a Volcano ``highestTierAllowed`` of ``tier`` (1 = the lowest tier) maps
    to: ``volcanoTierLevels[tier - 1]`` of the configuration, None above the last (the whole
    cluster is one domain)."""
    levels = config.tier_levels
    return levels[tier - 1] if tier <= len(levels) else None


def _workload(spec: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """KEP-4671 ``scheduling.k8s.io`` PodGroup (``v1beta1``'s ``disruptionMode`` is
    ``{single: {}}`` or ``{all: {}}``, ``v1alpha2``'s the string ``Pod`` or ``PodGroup``)."""
    out: dict[str, Any] = {}
    policy = _mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang, basic = policy.get("gang"), policy.get("basic")
    if gang is not None and basic is not None:
        raise _Bad("spec.schedulingPolicy", "sets both basic and gang")
    if gang is not None:
        out["min_count"] = _int_field(_mapping(gang, "spec.schedulingPolicy.gang"), "minCount",
                                      "spec.schedulingPolicy.gang", 1, None)
        if out["min_count"] is None:
            raise _Bad("spec.schedulingPolicy.gang.minCount", "missing field")
    elif basic is not None:
        _mapping(basic, "spec.schedulingPolicy.basic")
        out["min_count"] = None
    else:
        raise _Bad("spec.schedulingPolicy", "sets neither basic nor gang")
    constraints = _mapping(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    topology = constraints.get("topology")
    if topology is not None:
        if not isinstance(topology, list):
            raise _Bad("spec.schedulingConstraints.topology", f"must be a list, got {_shown(topology)}")
        if len(topology) > 1:
            raise _Bad("spec.schedulingConstraints.topology", f"holds at most one level, got {len(topology)}")
        if topology:
            entry = _mapping(topology[0], "spec.schedulingConstraints.topology[0]", required=True)
            out["required_level"] = _level(entry.get("key"), "spec.schedulingConstraints.topology[0].key", config)
            if out["required_level"] is None:
                raise _Bad("spec.schedulingConstraints.topology[0].key", "missing field")
    mode = spec.get("disruptionMode")
    if isinstance(mode, str):  # v1alpha2: the string Pod (the default) or PodGroup
        if mode not in ("Pod", "PodGroup"):
            raise _Bad("spec.disruptionMode", f"must be Pod or PodGroup, got {_shown(mode)}")
        out["whole_victim"] = mode == "PodGroup"
    elif mode is not None:
        mode = _mapping(mode, "spec.disruptionMode")
        if "all" in mode and "single" in mode:
            raise _Bad("spec.disruptionMode", "sets both single and all")
        out["whole_victim"] = mode.get("all") is not None
    priority = spec.get("priority")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority <= _INT32_MAX:
            raise _Bad("spec.priority", f"must be an int32, got {_shown(priority)}")
        out["priority"] = priority
    return out


def _volcano(spec: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """Volcano ``scheduling.volcano.sh/v1beta1`` PodGroup: ``minMember``,
    ``networkTopology{mode, highestTierAllowed}`` (Volcano's network topology-aware
    scheduling: ``hard`` is a bound, ``soft`` a preference; ``mode`` defaults to ``hard``,
    ``highestTierAllowed`` to 1)."""
    out: dict[str, Any] = {"min_count": _int_field(spec, "minMember", "spec", 1, 1)}
    network = _mapping(spec.get("networkTopology"), "spec.networkTopology")
    if network:
        mode = network.get("mode", "hard")
        if mode not in ("hard", "soft"):
            raise _Bad("spec.networkTopology.mode", f"must be hard or soft, got {_shown(mode)}")
        tier = _int_field(network, "highestTierAllowed", "spec.networkTopology", 1, 1)
        level = volcano_tier_level(tier or 1, config)
        out["required_level" if mode == "hard" else "preferred_level"] = level
    return out


def _coscheduling(spec: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup: ``minMember``,
    ``scheduleTimeoutSeconds``."""
    return {"min_count": _int_field(spec, "minMember", "spec", 1, 1),
            "timeout_seconds": _int_field(spec, "scheduleTimeoutSeconds", "spec", 1, None)}


def _kai(spec: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """KAI scheduler ``scheduling.run.ai/v2alpha2`` PodGroup: ``minMember``,
    ``topologyConstraint{requiredTopologyLevel, preferredTopologyLevel}`` (node label keys,
    the levels of KAI's Topology object)."""
    out: dict[str, Any] = {"min_count": _int_field(spec, "minMember", "spec", 1, 1)}
    constraint = _mapping(spec.get("topologyConstraint"), "spec.topologyConstraint")
    out["required_level"] = _level(constraint.get("requiredTopologyLevel"),
                                   "spec.topologyConstraint.requiredTopologyLevel", config)
    out["preferred_level"] = _level(constraint.get("preferredTopologyLevel"),
                                    "spec.topologyConstraint.preferredTopologyLevel", config)
    return out


#: Where a pod names its group: in its spec (``spec.schedulingGroup.podGroupName``), in an
#: annotation, or in a label.
IN_SPEC, IN_ANNOTATION, IN_LABEL = "spec", "annotation", "label"

#: A group object's reader: its ``spec`` and the configuration -> the :class:`PodGroupSpec`
#: fields it declares; raises :class:`_Bad` naming a field it cannot read.
Reader = Callable[[Mapping[str, Any], Config], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class GroupAPI:
    """One source of pod groups: where its group objects are served, how a pod names one,
    how the object is read, and what messages name
    (docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md).

    ``source``: the name in a gang key; API ``group``, resource ``plural``, the
    ``versions`` Troupe reads (preferred first; the first one the API server serves is
    used) and the ``kind``. ``ref_in`` / ``ref_key``: where a pod names its group
    (:data:`IN_SPEC`, the key ``schedulingGroup.podGroupName``; :data:`IN_ANNOTATION` or
    :data:`IN_LABEL`, the annotation or label key). ``read``: the object's reader.
    ``min_field``: the field of the object holding the gang's minimum count (what a gang's
    ``size_from`` and its held messages name)."""

    source: str
    group: str
    versions: tuple[str, ...]
    ref_in: str
    ref_key: str
    read: Reader
    min_field: str = "spec.minMember"
    plural: str = "podgroups"
    kind: str = "PodGroup"

    @property
    def ref_field(self) -> str:
        """Where a pod names this source's group, as an admission message names it:
        ``spec.schedulingGroup.podGroupName``, ``annotation scheduling.k8s.io/group-name``."""
        return f"spec.{self.ref_key}" if self.ref_in == IN_SPEC else f"{self.ref_in} {self.ref_key}"


#: Every source, in the order a pod's references are read (kube-scheduler itself acts on the
#: upstream reference, so it comes first). A new peer's PodGroup is its row (and its reader).
GROUP_APIS: tuple[GroupAPI, ...] = (
    GroupAPI(WORKLOAD, "scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2"), IN_SPEC,
             "schedulingGroup.podGroupName", _workload, min_field="spec.schedulingPolicy.gang.minCount"),
    GroupAPI(VOLCANO, "scheduling.volcano.sh", ("v1beta1",), IN_ANNOTATION, VOLCANO_GROUP_ANNOTATION, _volcano),
    GroupAPI(COSCHEDULING, "scheduling.x-k8s.io", ("v1alpha1",), IN_LABEL, COSCHEDULING_GROUP_LABEL, _coscheduling),
    GroupAPI(KAI, "scheduling.run.ai", ("v2alpha2",), IN_ANNOTATION, KAI_GROUP_ANNOTATION, _kai),
)

#: Source name -> its :class:`GroupAPI`.
API_BY_SOURCE: Mapping[str, GroupAPI] = {api.source: api for api in GROUP_APIS}


def source_of(api_version: str) -> str | None:
    """The source whose group objects are served at ``api_version`` (``group/version``),
    or None (another API, or a version Troupe does not read)."""
    group, _, version = api_version.partition("/")
    return next((api.source for api in GROUP_APIS if api.group == group and version in api.versions), None)


def parse_pod_group(source: str, obj: Mapping[str, Any], config: Config) -> PodGroupSpec:
    """The :class:`PodGroupSpec` of a group object ``obj`` (a plain dict as the API serves
    it) of ``source`` (:data:`WORKLOAD`, :data:`VOLCANO`, :data:`COSCHEDULING`,
    :data:`KAI`), its levels checked against ``config``'s.

    Never raises on the object's content: a field that cannot be read makes a spec whose
    ``error`` names the group, the field and the value, e.g. ``PodGroup team/train
    (scheduling.k8s.io): spec.schedulingPolicy.gang.minCount: must be an integer from 1 to
    2147483647, got 0``. Raises ``KeyError`` for an unknown ``source``. Sources:
    KEP-4671 (Workload API), Volcano's ``PodGroup`` and network topology-aware scheduling
    docs, scheduler-plugins' coscheduling KEP, KAI scheduler's ``PodGroup`` CRD."""
    reader = API_BY_SOURCE[source].read
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = _text(meta.get("name")) or "", _text(meta.get("namespace")) or "default"
    spec = obj.get("spec")
    class_name = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
    base = PodGroupSpec(PodGroupRef(source, name), namespace,
                        priority_class_name=class_name if isinstance(class_name, str) else "")
    try:
        fields = reader(_mapping(spec, "spec", required=True), config)
    except _Bad as e:
        return replace(base, error=f"{base.describe()}: {e}")
    return replace(base, **fields)


def _depth(level: str, config: Config) -> int:
    """How deep a level key is: a configured level's depth, below all of them a node."""
    depth = config.level_depth(level)
    return depth if depth is not None else len(config.topology_levels)


def constrained(request: TopologyRequest, spec: PodGroupSpec, config: Config) -> TopologyRequest:
    """``request`` (what Troupe's keys ask of a gang) bound by the group ``spec`` its
    members name, so that no plan of it is one kube-scheduler's own gang and topology
    plugins would refuse (docs/decisions/056-pod-groups.md): the required level is the
    deeper of the two (levels nest, so one domain of the deeper is inside one of the
    other: the intersection); with a required level, no preferred level is kept (the
    placement already packs a gang into as few child domains as it can); without one,
    ``request``'s preferred level, else the group's. Slices, placement and exclusive level
    are ``request``'s."""
    required = request.required_level
    if spec.required_level is not None and (required is None
                                            or _depth(spec.required_level, config) >= _depth(required, config)):
        required = spec.required_level
    preferred = None if required is not None else (request.preferred_level or spec.preferred_level)
    return TopologyRequest(required, preferred, request.slices, request.placement, request.exclusive_level)


# --- which group a pod names ----------------------------------------------------------
def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def pod_group_ref(pod: Mapping[str, Any]) -> PodGroupRef | None:
    """The group ``pod`` (a Pod as JSON) names, or None.

    Reads, in the order of :data:`GROUP_APIS`: ``spec.schedulingGroup.podGroupName``
    (KEP-4671, core/v1 ``PodSchedulingGroup``), Volcano's annotation
    :data:`VOLCANO_GROUP_ANNOTATION`, coscheduling's label :data:`COSCHEDULING_GROUP_LABEL`,
    KAI's annotation :data:`KAI_GROUP_ANNOTATION`. Values that are not non-empty strings are
    ignored (never raises)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    group = spec.get("schedulingGroup")
    scheduling_group = _text(group.get("podGroupName")) if isinstance(group, Mapping) else None
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    return group_ref_from_meta(annotations, labels, scheduling_group)


def group_ref_from_meta(annotations: Mapping[str, Any], labels: Mapping[str, Any],
                        scheduling_group: str | None = None) -> PodGroupRef | None:
    """:func:`pod_group_ref` on parts already read: ``scheduling_group`` is the pod's
    ``spec.schedulingGroup.podGroupName`` (or None)."""
    for api in GROUP_APIS:
        if api.ref_in == IN_SPEC:
            name = scheduling_group or None
        else:
            name = _text((annotations if api.ref_in == IN_ANNOTATION else labels).get(api.ref_key))
        if name:
            return PodGroupRef(api.source, name)
    return None


#: Where each source's reference is written on a pod, as an admission message names it.
REF_FIELDS: Mapping[str, str] = {api.source: api.ref_field for api in GROUP_APIS}

#: The annotation keys that name a group (Volcano's and KAI's), and the label keys
#: (coscheduling's): what the webhook's match conditions look for besides
#: ``spec.schedulingGroup``.
GROUP_ANNOTATIONS: tuple[str, ...] = tuple(api.ref_key for api in GROUP_APIS if api.ref_in == IN_ANNOTATION)
GROUP_LABELS: tuple[str, ...] = tuple(api.ref_key for api in GROUP_APIS if api.ref_in == IN_LABEL)

#: The annotation in which the webhook keeps the ``spec.schedulerName`` a pod was created
#: with when it hands the pod to kube-scheduler (configuration ``adoptSchedulerNames``,
#: docs/decisions/057-adopted-scheduler-names.md).
ORIGINAL_SCHEDULER_NAME = "troupe.io/original-scheduler-name"


def every_group_ref(pod: Mapping[str, Any]) -> tuple[PodGroupRef, ...]:
    """Every group ``pod`` (a Pod as JSON) names, in the order of :func:`pod_group_ref`
    (whose answer is the first): one per source at most, empty when it names none. A pod
    naming more than one is read by the first; the webhook warns about the others."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    group = spec.get("schedulingGroup")
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    scheduling_group = group.get("podGroupName") if isinstance(group, Mapping) else None
    found = ((api.source, scheduling_group if api.ref_in == IN_SPEC else
              (annotations if api.ref_in == IN_ANNOTATION else labels).get(api.ref_key)) for api in GROUP_APIS)
    return tuple(PodGroupRef(source, name) for source, value in found if (name := _text(value)))
