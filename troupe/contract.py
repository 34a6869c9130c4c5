"""The user contract: every annotation, label and gate key Troupe reads or writes, and the
parsing of a pod (a plain dict in the Kubernetes JSON shape) into its requests.

Both deployables import this module; it does no I/O and knows no Kubernetes client.
Sources of each rule: ``DESIGN.md`` (the user contract), ``seeds/001`` (PFN gang plugin
keys), ``seeds/002`` (GKE topology daemon gates and rank order), ``seeds/000``
(SharedDeviceGroup keys and the device env var naming rule).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from troupe import kueue, layers, workloadkinds
from troupe.config import Config
from troupe.errors import ContractError
from troupe.layers import (
    TOPOLOGY_EXCLUSIVE_LEVEL,
    TOPOLOGY_PLACEMENT,
    TOPOLOGY_SLICE_REQUIRED_LEVEL,
    TOPOLOGY_SLICE_SIZE,
    SliceLayer,
    parse_layers,
)

# --- Gates -------------------------------------------------------------------------------
#: Troupe's scheduling gate: added by the webhook, removed by the reconciler on release.
GATE = "troupe.io/placement"
#: Gates of the GKE topology scheduler (``seeds/002``): pods created with one are handled
#: as a gang and the gate is removed on release too.
GKE_GATE_PREFIX = "gke.io/topology-aware-auto-"

# --- Gang keys (suffixes of the configurable prefix, seeds/001) --------------------------
GANG_NAME_SUFFIX = "-name"
GANG_SIZE_SUFFIX = "-size"
GANG_TIMEOUT_SUFFIX = "-schedule-timeout-seconds"
#: The gang's minimum size (Volcano's ``minAvailable``, KAI's ``minMember``, the native
#: PodGroup's ``minCount``): the gang is first released when this many members exist and
#: fit together; the rest are placed as they come (docs/decisions/038-minimum-size.md).
GANG_MIN_SIZE_SUFFIX = "-min-size"

#: The value of ``<prefix>-size`` that asks the reconciler to take the gang's members and
#: size from the pod's workload (a Job, JobSet, LeaderWorkerSet or Kubeflow job), read
#: through its informer (docs/decisions/014-workload-gangs.md).
AUTO_SIZE = "auto"
#: Namespace label that makes every pod a supported workload creates there a gang member
#: (the webhook stamps ``<prefix>-size: auto`` on it), with the value :data:`GANG_MODE_AUTO`.
GANG_MODE_LABEL = "troupe.io/gang-mode"
GANG_MODE_AUTO = "auto"

# --- Topology requests (DESIGN.md "Topology"; the value is a level's node label key) -----
TOPOLOGY_REQUIRED_LEVEL = layers.TOPOLOGY_REQUIRED_LEVEL
TOPOLOGY_PREFERRED_LEVEL = layers.TOPOLOGY_PREFERRED_LEVEL
#: Every topology key (the levels above, the slices, placement and exclusive level of
#: :mod:`troupe.layers`): the gang's, fixed at creation, read from workloads too.
TOPOLOGY_KEYS = (TOPOLOGY_REQUIRED_LEVEL, TOPOLOGY_PREFERRED_LEVEL, TOPOLOGY_SLICE_SIZE, TOPOLOGY_SLICE_REQUIRED_LEVEL,
                 TOPOLOGY_PLACEMENT, TOPOLOGY_EXCLUSIVE_LEVEL)


# --- Shared device groups (seeds/000) ----------------------------------------------------
#: Pod annotation: the SharedDeviceGroup (cluster-scoped) the pod joins.
DEVICE_GROUP = "deviceshare.io/group"
#: Pod annotation written by the reconciler: JSON, resource name -> ``"0,1"``.
SELECTED_DEVICES = "deviceshare.io/selected-devices"
#: Prefix of the per-variable annotations (``deviceshare.io/env.NVIDIA_VISIBLE_DEVICES``),
#: written by the reconciler and read by the containers through the Downward API.
DEVICE_ENV_PREFIX = "deviceshare.io/env."
#: Node label that opts a node in to shared device groups, with value ``shared``.
DEVICE_MODE_LABEL = "deviceshare.io/mode"
DEVICE_MODE_SHARED = "shared"
#: The SharedDeviceGroup custom resource (cluster-scoped): API group, version, plural.
DEVICE_GROUP_API = ("deviceshare.io", "v1alpha1", "shareddevicegroups")
#: The Gang objects the reconciler keeps (group, version, plural; docs/decisions/043-gang-objects.md).
GANG_API = ("troupe.io", "v1alpha1", "gangs")
#: The annotation that ties a Gang object to its gang's key (``namespace/id``).
GANG_KEY_ANNOTATION = "reconciler.troupe.io/gang-key"
#: Finalizer the reconciler keeps on a SharedDeviceGroup until none of its pods runs, so
#: that the group's devices are not given to another group while containers still use them.
DEVICE_GROUP_FINALIZER = "deviceshare.io/release-devices"
#: The taint recommended on shared nodes (``kubectl taint node N deviceshare.io/mode=shared:NoSchedule``),
#: so that ordinary pods, whose devices the groups' accounting would not see, stay off them.
#: The webhook gives every group pod the matching toleration (:func:`device_shared_toleration`).
DEVICE_SHARED_TAINT_KEY = DEVICE_MODE_LABEL
DEVICE_SHARED_TAINT_VALUE = DEVICE_MODE_SHARED
DEVICE_SHARED_TAINT_EFFECT = "NoSchedule"
#: The taint the reconciler puts on each node of a preemptor's nomination before it evicts
#: the victims, and removes with the nomination (docs/decisions/033-nominated-nodes-are-tainted.md):
#: kube-scheduler cannot see Troupe's nominations, so without it a victim's replacement from
#: another controller may take the freed node. The webhook gives every pod it gates the
#: matching toleration (:func:`nominated_toleration`), so only pods Troupe pins land there.
NOMINATED_TAINT_KEY = "troupe.io/nominated"
NOMINATED_TAINT_EFFECT = "NoSchedule"

# --- Decisions written by the reconciler ------------------------------------------------
#: Every annotation under this prefix is written only by the reconciler's identity.
RESERVED_PREFIX = "reconciler.troupe.io/"
#: The node the reconciler planned for the pod (the pin narrows node affinity to it).
ASSIGNED_NODE = RESERVED_PREFIX + "node"
#: The member's rank within its gang, as the reconciler ordered it.
ASSIGNED_RANK = RESERVED_PREFIX + "rank"
#: When the reconciler released the member (RFC 3339, UTC): the write that pinned it and
#: removed its gate. A release's bind timeout runs from its last member's ``released-at``.
RELEASED_AT = RESERVED_PREFIX + "released-at"
#: When the release the member belongs to was planned (RFC 3339 with milliseconds, UTC):
#: the same on every member released by one decision, so it names that release too.
PLANNED_AT = RESERVED_PREFIX + "planned-at"
#: The plan of a release of several members, written on its first member in the same
#: update that releases it, before any other member is written: JSON
#: ``{"plannedAt": "<RFC 3339>", "nodes": {"<pod uid>": "<node name>", ...}}``. Until every
#: member it names is released, it reserves their nodes (docs/decisions/007-release-writes.md).
PLAN = RESERVED_PREFIX + "plan"
#: A preemptor gang's nomination, on its first gated member: JSON ``{"at": "<RFC 3339>",
#: "nodes": {"<pod uid>": "<node>"}, "victims": ["<namespace>/<pod>"], "refused":
#: ["<gang key>"]}``. From the moment it is written the nodes it names hold capacity for
#: the gang (no other gang is placed there), while the victims are evicted; the gang is
#: released once they are gone (docs/decisions/020-preemption-in-the-decision.md).
NOMINATION = RESERVED_PREFIX + "nomination"
#: A gang's reservation, on the workload object its members come from (a Job, a JobSet, a
#: PyTorchJob): JSON ``{"gang": "<gang id>", "plannedAt": "<RFC 3339>", "nodes": ["<node of
#: rank 0>", ...]}``. From the moment it is written every rank's node holds that rank's
#: requests (read from the pod template) until the member of that rank is released there;
#: it is removed once every member is bound, or with a rollback
#: (docs/decisions/034-release-as-created.md).
RESERVATION = RESERVED_PREFIX + "reservation"

#: On a Node: the gang members that failed on it or were lost with it, newest last, JSON
#: ``[{"uid": "<pod uid>", "pod": "<namespace>/<name>", "at": "<RFC 3339>", "why":
#: "<what happened>"}]`` (at most :data:`NODE_FAILURES_KEPT`). A node with
#: ``nodeFailureThreshold`` of them within ``nodeFailureWindowSeconds`` is avoided by new
#: placements for ``nodeAvoidSeconds`` after the last (docs/decisions/041-failing-nodes.md).
NODE_FAILURES = RESERVED_PREFIX + "failures"
NODE_FAILURES_KEPT = 16

# --- Pod condition written by the reconciler ---------------------------------------------
#: The condition type on every gated member of a waiting gang, through ``pods/status``:
#: status ``False`` with the reason it waits (``WaitingForMembers``, ``Queued``, ``Held``,
#: ``BackingOff``, ``Unschedulable``, ``Preempting``...) and a message with numbers; ``True``,
#: reason ``Released``, once it is released. Where ``kubectl describe pod`` shows it.
GANG_CONDITION = "troupe.io/Gang"

# --- Labels read --------------------------------------------------------------------------
HOSTNAME_LABEL = layers.HOSTNAME_LABEL
#: The labels workloads' controllers put on their pods (:mod:`troupe.workloadkinds`).
JOB_COMPLETION_INDEX = workloadkinds.JOB_COMPLETION_INDEX
KUBEFLOW_REPLICA_INDEX = workloadkinds.KUBEFLOW_REPLICA_INDEX
JOB_NAME_LABEL = workloadkinds.JOB_NAME_LABEL
KUBEFLOW_JOB_NAME_LABEL = workloadkinds.KUBEFLOW_JOB_NAME_LABEL
JOBSET_NAME_LABEL = workloadkinds.JOBSET_NAME_LABEL
JOBSET_GLOBAL_INDEX_LABEL = workloadkinds.JOBSET_GLOBAL_INDEX_LABEL
JOBSET_RESTART_LABEL = workloadkinds.JOBSET_RESTART_LABEL
LWS_NAME_LABEL = workloadkinds.LWS_NAME_LABEL
LWS_GROUP_INDEX_LABEL = workloadkinds.LWS_GROUP_INDEX_LABEL
LWS_WORKER_INDEX_LABEL = workloadkinds.LWS_WORKER_INDEX_LABEL
KUBEFLOW_REPLICA_TYPE = workloadkinds.KUBEFLOW_REPLICA_TYPE
KUBEFLOW_JOB_ROLE = workloadkinds.KUBEFLOW_JOB_ROLE
RAY_CLUSTER_LABEL = workloadkinds.RAY_CLUSTER_LABEL
RAY_NODE_TYPE_LABEL = workloadkinds.RAY_NODE_TYPE_LABEL
RAY_GROUP_LABEL = workloadkinds.RAY_GROUP_LABEL
RAY_REPLICA_INDEX_LABEL = workloadkinds.RAY_REPLICA_INDEX_LABEL
RAY_HOST_INDEX_LABEL = workloadkinds.RAY_HOST_INDEX_LABEL
#: kubelet's annotation on mirror pods (static pods): never mutated.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"

#: A label value (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/
#: #syntax-and-character-set): at most 63 characters, alphanumerics at both ends.
# Patterns are used with ``fullmatch`` only: ``$`` alone would accept a trailing newline.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
#: A count or an index: ASCII digits, at most 9 (Python's int() refuses over 4,300 digits,
#: and no gang, timeout or rank comes near a billion).
_DECIMAL = re.compile(r"[0-9]{1,9}")
@dataclass(frozen=True)
class GangKeys:
    """The four gang annotation keys for one ``gangAnnotationPrefix``."""

    name: str
    size: str
    timeout: str
    min_size: str

    @classmethod
    def for_prefix(cls, prefix: str) -> GangKeys:
        """Keys for ``prefix`` (``troupe.io/gang`` -> ``troupe.io/gang-name`` ...)."""
        return cls(prefix + GANG_NAME_SUFFIX, prefix + GANG_SIZE_SUFFIX, prefix + GANG_TIMEOUT_SUFFIX,
                   prefix + GANG_MIN_SIZE_SUFFIX)

    def all(self) -> tuple[str, str, str, str]:
        """The keys as a tuple (name, size, timeout, min_size)."""
        return (self.name, self.size, self.timeout, self.min_size)


@dataclass(frozen=True)
class GangSpec:
    """A pod's gang membership: gang ``namespace/name``, ``size`` members, and
    ``timeout_seconds`` (the effective one: defaulted and capped, seeds/001).

    ``auto``: the size is :data:`AUTO_SIZE`: the reconciler groups the pod by its
    workload and sizes the gang from it; ``name`` is then ``""`` and ``size`` 0.
    ``min_size``: the ``<prefix>-min-size`` asked for (1 <= ``min_size`` <= ``size``), or
    None: the whole gang is its minimum."""

    namespace: str
    name: str
    size: int
    timeout_seconds: int
    auto: bool = False
    min_size: int | None = None

    @property
    def key(self) -> str:
        """``namespace/name``, the gang's identity (a gang is namespace + name)."""
        return f"{self.namespace}/{self.name}"


