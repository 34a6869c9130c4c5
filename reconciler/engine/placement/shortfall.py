"""Why a gang does not fit, domain by domain: the per-domain shortfall ``kubectl troupe why`` shows.

:func:`~.place.place_gang`'s reason (``fits 6 of 8 members; 3 nodes excluded: ...``, from
:func:`reconciler.engine.placement.place._explain`) sums the whole cluster. An operator asks the
next question: *which* subblock came closest, and what kept the rest out? :func:`shortfall`
answers it for every candidate domain at the gang's level, with numbers::

    subblock gpu-b0-s1: 6 of 8 fit (2 nodes cordoned, 1 full)

The level (docs/decisions/021-why-and-status.md):

- the gang's ``troupe.io/topology-required-level`` or ``-preferred-level`` when it asks one;
- else the lowest level at which some domain, emptied of every other pod, could hold the
  whole gang (the smallest domain placement could ever choose; :func:`~reconciler.engine.gangs.queueing.hold_for` targets the
  same one); the whole cluster when none can.

For each domain: ``fits``, members that fit in its free capacity now (summed over the
members' shapes, as placement counts them, each capped by its members); ``could``, members
that would fit were every other pod gone (what finishing pods or preemption could give at
most); and each node that takes no member, by the first reason that keeps it out, listed by the
plugin that gave it in kube-scheduler's profile order (:mod:`reconciler.engine.filters.profile`)
and in words for a count of nodes: ``not ready``, ``cordoned`` (``spec.unschedulable``;
NodeUnschedulable), ``untolerated taint k=v`` (TaintToleration), ``not selected`` (node
selector or required affinity; NodeAffinity), then NodeResourcesFit's, in this order:
``held for <gang>`` (capacity held for a gang ahead in the queue, docs/decisions/019, as
kube-scheduler counts a nominated pod's requests), ``too small`` (too little even when
empty), ``full`` (in use). Reasons are those of the lowest-ranked member's shape, as
placement's message gives them.

When the members need the filters that depend on the pods around them
(:func:`reconciler.engine.filters.gang.needed`: pod affinity and anti-affinity, topology spread, host ports,
node name, volumes), ``fits`` and ``could`` are the members placement's own fill
(:func:`.fill.fill` with :class:`~reconciler.engine.filters.gang.GangFilters`, as :func:`.place.place_gang`
runs it) places in the domain, now and on the emptied snapshot, a member that fits nowhere
skipped; and, when one is left out, every node of the domain is listed by why it refuses
the first one left out, the members placed so far counted, in kube-scheduler's profile
order and words (``didn't match pod anti-affinity rules``; docs/decisions/031 and 048).

Pure: a snapshot and members in, plain values out; deterministic (domains in a stated
order, ties by topology order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.engine.filters import gang as gangfilters
from reconciler.engine.filters import nodeaffinity, noderesources, nodeunschedulable, profile
from reconciler.engine.filters.gang import GangFilters
from reconciler.engine.filters.status import Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.selectors import NodeFilter
from reconciler.engine.placement import layers
from reconciler.engine.placement.fill import fill
from reconciler.engine.placement.place import NO_REQUEST
from reconciler.engine.placement.shapes import member_shapes
from troupe.contract import TopologyRequest

CORDONED = "cordoned"
NOT_READY_NODE = "not ready"
NOT_SELECTED = "not selected"
TOO_SMALL = "too small"
FULL = "full"
HELD = "held for"
#: The words a count of nodes reads for the plugins' reasons it renames.
_RENAMED = {nodeunschedulable.NOT_READY: NOT_READY_NODE, nodeunschedulable.UNSCHEDULABLE: CORDONED,
            nodeaffinity.SELECTOR_MISMATCH: NOT_SELECTED, nodeaffinity.AFFINITY_MISMATCH: NOT_SELECTED}
Key = tuple[tuple[int, tuple[int, str]], str]
"""A node's reason as :class:`Excluded` counts it: its place in the profile order, and its words."""


