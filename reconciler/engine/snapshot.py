"""The cluster snapshot the placement engine plans on: nodes, pods, free capacity.

Built from plain Kubernetes objects (dicts in the JSON shape, camelCase keys). Two parts:

- immutable, built once: the nodes in topology order, their paths, the
  :class:`~reconciler.engine.topology.TopologyTree`, the pods, and a cache of which nodes
  pass each pod filter (shared by every copy of the snapshot);
- per-plan scratch state: the free amount of every resource on every node. Plans that
  must see each other's capacity apply to a copy (:meth:`Snapshot.with_assumed`) or in
  place with an undo (:meth:`Snapshot.assumed`, :meth:`Snapshot.without`; preemption
  removes candidate victims that way and asks placement again).

What uses a node's resources (DESIGN.md "Topology"): every pod that is not terminal
(``Succeeded``/``Failed`` pods use nothing) and is

- bound (``spec.nodeName``);
- committed by the reconciler, gated or not: pinned (its ``reconciler.troupe.io/node``
  annotation), or named by the plan record (``reconciler.troupe.io/plan``) of a release in
  progress: a pin is a commitment, so a release cut short by a failed write or a killed
  reconciler keeps its nodes until it is finished or rolled back
  (docs/decisions/007-release-writes.md);
- and nothing else: a pending pod that neither Troupe released nor kube-scheduler bound
  uses nothing, whatever its node selection says. A tenant's pod pinned to a node it can
  never be bound to (``{kubernetes.io/hostname: n0, no-such-label: x}``) would otherwise
  make a free node look full: a phantom reservation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from reconciler.engine.devices import (
    DeviceGroup,
    DeviceInventory,
    Devices,
    Holding,
    format_ids,
    is_shared,
    parse_ids,
    parse_selected,
)
from reconciler.engine.fields import ObjectError, mapping, string, string_map
from reconciler.engine.filters import (
    NodeFilter,
    Taint,
    insufficient,
    parse_node_filter,
    parse_taints,
    static_reason,
)
from reconciler.engine.resources import PODS, node_allocatable, pod_requests
from reconciler.engine.topology import TopologyLevels, TopologyTree
from troupe.contract import (
    ASSIGNED_NODE,
    DEVICE_GROUP,
    GANG_CONDITION,
    HOSTNAME_LABEL,
    NOMINATION,
    PLAN,
    PLANNED_AT,
    RELEASED_AT,
    SELECTED_DEVICES,
    is_troupe_gate,
    rank_key,
)

T = TypeVar("T")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: The capacity of a node for a pod that requests nothing at all (not even ``pods``).
UNBOUNDED = 1 << 30


@dataclass(frozen=True, eq=False)
class NodeInfo:
    """A node as the engine sees it. ``allocatable`` is in units (:mod:`.resources`)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    @property
    def hostname(self) -> str:
        """The ``kubernetes.io/hostname`` label (the name when the label is absent)."""
        return self.labels.get(HOSTNAME_LABEL, self.name)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """A Node object. Ready unless a ``Ready`` condition says otherwise (as the GKE
        daemon reads it, so hand-written snapshots need no conditions). Raises
        :class:`~reconciler.engine.fields.ObjectError` naming the bad field."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec")
        status = mapping(obj, "status", required=True)
        ready = True
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            for c in conditions:
                if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") != "True":
                    ready = False
        return _filled(cls, {
            "name": string(meta, "name", "metadata", required=True),
            "labels": string_map(meta, "labels", "metadata"),
            "allocatable": node_allocatable(status),
            "taints": parse_taints(spec),
            "ready": ready,
            "unschedulable": spec.get("unschedulable") is True,
        })


@dataclass(frozen=True)
class Owner:
    """A pod's controlling owner reference (``controller: true``): the object that
    recreates the pod when it is deleted (a Job, a ReplicaSet...)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Plan:
    """A release's plan record (``reconciler.troupe.io/plan``): ``planned_at`` (RFC 3339)
    and ``nodes``, pod UID -> node name, for every member the release places; ``groups``,
    the SharedDeviceGroups the release binds (name -> :class:`Holding`), so that the IDs
    they get are taken from the moment the record is written, before any member carries
    them (docs/decisions/018-shared-device-groups.md)."""

    planned_at: str
    nodes: Mapping[str, str]
    groups: Mapping[str, Holding] = field(default_factory=dict)

    def encode(self) -> str:
        """The annotation value: compact JSON with sorted keys (``groups`` only when some
        group is bound: ``{"g": {"node": "n", "devices": {"nvidia.com/gpu": "0,1"}}}``)."""
        data: dict[str, Any] = {"plannedAt": self.planned_at, "nodes": dict(self.nodes)}
        if self.groups:
            data["groups"] = {g: {"node": h.node, "devices": {r: format_ids(ids) for r, ids in h.devices.items()}}
                              for g, h in self.groups.items()}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str) -> Plan | None:
        """The record in an annotation value, or None when it is not one. Only the
        reconciler writes it (the webhook refuses anyone else), so a malformed value is
        ignored rather than refused: a record it cannot read reserves nothing."""
        read = _stamped_node_map(raw, "plannedAt")
        if read is None:
            return None
        data, at, nodes = read
        groups: dict[str, Holding] = {}
        raw_groups = data.get("groups") or {}
        if not isinstance(raw_groups, dict):
            return None
        for g, entry in raw_groups.items():
            node = entry.get("node") if isinstance(entry, dict) else None
            devices = entry.get("devices") if isinstance(entry, dict) else None
            if not isinstance(node, str) or not isinstance(devices, dict):
                return None
            try:
                groups[g] = Holding(g, node, {r: parse_ids(ids) for r, ids in sorted(devices.items())}, f"plan {at}")
            except (ValueError, AttributeError):
                return None
        return cls(at, nodes, groups)