def _mapping_or_empty(value: Any) -> Mapping[str, Any]:
    # A dict, what JSON and YAML give, needs no ABC check.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def pod_meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod.metadata`` or an empty mapping (never raises on malformed input)."""
    return _mapping_or_empty(pod.get("metadata")) if type(pod) is dict or isinstance(pod, Mapping) else {}


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod.metadata.annotations`` or an empty mapping."""
    return _mapping_or_empty(pod_meta(pod).get("annotations"))


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod.metadata.labels`` or an empty mapping."""
    return _mapping_or_empty(pod_meta(pod).get("labels"))


def pod_gates(pod: Mapping[str, Any]) -> list[str]:
    """Names of ``pod.spec.schedulingGates``, in order."""
    spec = pod.get("spec")
    raw = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list):
        return []
    return [g["name"] for g in raw if isinstance(g, Mapping) and isinstance(g.get("name"), str)]


def is_troupe_gate(name: str) -> bool:
    """True for the gates Troupe removes on release: its own and the GKE ``auto`` gates."""
    return name == GATE or name.startswith(GKE_GATE_PREFIX)


def _positive_int(key: str, raw: Any, what: str) -> int:
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) > 9:
        raise ContractError(key, raw, f"must be {what} of at most 9 digits")
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw):
        raise ContractError(key, raw if isinstance(raw, str) else str(raw), f"must be {what}")
    value = int(raw)
    if value < 1:
        raise ContractError(key, raw, f"must be {what}")
    return value


