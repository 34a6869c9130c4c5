"""Gang placement: every member placed together, or none, topology-aware and rank-ordered.

:func:`place_gang` is the entry point. The objective, in this order
(docs/decisions/001-placement-objective.md has a worked example):

a. the whole gang inside the smallest topology domain (the lowest level) that can hold
   it; ``troupe.io/topology-required-level`` allows only domains of that level,
   ``troupe.io/topology-preferred-level`` starts the search there and moves up;
b. the lowest topology cost: as few child domains as possible at each level below the
   chosen domain, then as few nodes; members are laid out in rank order over the chosen
   nodes in topology order, so neighbouring ranks share a node or sit as near as they can
   (the reported ``cost`` is the seed's: 1e6 across blocks, 1e4 across subblocks, 100
   across hosts, 0 on one node or host);
c. the domain, then the nodes, that leave the least free capacity behind (best fit);
d. topology order, which ends with the node name.

Members are grouped into *shapes* (equal requests and node filter); nodes are filtered
once per shape and capacities aggregated bottom-up in the tree. A gang of one shape is
placed by :mod:`.selection`. A gang of several shapes is first placed as if every member
had the per-resource maximum of the shapes' requests and had to pass every shape's filter
(the *envelope*: the one-shape search, at the price of some capacity); a rank-order fill that checks
each member's own requests and filter is tried on the most promising smaller domains
(all of them when the envelope does not fit) and wins when it finds one, by (a).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.engine.filters import gang as gangfilters
from reconciler.engine.filters import noderesources, profile
from reconciler.engine.filters.gang import GangFilters
from reconciler.engine.filters.status import Code, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyTree, sequence_cost
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.text import plural
from reconciler.engine.placement import layers, selection
from reconciler.engine.placement.fill import fill
from reconciler.engine.placement.shapes import (
    Shape,
    eligible_nodes,
    envelope,
    member_shapes,
    shape_capacity,
)
from troupe.contract import HOSTNAME_LABEL, TopologyRequest
from troupe.layers import TOPOLOGY_SLICE_SIZE

#: No level, slices, placement or exclusive level asked: the whole gang in the smallest domain.
NO_REQUEST = TopologyRequest()

#: :func:`selection.exact` is used when its estimated work over all candidate domains is
#: at most this (about 20 ms); :func:`selection.greedy` otherwise.
EXACT_BUDGET = 60_000
#: A gang of several shapes that does not fit as its envelope is tried on at most this
#: many domains per level (those with the most room first).
MIXED_CANDIDATES = 16


@dataclass(frozen=True)
class Assignment:
    """Member ``pod_key`` (``namespace/name``) goes to ``node``; ``rank`` is its position
    in the gang's rank order (0-based). ``requests`` (units) let a snapshot assume it."""

    pod_key: PodKey
    node: str
    rank: int
    requests: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class DomainRef:
    """A topology domain: its level's label key (``""`` for the whole cluster,
    ``kubernetes.io/hostname`` for one node) and its path of label values from the top."""

    level: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        """``cluster``, ``node n4`` (one node), or ``<level>=<path>`` with ``-`` for a level
        the nodes have no label of: ``cloud.google.com/gce-topology-subblock=b0/b0-s1``."""
        if not self.level:
            return "cluster"
        if self.level == HOSTNAME_LABEL:
            return f"node {self.path[-1]}"
        return f"{self.level}={'/'.join('-' if v.startswith('<') else v for v in self.path)}"


@dataclass(frozen=True)
class SliceDomain:
    """Slice ``index`` (ranks ``[index*size, (index+1)*size)``) of slice layer ``layer``
    (0: the outermost) and the domain of the layer's level that holds it."""

    layer: int
    size: int
    index: int
    domain: DomainRef