def _stamped_node_map(raw: str, stamp: str) -> tuple[dict[str, Any], str, dict[str, str]] | None:
    """A record the reconciler writes in an annotation (a plan, a nomination): a JSON
    object with a string under ``stamp`` and a ``nodes`` map of strings to strings.
    Returns ``(object, stamp, nodes)``, or None when ``raw`` is not such a record."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    at, nodes = data.get(stamp), data.get("nodes")
    if not isinstance(at, str) or not isinstance(nodes, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in nodes.items()):
        return None
    return data, at, nodes


@dataclass(frozen=True)
class Nomination:
    """A preemptor gang's nomination (``reconciler.troupe.io/nomination``): when it was
    made (``at``, RFC 3339), the node each member will go to (pod UID -> node: capacity
    held for the gang from the moment it is written), the victim pods to evict
    (``namespace/name``), and the victim gangs whose eviction a PodDisruptionBudget refused
    (not chosen again while this nomination stands)."""

    at: str
    nodes: Mapping[str, str]
    victims: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    def encode(self) -> str:
        """The annotation value: compact JSON with sorted keys."""
        return json.dumps({"at": self.at, "nodes": dict(self.nodes), "victims": list(self.victims),
                           "refused": list(self.refused)}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str) -> Nomination | None:
        """The nomination in an annotation value, or None when it is not one (only the
        reconciler writes it: an unreadable value holds nothing)."""
        read = _stamped_node_map(raw, "at")
        if read is None:
            return None
        data, at, nodes = read
        victims, refused = data.get("victims", []), data.get("refused", [])
        if not isinstance(victims, list) or not isinstance(refused, list):
            return None
        if not all(isinstance(v, str) for v in (*victims, *refused)):
            return None
        return cls(at, nodes, tuple(victims), tuple(refused))


@dataclass(frozen=True, eq=False)
class PodInfo:
    """A pod as the engine sees it. ``requests`` is in units and includes one ``pods``.

    ``node_name`` is ``spec.nodeName`` (bound); ``assigned_node`` the reconciler's
    annotation (a node name); ``rank`` is
    :func:`troupe.contract.rank_key`. ``planned_at`` and ``released_at`` are the
    reconciler's annotations of a released member (RFC 3339 strings, ``""`` when absent),
    ``plan`` the release record the pod carries, if any; ``nomination`` a preemptor's
    nomination it carries, if any. ``deleting``: a
    ``deletionTimestamp`` is set (the pod still uses its node until it is gone).
    ``device_group``: the SharedDeviceGroup it joins (``deviceshare.io/group``, ``""``);
    ``devices``: the IDs the reconciler gave it (``deviceshare.io/selected-devices``), None
    when it has none (or an unreadable value). ``grace_seconds``: its
    ``terminationGracePeriodSeconds`` (30 when unset, the API default). ``condition``:
    its ``troupe.io/Gang`` condition as ``(status, reason, message)``, None without one.
    """

    namespace: str
    name: str
    requests: Mapping[str, int] = field(default_factory=lambda: {PODS: 1})
    node_filter: NodeFilter = field(default_factory=NodeFilter)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
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

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

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
        return any(is_troupe_gate(g) for g in self.gates)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PodInfo:
        """A Pod object; raises :class:`~reconciler.engine.fields.ObjectError` naming the
        bad field."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec", required=True)
        status = mapping(obj, "status")
        name = string(meta, "name", "metadata", required=True)
        annotations = string_map(meta, "annotations", "metadata")
        labels = string_map(meta, "labels", "metadata")
        node_filter = parse_node_filter(spec)
        gates = []
        raw_gates = spec.get("schedulingGates") or []
        if not isinstance(raw_gates, list):
            raise ObjectError("spec.schedulingGates", f"expected a list, got {type(raw_gates).__name__}")
        for i, g in enumerate(raw_gates):
            if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
                raise ObjectError(f"spec.schedulingGates[{i}].name", "missing field")
            gates.append(g["name"])
        priority = spec.get("priority", 0)
        if priority is None:
            priority = 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ObjectError("spec.priority", f"expected an integer, got {priority!r}")
        return _filled(cls, {
            "namespace": string(meta, "namespace", "metadata", default="default"),
            "name": name,
            "requests": pod_requests(spec),
            "node_filter": node_filter,
            "labels": labels,
            "annotations": annotations,
            "node_name": string(spec, "nodeName", "spec"),
            "assigned_node": annotations.get(ASSIGNED_NODE, ""),
            "phase": string(status, "phase", "status", default="Pending"),
            "gates": tuple(gates),
            "creation_timestamp": str(meta.get("creationTimestamp") or ""),
            "rank": rank_key(obj),
            "priority": priority,
            "uid": str(meta.get("uid") or ""),
            "resource_version": str(meta.get("resourceVersion") or ""),
            "deleting": meta.get("deletionTimestamp") is not None,
            "owner": _controller_owner(meta),
            "planned_at": annotations.get(PLANNED_AT, ""),
            "released_at": annotations.get(RELEASED_AT, ""),
            "plan": Plan.decode(annotations[PLAN]) if PLAN in annotations else None,
            "nomination": Nomination.decode(annotations[NOMINATION]) if NOMINATION in annotations else None,
            "device_group": annotations.get(DEVICE_GROUP, ""),
            "devices": _selected(annotations),
            "grace_seconds": _grace(spec),
            "condition": _gang_condition(status),
        })


