"""Slices, balanced spread and exclusive domains inside the one-shape placement.

A gang's :class:`troupe.contract.TopologyRequest` may carry slice layers (outermost first:
``size`` members, ranks ``[k*size, (k+1)*size)``, inside one domain of the layer's level),
``Balanced`` placement and an exclusive level (:mod:`troupe.layers`;
docs/decisions/035-topology-layers.md). They are decided here, in the same pure placement:

- **Units.** For layer ``i`` a domain of its level holds ``u_i`` whole slices: for the
  innermost layer ``floor(members that fit / size)``, for an outer one
  ``floor(inner slices it holds / (size / inner size))``; a domain above the level holds
  the sum of its children's. That count is exact for members of one shape: any ``size``
  members that fit in a domain form a slice there, and a slice of an outer layer is
  ``size / inner size`` inner slices, each inside one inner domain.
- **Choice, top down.** The gang's domain is chosen as today (the lowest allowed level
  with a domain that holds it, then the least vector of domains used per level, best fit,
  topology order, :mod:`.selection`) but counted in slices of the outermost layer below
  it, the search stopping at that layer's level; inside each chosen domain of that level
  the same choice is made for its slices of the next layer, and so on down to the nodes.
  Layers at or above a domain's level are kept by the domain itself.
- **Balanced** replaces each choice by :func:`balanced`: the fewest children that hold
  the share (largest first), then a water-fill that gives each as even a share as its
  room allows, extra units to the first in topology order.
- **Rank order.** Members take ranks walking the chosen nodes in topology order; every
  chosen domain of a slice level holds a multiple of the slice size, so slice ``k``'s
  ranks are contiguous and inside one domain (and on adjacent hosts where it can be).

Pure: a snapshot and counts in, node counts out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyTree
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement import selection
from troupe.contract import TopologyRequest
from troupe.layers import BALANCED, TOPOLOGY_EXCLUSIVE_LEVEL

Caps = list[list[int]]
Counts = list[tuple[int, int]]


@dataclass(frozen=True)
class Layer:
    """One slice layer as the engine uses it: ``size`` members inside one domain of
    ``depth`` (of the snapshot's tree), ``level`` the key the gang named."""

    size: int
    depth: int
    level: str

    def __str__(self) -> str:
        """``slices of 8 at <level>``."""
        return f"slices of {self.size} at {self.level}"


@dataclass(frozen=True)
class Layout:
    """What a gang asks beyond its level: ``layers`` (outermost first), ``balanced``, and
    the depth of its ``exclusive`` level (None: not exclusive)."""

    layers: tuple[Layer, ...] = ()
    balanced: bool = False
    exclusive: int | None = None

    @property
    def shaped(self) -> bool:
        """Whether the choice of nodes differs from the plain placement's."""
        return bool(self.layers) or self.balanced


#: No slices, compact, not exclusive: today's placement.
PLAIN = Layout()


def layout_of(snapshot: Snapshot, request: TopologyRequest) -> tuple[Layout, str]:
    """The :class:`Layout` of ``request`` (the gang's, parsed once with the gang:
    :attr:`reconciler.engine.gangs.gang.Gang.topology`) on the snapshot's levels; and
    ``""``, or why it cannot be used (a level the snapshot does not know)."""
    levels = snapshot.levels
    layers = []
    for layer in request.slices:
        depth = levels.depth_of(layer.level)
        if depth is None:
            return Layout(), f"unknown topology level {layer.level!r} in troupe.io/topology-slice-required-level"
        layers.append(Layer(layer.size, depth, layer.level))
    exclusive_depth = None
    if request.exclusive_level is not None:
        exclusive_depth = levels.depth_of(request.exclusive_level)
        if exclusive_depth is None:
            return Layout(), f"unknown topology level {request.exclusive_level!r} in {TOPOLOGY_EXCLUSIVE_LEVEL}"
    return Layout(tuple(layers), request.placement == BALANCED, exclusive_depth), ""


def unit_caps(tree: TopologyTree, member_caps: Caps, layers: Sequence[Layer]) -> list[Caps]:
    """Per layer, per depth from the root down to the layer's, how many whole slices of
    the layer each domain holds (module docstring); ``member_caps`` is
    :meth:`TopologyTree.caps_by_depth` of the members that fit per node."""
    out: list[Caps] = [[] for _ in layers]
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        if i == len(layers) - 1:
            base = [c // layer.size for c in member_caps[layer.depth]]
        else:
            ratio = layer.size // layers[i + 1].size
            base = [c // ratio for c in out[i + 1][layer.depth]]
        out[i] = _aggregate(tree, base, layer.depth)
    return out


def _aggregate(tree: TopologyTree, base: list[int], depth: int) -> Caps:
    """Per depth ``0..depth``: each domain's sum of ``base`` (per domain of ``depth``)."""
    caps: Caps = [[] for _ in range(depth + 1)]
    caps[depth] = base
    for d in range(depth - 1, -1, -1):
        child, first, end = caps[d + 1], tree.first[d], tree.end[d]
        caps[d] = [sum(child[first[j]:end[j]]) for j in range(len(first))]
    return caps


def water_fill(caps: Sequence[int], total: int) -> list[int]:
    """Shares of ``total`` over domains of room ``caps`` (``sum(caps) >= total``), as even
    as the room allows: each gets ``min(cap, L)`` for the largest level ``L`` that does
    not overshoot, and what is left goes one each to the first domains (in the given
    order) with room above ``L``. The largest and smallest share differ by at most one
    among the domains not filled to their room."""
    lo, hi = 0, max(caps, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in caps) <= total:
            lo = mid
        else:
            hi = mid - 1
    shares = [min(c, lo) for c in caps]
    left = total - sum(shares)
    for k, c in enumerate(caps):
        if left and c > lo:
            shares[k] += 1
            left -= 1
    return shares


def balanced(tree: TopologyTree, caps: Sequence[Sequence[int]], depth: int, j: int, x: int,
             leaf: int) -> selection.Selection:
    """Balanced choice of ``x`` units (members, or slices whose domains are at ``leaf``)
    in domain ``j`` at ``depth``: at every level below, each chosen domain's share goes to
    the fewest children that hold it (largest first, then topology order), spread by
    :func:`water_fill` in topology order. Requires ``caps[depth][j] >= x > 0``."""
    items = [(j, x)]
    vector, spare = [], []
    for d in range(depth + 1, leaf + 1):
        cap, first, end = caps[d], tree.first[d - 1], tree.end[d - 1]
        nxt: list[tuple[int, int]] = []
        room = 0
        for parent, share in items:
            kids = sorted((c for c in range(first[parent], end[parent]) if cap[c] > 0), key=lambda c: (-cap[c], c))
            total = k = 0
            while total < share:
                total += cap[kids[k]]
                k += 1
            chosen = sorted(kids[:k])
            room += total - share
            nxt.extend((c, s) for c, s in zip(chosen, water_fill([cap[c] for c in chosen], share), strict=True) if s)
        vector.append(len(nxt))
        spare.append(room)
        items = nxt
    return selection.Selection(tuple(items), tuple(vector), tuple(spare))


class Chooser:
    """One choice of units in a domain, by :func:`balanced` or by the compact
    :func:`selection.exact` while its estimated work fits what is left of ``budget``,
    else :func:`selection.greedy`. ``member`` and ``units`` are the capacities
    (:func:`unit_caps`) of the members and of each layer's slices."""

    def __init__(self, tree: TopologyTree, budget: int, layout: Layout, member: Caps, units: Sequence[Caps]) -> None:
        self.tree, self.left, self.is_balanced = tree, budget, layout.balanced
        self.layers, self.member, self.units = layout.layers, member, units
        self._fitting: dict[int | None, Caps] = {}
        self._spread: dict[int, selection.Spread] = {}

    def level(self, depth: int) -> tuple[int | None, Caps, int, int]:
        """For a domain of ``depth``: the outermost layer below it (None: the members),
        the capacities counted in its units, its unit size, and the depth of its units."""
        i = next((i for i, layer in enumerate(self.layers) if layer.depth > depth), None)
        if i is None:
            return None, self.member, 1, self.tree.leaf_depth
        return i, self.units[i], self.layers[i].size, self.layers[i].depth

    def work(self, i: int | None, depth: int, j: int, x: int) -> int:
        """:func:`selection.exact_work` of ``x`` units of layer ``i`` in domain ``j``."""
        fitting = self._fitting.get(i)
        if fitting is None:
            if i is None:  # the nodes: one prefix sum, as the plain search counts them
                leaf = self.tree.leaf_depth
                fitting = self.tree.caps_by_depth([1 if c > 0 else 0 for c in self.member[leaf]])
            else:
                leaf = self.layers[i].depth
                fitting = _aggregate(self.tree, [1 if c > 0 else 0 for c in self.units[i][leaf]], leaf)
            self._fitting[i] = fitting
        return selection.exact_work(fitting[depth][j], x)

    def choose(self, caps: Caps, depth: int, j: int, x: int, leaf: int, exact: bool) -> selection.Selection:
        """The units of ``leaf`` holding ``x`` in domain ``j`` at ``depth``."""
        if self.is_balanced:
            return balanced(self.tree, caps, depth, j, x, leaf)
        if exact:
            return selection.exact(self.tree, caps, depth, j, x, leaf)
        spread = self._spread.get(id(caps))
        if spread is None:
            spread = self._spread[id(caps)] = selection.Spread(self.tree, caps, leaf)
        return selection.greedy(self.tree, caps, depth, j, x, spread, leaf)

    def afford(self, work: int) -> bool:
        """Whether an exact search of this much work fits the budget left (and take it)."""
        if self.is_balanced or work > self.left:
            return False
        self.left -= work
        return True

    def expand(self, depth: int, items: Sequence[tuple[int, int]]) -> Counts:
        """Node counts of ``x`` members inside each domain ``j`` of ``items`` (``(j, x)``,
        in topology order) at ``depth``, every layer below ``depth`` kept: the next
        layer's slices chosen in each, then recursively inside each of those. The exact
        search is used for all of one level's choices when their total work fits the
        budget left, else the greedy for all, as the top level decides."""
        if depth == self.tree.leaf_depth:
            return list(items)
        i, caps, size, leaf = self.level(depth)
        exact = not self.is_balanced and self.afford(sum(self.work(i, depth, j, x // size) for j, x in items))
        chosen = [pair for j, x in items for pair in self.choose(caps, depth, j, x // size, leaf, exact).counts]
        if i is None:
            return chosen
        return self.expand(leaf, [(unit, count * size) for unit, count in chosen])


def place(snapshot: Snapshot, node_caps: list[int], x: int, depths: Sequence[int], budget: int,
          allowed: Sequence[Collection[int]] | None, layout: Layout) -> tuple[int, int, Counts, str] | None:
    """The best ``(depth, domain, node counts, method)`` for ``x`` members of one shape
    (``node_caps`` of them fit per node) with ``layout``'s slices and balance (module
    docstring): the first depth of ``depths`` with an allowed domain that holds them, then
    the least (vector, room left, spare, index) over those domains. None when none does."""
    tree = snapshot.tree
    member = tree.caps_by_depth(node_caps)
    chooser = Chooser(tree, budget, layout, member, unit_caps(tree, member, layout.layers))
    for d in depths:
        i, caps, size, leaf = chooser.level(d)
        need = x // size
        candidates = [j for j, c in enumerate(caps[d]) if c >= need and (allowed is None or j in allowed[d])]
        if not candidates:
            continue
        exact = not layout.balanced and chooser.afford(sum(chooser.work(i, d, j, need) for j in candidates))
        best: tuple[tuple[tuple[int, ...], int, tuple[int, ...], int], selection.Selection] | None = None
        for j in candidates:
            sel = chooser.choose(caps, d, j, need, leaf, exact)
            key = (sel.vector, caps[d][j] - need, sel.spare, j)
            if best is None or key < best[0]:
                best = (key, sel)
        assert best is not None
        method = "balanced" if layout.balanced else "exact" if exact else "greedy"
        if i is None:
            return d, best[0][3], list(best[1].counts), method
        return d, best[0][3], chooser.expand(leaf, [(unit, count * size) for unit, count in best[1].counts]), method
    return None


def slice_domains(snapshot: Snapshot, nodes: Sequence[int], layers: Sequence[Layer]) -> list[tuple[int, int, int]]:
    """``(layer, slice index, domain index at the layer's depth)`` of every slice of a
    plan (``nodes``: node index per rank), layers outermost first; a slice whose members
    are not inside one domain has domain ``-1``."""
    out = []
    for n, layer in enumerate(layers):
        held = list(map(snapshot.tree.domain_of[layer.depth].__getitem__, nodes))
        size = layer.size
        for k in range(len(nodes) // size):
            first = held[k * size]
            whole = held[k * size:(k + 1) * size].count(first) == size
            out.append((n, k, first if whole else -1))
    return out


def holds(snapshot: Snapshot, nodes: Sequence[int], layers: Sequence[Layer]) -> bool:
    """Whether every slice of every layer of the plan ``nodes`` is inside one domain."""
    return all(domain >= 0 for _, _, domain in slice_domains(snapshot, nodes, layers))


@dataclass(frozen=True)
class Balance:
    """How a plan spreads: at ``depth``, the first below its domain where it uses more
    than one domain, ``domains`` used, the ``largest`` and ``smallest`` share (members)."""

    depth: int
    domains: int
    largest: int
    smallest: int


def balance_of(snapshot: Snapshot, nodes: Sequence[int], depth: int) -> Balance | None:
    """The :class:`Balance` of a plan (node index per rank) in a domain of ``depth``;
    None when every member is on one node."""
    tree = snapshot.tree
    for d in range(depth + 1, tree.leaf_depth + 1):
        held = list(map(tree.domain_of[d].__getitem__, nodes))
        if held and held.count(held[0]) != len(held):
            shares = Counter(held).values()
            return Balance(d, len(shares), max(shares), min(shares))
    return None


def short_layer(snapshot: Snapshot, node_caps: list[int], x: int, layers: Sequence[Layer], scope: int,
                domains: Sequence[int]) -> tuple[Layer, int, int, int] | None:
    """The layer that keeps ``x`` members (``node_caps`` per node) out of every domain of
    ``domains`` at depth ``scope``, innermost first: ``(layer, slices the best domain
    holds, slices needed, that domain)``; None when every layer's slices fit somewhere."""
    tree = snapshot.tree
    units = unit_caps(tree, tree.caps_by_depth(node_caps), layers)
    for i in range(len(layers) - 1, -1, -1):
        if layers[i].depth <= scope or not domains:
            continue
        best = max(domains, key=lambda j: (units[i][scope][j], -j))
        need = x // layers[i].size
        if units[i][scope][best] < need:
            return layers[i], units[i][scope][best], need, best
    return None


def _own(snapshot: Snapshot, members: Sequence[PodInfo]) -> set[PodKey]:
    """The keys of the gang's pods: ``members``, and the pods of their namespace that
    carry the same gang annotations (members that already run)."""
    own = {pod.key for pod in members}
    if members:
        first = members[0]
        own.update(key for key in snapshot.exclusive if snapshot.pods[key].namespace == first.namespace
                   and snapshot.pods[key].gang_annotations == first.gang_annotations)
    return own


def exclusive_holders(snapshot: Snapshot, layout: Layout, members: Sequence[PodInfo]) -> dict[tuple[int, int], list[PodKey]]:
    """The domains the gang of ``members`` may not use, as ``(depth, domain index)`` -> the
    keys of the pods that keep it out (each domain is open again once all of them are
    gone): every domain of the exclusive level of another gang's member placed or reserved
    there (:attr:`Snapshot.exclusive`), and, for an exclusive gang, every domain of its
    level where a pod Troupe placed or holds for another gang uses a node (gated, pinned or
    released by Troupe). A pod counts as the gang's when it is a member or carries the same
    gang annotations in the same namespace. Pods that carry no Troupe key are not seen (the
    guide says how to keep them out). Rule: docs/decisions/035-topology-layers.md."""
    tree, levels = snapshot.tree, snapshot.levels
    own = _own(snapshot, members)
    holders: dict[tuple[int, int], list[PodKey]] = {}
    for key in snapshot.exclusive:
        i = snapshot.node_index_of(key)
        if i is None or key in own:
            continue
        depth = levels.depth_of(snapshot.pods[key].gang_annotations[TOPOLOGY_EXCLUSIVE_LEVEL])
        if depth is not None:
            holders.setdefault((depth, tree.domain_of[depth][i]), []).append(key)
    if layout.exclusive is not None:
        first = members[0] if members else None
        for key, pod in snapshot.pods.items():
            if key in own or not (pod.gated or pod.assigned_node or pod.planned_at):
                continue
            if first is not None and pod.namespace == first.namespace and pod.gang_annotations == first.gang_annotations:
                continue
            i = snapshot.node_index_of(key)
            if i is not None:
                holders.setdefault((layout.exclusive, tree.domain_of[layout.exclusive][i]), []).append(key)
    return holders


def exclusive_blocked(snapshot: Snapshot, layout: Layout, members: Sequence[PodInfo]) -> set[int]:
    """The nodes the gang of ``members`` may not use: those of every domain of
    :func:`exclusive_holders`."""
    tree = snapshot.tree
    return {i for depth, j in exclusive_holders(snapshot, layout, members) for i in range(tree.lo[depth][j], tree.hi[depth][j])}


def shares_text(snapshot: Snapshot, balance: Balance) -> str:
    """``2 <level> domains, 6 to 6 members``: a :class:`Balance` in words."""
    return (f"{balance.domains} {snapshot.levels.name_of(balance.depth)} domains, "
            f"{balance.largest} to {balance.smallest} members")