def status_key(status: Status) -> Key:
    """``status``'s first reason in words for a count of nodes (:data:`_RENAMED`, else
    kube-scheduler's message without its ``node(s) ``), ordered by the plugin that gave it."""
    reason = status.reasons[0]
    return profile.rank(status.plugin, reason), _RENAMED.get(reason) or reason.removeprefix("node(s) ")


#: Where NodeResourcesFit's reasons go; this module counts capacity in three: held, too small, full.
_FIT = profile.position(noderesources.PLUGIN)
#: Too little even when emptied: NodeResourcesFit's second.
TOO_SMALL_KEY: Key = ((_FIT, (1, "")), TOO_SMALL)
#: In use: NodeResourcesFit's third.
FULL_KEY: Key = ((_FIT, (2, "")), FULL)


def held_key(gang: str) -> Key:
    """``held for <gang>``: NodeResourcesFit's first, as kube-scheduler counts the requests
    of a pod nominated to the node."""
    return (_FIT, (0, gang)), f"{HELD} {gang}"


class Excluded:
    """Nodes per reason of one domain, listed in profile order; reasons of equal words
    (``not selected``) are one, listed where the first of them goes."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.order: dict[str, tuple[int, tuple[int, str]]] = {}

    def add(self, key: Key) -> None:
        """One more node kept out for ``key``."""
        rank, words = key
        self.counts[words] += 1
        if words not in self.order or rank < self.order[words]:
            self.order[words] = rank

    def listed(self) -> tuple[tuple[str, int], ...]:
        """``(words, nodes)`` in profile order."""
        return tuple(sorted(self.counts.items(), key=lambda t: (self.order[t[0]], t[0])))


@dataclass(frozen=True)
class DomainShortfall:
    """One candidate domain: its ``level`` (a node label key; ``""`` for the whole
    cluster), its ``path`` of label values from the top, ``nodes`` in it, ``fits`` members
    that fit now and ``could`` that would fit with every other pod gone (both capped at
    ``need``, the members asked for), ``free``: the free units of ``resource`` on its
    nodes that pass the members' filters, and ``excluded``: ``(reason, nodes)`` for the
    nodes that take no member, in the module docstring's order. ``slices``: for a gang
    with slice layers, the innermost layer whose slices the domain cannot hold now
    (``slices of 8 at <level>: 5 of 8 fit``), else ``""``."""

    level: str
    path: tuple[str, ...]
    nodes: int
    need: int
    fits: int
    could: int
    free: int
    excluded: tuple[tuple[str, int], ...]
    slices: str = ""

    @property
    def name(self) -> str:
        """The domain's own label value (``gpu-b0-s1``), or ``cluster``."""
        return self.path[-1] if self.path else "cluster"

    def describe(self, level_name: str = "") -> str:
        """``subblock gpu-b0-s1: 6 of 8 fit (2 nodes cordoned, 1 full)``; ``level_name``
        is how the level is called (default: the label key's last word)."""
        what = level_name or short_level(self.level)
        head = f"{what} {self.name}: " if self.path else "cluster: "
        text = f"{head}{self.fits} of {self.need} fit"
        if self.excluded:
            parts = [f"{n} {'node' if n == 1 else 'nodes'} {r}" if i == 0 else f"{n} {r}"
                     for i, (r, n) in enumerate(self.excluded)]
            text += f" ({', '.join(parts)})"
        if self.slices:
            text += f"; {self.slices}"
        if self.fits < self.need and self.could >= self.need:
            text += "; fits once room is freed"
        elif self.could < self.need:
            text += f"; at most {self.could} even when empty"
        return text


@dataclass(frozen=True)
class Shortfall:
    """The candidate domains of one gang at ``level`` (``depth`` in the topology tree),
    best first: the most members fitting now, then the most when emptied, then topology
    order. ``members``: how many members were asked for; ``resource``: the resource
    whose free units each domain reports."""

    level: str
    depth: int
    members: int
    resource: str
    domains: tuple[DomainShortfall, ...]