def effective_timeout(raw: str | None, config: Config, key: str = "") -> int:
    """The gang timeout in seconds: ``raw`` (a positive decimal integer string) capped by
    ``gangScheduleTimeoutSecondsLimit``, or ``gangScheduleDefaultTimeoutSeconds`` when absent
    (seeds/001). Raises :class:`ContractError` for a value that is not a positive integer.
    """
    if raw is None:
        return min(config.gang_schedule_default_timeout_seconds, config.gang_schedule_timeout_seconds_limit)
    value = _positive_int(key, raw, "a positive integer number of seconds")
    return min(value, config.gang_schedule_timeout_seconds_limit)


def parse_gang(pod: Mapping[str, Any], config: Config) -> GangSpec | None:
    """The pod's gang, or None when it carries none of the gang annotations.

    Rules (DESIGN.md "Gangs"): name is a valid label value; size an integer >= 1; the
    timeout a positive integer (defaulted and capped, see :func:`effective_timeout`).
    Name and size are both required once any gang key is present, except with size
    :data:`AUTO_SIZE`, which takes no name (the workload names the gang, one per Job,
    JobSet or LeaderWorkerSet group: a name would join several of them). A minimum size
    (``<prefix>-min-size``) is an integer with 1 <= M <= size (with size ``auto`` the
    reconciler checks the upper bound against the workload's count).
    Raises :class:`ContractError` naming the key and the value.
    """
    namespace = pod_meta(pod).get("namespace") or "default"
    return parse_gang_annotations(pod_annotations(pod), str(namespace), config)


