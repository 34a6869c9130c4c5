"""Choosing nodes inside one topology domain for ``x`` identical pods.

Inputs are the :class:`~reconciler.engine.ledger.topology.TopologyTree` and, per depth, how
many of the pods each domain can hold (``caps[d][j]``, from
:meth:`TopologyTree.caps_by_depth`). The output is a :class:`Selection`: pods per node,
and the objective vector ``(domains used at depth d+1, at d+2, ..., nodes used)`` below
the chosen domain at depth ``d``, compared lexicographically: fewer child domains at
each level first, then fewer nodes; among equal vectors, the used domains of each level
should have the least capacity beyond the gang (best fit, from the top down). With pods laid out in rank order over the nodes in
topology order, that vector fixes the seed's topology cost (1e6 per extra block, 1e4 per
extra subblock, 100 per extra host), and lexicographic order is the seed's order whenever
fewer than 100 domains of a level are used (docs/decisions/001-placement-objective.md).

Two methods, same contract:

- :func:`greedy`, level by level from the domain down: among the children of the domains
  chosen so far, take the fewest that hold ``x`` (largest first), then swap the last one
  for the smallest that still suffices (best fit, against fragmentation). Its vector is
  optimal when only one level has a choice (e.g. one pod per node, one node per host,
  inside one block); ``O(n log n)`` in the domain's nodes.
- :func:`exact`, a knapsack over the subtree keeping, for every reachable capacity, the
  lexicographically least (vector, spare); optimal, and chosen by the caller when its
  work estimate (:func:`exact_work`) is small.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from reconciler.engine.ledger.topology import TopologyTree

Caps = Sequence[Sequence[int]]


@dataclass(frozen=True)
class Selection:
    """Pods per node, ``counts`` as ``(node index, pods)`` in node (topology) order.

    ``vector`` is the number of domains used at each depth below the chosen domain, nodes
    last; ``spare`` the pod slots the used domains of each depth could hold beyond the
    gang (their capacity minus ``x``), nodes last, so ``spare[-1]`` is what stays free on
    the chosen nodes. Both are compared lexicographically, ``vector`` first.
    """

    counts: tuple[tuple[int, int], ...]
    vector: tuple[int, ...]
    spare: tuple[int, ...]

    @property
    def slack(self) -> int:
        """Pod slots left free on the chosen nodes."""
        return self.spare[-1] if self.spare else 0


def _single_node(caps: Caps, leaf: int, j: int, x: int) -> Selection:
    return Selection(((j, x),), (), ())


class Spread:
    """The greedy's tie-break among domains of equal capacity: for a domain, how many
    domains with capacity it has at each depth below, nodes last; fewer means its
    capacity is more concentrated, so it comes first. Prefix counts per depth are built
    lazily, once per placement, and shared by every candidate domain."""

    def __init__(self, tree: TopologyTree, caps: Caps, leaf: int | None = None) -> None:
        self.tree, self.caps = tree, caps
        self.leaf = tree.leaf_depth if leaf is None else leaf
        self._prefix: dict[int, list[int]] = {}

    def _counts(self, depth: int) -> list[int]:
        pre = self._prefix.get(depth)
        if pre is None:
            pre = self._prefix[depth] = list(accumulate((c > 0 for c in self.caps[depth]), initial=0))
        return pre

    def of(self, depth: int, j: int) -> tuple[int, ...]:
        """The spread of domain ``j`` at ``depth``."""
        tree = self.tree
        lo, hi = tree.lo[depth][j], tree.hi[depth][j]
        out = []
        for e in range(depth + 1, self.leaf + 1):
            owner, pre = tree.domain_of[e], self._counts(e)
            out.append(pre[owner[hi - 1] + 1] - pre[owner[lo]])
        return tuple(out)


def greedy(tree: TopologyTree, caps: Caps, depth: int, j: int, x: int, spread: Spread | None = None,
           leaf: int | None = None) -> Selection:
    """Level-wise largest-first selection with a best-fit last pick (module docstring);
    among equal capacities the more concentrated domain (``spread``) comes first.
    ``leaf``: the depth whose domains are chosen as the units (default the nodes; a slice
    level's, :mod:`.layers`). Requires ``caps[depth][j] >= x > 0``."""
    leaf = tree.leaf_depth if leaf is None else leaf
    if depth == leaf:
        return _single_node(caps, leaf, j, x)
    spread = spread or Spread(tree, caps, leaf)
    chosen = [j]
    vector, spare = [], []
    last, last_need = j, x
    for d in range(depth + 1, leaf + 1):
        cap = caps[d]
        first, end = tree.first[d - 1], tree.end[d - 1]
        items = [c for p in chosen for c in range(first[p], end[p]) if cap[c] > 0]
        if d == leaf:
            items.sort(key=lambda c: (-cap[c], c))
        else:
            items.sort(key=lambda c: (-cap[c], spread.of(d, c), c))
        total = k = 0
        for c in items:
            total += cap[c]
            k += 1
            if total >= x:
                break
        need = x - (total - cap[items[k - 1]])
        neg = [-cap[c] for c in items]
        smallest_enough = bisect_right(neg, -need) - 1  # last position with cap >= need
        pick = max(k - 1, bisect_left(neg, neg[smallest_enough]))  # first of that cap
        chosen = [*items[: k - 1], items[pick]]
        vector.append(k)
        spare.append(total - cap[items[k - 1]] + cap[items[pick]] - x)
        last, last_need = items[pick], need
    counts = {c: caps[leaf][c] for c in chosen}
    counts[last] = last_need
    return Selection(tuple(sorted(counts.items())), tuple(vector), tuple(spare))


#: capacity -> (value, nodes with their capacities); value is (domains used per depth,
#: then capacity of the used domains per depth), both from the top down to the nodes.
Profile = dict[int, tuple[tuple[int, ...], tuple[tuple[int, int], ...]]]


def _profile(tree: TopologyTree, caps: Caps, d: int, j: int, x: int, leaf: int) -> Profile:
    """Over non-empty choices of nodes in domain ``j`` at depth ``d``: for each total
    capacity, the least value. Choices already holding ``x`` are not extended: adding a
    node only makes the value worse. Values add up over disjoint subtrees, and adding
    keeps lexicographic order, so keeping the least per capacity is exact. ``leaf``: the
    depth of the units chosen."""
    if d == leaf:
        return {caps[leaf][j]: ((), ((j, caps[leaf][j]),))}
    width = leaf - d  # depths d+1 .. leaf
    acc: Profile = {0: ((0,) * (2 * width), ())}
    child_caps = caps[d + 1]
    for c in tree.children(d, j):
        cap = child_caps[c]
        if cap == 0:
            continue
        prof = _profile(tree, caps, d + 1, c, x, leaf)
        new = dict(acc)
        for a, (va, pa) in acc.items():
            if a >= x:
                continue
            for b, (vb, pb) in prof.items():
                w = width - 1
                v = (
                    va[0] + 1,
                    *[va[1 + i] + vb[i] for i in range(w)],
                    va[width] + cap,
                    *[va[width + 1 + i] + vb[w + i] for i in range(w)],
                )
                cur = new.get(a + b)
                if cur is None or v < cur[0]:
                    new[a + b] = (v, pa + pb)
        acc = new
    del acc[0]
    return acc


def exact(tree: TopologyTree, caps: Caps, depth: int, j: int, x: int, leaf: int | None = None) -> Selection:
    """The optimal selection: least ``vector``, then least ``spare`` (module docstring);
    ``leaf`` as for :func:`greedy`. Requires ``caps[depth][j] >= x > 0``."""
    leaf = tree.leaf_depth if leaf is None else leaf
    if depth == leaf:
        return _single_node(caps, leaf, j, x)
    width = leaf - depth
    prof = _profile(tree, caps, depth, j, x, leaf)
    value, total = min((v, c) for c, (v, _) in prof.items() if c >= x)
    slack = total - x
    counts = dict(prof[total][1])
    # The slack stays on the last chosen node (in topology order) that can give it up.
    for node in sorted(counts, reverse=True):
        if counts[node] > slack:
            counts[node] -= slack
            break
    return Selection(tuple(sorted(counts.items())), value[:width], tuple(s - x for s in value[width:]))


def least_vector(tree: TopologyTree, caps: Caps, depth: int, j: int, x: int, leaf: int | None = None) -> tuple[int, ...]:
    """A lower bound of the ``vector`` of any selection of ``x`` pods in domain ``j`` at
    ``depth`` (:class:`Selection`): at each depth below it, the fewest of its domains whose
    capacities add up to ``x``. ``leaf`` as for :func:`greedy`."""
    leaf = tree.leaf_depth if leaf is None else leaf
    lo, hi = tree.lo[depth][j], tree.hi[depth][j]
    out = []
    for e in range(depth + 1, leaf + 1):
        owner = tree.domain_of[e]
        inside = caps[e][owner[lo]:owner[hi - 1] + 1]
        if max(inside) >= x:
            out.append(1)
            continue
        total = k = 0
        for c in sorted(inside, reverse=True):
            total += c
            k += 1
            if total >= x:
                break
        out.append(k)
    return tuple(out)


def exact_work(fitting_nodes: int, x: int) -> int:
    """An upper estimate of :func:`exact`'s inner steps for a domain with this many nodes
    that can hold a pod: each node is merged into profiles of at most about ``x``
    capacities."""
    return fitting_nodes * (x + 1) * (x + 1)