def short_level(level: str) -> str:
    """How a level is called in messages: ``cloud.google.com/gce-topology-subblock`` ->
    ``subblock``, ``topology.gke.io/rack`` -> ``rack``, ``kubernetes.io/hostname`` ->
    ``node``, ``""`` -> ``cluster``."""
    if not level:
        return "cluster"
    if level == "kubernetes.io/hostname":
        return "node"
    return level.rsplit("/", 1)[-1].removeprefix("gce-topology-")


def _node_key(snapshot: Snapshot, i: int, flt: NodeFilter) -> Key | None:
    status = profile.node_status(flt, snapshot.nodes[i])
    return None if status is None else status_key(status)


def target_depth(snapshot: Snapshot, members: Sequence[PodInfo], request: TopologyRequest = NO_REQUEST) -> int:
    """The depth whose domains :func:`shortfall` reports (module docstring): the level
    ``request`` requires or prefers, else the lowest at which an emptied domain holds every
    member, else 0."""
    levels, tree = snapshot.levels, snapshot.tree
    for asked in (request.required_level, request.preferred_level):
        if asked is not None:
            depth = levels.depth_of(asked)
            if depth is not None:
                return depth
    if not members:
        return 0
    empty = snapshot.empty()
    shapes = _shapes(members)
    caps = [tree.caps_by_depth(empty.capacity(req, snapshot.eligible(flt))) for (req, flt), _ in shapes]
    for d in range(tree.leaf_depth, -1, -1):
        if any(sum(min(len(ms), c[d][j]) for (_, ms), c in zip(shapes, caps, strict=True)) >= len(members)
               for j in range(tree.size(d))):
            return d
    return 0


def _shapes(members: Sequence[PodInfo]) -> list[tuple[tuple[Mapping[str, int], NodeFilter], list[PodInfo]]]:
    """Members grouped by (requests, node filter), in order of their lowest rank."""
    ordered = sorted(members, key=lambda p: (p.rank, p.key))
    groups: dict[tuple[tuple[tuple[str, int], ...], NodeFilter], tuple[Mapping[str, int], list[PodInfo]]] = {}
    for p in ordered:
        key = (tuple(sorted(p.requests.items())), p.node_filter)
        groups.setdefault(key, (p.requests, []))[1].append(p)
    return [((req, key[1]), ms) for key, (req, ms) in groups.items()]