@dataclass(frozen=True)
class PlacementResult:
    """The plan for a gang, or why there is none.

    ``placed``: every member has an assignment (``assignments``, in rank order) and
    ``code`` is ``SUCCESS``; otherwise ``assignments`` is empty and ``reason`` says why, in
    the form ``fits 3 of 8 members; 12 nodes excluded: untolerated taint
    dedicated=infer: 4, insufficient nvidia.com/gpu: 8``. ``cost`` is the seed's topology
    cost of the plan, ``domain`` the smallest domain holding it, ``fits`` how many
    members fit in the best allowed domain, ``method`` which search found the plan
    (``exact``, ``greedy``, ``mixed``, ``balanced``). ``slices``: the domain of every
    slice of the gang's slice layers (:mod:`.layers`); ``balance``: how the plan spreads
    below its domain (domains used, largest and smallest share), None on one node.
    ``shortfall``: not placed for want of room on the nodes there are (more nodes could
    help), not for a request that cannot be read (docs/decisions/080-provisioning-requests.md).
    """

    placed: bool
    assignments: list[Assignment]
    code: Code
    reason: str = ""
    cost: float = 0.0
    domain: DomainRef | None = None
    fits: int = 0
    method: str = ""
    slices: tuple[SliceDomain, ...] = ()
    balance: layers.Balance | None = None
    shortfall: bool = False

    def nodes(self) -> dict[str, str]:
        """``pod_key -> node`` of the plan."""
        return {a.pod_key: a.node for a in self.assignments}


def _unresolvable(reason: str) -> PlacementResult:
    return PlacementResult(False, [], Code.UNRESOLVABLE, reason)


def _search_depths(snapshot: Snapshot, required_level: str | None,
                   preferred_level: str | None) -> tuple[list[int], str]:
    """The depths of the topology tree the search tries, in order (the required level
    only; from the preferred level up to the root; else from the leaves up), and ``""``;
    or ``[]`` and why, for a level the snapshot does not know."""
    levels, leaf = snapshot.levels, snapshot.tree.leaf_depth
    known = ", ".join((*levels.keys, *levels.fallback, levels.name_of(leaf)))
    if required_level is not None:
        depth = levels.depth_of(required_level)
        if depth is None:
            return [], f"unknown topology level {required_level!r} (known: {known})"
        return [depth], ""
    if preferred_level is not None:
        depth = levels.depth_of(preferred_level)
        if depth is None:
            return [], f"unknown topology level {preferred_level!r} (known: {known})"
        return list(range(depth, -1, -1)), ""
    return list(range(leaf, -1, -1)), ""


def _placed(snapshot: Snapshot, order: Sequence[PodInfo], nodes: Sequence[int], depth: int, domain: int,
            method: str, layout: layers.Layout) -> PlacementResult:
    """The result of a plan found by ``method``: member ``order[k]`` (rank ``k``) on node
    index ``nodes[k]``, all in domain ``domain`` of depth ``depth``, with ``layout``'s
    slices and spread reported."""
    assignments = [
        Assignment(pod.key, snapshot.nodes[i].name, rank, pod.requests)
        for rank, (pod, i) in enumerate(zip(order, nodes, strict=True))
    ]
    slices = tuple(SliceDomain(n, layout.layers[n].size, k, _domain(snapshot, layout.layers[n].depth, j))
                   for n, k, j in layers.slice_domains(snapshot, nodes, layout.layers))
    balance = layers.balance_of(snapshot, nodes, depth)
    message = f"placed {len(order)} members in {_domain(snapshot, depth, domain)}"
    message += "".join(f"; {len(order) // layer.size} {layer}" for layer in layout.layers)
    if layout.balanced and balance is not None:
        message += f"; balanced over {layers.shares_text(snapshot, balance)}"
    return PlacementResult(True, assignments, Code.SUCCESS, message,
                           sequence_cost([snapshot.paths[i] for i in nodes], snapshot.weights),
                           _domain(snapshot, depth, domain), len(order), method, slices, balance)


