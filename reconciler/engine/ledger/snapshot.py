"""The cluster snapshot the placement engine plans on: nodes, pods, free capacity.

Built from the nodes and pods of :mod:`reconciler.engine.model.pods` by the one snapshot builder,
:func:`reconciler.engine.ledger.builder.build_snapshot` (which also parses plain Kubernetes objects,
:func:`~reconciler.engine.ledger.builder.snapshot_of_objects`); it indexes their plan and nomination
records (:mod:`reconciler.engine.model.records`).
It is the capacity ledger, in two parts:

- immutable, built once: the nodes in topology order, their paths, the
  :class:`~reconciler.engine.ledger.topology.TopologyTree`, the pods, and a cache of which nodes
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
- held, while gated, by a preemptor's nomination (``reconciler.troupe.io/nomination``), so
  that no other gang takes what the eviction of its victims frees;
- reserved for a rank of a gang released as created, until its member is released there
  (``reconciler.troupe.io/reservation`` on the workload, :mod:`reconciler.engine.model.reservations`, decision 034);
- and nothing else: a pending pod that neither Troupe released nor kube-scheduler bound
  uses nothing, whatever its node selection says. A tenant's pod pinned to a node it can
  never be bound to (``{kubernetes.io/hostname: n0, no-such-label: x}``) would otherwise
  make a free node look full: a phantom reservation.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.podindex import PodIndex
from reconciler.engine.ledger.recordindex import nomination_record, plan_record, records
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.ledger.usage import UsageCopy, give_back, take
from reconciler.engine.model.budgets import Budget
from reconciler.engine.model.devicegroups import DeviceGroup, DeviceInventory, Holding
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.limits import Limit
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import SpreadConstraint
from reconciler.engine.model.reservations import Reservation, fill
from reconciler.engine.model.selectors import NodeFilter, Taint
from reconciler.engine.model.volumes import VolumeCatalog
from reconciler.engine.model.workloads import group

T = TypeVar("T")
#: The capacity of a node for a pod that requests nothing at all (not even ``pods``).
UNBOUNDED = 1 << 30


class Placed(Protocol):
    """One member on its node, as a snapshot assumes it: what a
    :class:`~reconciler.engine.placement.place.Assignment` gives. ``pod_key``: ``namespace/name``;
    ``node``: a node name; ``requests``: units per resource (:mod:`reconciler.engine.model.resources`)."""

    @property
    def pod_key(self) -> PodKey:
        """The member's ``namespace/name``."""

    @property
    def node(self) -> str:
        """The name of the node it goes to."""

    @property
    def requests(self) -> Mapping[str, int]:
        """What it uses there, in units."""


class Placement(Protocol):
    """A gang placed, as a snapshot assumes it: what a
    :class:`~reconciler.engine.placement.place.PlacementResult` gives, its members' ``assignments``
    (none when it was not placed)."""

    @property
    def assignments(self) -> Sequence[Placed]:
        """Every placed member, on its node."""