def parse_gang_annotations(a: Mapping[str, Any], namespace: str, config: Config) -> GangSpec | None:
    """:func:`parse_gang` on a pod's annotations ``a`` and its ``namespace``."""
    keys = GangKeys.for_prefix(config.gang_annotation_prefix)
    if not any(k in a for k in keys.all()):
        return None
    if a.get(keys.size) == AUTO_SIZE:
        if keys.name in a:
            raise ContractError(
                keys.name, str(a[keys.name]),
                f"cannot be set together with {keys.size}: {AUTO_SIZE} (the workload names the gang)",
            )
        minimum = _min_size(a, keys, None)
        return GangSpec(namespace, "", 0, effective_timeout(a.get(keys.timeout), config, keys.timeout), auto=True,
                        min_size=minimum)
    name = a.get(keys.name)
    if name is None:
        raise ContractError(keys.name, None, "is required with the other gang annotations")
    if not isinstance(name, str) or len(name) > 63 or not _LABEL_VALUE.fullmatch(name):
        raise ContractError(
            keys.name, str(name),
            "must be a valid label value (at most 63 characters: letters, digits, '-', '_', '.', "
            "beginning and ending with a letter or digit)",
        )
    raw_size = a.get(keys.size)
    if raw_size is None:
        raise ContractError(keys.size, None, "is required with the other gang annotations")
    size = _positive_int(keys.size, raw_size, "an integer >= 1")
    timeout = effective_timeout(a.get(keys.timeout), config, keys.timeout)
    return GangSpec(namespace, name, size, timeout, min_size=_min_size(a, keys, size))