def place_gang(
    snapshot: Snapshot,
    members: Sequence[PodInfo],
    request: TopologyRequest = NO_REQUEST,
    *,
    near: Sequence[str] = (),
    exact_budget: int = EXACT_BUDGET,
) -> PlacementResult:
    """Place every member or none (module docstring for the objective).

    ``members`` are the gang's unplaced pods (they must not already use nodes in
    ``snapshot``), in any order: they are ranked by :attr:`PodInfo.rank`, then key.
    ``request``: the gang's topology request, as its gang parsed it once
    (:attr:`reconciler.engine.gangs.gang.Gang.topology`): its required or preferred level
    (level label keys of the snapshot's
    :class:`~reconciler.engine.ledger.topology.TopologyLevels`, either set, or
    ``kubernetes.io/hostname`` for one node), and its slices, placement and exclusive
    level (:mod:`.layers`); the default asks for none of them. ``near`` names the nodes of the gang's
    members that already run (replacements are placed next to them): only domains that
    hold one of them are considered at each level, so a replacement goes to the smallest
    domain it shares with its gang, and, with a required level, into the gang's domain of
    that level or nowhere; replacements keep the exclusive level of the request only.
    ``exact_budget`` bounds the exact search (0: always greedy).
    Deterministic: the same snapshot and members give the same result, message included.
    ``snapshot`` is not changed; apply the plan with :meth:`Snapshot.with_assumed` or
    :meth:`Snapshot.assumed`. Long because it reads as the objective in order: the levels
    and the layout, the envelope's search, the mixed fill, then the result.
    """
    order = sorted(members, key=lambda p: (p.rank, p.key))
    if not order:
        return PlacementResult(True, [], Code.SUCCESS, "no members", method="none")
    allowed = _allowed(snapshot, near)
    required_level = request.required_level
    depths, unknown = _search_depths(snapshot, required_level, request.preferred_level)
    snapshot, shaped, problem = _with_layout(snapshot, order, request, depths, near)
    if unknown or problem:
        return _unresolvable(unknown or problem)
    filters = GangFilters(snapshot, order) if gangfilters.needed(snapshot, order) else None
    shapes, shape_of = member_shapes(order, filters)
    if filters is not None:
        depths = filters.together_depths(depths)
    size = len(order)
    caps = _gang_capacity(snapshot, shapes)
    found = layers.place(snapshot, caps, size, depths, exact_budget, allowed, shaped) if shaped.shaped else \
        _place_uniform(snapshot, caps, size, depths, exact_budget, allowed)
    if found is not None and filters is not None and not filters.verify(_uniform_nodes(found[2])):
        found = None
    mixed = None
    if len(shapes) > 1 or (filters is not None and found is None):
        # (a) first: the fill may hold the gang in a smaller domain than the envelope.
        smaller = [d for d in depths if found is None or d > found[0]]
        mixed = _place_mixed(snapshot, order, shapes, shape_of, smaller, allowed, filters)
        mixed = mixed if mixed is None or layers.holds(snapshot, mixed[2], shaped.layers) else None
    if mixed is not None:
        depth, j, nodes = mixed
        method = "mixed"
    elif found is not None:
        depth, j, chosen, method = found
        nodes = _uniform_nodes(chosen)
    else:
        return _explain(snapshot, order, shapes, required_level, depths, allowed, filters, shaped)
    return _placed(snapshot, order, nodes, depth, j, method, shaped)


def _with_layout(snapshot: Snapshot, order: Sequence[PodInfo], request: TopologyRequest, depths: Sequence[int],
                 near: Sequence[str]) -> tuple[Snapshot, layers.Layout, str]:
    """The snapshot the gang ``order`` may use (domains another gang holds exclusively, or
    that its own exclusive level keeps it out of, blocked), its :class:`layers.Layout`
    (slices dropped for replacements, placed ``near`` their gang), and why the layout
    cannot apply (``""`` when it can)."""
    shaped, bad = layers.layout_of(snapshot, request)
    problem = bad or _layers_problem(shaped, len(order), depths, request.required_level)
    if near:
        shaped = layers.Layout(exclusive=shaped.exclusive)
    if not problem and (snapshot.exclusive or shaped.exclusive is not None):
        blocked = layers.exclusive_blocked(snapshot, shaped, order)
        snapshot = snapshot.with_blocked(blocked) if blocked else snapshot
    return snapshot, shaped, problem