class _FilterFill:
    """Placement's fill for a gang that needs the pod filters (:func:`.fill.fill` with
    :class:`~reconciler.engine.filters.gang.GangFilters`, as :func:`.place.place_gang` runs it), one
    domain at a time on ``snapshot``; nodes in ``held`` take no member."""

    def __init__(self, snapshot: Snapshot, order: Sequence[PodInfo], held: Mapping[int, str]) -> None:
        self.snapshot, self.order, self.held = snapshot, order, held
        self.filters = GangFilters(snapshot, order)
        shapes, self.shape_of = member_shapes(order, self.filters)
        self.eligible = [s.eligible if s.eligible is not None else snapshot.eligible(s.flt) for s in shapes]
        caps = [snapshot.capacity(s.requests, e) for s, e in zip(shapes, self.eligible, strict=True)]
        self.room = [i not in held and any(c[i] > 0 for c in caps) for i in range(len(snapshot.nodes))]
        self.empty = snapshot.empty()

    def nodes(self, lo: int, hi: int) -> list[int]:
        """The node of each member (rank order; -1: none) the fill gives in nodes
        ``lo``..``hi``: the part (:meth:`GangFilters.partitions`) where most are placed."""
        usable = [i for i in range(lo, hi) if self.room[i]]
        best = [-1] * len(self.order)
        for part in self.filters.partitions(usable):
            found = fill(self.snapshot, self.order, self.shape_of, self.eligible, part, self.filters, partial=True)
            if found is not None and placed(found) > placed(best):
                best = found
        return best

    def reasons(self, lo: int, hi: int, nodes: Sequence[int]) -> Excluded:
        """Why nodes ``lo``..``hi`` take no more member: with a member left out, every node
        by why it refuses the first one left out, the members placed so far counted; else
        the nodes that took none, for the first member."""
        order = self.filters.fill_order()
        waiting = next((m for m in order if nodes[m] < 0), None)
        free = {i: self.snapshot.free(i) for i in range(lo, hi)}
        reasons = Excluded()
        try:
            if waiting is not None:
                for m in order:
                    if nodes[m] >= 0:
                        self.filters.place(m, nodes[m])
                        for name, units in self.order[m].requests.items():
                            free[nodes[m]][name] = free[nodes[m]].get(name, 0) - units
            for i in range(lo, hi):
                if waiting is None and i in nodes:
                    continue
                why = self._reason(order[0] if waiting is None else waiting, i, free[i])
                if why is not None:
                    reasons.add(why)
        finally:
            self.filters.rollback()
        return reasons

    def _reason(self, m: int, i: int, free: Mapping[str, int]) -> Key | None:
        """The first reason node ``i`` refuses member ``m`` with ``free`` units left, in
        kube-scheduler's profile order: the node's plugins, a hold, then the gang's loop
        (:meth:`GangFilters.first`, as placement runs it) with resources (``full``, ``too
        small``) at ``NodeResourcesFit``'s place; None when it takes it."""
        pod = self.order[m]
        why = _node_key(self.snapshot, i, pod.node_filter)
        if why is None and i in self.held:
            why = held_key(self.held[i])
        if why is not None:
            return why

        def fit() -> Key | None:
            if not noderesources.short(free, pod.requests):
                return None
            return FULL_KEY if not noderesources.short(self.empty.free(i), pod.requests) else TOO_SMALL_KEY

        found = self.filters.first(m, i, fit)
        return status_key(found) if isinstance(found, Status) else found


class _SliceCheck:
    """Per domain of ``depth``, the innermost slice layer of the gang whose slices it
    cannot hold now (members of one shape; ``now_caps``: members per node, by shape)."""

    def __init__(self, snapshot: Snapshot, ranked: Sequence[PodInfo], request: TopologyRequest,
                 now_caps: Sequence[Sequence[int]], depth: int) -> None:
        shaped, _ = layers.layout_of(snapshot, request)
        self.layers = [layer for layer in shaped.layers if layer.depth > depth] if len(now_caps) == 1 else []
        self.need, self.depth = len(ranked), depth
        tree = snapshot.tree
        self.units = layers.unit_caps(tree, tree.caps_by_depth(now_caps[0]), self.layers) if self.layers else []

    def text(self, j: int) -> str:
        """``slices of 8 at <level>: 5 of 8 fit`` for domain ``j``, or ``""``."""
        for i in range(len(self.layers) - 1, -1, -1):
            layer, have = self.layers[i], self.units[i][self.depth][j]
            if have < self.need // layer.size:
                return f"{layer}: {have} of {self.need // layer.size} fit"
        return ""


def placed(nodes: Sequence[int]) -> int:
    """How many members of a fill's ``nodes`` (-1: none) have a node."""
    return sum(1 for i in nodes if i >= 0)


def _capacity_reasons(snapshot: Snapshot, nodes: range, now_caps: Sequence[Sequence[int]],
                      empty_caps: Sequence[Sequence[int]], flt: NodeFilter, held: Mapping[int, str]) -> Excluded:
    """Per reason, the ``nodes`` where no shape has room now (``now_caps``, members per
    node, by shape), by the node filter ``flt``, ``held``, then ``empty_caps``."""
    reasons = Excluded()
    for i in nodes:
        if any(c[i] > 0 for c in now_caps):
            continue
        why = _node_key(snapshot, i, flt)
        if why is None and i in held:
            why = held_key(held[i])
        if why is None:
            why = FULL_KEY if any(c[i] > 0 for c in empty_caps) else TOO_SMALL_KEY
        reasons.add(why)
    return reasons