def _min_size(a: Mapping[str, Any], keys: GangKeys, size: int | None) -> int | None:
    """The ``<prefix>-min-size`` of ``a``: None when absent; an integer from 1 to ``size``
    (None: the size is the workload's, checked by the reconciler). Raises
    :class:`ContractError` naming the key and the value."""
    raw = a.get(keys.min_size)
    if raw is None:
        return None
    if size is None:
        return _positive_int(keys.min_size, raw, "an integer >= 1")
    minimum = _positive_int(keys.min_size, raw, f"an integer from 1 to the gang's {keys.size} ({size})")
    if minimum > size:
        raise ContractError(keys.min_size, str(raw), f"must be an integer from 1 to the gang's {keys.size} ({size})")
    return minimum


@dataclass(frozen=True)
class TopologyRequest:
    """A gang's level request: node label keys of configured levels, or None; its
    ``slices`` (outermost first), ``placement`` (``Compact`` or ``Balanced``) and
    ``exclusive_level`` (:mod:`troupe.layers`)."""

    required_level: str | None = None
    preferred_level: str | None = None
    slices: tuple[SliceLayer, ...] = ()
    placement: str = "Compact"
    exclusive_level: str | None = None


def parse_topology_request(pod: Mapping[str, Any], config: Config) -> TopologyRequest:
    """The pod's ``troupe.io/topology-required-level`` / ``-preferred-level`` request.

    Each value must be a configured level key (either set of ``Config``; read from Kueue's
    annotations, ``kubernetes.io/hostname`` too, as Kueue allows); both at once are refused,
    as Kueue refuses both podset topology annotations. Raises
    :class:`ContractError` listing the configured levels.
    """
    return parse_topology_annotations(pod_annotations(pod), config)