def _layers_problem(layout: layers.Layout, size: int, depths: Sequence[int], required_level: str | None) -> str:
    """Why ``layout``'s slices cannot apply to a gang of ``size`` searching ``depths``
    (the webhook refuses both for pods it admits; a workload's size is known later)."""
    if not layout.layers:
        return ""
    outer = layout.layers[0]
    if size % outer.size:
        return f"{TOPOLOGY_SLICE_SIZE}: the gang's {size} members are not a multiple of the slice size {outer.size}"
    if required_level is not None and depths and depths[0] > outer.depth:
        return f"slice level {outer.level} is above the gang's required level {required_level}"
    return ""


def _gang_capacity(snapshot: Snapshot, shapes: Sequence[Shape]) -> list[int]:
    """Per node: how many members fit, the members all of one shape, or of their
    envelope (:func:`envelope`)."""
    if len(shapes) == 1:
        return shape_capacity(snapshot, shapes[0], eligible_nodes(snapshot, shapes[0]))
    requests, eligible = envelope(shapes, [eligible_nodes(snapshot, s) for s in shapes])
    caps = snapshot.capacity(requests, eligible)
    return [min(cap, 1) for cap in caps] if any(s.one_per_node for s in shapes) else caps


def _uniform_nodes(counts: Sequence[tuple[int, int]]) -> list[int]:
    """The node index of each member, in rank order, of a one-shape choice's
    ``(node index, members)`` in topology order."""
    return [i for i, count in counts for _ in range(count)]


Allowed = list[set[int]] | None
"""Per depth, the domain indices a search may use; None: every domain."""


def _allowed(snapshot: Snapshot, near: Sequence[str]) -> Allowed:
    """The domains at each depth that hold one of the ``near`` nodes (names absent from
    the snapshot are ignored); None when ``near`` is empty."""
    if not near:
        return None
    tree = snapshot.tree
    at = [snapshot.index[n] for n in near if n in snapshot.index]
    return [{tree.domain_of[d][i] for i in at} for d in range(tree.leaf_depth + 1)]


def _domain(snapshot: Snapshot, depth: int, j: int) -> DomainRef:
    return DomainRef(snapshot.levels.name_of(depth), snapshot.tree.prefix[depth][j])


def _place_uniform(
    snapshot: Snapshot, node_caps: list[int], x: int, depths: Sequence[int], budget: int, allowed: Allowed = None,
) -> tuple[int, int, list[tuple[int, int]], str] | None:
    """The best (depth, domain, node counts, method) for ``x`` pods of one shape whose
    per-node capacities are ``node_caps``; None when no allowed domain holds them."""
    tree = snapshot.tree
    caps = tree.caps_by_depth(node_caps)
    fitting = tree.caps_by_depth([1 if c > 0 else 0 for c in node_caps])
    for d in depths:
        candidates = [j for j, c in enumerate(caps[d]) if c >= x and (allowed is None or j in allowed[d])]
        if not candidates:
            continue
        work = sum(selection.exact_work(fitting[d][j], x) for j in candidates)
        method = "exact" if work <= budget else "greedy"
        best: tuple[tuple[tuple[int, ...], int, tuple[int, ...], int], selection.Selection] | None = None
        if method == "exact":
            best = _best_exact(tree, caps, d, x, candidates)
        else:
            spread = selection.Spread(tree, caps)
            for j in candidates:
                sel = selection.greedy(tree, caps, d, j, x, spread)
                key = (sel.vector, caps[d][j] - x, sel.spare, j)
                if best is None or key < best[0]:
                    best = (key, sel)
        assert best is not None
        return d, best[0][3], list(best[1].counts), method
    return None