def _selected(annotations: Mapping[str, str]) -> Devices | None:
    """The pod's ``deviceshare.io/selected-devices``, or None (absent or unreadable: only
    the reconciler writes it, so an unreadable value claims nothing)."""
    raw = annotations.get(SELECTED_DEVICES)
    if raw is None:
        return None
    try:
        return parse_selected(raw)
    except ValueError:
        return None


def _gang_condition(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == GANG_CONDITION:
            return (str(c.get("status") or ""), str(c.get("reason") or ""), str(c.get("message") or ""))
    return None


def _grace(spec: Mapping[str, Any]) -> int:
    value = spec.get("terminationGracePeriodSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 30


def _filled(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of the frozen dataclass ``cls`` holding ``values``, a value for every
    field: what its generated ``__init__`` makes, without the ``object.__setattr__``
    call per field that is a third of parsing a pod. Only for ``from_object``, which
    gives every field (a test holds them to it)."""
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


#: Equal owners are one value: a Job's or a ReplicaSet's pods all name it.
_owner = lru_cache(maxsize=1024)(Owner)


def _controller_owner(meta: Mapping[str, Any]) -> Owner | None:
    """The owner reference with ``controller: true``, or None (malformed entries are
    skipped: an owner that cannot be read is no owner Troupe may rely on)."""
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return None
    for o in owners:
        if isinstance(o, Mapping) and o.get("controller") is True:
            api_version, kind, name, uid = o.get("apiVersion"), o.get("kind"), o.get("name"), o.get("uid")
            if (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind
                    and isinstance(name, str) and name and isinstance(uid, str) and uid):
                return _owner(str(api_version), str(kind), str(name), str(uid))
    return None


def _reservations(pods: Iterable[PodInfo]) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """``(namespace, uid) -> node`` and ``-> planned_at`` for every member named by a plan
    record that a live pod carries (a terminal or deleting holder's record is over). When
    two records name the same pod, the later plan wins (it can only be a retry of the
    same gang after the earlier release was rolled back)."""
    nodes: dict[tuple[str, str], str] = {}
    at: dict[tuple[str, str], str] = {}
    holders = sorted((p for p in pods if p.plan is not None and p.active), key=lambda p: (p.plan.planned_at, p.key))  # type: ignore[union-attr]
    for holder in holders:
        assert holder.plan is not None
        for uid, node in holder.plan.nodes.items():
            nodes[(holder.namespace, uid)] = node
            at[(holder.namespace, uid)] = holder.plan.planned_at
    return nodes, at


def _nominations(pods: Iterable[PodInfo]) -> dict[tuple[str, str], str]:
    """``(namespace, uid) -> node`` for every member named by a nomination that a live pod
    carries (the later nomination wins when two name the same pod)."""
    out: dict[tuple[str, str], str] = {}
    holders = sorted((p for p in pods if p.nomination is not None and p.active),
                     key=lambda p: (p.nomination.at, p.key))  # type: ignore[union-attr]
    for holder in holders:
        assert holder.nomination is not None
        for uid, node in holder.nomination.nodes.items():
            out[(holder.namespace, uid)] = node
    return out


class NodeTable:
    """What a snapshot derives from its nodes alone: the nodes in topology order, their
    paths, the topology tree, names to indexes, which pass the static
    checks, and allocatable per resource. Immutable; a cache keeps one per set of nodes
    and builds snapshots on it while only pods change (kwok's and kubelets' status
    heartbeats do not change it).

    Raises ``ValueError`` on a duplicate node name.
    """

    def __init__(self, nodes: Iterable[NodeInfo], levels: TopologyLevels) -> None:
        keyed = sorted(((levels.path_of(n.name, n.labels), n.name, n) for n in nodes), key=lambda t: (t[0], t[1]))
        self.levels = levels
        self.nodes: tuple[NodeInfo, ...] = tuple(n for _, _, n in keyed)
        self.paths: tuple[tuple[str, ...], ...] = tuple(p for p, _, _ in keyed)
        self.index: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            if n.name in self.index:
                raise ValueError(f"duplicate node {n.name!r}")
            self.index[n.name] = i
        self.tree = TopologyTree([n.name for n in self.nodes], self.paths, levels)
        self.weights = levels.weights()
        self.static_ok = [n.ready and not n.unschedulable for n in self.nodes]
        #: Per node: opted in to shared device groups (``deviceshare.io/mode: shared``).
        self.shared = [is_shared(n.labels) for n in self.nodes]
        resources = sorted({r for n in self.nodes for r in n.allocatable})
        self.allocatable: dict[str, tuple[int, ...]] = {
            r: tuple(n.allocatable.get(r, 0) for n in self.nodes) for r in resources}


class Snapshot:
    """Nodes (in topology order), pods, SharedDeviceGroups and free capacity; see the
    module docstring.

    ``nodes[i]``, ``paths[i]`` and index ``i`` of every per-node list refer to the same
    node; :attr:`index` maps a node name to ``i``. ``nodes`` may be a prebuilt
    :class:`NodeTable` (made with the same ``levels``), shared by snapshots that differ
    only in pods. ``groups``: the SharedDeviceGroups by name; ``group_errors``: name ->
    why a group object could not be read. :attr:`devices` is the device inventory
    (:class:`~reconciler.engine.devices.DeviceInventory`): the IDs groups hold count as
    used on their nodes, so no ordinary gang is planned onto them. Raises ``ValueError``
    on a duplicate node or pod.
    """

    def __init__(self, nodes: Iterable[NodeInfo] | NodeTable, pods: Iterable[PodInfo], levels: TopologyLevels,
                 groups: Iterable[DeviceGroup] = (), group_errors: Mapping[str, str] | None = None) -> None:
        table = nodes if isinstance(nodes, NodeTable) else NodeTable(nodes, levels)
        self.table = table
        self.levels = levels
        self.nodes = table.nodes
        self.paths = table.paths
        self.index = table.index
        self.tree = table.tree
        self.weights = table.weights
        self.pods: dict[str, PodInfo] = {}
        for p in pods:
            if p.key in self.pods:
                raise ValueError(f"duplicate pod {p.key!r}")
            self.pods[p.key] = p
        self.groups: dict[str, DeviceGroup] = {g.name: g for g in groups}
        self.group_errors: dict[str, str] = dict(group_errors or {})
        self._static_ok = table.static_ok
        self._eligible: dict[NodeFilter, list[bool]] = {}
        self._free: dict[str, list[int]] = {r: list(col) for r, col in table.allocatable.items()}
        self._using: dict[str, tuple[int, Mapping[str, int]]] = {}
        self._reserved, self._reserved_at = _reservations(self.pods.values())
        self._nominated = _nominations(self.pods.values())
        self._memo: dict[str, Any] = {}
        claims = []
        for p in self.pods.values():
            where = self.node_of(p)
            if where is not None:
                self._take(p.key, where, p.requests)
                # A pod being deleted still runs with its devices until it is gone.
                if p.device_group and p.devices is not None:
                    claims.append(Holding(p.device_group, self.nodes[where].name, p.devices, f"pod {p.key}"))
        plans = [h for p in self.pods.values() if p.plan is not None and p.active for h in p.plan.groups.values()]
        self.devices = DeviceInventory.build(self.index, self.groups, claims, plans)
        for h in self.devices.holdings.values():
            self._hold(h)

    @staticmethod
    def _holding_key(group: str) -> str:
        """The key under which a group's devices use its node (no pod key has a ``:`` before
        its ``/``)."""
        return f"group:{group}"

    def _hold(self, h: Holding) -> None:
        self._take(self._holding_key(h.group), self.index[h.node], {r: len(ids) for r, ids in h.devices.items()})

    @classmethod
    def from_objects(
        cls,
        nodes: Sequence[Mapping[str, Any]],
        pods: Sequence[Mapping[str, Any]],
        levels: TopologyLevels | None = None,
        *,
        groups: Sequence[Mapping[str, Any]] = (),
        skipped: list[str] | None = None,
    ) -> Snapshot:
        """A snapshot of Node, Pod and SharedDeviceGroup objects (levels default to GKE's).

        Raises :class:`ObjectError` whose field starts with the object's place
        (``nodes[2].status.allocatable: missing field``). Given a ``skipped`` list, a
        malformed object is left out instead and its error appended there: what a
        long-running caller wants, so that one odd node (say, one still registering,
        without ``status.allocatable``) does not stop every plan.
        """

        def parse(kind: str, objs: Sequence[Mapping[str, Any]], one: Callable[[Mapping[str, Any]], T]) -> list[T]:
            out = []
            for index, obj in enumerate(objs):
                try:
                    out.append(one(obj))
                except ObjectError as e:
                    error = ObjectError(f"{kind}[{index}].{e.field}", e.why)
                    if skipped is None:
                        raise error from None
                    skipped.append(str(error))
            return out

        return cls(
            parse("nodes", nodes, NodeInfo.from_object),
            parse("pods", pods, PodInfo.from_object),
            levels or TopologyLevels.default(),
            parse("groups", groups, DeviceGroup.from_object),
        )

    # --- who uses what -------------------------------------------------------------------
    def node_of(self, pod: PodInfo) -> int | None:
        """The index of the node whose resources ``pod`` uses, or None (see module doc)."""
        if pod.terminal:
            return None
        if pod.node_name:
            return self.index.get(pod.node_name)
        committed = self.committed_node(pod)
        if committed:
            return self.index.get(committed)
        nominated = self.nominated_node(pod)
        if nominated:
            return self.index.get(nominated)
        return None

    def nominated_node(self, pod: PodInfo) -> str:
        """The node a preemptor's nomination holds for ``pod`` (a gated member), or ``""``:
        its capacity counts as used, so no other gang takes what the eviction frees."""
        if pod.gated and pod.uid and self._nominated:
            return self._nominated.get((pod.namespace, pod.uid), "")
        return ""

    def committed_node(self, pod: PodInfo) -> str:
        """The node the reconciler committed ``pod`` to (a node name), or ``""``: its pin
        (``reconciler.troupe.io/node``), else its entry in the plan record of a release in
        progress while it is still gated."""
        if pod.assigned_node:
            return pod.assigned_node
        if pod.gated and pod.uid:
            return self._reserved.get((pod.namespace, pod.uid), "")
        return ""

    def plan_of(self, pod: PodInfo) -> str:
        """``planned_at`` of the release ``pod`` belongs to: its own annotation once
        released, else that of the plan record that reserves its node; ``""`` when none."""
        if pod.planned_at:
            return pod.planned_at
        if pod.gated and pod.uid:
            return self._reserved_at.get((pod.namespace, pod.uid), "")
        return ""

    def _take(self, key: str, i: int, requests: Mapping[str, int]) -> None:
        if key in self._using:
            raise ValueError(f"pod {key} already uses node {self.nodes[self._using[key][0]].name}")
        for r, q in requests.items():
            col = self._free.get(r)
            if col is None:
                col = self._free[r] = [0] * len(self.nodes)
            col[i] -= q
        self._using[key] = (i, requests)

    def _give_back(self, key: str) -> tuple[int, Mapping[str, int]]:
        i, requests = self._using.pop(key)
        for r, q in requests.items():
            self._free[r][i] += q
        return i, requests

    def using(self, pod_key: str) -> str | None:
        """The node whose resources the pod uses in this snapshot, or None."""
        entry = self._using.get(pod_key)
        return None if entry is None else self.nodes[entry[0]].name

    def node_index_of(self, pod_key: str) -> int | None:
        """The index of the node whose resources the pod uses in this snapshot, or None
        (:meth:`using` as an index, for callers that keep per-node arrays)."""
        entry = self._using.get(pod_key)
        return None if entry is None else entry[0]

    def free_units(self, resource: str) -> list[int]:
        """Free units of ``resource`` on every node, in node order: a copy, all zeros when
        no node has the resource (may be negative where a node is overcommitted)."""
        col = self._free.get(resource)
        return list(col) if col is not None else [0] * len(self.nodes)

    def free(self, node: str | int) -> dict[str, int]:
        """Free units of every resource on a node (may be negative when overcommitted)."""
        i = node if isinstance(node, int) else self.index[node]
        return {r: col[i] for r, col in self._free.items()}

    # --- plans applied ---------------------------------------------------------------
    def _copy(self) -> Snapshot:
        other = copy.copy(self)
        other._free = {r: list(col) for r, col in self._free.items()}
        other._using = dict(self._using)
        other._memo = {}
        return other

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()`` once per snapshot (and per copy): what several decisions on the
        same snapshot derive alike (the candidate victims of preemption, say)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]

    def with_blocked(self, nodes: Iterable[int]) -> Snapshot:
        """A copy in which the nodes of these indices have nothing free: capacity held for
        a gang ahead in the queue."""
        other = self._copy()
        for i in nodes:
            for col in other._free.values():
                col[i] = min(col[i], 0)
        return other

    def _assume(self, assignments: Iterable[Any]) -> list[str]:
        done: list[str] = []
        try:
            for a in assignments:
                self._take(a.pod_key, self.index[a.node], a.requests)
                done.append(a.pod_key)
        except (KeyError, ValueError):
            for key in reversed(done):
                self._give_back(key)
            raise
        return done

    def with_assumed(self, result: Any | None, holdings: Iterable[Holding] = ()) -> Snapshot:
        """A copy in which the placed pods of ``result`` (a
        :class:`~reconciler.engine.placement.PlacementResult`, or anything with
        ``assignments`` of ``pod_key``, ``node``, ``requests``; None for none) use their
        nodes, and the groups of ``holdings`` (bound by the same plan) hold their devices."""
        other = self._copy()
        if result is not None:
            other._assume(result.assignments)
        added = [h for h in holdings if h.group not in other.devices.holdings]
        if added:
            other.devices = other.devices.with_holdings(added)
            for h in added:
                other._hold(h)
        return other

    def with_removed(self, pod_keys: Iterable[str]) -> Snapshot:
        """A copy in which these pods use nothing (victims evicted, say)."""
        other = self._copy()
        for key in pod_keys:
            if key in other._using:
                other._give_back(key)
        return other

    @contextmanager
    def assumed(self, result: Any) -> Iterator[Snapshot]:
        """Apply ``result`` in place for the ``with`` block, then undo it."""
        done = self._assume(result.assignments)
        try:
            yield self
        finally:
            for key in reversed(done):
                self._give_back(key)

    @contextmanager
    def without(self, pod_keys: Iterable[str]) -> Iterator[Snapshot]:
        """Free the resources of these pods for the ``with`` block, then restore them.
        Pods that use no node here are ignored."""
        removed = [(key, *self._give_back(key)) for key in dict.fromkeys(pod_keys) if key in self._using]
        try:
            yield self
        finally:
            for key, i, requests in reversed(removed):
                self._take(key, i, requests)

    # --- filters -----------------------------------------------------------------------
    def eligible(self, flt: NodeFilter) -> list[bool]:
        """Per node: passes every non-resource filter for ``flt``. Cached per filter and
        shared by copies (it depends only on the immutable nodes)."""
        cached = self._eligible.get(flt)
        if cached is not None:
            return cached
        tolerated: dict[tuple[Taint, ...], bool] = {}
        out = []
        for ok, n in zip(self._static_ok, self.nodes, strict=True):
            if ok and n.taints:
                t = tolerated.get(n.taints)
                if t is None:
                    t = tolerated[n.taints] = flt.untolerated(n.taints) is None
                ok = t
            if ok and flt.node_selector:
                ok = flt.selector_matches(n.labels)
            if ok and flt.terms is not None:
                ok = flt.affinity_matches(n.labels, n.name)
            out.append(ok)
        self._eligible[flt] = out
        return out

    def capacity(self, requests: Mapping[str, int], eligible: Sequence[bool] | None = None) -> list[int]:
        """Per node: how many pods with ``requests`` fit in its free capacity (0 where
        ``eligible`` is false)."""
        n = len(self.nodes)
        cols = []
        for r, q in requests.items():
            if q <= 0:
                continue
            free = self._free.get(r)
            if free is None:
                return [0] * n
            cols.append([f // q if f > 0 else 0 for f in free])
        if not cols:
            caps = [UNBOUNDED] * n
        elif len(cols) == 1:
            caps = cols[0]
        else:
            caps = [min(t) for t in zip(*cols, strict=True)]
        if eligible is None:
            return caps
        return [c if ok else 0 for c, ok in zip(caps, eligible, strict=True)]

    def reasons(self, i: int, flt: NodeFilter, requests: Mapping[str, int]) -> list[str]:
        """Why node ``i`` takes no pod with this filter and these requests (empty: it
        takes one): the failing filter, or every resource it has too little of."""
        n = self.nodes[i]
        why = static_reason(flt, n.name, n.labels, n.taints, n.ready, n.unschedulable)
        if why is not None:
            return [why]
        return insufficient(self.free(i), requests)

    def empty(self) -> Snapshot:
        """A copy in which no pod uses anything: what preemption could free at most."""
        other = copy.copy(self)
        other._free = {r: [n.allocatable.get(r, 0) for n in self.nodes] for r in self._free}
        other._using = {}
        return other