def parse_topology_annotations(a: Mapping[str, Any], config: Config) -> TopologyRequest:
    """:func:`parse_topology_request` on a pod's annotations ``a``: Troupe's topology keys,
    else Kueue's topology-aware scheduling annotations read as Troupe's
    (:mod:`troupe.kueue`; an error then names the Kueue key)."""
    if kueue.asks(a) and not any(k in a for k in TOPOLOGY_KEYS):
        try:
            return _parse_topology(kueue.as_troupe(a), config, node_level=True)
        except ContractError as e:
            raise kueue.rekeyed(e, a) from None
    return _parse_topology(a, config)


def _parse_topology(a: Mapping[str, Any], config: Config, node_level: bool = False) -> TopologyRequest:
    """The request of annotations ``a`` in Troupe's keys; ``node_level``: the level may also
    be ``kubernetes.io/hostname`` (one node), as Kueue's ``podset-*-topology`` allows."""
    required, preferred = a.get(TOPOLOGY_REQUIRED_LEVEL), a.get(TOPOLOGY_PREFERRED_LEVEL)
    for key, value in ((TOPOLOGY_REQUIRED_LEVEL, required), (TOPOLOGY_PREFERRED_LEVEL, preferred)):
        if value is not None and (not isinstance(value, str)
                                  or (config.level_depth(value) is None and not (node_level and value == HOSTNAME_LABEL))):
            known = (*config.all_levels, HOSTNAME_LABEL) if node_level else config.all_levels
            raise ContractError(key, str(value), f"must name a configured level ({', '.join(known)})")
    if required is not None and preferred is not None:
        raise ContractError(TOPOLOGY_PREFERRED_LEVEL, preferred, f"cannot be set together with {TOPOLOGY_REQUIRED_LEVEL}")
    slices, placement, exclusive = parse_layers(a, config, required)
    return TopologyRequest(required, preferred, slices, placement, exclusive)


def device_group(pod: Mapping[str, Any]) -> str | None:
    """The SharedDeviceGroup the pod joins (``deviceshare.io/group``), or None."""
    value = pod_annotations(pod).get(DEVICE_GROUP)
    return value if isinstance(value, str) else None


def device_env_var(resource: str) -> str:
    """The env var that carries a resource's device IDs (DESIGN.md, seeds/000 ``getEnvVarName``).

    ``nvidia.com/gpu`` -> ``NVIDIA_VISIBLE_DEVICES``; names containing ``amd`` ->
    ``AMD_VISIBLE_DEVICES``, ``huawei`` -> ``ASCEND_VISIBLE_DEVICES``; ``vendor.com/device``
    -> ``VENDOR_DEVICE_VISIBLE_DEVICES``; any other form upper-cased with ``.`` and ``/``
    turned into ``_``, plus ``_VISIBLE_DEVICES``.
    """
    if "nvidia" in resource:
        return "NVIDIA_VISIBLE_DEVICES"
    if "amd" in resource:
        return "AMD_VISIBLE_DEVICES"
    if "huawei" in resource:
        return "ASCEND_VISIBLE_DEVICES"
    parts = resource.split("/")
    if len(parts) == 2 and parts[0] and parts[1]:
        vendor = parts[0].split(".")[0]
        return f"{vendor}_{parts[1]}".upper() + "_VISIBLE_DEVICES"
    return resource.upper().replace(".", "_").replace("/", "_") + "_VISIBLE_DEVICES"