def _best_exact(tree: TopologyTree, caps: list[list[int]], d: int, x: int, candidates: Sequence[int],
                ) -> tuple[tuple[tuple[int, ...], int, tuple[int, ...], int], selection.Selection]:
    """The best exact selection among the domains ``candidates`` at depth ``d`` for ``x``
    pods: the least ``(vector, room beyond the gang, spare, domain)``, as evaluating each
    domain would give, at the cost of the domains that could win. Each domain's vector is
    bounded below by :func:`selection.least_vector` (a domain cannot use fewer children at a
    depth than it needs to hold ``x``); domains are tried in order of ``(bound, room,
    index)``, and the search stops at the first whose bound and room cannot beat the best
    found (on a tie of both, when the best's spare is all zeros and its index lower: no
    domain after it beats that). The bound of branch and bound, exact: upstream kube-scheduler
    bounds its placements scored by sampling (``PercentageOfPlacementsToScore``, KEP-5732);
    this keeps every plan as it was (docs/decisions/068-release-pipeline.md)."""
    order = sorted((selection.least_vector(tree, caps, d, j, x), caps[d][j] - x, j) for j in candidates)
    best: tuple[tuple[tuple[int, ...], int, tuple[int, ...], int], selection.Selection] | None = None
    for bound, room, j in order:
        if best is not None:
            vector, best_room, spare, best_j = best[0]
            if (bound, room) > (vector, best_room) or \
                    ((bound, room) == (vector, best_room) and not any(spare) and j > best_j):
                break
        sel = selection.exact(tree, caps, d, j, x)
        key = (sel.vector, room, sel.spare, j)
        if best is None or key < best[0]:
            best = (key, sel)
    assert best is not None
    return best


def _place_mixed(
    snapshot: Snapshot, order: Sequence[PodInfo], shapes: Sequence[Shape], shape_of: Sequence[int],
    depths: Sequence[int], allowed: Allowed = None, filters: GangFilters | None = None,
) -> tuple[int, int, list[int]] | None:
    """Rank-order fill for members of several shapes, or of a gang with ``filters``: in
    each candidate domain (every shape's capacity suffices; most room first, at most
    :data:`MIXED_CANDIDATES`), each member goes to the node of the previous member if it
    fits, else to the next node in topology order where it fits (wrapping around), where
    "fits" includes the gang's filters with the members placed so far counted. Best by
    (cost, nodes, room left)."""
    tree = snapshot.tree
    eligible = [eligible_nodes(snapshot, s) for s in shapes]
    node_caps = [shape_capacity(snapshot, s, e) for s, e in zip(shapes, eligible, strict=True)]
    caps = [tree.caps_by_depth(c) for c in node_caps]
    need = [len(s.members) for s in shapes]
    for d in depths:
        candidates = [
            j for j in range(tree.size(d))
            if (allowed is None or j in allowed[d]) and all(c[d][j] >= n for c, n in zip(caps, need, strict=True))
        ]
        room = {j: sum(c[d][j] - n for c, n in zip(caps, need, strict=True)) for j in candidates}
        candidates.sort(key=lambda j: (room[j], j))
        best: tuple[tuple[float, int, int, int], list[int]] | None = None
        for j in candidates[:MIXED_CANDIDATES]:
            usable = [i for i in range(tree.lo[d][j], tree.hi[d][j]) if any(c[i] > 0 for c in node_caps)]
            for part in filters.partitions(usable) if filters is not None else [usable]:
                nodes = fill(snapshot, order, shape_of, eligible, part, filters)
                if nodes is None:
                    continue
                key = (sequence_cost([snapshot.paths[i] for i in nodes], snapshot.weights), len(set(nodes)), room[j], j)
                if best is None or key < best[0]:
                    best = (key, nodes)
        if best is not None:
            return d, best[0][3], best[1]
    return None