def shortfall(snapshot: Snapshot, members: Sequence[PodInfo], request: TopologyRequest = NO_REQUEST, *,
              held: Mapping[int, str] | None = None, near: Sequence[str] = (),
              resource: str = "nvidia.com/gpu") -> Shortfall:
    """Every candidate domain for ``members`` (gated pods using no node in ``snapshot``)
    at the gang's level (module docstring), best first.

    ``held``: node index -> the gang ahead in the queue its capacity is held for (those
    nodes count as ``held for <gang>``, as a decision sees them blocked). ``near``: nodes
    of members already running; only domains holding one of them are candidates (a
    replacement goes next to its gang). ``resource``: whose free units to report.
    ``request``: the gang's (:attr:`reconciler.engine.gangs.gang.Gang.topology`): its
    level chooses the depth reported, its slice layers are checked in each domain.
    """
    held = held or {}
    tree, levels = snapshot.tree, snapshot.levels
    depth = target_depth(snapshot, members, request)
    shapes = _shapes(members)
    empty = snapshot.empty()
    now_caps, empty_caps = [], []
    for (req, flt), _ in shapes:
        eligible = snapshot.eligible(flt)
        cap = snapshot.capacity(req, eligible)
        now_caps.append([0 if i in held else c for i, c in enumerate(cap)])
        empty_caps.append(empty.capacity(req, eligible))
    now_by_depth = [tree.caps_by_depth(c)[depth] for c in now_caps]
    empty_by_depth = [tree.caps_by_depth(c)[depth] for c in empty_caps]
    first_flt = shapes[0][0][1] if shapes else NodeFilter()
    any_eligible = [any(t) for t in zip(*(snapshot.eligible(flt) for (_, flt), _ in shapes), strict=True)] \
        if shapes else [True] * len(snapshot.nodes)
    free = snapshot.free_units(resource)
    near_at = {tree.domain_of[depth][snapshot.index[n]] for n in near if n in snapshot.index}
    ranked = sorted(members, key=lambda p: (p.rank, p.key))
    filtered = _FilterFill(snapshot, ranked, held) if gangfilters.needed(snapshot, ranked) else None
    emptied = _FilterFill(empty, ranked, {}) if filtered is not None else None
    sliced = _SliceCheck(snapshot, ranked, request, now_caps, depth)
    out = []
    for j in range(tree.size(depth)):
        if near_at and j not in near_at:
            continue
        lo, hi = tree.lo[depth][j], tree.hi[depth][j]
        if filtered is not None and emptied is not None:
            nodes = filtered.nodes(lo, hi)
            fits, could, reasons = placed(nodes), placed(emptied.nodes(lo, hi)), filtered.reasons(lo, hi, nodes)
        else:
            fits = sum(min(len(ms), c[j]) for (_, ms), c in zip(shapes, now_by_depth, strict=True))
            could = sum(min(len(ms), c[j]) for (_, ms), c in zip(shapes, empty_by_depth, strict=True))
            reasons = _capacity_reasons(snapshot, range(lo, hi), now_caps, empty_caps, first_flt, held)
        excluded = reasons.listed()
        domain_free = sum(max(free[i], 0) for i in range(lo, hi) if any_eligible[i])
        out.append(DomainShortfall(levels.name_of(depth), tree.prefix[depth][j], hi - lo, len(members),
                                   fits, could, domain_free, excluded, sliced.text(j)))
    order = sorted(range(len(out)), key=lambda k: (-out[k].fits, -out[k].could, k))
    return Shortfall(levels.name_of(depth), depth, len(members), resource, tuple(out[k] for k in order))