def device_shared_toleration() -> dict[str, str]:
    """The toleration of the shared-node taint (``deviceshare.io/mode=shared:NoSchedule``),
    as a pod spec carries it; a new dict on every call."""
    return {"key": DEVICE_SHARED_TAINT_KEY, "operator": "Equal", "value": DEVICE_SHARED_TAINT_VALUE,
            "effect": DEVICE_SHARED_TAINT_EFFECT}


def is_reserved_annotation(key: str) -> bool:
    """True for annotations that only the reconciler's identity may write: the selected
    devices, the device env values, and everything under :data:`RESERVED_PREFIX`."""
    return key == SELECTED_DEVICES or key.startswith(DEVICE_ENV_PREFIX) or key.startswith(RESERVED_PREFIX)


def created_by_workload(pod: Mapping[str, Any]) -> bool:
    """True when a workload Troupe sizes gangs from created the pod: its controller owner
    is one of :data:`troupe.workloadkinds.POD_OWNERS`, or it carries one of
    :data:`troupe.workloadkinds.MEMBER_LABELS` (a LeaderWorkerSet's name label)."""
    labels = pod_labels(pod)
    if any(isinstance(labels.get(key), str) for key in workloadkinds.MEMBER_LABELS):
        return True
    owners = pod_meta(pod).get("ownerReferences")
    if not isinstance(owners, Sequence) or isinstance(owners, str):
        return False
    for o in owners:
        if isinstance(o, Mapping) and o.get("controller") is True:
            api_version, kind = o.get("apiVersion"), o.get("kind")
            if isinstance(api_version, str) and (api_version.split("/", 1)[0], kind) in workloadkinds.POD_OWNERS:
                return True
    return False


def auto_gang_key(pod: Mapping[str, Any]) -> str | None:
    """The group of a pod created with a ``gke.io/topology-aware-auto-*`` gate, as the GKE
    daemon groups them (seeds/002): ``job-name`` label, then
    ``training.kubeflow.org/job-name``, then the first owner's UID, then the ``name`` label.
    None when none is present."""
    owners = pod_meta(pod).get("ownerReferences")
    owner_uid = None
    if isinstance(owners, Sequence) and owners and isinstance(owners[0], Mapping) and owners[0].get("uid"):
        owner_uid = str(owners[0]["uid"])
    return auto_gang_group(pod_labels(pod), owner_uid)


def auto_gang_group(lab: Mapping[str, Any], owner_uid: str | None) -> str | None:
    """:func:`auto_gang_key` on a pod's labels ``lab`` and its (first) owner's UID."""
    for key in (JOB_NAME_LABEL, KUBEFLOW_JOB_NAME_LABEL):
        if isinstance(lab.get(key), str) and lab[key]:
            return f"{key}={lab[key]}"
    if owner_uid:
        return f"owner={owner_uid}"
    if isinstance(lab.get("name"), str) and lab["name"]:
        return f"name={lab['name']}"
    return None


def nominated_taint() -> dict[str, str]:
    """Troupe's taint of a nominated node (``troupe.io/nominated:NoSchedule``), as a node's
    ``spec.taints`` carries it; a new dict on every call."""
    return {"key": NOMINATED_TAINT_KEY, "effect": NOMINATED_TAINT_EFFECT}


def nominated_toleration() -> dict[str, str]:
    """The toleration of :func:`nominated_taint` (operator ``Exists``), as a pod spec
    carries it; a new dict on every call."""
    return {"key": NOMINATED_TAINT_KEY, "operator": "Exists", "effect": NOMINATED_TAINT_EFFECT}