def _explain(
    snapshot: Snapshot, order: Sequence[PodInfo], shapes: Sequence[Shape], required_level: str | None,
    depths: Sequence[int], allowed: Allowed = None, filters: GangFilters | None = None,
    layout: layers.Layout = layers.PLAIN,
) -> PlacementResult:
    """Why no placement exists, as a result: members that fit in the best allowed domain,
    nodes that take no member and their reasons (those of the lowest-ranked member's
    shape), and whether freeing capacity could help (the gang fits an emptied cluster).
    When the members fit but a slice layer's slices do not, the layer that fails first,
    innermost first: ``slices of 8 at <level>: 5 of 8 slices fit; best <domain> holds 5``."""
    tree = snapshot.tree
    scope = depths[0] if required_level is not None else 0
    domains = [j for j in range(tree.size(scope)) if allowed is None or j in allowed[scope]]
    node_caps = [shape_capacity(snapshot, s, eligible_nodes(snapshot, s)) for s in shapes]
    scope_caps = [tree.caps_by_depth(c)[scope] for c in node_caps]
    fits = max(
        (sum(min(len(s.members), c[j]) for s, c in zip(shapes, scope_caps, strict=True)) for j in domains),
        default=0,
    )
    reasons: Counter[Status] = Counter()
    excluded = 0
    for i in range(len(snapshot.nodes)):
        if all(c[i] == 0 for c in node_caps):
            excluded += 1
            why = _status(snapshot, filters, shapes[0], i)
            if why is not None:
                reasons[why] += 1
    x = len(order)
    where = ""
    if required_level is not None:
        where = f" in the gang's {required_level}" if allowed is not None else f" in one {required_level}"
    message = f"fits {fits} of {x} members{where}"
    short = layers.short_layer(snapshot, _gang_capacity(snapshot, shapes), x, layout.layers, scope, domains) \
        if fits >= x and layout.layers else None
    refused = _refused(snapshot, order, shapes, node_caps, filters) if short is None else {}
    if short is not None:
        message = f"{short[0]}: {short[1]} of {short[2]} slices fit"
        message += f"; best {_domain(snapshot, scope, short[3])} holds {short[1]}" if scope else ""
    elif fits >= x:
        message += ", but not all at once"
        message += f": {profile.render(refused)}" if refused else " with their different requests"
    elif refused:
        message += f"; placed one by one, the next member fits no node: {profile.render(refused)}"
    if excluded:
        message += f"; {plural(excluded, 'node')} excluded: {profile.render(reasons)}"
    elif not snapshot.nodes:
        message += "; no nodes"
    empty = snapshot.empty()
    empty_caps = [
        tree.caps_by_depth(empty.capacity(s.requests, snapshot.eligible(s.flt)))[scope] for s in shapes
    ]
    could = any(all(c[j] >= len(s.members) for s, c in zip(shapes, empty_caps, strict=True)) for j in domains)
    code = Code.UNSCHEDULABLE if could else Code.UNRESOLVABLE
    return PlacementResult(False, [], code, message, fits=fits, shortfall=True)


def _refused(snapshot: Snapshot, order: Sequence[PodInfo], shapes: Sequence[Shape], node_caps: Sequence[Sequence[int]],
             filters: GangFilters | None) -> Mapping[Status, int]:
    """With ``filters``: why (nodes per status), members placed one by one on every node
    with room, the first that fits nowhere is refused (the last fill's refusal when one
    ran); else nothing."""
    if filters is None:
        return {}
    if not filters.refused:
        shape_of = [0] * len(order)
        for k, shape in enumerate(shapes):
            for m in shape.members:
                shape_of[m] = k
        usable = [i for i in range(len(snapshot.nodes)) if any(c[i] > 0 for c in node_caps)]
        fill(snapshot, order, shape_of, [eligible_nodes(snapshot, s) for s in shapes], usable, filters)
    return filters.refused


def _status(snapshot: Snapshot, filters: GangFilters | None, shape: Shape, i: int) -> Status | None:
    """Why node ``i`` takes no member of ``shape``: the first failing plugin, in
    kube-scheduler's order (:mod:`reconciler.engine.filters.profile`): the node's own, then
    the gang's loop (:meth:`GangFilters.first`) with ``NodeResourcesFit`` at its place; or None."""
    found = profile.node_status(shape.flt, snapshot.nodes[i])
    if found is not None:
        return found

    def fit() -> Status | None:
        return noderesources.check(snapshot.free(i), shape.requests)

    return fit() if filters is None else filters.first(shape.members[0], i, fit)