class Snapshot:
    """Nodes (in topology order), pods, SharedDeviceGroups and free capacity; see the
    module docstring.

    ``nodes[i]``, ``paths[i]`` and index ``i`` of every per-node list refer to the same
    node; :attr:`index` maps a node name to ``i``. ``nodes`` may be a prebuilt
    :class:`NodeTable` (made with the same ``levels``), shared by snapshots that differ
    only in pods. ``groups``: the SharedDeviceGroups by name; ``group_errors``: name ->
    why a group object could not be read; ``budgets``: the PodDisruptionBudgets
    (:class:`~reconciler.engine.model.budgets.Budget`) that ``atomic`` preemption counts.
    :attr:`devices` is the device inventory
    (:class:`~reconciler.engine.model.devicegroups.DeviceInventory`): the IDs groups hold count as
    used on their nodes, so no ordinary gang is planned onto them. Raises ``ValueError``
    on a duplicate node or pod. ``namespaces``: namespace name -> its labels (for
    ``namespaceSelector``); ``volumes``: the claims, volumes and CSINodes
    (:class:`~reconciler.engine.model.volumes.VolumeCatalog`; None when they were not read, as by
    the simulator: the volume filters are then skipped); ``spread_defaults``: the cluster's
    default ``DoNotSchedule`` spread constraints, selectors unset (:mod:`reconciler.engine.filters.podtopologyspread`);
    ``reservations``: of gangs released as created; their free ranks hold their nodes
    (:mod:`reconciler.engine.model.reservations`; :attr:`reservations` by ``namespace/gang id``).
    ``usage``: the bound pods' use of the nodes, counted already on ``nodes`` (a copy of a
    cache's :class:`~reconciler.engine.ledger.usage.BoundUsage`, which the snapshot then owns):
    those pods are not counted again (docs/decisions/061-bound-usage.md); ignored unless it
    was made on this very table. ``group_priorities``: pod key -> the priority its pod group
    states, for the pods whose group states one (:meth:`priority_of`). ``limits``: pod key ->
    its time limits (:class:`~reconciler.engine.model.limits.Limit`), for the pods that have one.
    """

    def __init__(self, nodes: Iterable[NodeInfo] | NodeTable, pods: Iterable[PodInfo], levels: TopologyLevels,
                 groups: Iterable[DeviceGroup] = (), group_errors: Mapping[str, str] | None = None,
                 budgets: Iterable[Budget] = (), *, spread_defaults: Sequence[SpreadConstraint] = (),
                 namespaces: Mapping[str, Mapping[str, str]] | None = None, volumes: VolumeCatalog | None = None,
                 reservations: Iterable[Reservation] = (), whole_victims: Iterable[str] = (),
                 group_priorities: Mapping[PodKey, int] | None = None, usage: UsageCopy | None = None,
                 limits: Mapping[PodKey, Limit] | None = None) -> None:
        table = nodes if isinstance(nodes, NodeTable) else NodeTable(nodes, levels)
        self.table = table
        self.levels = levels
        self.nodes = table.nodes
        self.paths = table.paths
        self.index = table.index
        self.tree = table.tree
        self.weights = table.weights
        # The bound pods' use of their nodes comes counted when the caller keeps it (a
        # cache's BoundUsage, on this very table): only the other pods are counted here.
        counted: Mapping[str, Any] = {}
        if usage is not None and usage.table is table:
            self._free, self._using = usage.free, usage.using
            counted = usage.using
        else:
            self._free = {resource: list(col) for resource, col in table.allocatable.items()}
            self._using = {}
        indexed = PodIndex(pods, counted)
        self.pods: dict[PodKey, PodInfo] = indexed.pods
        self.groups: dict[str, DeviceGroup] = {group.name: group for group in groups}
        self.group_errors: dict[str, str] = dict(group_errors or {})
        self.budgets: tuple[Budget, ...] = tuple(budgets)
        self.namespaces: Mapping[str, Mapping[str, str]] = namespaces or {}
        self.volumes, self.spread_defaults = volumes, tuple(spread_defaults)
        #: Gang keys evicted only whole, even by ``minimal`` preemption: their members name a
        #: pod group whose ``disruptionMode`` is ``all`` (docs/decisions/056-pod-groups.md).
        self.whole_victims: frozenset[str] = frozenset(whole_victims)
        self.group_priorities: Mapping[PodKey, int] = group_priorities or {}
        self.limits: Mapping[PodKey, Limit] = limits or {}
        #: Keys of the pods that carry :class:`~reconciler.engine.model.podterms.PodTerms`.
        self.terms_keys = tuple(indexed.terms_keys)
        #: Keys of the pods that ask an exclusive level (:mod:`reconciler.engine.placement.layers`).
        self.exclusive = tuple(indexed.exclusive)
        self._static_ok = table.static_ok
        self._eligible: dict[NodeFilter, list[bool]] = {}
        self._reserved, self._reserved_at = records(indexed.planned, plan_record)
        self._nominated, _ = records(indexed.nominating, nomination_record)
        self._memo: dict[str, Any] = {}
        self._gated = indexed.gated
        claims = []
        for pod in indexed.uncounted:
            where = self.node_of(pod)
            if where is not None:
                self._take(pod.key, where, pod.requests)
                # A pod being deleted still runs with its devices until it is gone.
                if pod.device_group and pod.devices is not None:
                    claims.append(Holding(pod.device_group, self.nodes[where].name, pod.devices, f"pod {pod.key}"))
        plans = [holding for pod in indexed.planned if pod.active and pod.plan is not None for holding in pod.plan.groups.values()]
        self.devices = DeviceInventory.build(self.index, self.groups, claims, plans)
        for holding in self.devices.holdings.values():
            self._hold(holding)
        self.reservations: dict[str, Reservation] = {}
        self._hold_reservations(reservations, indexed.stamped)

    def _hold_reservations(self, reservations: Iterable[Reservation], stamped: Iterable[PodInfo]) -> None:
        """Each reservation's free ranks use their nodes (module docstring); a rank whose
        node is not in the snapshot holds nothing (its gang's decision rolls it back)."""
        found = {f"{r.namespace}/{r.record.gang}": r for r in reservations}
        if not found:
            return
        stamps = {(r.namespace, r.record.planned_at) for r in found.values()}
        times = {at for _, at in stamps}
        released: dict[tuple[str, str], list[PodInfo]] = {}
        for pod in stamped:  # the pods with a planned-at stamp
            if (pod.planned_at in times and (pod.namespace, pod.planned_at) in stamps
                    and (pod.active or pod.phase == "Succeeded")):
                released.setdefault((pod.namespace, pod.planned_at), []).append(pod)
        for key, r in found.items():
            self.reservations[key] = r
            members = [p for p in released.get((r.namespace, r.record.planned_at), ())
                       if (made_by := group(p)) is not None and made_by[1] == r.workload]
            filled = fill(r.record, r.slots, members)
            prefix = r.prefix
            for rank, node in enumerate(r.record.nodes):
                if rank not in filled and (i := self.index.get(node)) is not None:
                    self._take(f"{prefix}{rank}", i, r.requests(rank))

    @staticmethod
    def _holding_key(group: str) -> str:
        """The key under which a group's devices use its node (no pod key has a ``:`` before
        its ``/``)."""
        return f"group:{group}"

    def _hold(self, holding: Holding) -> None:
        self._take(self._holding_key(holding.group), self.index[holding.node],
                   {resource: len(ids) for resource, ids in holding.devices.items()})

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
        if self._nominated and pod.uid and pod.gated:
            return self._nominated.get((pod.namespace, pod.uid), "")
        return ""

    def priority_of(self, pod: PodInfo) -> int:
        """The priority ``pod`` counts with as its gang's member: the priority its pod
        group states, else its own ``spec.priority``. A gang's priority is the highest of
        its members' (:attr:`~reconciler.engine.gangs.gang.Gang.priority`, the same rule),
        as KEP-5710 gives a pod its workload's (docs/decisions/064-preemption-names-no-other-tenant.md)."""
        return self.group_priorities.get(pod.key, pod.priority) if self.group_priorities else pod.priority

    def planned_from(self, members: Iterable[PodInfo], priority: int) -> Snapshot:
        """The snapshot a gang of ``priority`` plans on for its gated ``members``: the room
        their own nomination holds is theirs, and so is the room held by nominations of
        lower priority (kube-scheduler honours only nominations of equal or higher
        priority: its ``addNominatedPods``, Kubernetes docs "Pod Priority and Preemption").
        ``self`` when there is nothing to set aside."""
        if not self._nominated:  # no nomination in the snapshot: nothing to set aside
            return self
        own = {pod.key for pod in members if self.nominated_node(pod)}
        nominated = self.memo("nominated", lambda: sorted(
            (self.priority_of(pod), pod.key) for pod in self._gated
            if pod.active and self.nominated_node(pod) and not self.committed_node(pod)))
        aside = sorted(own | {key for held_at, key in nominated if held_at < priority})
        return self.with_removed(aside) if aside else self

    def committed_node(self, pod: PodInfo) -> str:
        """The node the reconciler committed ``pod`` to (a node name), or ``""``: its pin
        (``reconciler.troupe.io/node``), else its entry in the plan record of a release in
        progress while it is still gated."""
        if pod.assigned_node:
            return pod.assigned_node
        if self._reserved and pod.uid and pod.gated:
            return self._reserved.get((pod.namespace, pod.uid), "")
        return ""

    def plan_of(self, pod: PodInfo) -> str:
        """``planned_at`` of the release ``pod`` belongs to: its own annotation once
        released, else that of the plan record that reserves its node; ``""`` when none."""
        if pod.planned_at:
            return pod.planned_at
        if self._reserved_at and pod.uid and pod.gated:
            return self._reserved_at.get((pod.namespace, pod.uid), "")
        return ""

    def _take(self, key: str, node: int, requests: Mapping[str, int]) -> None:
        """``key`` (a pod key or a group's holding key) uses ``requests`` (units) on the
        node of index ``node``; ``ValueError`` when it already uses one."""
        if key in self._using:
            raise ValueError(f"pod {key} already uses node {self.nodes[self._using[key][0]].name}")
        take(self._free, self._using, key, node, requests, len(self.nodes))

    def _give_back(self, key: str) -> tuple[int, Mapping[str, int]]:
        """``key`` uses nothing any more; returns the node index and the requests it used."""
        return give_back(self._free, self._using, key)

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
        return {resource: col[i] for resource, col in self._free.items()}

    # --- plans applied ---------------------------------------------------------------
    def _copy(self) -> Snapshot:
        other = copy.copy(self)
        other._free = {resource: list(col) for resource, col in self._free.items()}
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

    def _assume(self, assignments: Iterable[Placed]) -> Callable[[], None]:
        """Each placed pod uses its node, in place of what a nomination or plan record held
        for it; returns the undo."""
        done: list[str] = []
        held: list[tuple[str, tuple[int, Mapping[str, int]]]] = []

        def undo() -> None:
            for key in reversed(done):
                self._give_back(key)
            for key, (node, requests) in held:
                self._take(key, node, requests)

        try:
            for placed in assignments:
                if placed.pod_key in self._using:
                    held.append((placed.pod_key, self._give_back(placed.pod_key)))
                self._take(placed.pod_key, self.index[placed.node], placed.requests)
                done.append(placed.pod_key)
        except KeyError:
            undo()
            raise
        return undo

    def with_assumed(self, result: Placement | None, holdings: Iterable[Holding] = ()) -> Snapshot:
        """A copy in which the placed pods of ``result`` (a PlacementResult, or None) use their
        nodes (not what a nomination or plan record held for them), and the groups of
        ``holdings`` (bound by the same plan) hold their devices. Raises ``KeyError`` for an
        assignment to an unknown node (this snapshot is left alone)."""
        other = self._copy()
        if result is not None:
            other._assume(result.assignments)
        added = [holding for holding in holdings if holding.group not in other.devices.holdings]
        if added:
            other.devices = other.devices.with_holdings(added)
            for holding in added:
                other._hold(holding)
        return other

    def copy(self) -> Snapshot:
        """A copy whose capacity its owner may change in place (:meth:`assume`); the
        immutable parts are shared."""
        return self._copy()

    def assume(self, result: Placement | None, holdings: Iterable[Holding] = ()) -> None:
        """:meth:`with_assumed` applied to this snapshot itself, for its owner (a
        :meth:`copy` no one else reads): what a pipeline of decisions on one snapshot does
        after each release, at the cost of the nodes it touches
        (docs/decisions/068-release-pipeline.md). What was derived of the snapshot
        (:meth:`memo`) is dropped. Raises ``KeyError`` for an assignment to an unknown node,
        with nothing applied."""
        if result is not None:
            self._assume(result.assignments)
        added = [holding for holding in holdings if holding.group not in self.devices.holdings]
        if added:
            self.devices = self.devices.with_holdings(added)
            for holding in added:
                self._hold(holding)
        self._memo = {}

    def with_removed(self, pod_keys: Iterable[str]) -> Snapshot:
        """A copy in which these pods use nothing (victims evicted, say)."""
        other = self._copy()
        for key in pod_keys:
            if key in other._using:
                other._give_back(key)
        return other

    @contextmanager
    def assumed(self, result: Placement) -> Iterator[Snapshot]:
        """Apply ``result`` (a :class:`~reconciler.engine.placement.place.PlacementResult`) in
        place for the ``with`` block, then undo it; raises as :meth:`with_assumed` does,
        with nothing applied."""
        undo = self._assume(result.assignments)
        try:
            yield self
        finally:
            undo()

    @contextmanager
    def without(self, pod_keys: Iterable[str]) -> Iterator[Snapshot]:
        """Free the resources of these pods for the ``with`` block, then restore them.
        Pods that use no node here are ignored."""
        removed = [(key, *self._give_back(key)) for key in dict.fromkeys(pod_keys) if key in self._using]
        try:
            yield self
        finally:
            for key, node, requests in reversed(removed):
                self._take(key, node, requests)

    # --- filters -----------------------------------------------------------------------
    def eligible(self, flt: NodeFilter) -> list[bool]:
        """Per node: passes every non-resource filter for ``flt``. Cached per filter and
        shared by copies (it depends only on the immutable nodes)."""
        cached = self._eligible.get(flt)
        if cached is not None:
            return cached
        tolerated: dict[tuple[Taint, ...], bool] = {}
        out = []
        for ok, node in zip(self._static_ok, self.nodes, strict=True):
            if ok and node.taints:
                tolerates = tolerated.get(node.taints)
                if tolerates is None:
                    tolerates = tolerated[node.taints] = flt.untolerated(node.taints) is None
                ok = tolerates
            if ok and flt.node_selector:
                ok = flt.selector_matches(node.labels)
            if ok and flt.terms is not None:
                ok = flt.affinity_matches(node.labels, node.name)
            out.append(ok)
        self._eligible[flt] = out
        return out

    def capacity(self, requests: Mapping[str, int], eligible: Sequence[bool] | None = None) -> list[int]:
        """Per node: how many pods with ``requests`` fit in its free capacity (0 where
        ``eligible`` is false)."""
        count = len(self.nodes)
        cols = []
        for resource, amount in requests.items():
            if amount <= 0:
                continue
            free = self._free.get(resource)
            if free is None:
                return [0] * count
            cols.append([units // amount if units > 0 else 0 for units in free])
        if not cols:
            caps = [UNBOUNDED] * count
        elif len(cols) == 1:
            caps = cols[0]
        else:
            caps = [min(fits) for fits in zip(*cols, strict=True)]
        if eligible is None:
            return caps
        return [cap if ok else 0 for cap, ok in zip(caps, eligible, strict=True)]

    def empty(self) -> Snapshot:
        """A copy in which no pod uses anything: what preemption could free at most."""
        other = copy.copy(self)
        other._free = {resource: [node.allocatable.get(resource, 0) for node in self.nodes] for resource in self._free}
        other._using = {}
        return other
