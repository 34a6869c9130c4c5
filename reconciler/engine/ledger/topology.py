"""The topology: levels, each node's path through them, and the immutable domain tree.

Levels are node label keys, highest first (default: GKE's block, subblock, host; nodes may
carry the older ``topology.gke.io/cluster|rack|host`` set instead). A node's *path* is its
value at each level. Depths number the tree::

    depth 0            the cluster (root)
    depth 1 .. L       the label levels (block, subblock, host)
    depth L + 1        the nodes (kubernetes.io/hostname)

A node missing a level's label is its own domain at that level and every level below
(docs/decisions/001-placement-objective.md, "Nodes without labels"): the path holds
``<node-name>`` there, which no label value can equal (``<`` is not allowed in label
values). A node without any topology label is thus a block of its own.

Nodes are kept sorted by path then name, so every domain is a contiguous range of node
indices and the children of a domain a contiguous range of the next depth's domains.
The tree is built once per snapshot and never changes; the per-plan counts live with the
caller (:mod:`reconciler.engine.placement.place`), as Kueue keeps its TAS tree apart from a plan's scratch state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import sub

from troupe.config import Config
from troupe.contract import HOSTNAME_LABEL

#: A rank boundary at the lowest label level costs this, and each level up this many
#: times more: the seed's 100 across hosts, 1e4 across subblocks, 1e6 across blocks.
LEVEL_WEIGHT_BASE = 100


def missing_value(node_name: str) -> str:
    """The path value standing for an absent label: unique to the node."""
    return f"<{node_name}>"


@dataclass(frozen=True)
class TopologyLevels:
    """The configured levels: ``keys`` (highest first) and an optional ``fallback`` set of
    the same depth, used for nodes that carry none of ``keys``."""

    keys: tuple[str, ...]
    fallback: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("at least one topology level is needed")
        if self.fallback and len(self.fallback) != len(self.keys):
            raise ValueError("fallback levels must be as many as the levels")

    @classmethod
    def from_config(cls, config: Config) -> TopologyLevels:
        """The levels of a Troupe :class:`~troupe.config.Config`."""
        return cls(tuple(config.topology_levels), tuple(config.topology_fallback_levels))

    @classmethod
    def default(cls) -> TopologyLevels:
        """GKE's levels, falling back to the pre-1.31 labels (``seeds/002``)."""
        return cls.from_config(Config())

    @property
    def count(self) -> int:
        """L, the number of label levels."""
        return len(self.keys)

    @property
    def leaf_depth(self) -> int:
        """The depth of nodes, L + 1."""
        return len(self.keys) + 1

    def depth_of(self, key: str) -> int | None:
        """The depth a level key names: 1..L for a key of either set, L + 1 for
        ``kubernetes.io/hostname``; None for an unknown key."""
        for keys in (self.keys, self.fallback):
            if key in keys:
                return keys.index(key) + 1
        if key == HOSTNAME_LABEL:
            return self.leaf_depth
        return None

    def name_of(self, depth: int) -> str:
        """The level key of a depth (``""`` for the root)."""
        if depth == 0:
            return ""
        if depth == self.leaf_depth:
            return HOSTNAME_LABEL
        return self.keys[depth - 1]

    def path_of(self, node_name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's value at each level: from ``keys`` if it carries any of them, else
        from ``fallback`` if it carries any of those; absent values are
        :func:`missing_value`."""
        keys = self.keys
        if self.fallback and not any(k in labels for k in keys) and any(k in labels for k in self.fallback):
            keys = self.fallback
        missing = missing_value(node_name)
        return tuple(labels.get(k, missing) for k in keys)

    def weights(self) -> tuple[float, ...]:
        """The seed's cost of a rank boundary whose first differing level is each level:
        ``(1e6, 1e4, 100)`` for three levels."""
        n = self.count
        return tuple(float(LEVEL_WEIGHT_BASE ** (n - i)) for i in range(n))


def distance(a: Sequence[str], b: Sequence[str], weights: Sequence[float]) -> float:
    """``node_topology_distance`` of ``seeds/002``: the weight of the first level whose
    values differ, 0 when the paths are equal (same node, or same host)."""
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return weights[i]
    return 0.0


def sequence_cost(paths: Sequence[Sequence[str]], weights: Sequence[float]) -> float:
    """The seed's topology cost of ranks placed on nodes with these paths, in rank order:
    the sum of :func:`distance` over neighbouring ranks."""
    return sum(distance(paths[i], paths[i + 1], weights) for i in range(len(paths) - 1))


class TopologyTree:
    """Domains per depth as contiguous node ranges; immutable once built.

    For depth ``d`` and domain index ``j``: ``lo[d][j]:hi[d][j]`` are its nodes,
    ``first[d][j]:end[d][j]`` its children at depth ``d + 1`` (empty for nodes), and
    ``prefix[d][j]`` its path (``()`` for the root, the full path plus the node name
    for a node).
    """

    def __init__(self, node_names: Sequence[str], paths: Sequence[tuple[str, ...]], levels: TopologyLevels) -> None:
        n, leaf = len(paths), levels.leaf_depth
        if any(paths[i] + (node_names[i],) > paths[i + 1] + (node_names[i + 1],) for i in range(n - 1)):
            raise ValueError("nodes must be sorted by path, then name")
        self.levels = levels
        self.leaf_depth = leaf
        self.lo: list[list[int]] = [[0]]
        self.hi: list[list[int]] = [[n]]
        self.prefix: list[list[tuple[str, ...]]] = [[()]]
        for d in range(1, leaf):
            lo: list[int] = []
            hi: list[int] = []
            pre: list[tuple[str, ...]] = []
            for i in range(n):
                key = paths[i][:d]
                if not pre or pre[-1] != key:
                    if lo:
                        hi.append(i)
                    lo.append(i)
                    pre.append(key)
            if lo:
                hi.append(n)
            self.lo.append(lo)
            self.hi.append(hi)
            self.prefix.append(pre)
        self.lo.append(list(range(n)))
        self.hi.append(list(range(1, n + 1)))
        self.prefix.append([paths[i] + (node_names[i],) for i in range(n)])
        #: ``domain_of[d][i]``: the index of node ``i``'s domain at depth ``d``.
        self.domain_of: list[list[int]] = []
        for d in range(leaf + 1):
            owner = [0] * n
            for j, (lo_j, hi_j) in enumerate(zip(self.lo[d], self.hi[d], strict=True)):
                owner[lo_j:hi_j] = [j] * (hi_j - lo_j)
            self.domain_of.append(owner)
        self.first: list[list[int]] = []
        self.end: list[list[int]] = []
        for d in range(leaf + 1):
            if d == leaf:
                count = len(self.lo[d])
                self.first.append([0] * count)
                self.end.append([0] * count)
                continue
            child_lo = self.lo[d + 1]
            first, end, c = [], [], 0
            for j in range(len(self.lo[d])):
                first.append(c)
                while c < len(child_lo) and child_lo[c] < self.hi[d][j]:
                    c += 1
                end.append(c)
            self.first.append(first)
            self.end.append(end)

    def size(self, depth: int) -> int:
        """How many domains there are at ``depth``."""
        return len(self.lo[depth])

    def children(self, depth: int, j: int) -> range:
        """Indices (at ``depth + 1``) of the children of domain ``j`` at ``depth``."""
        return range(self.first[depth][j], self.end[depth][j])

    def caps_by_depth(self, node_caps: Sequence[int]) -> list[list[int]]:
        """Per-depth domain capacities: each domain's sum of ``node_caps`` (per node, in
        node order), aggregated bottom-up with one prefix sum."""
        at = list(accumulate(node_caps, initial=0)).__getitem__
        out = [list(map(sub, map(at, self.hi[d]), map(at, self.lo[d]))) for d in range(self.leaf_depth)]
        out.append(list(node_caps))
        return out
