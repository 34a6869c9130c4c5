"""The capacity model of the preemption search: how many members fit where, with which
candidate pods evicted, without asking the placement engine.

The members are grouped into the placement engine's shapes
(:func:`~reconciler.engine.placement.shapes.member_shapes`); with several shapes their
:func:`~reconciler.engine.placement.shapes.envelope` is one more *kind*. Per kind and node the
model counts the members that fit (what :meth:`Snapshot.capacity` computes) and sums them
over each *scope* domain (the domains of the required level, or the cluster), as
:meth:`~reconciler.engine.ledger.topology.TopologyTree.caps_by_depth` does. Evicting pods adds their requests to their
nodes' free capacity: :func:`freed_by_node` sums those vectors per node, and
:meth:`CapacityModel.recount` moves a node's counts and its domain's sums.

For members of one shape the sums decide exactly whether a domain holds the gang; for
several, each shape fitting is necessary and the envelope fitting sufficient
(:class:`Fit`), and the placement engine decides between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from enum import Enum

from reconciler.engine.ledger.snapshot import UNBOUNDED, Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.resources import resource_order
from reconciler.engine.placement.shapes import envelope, member_shapes


@dataclass(slots=True, eq=False)
class SearchPod:
    """A candidate pod as the search sees it: its gang (index in
    :attr:`~.candidates.CandidatePool.gangs`), node (index in the snapshot), ``requests`` (units),
    ``vector`` ((model resource index, amount) pairs for the resources the
    :class:`CapacityModel` tracks), the scope domain of its node (-1: none) and
    whether a member could use its node (``relevant``)."""

    key: PodKey
    gang: int
    node: int
    requests: Mapping[str, int]
    vector: tuple[tuple[int, int], ...]
    scope: int
    relevant: bool


class Fit(Enum):
    """Whether the members fit in a domain, by the arithmetic alone."""

    #: They fit: one shape with room for every member, or the envelope has room.
    YES = "yes"
    #: Several shapes, each fits on its own but their envelope does not: the placement
    #: engine's mixed fill decides.
    MAYBE = "maybe"
    #: They do not fit: some shape lacks room.
    NO = "no"


class Target(Enum):
    """What a search aims at for members of several shapes (one shape: the same)."""

    #: Each shape fits (:attr:`Fit.MAYBE` is enough): the usual aim, the placement engine
    #: confirms.
    EACH_SHAPE = "each shape"
    #: The envelope fits (:attr:`Fit.YES` only): the fallback when the engine's fill
    #: failed on every plan aimed at each shape, and the bounds of the search.
    ENVELOPE = "envelope"


def overage_order(name: str) -> tuple[int, tuple[int, str]]:
    """Sort key of resources in the overage vector: extended resources first (by name),
    then cpu, memory, ephemeral-storage (kube-scheduler's order)."""
    key = resource_order(name)
    return (0 if key[0] == 4 else 1, key)


def freed_by_node(pods: Iterable[SearchPod], width: int, into: dict[int, list[int]] | None = None,
                  start: Mapping[int, Sequence[int]] | None = None) -> dict[int, list[int]]:
    """Node index -> what ``pods`` request there, per model resource (``width`` of them),
    added to ``into`` (a new dict when None); a node not yet in ``into`` starts from a
    copy of its ``start`` vector when it has one, else from zeros."""
    out: dict[int, list[int]] = {} if into is None else into
    for pod in pods:
        vector = out.get(pod.node)
        if vector is None:
            first = start.get(pod.node) if start is not None else None
            vector = out[pod.node] = list(first) if first is not None else [0] * width
        for resource, amount in pod.vector:
            vector[resource] += amount
    return out


class CapacityModel:
    """Capacity arithmetic for the members: per *kind* (each shape of members, plus their
    envelope when there are several shapes), per node, how many members fit, and its sum
    over each scope domain (those of ``depth`` in ``scope``).

    Attributes: ``member_count``; ``shape_counts`` (members per shape); ``single`` (one
    shape); ``main_kind`` (the shape when single, else the envelope); ``resources`` (the
    resources some kind requests, in :func:`overage_order`) and ``index`` (name -> model
    resource index); ``kind_requests`` ((model resource index, units) pairs per kind);
    ``free`` (per model resource, per node, units free); ``scope_of`` (node -> its scope
    domain, -1 outside the scope); ``usable`` (node: in scope and eligible for a kind);
    ``base_caps`` (node -> members per kind that fit now); ``base_sums`` (scope domain ->
    their sums per kind).
    """

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], depth: int, scope: set[int]) -> None:
        shapes, _ = member_shapes(members)
        self.member_count = len(members)
        requests: list[Mapping[str, int]] = [shape.requests for shape in shapes]
        eligible = [snapshot.eligible(shape.flt) for shape in shapes]
        self.shape_counts = [len(shape.members) for shape in shapes]
        self.single = len(shapes) == 1
        if not self.single:
            envelope_requests, envelope_eligible = envelope(shapes, eligible)
            requests.append(envelope_requests)
            eligible.append(envelope_eligible)
        self.main_kind = len(requests) - 1
        self.resources = sorted({resource for asked in requests for resource, amount in asked.items() if amount > 0},
                                key=overage_order)
        self.index = {resource: i for i, resource in enumerate(self.resources)}
        self.kind_requests = [tuple((self.index[resource], amount) for resource, amount in asked.items() if amount > 0)
                              for asked in requests]
        self.eligible = eligible
        self.kinds = range(len(requests))
        self.free = [snapshot.free_units(resource) for resource in self.resources]
        tree = snapshot.tree
        owner = tree.domain_of[depth]
        nodes = range(len(snapshot.nodes))
        self.scope_of = [owner[node] if owner[node] in scope else -1 for node in nodes]
        any_eligible = [any(column[node] for column in eligible) for node in nodes]
        self.usable = [self.scope_of[node] >= 0 and any_eligible[node] for node in nodes]
        columns = [snapshot.capacity(asked, ok) for asked, ok in zip(requests, eligible, strict=True)]
        self.base_caps = [list(per_kind) for per_kind in zip(*columns, strict=True)]
        by_domain = [tree.caps_by_depth(column)[depth] for column in columns]
        self.base_sums: dict[int, list[int]] = {domain: [column[domain] for column in by_domain]
                                                for domain in scope}

    @property
    def width(self) -> int:
        """How many resources the model tracks."""
        return len(self.resources)

    def cap(self, kind: int, node: int, added: Sequence[int] | None) -> int:
        """Members of ``kind`` that fit on ``node`` with ``added`` (per model resource)
        freed on it; what :meth:`Snapshot.capacity` computes."""
        if not self.eligible[kind][node]:
            return 0
        best = UNBOUNDED
        free = self.free
        for resource, asked in self.kind_requests[kind]:
            available = free[resource][node] + (added[resource] if added is not None else 0)
            if available < asked:
                return 0
            count = available // asked
            if count < best:
                best = count
        return best

    def node_caps(self, node: int, added: Sequence[int]) -> list[int]:
        """Members per kind that fit on ``node`` with ``added`` freed on it."""
        return [self.cap(kind, node, added) for kind in self.kinds]

    def shift(self, sums: MutableSequence[int], old: Sequence[int], new: Sequence[int]) -> None:
        """Move the per-kind ``sums`` of a domain from a node's ``old`` counts to ``new``."""
        for kind in self.kinds:
            sums[kind] += new[kind] - old[kind]

    def recount(self, node: int, added: Sequence[int], caps: dict[int, list[int]],
                sums: MutableSequence[int]) -> list[int]:
        """Recount ``node`` with ``added`` freed on it: its counts go into ``caps`` (node ->
        counts; absent: :attr:`base_caps`) and its domain's ``sums`` move by the change.
        Returns the new counts."""
        old = caps.get(node)
        if old is None:
            old = self.base_caps[node]
        new = caps[node] = self.node_caps(node, added)
        self.shift(sums, old, new)
        return new

    def status(self, sums: Sequence[int]) -> Fit:
        """Whether the members fit in a domain whose per-kind sums are ``sums``."""
        if self.single:
            return Fit.YES if sums[0] >= self.member_count else Fit.NO
        if any(sums[kind] < count for kind, count in enumerate(self.shape_counts)):
            return Fit.NO
        return Fit.YES if sums[self.main_kind] >= self.member_count else Fit.MAYBE

    def enough(self, sums: Sequence[int], target: Target) -> bool:
        """Whether the sums of a domain meet ``target``."""
        fit = self.status(sums)
        return fit is Fit.YES or (fit is Fit.MAYBE and target is Target.EACH_SHAPE)

    def deficit(self, sums: Sequence[int], target: Target) -> int:
        """Member slots still missing in a domain: for one shape, the members beyond its
        capacity; for several, the per-shape shortfalls (:attr:`Target.EACH_SHAPE`) or
        the envelope's (:attr:`Target.ENVELOPE`)."""
        if self.single or target is Target.ENVELOPE:
            return max(0, self.member_count - sums[self.main_kind])
        return sum(max(0, count - sums[kind]) for kind, count in enumerate(self.shape_counts))

    def sums(self, pods: Iterable[SearchPod]) -> dict[int, list[int]]:
        """The domain sums with ``pods`` removed, for the domains they touch."""
        freed = freed_by_node((pod for pod in pods if pod.scope >= 0), self.width)
        out: dict[int, list[int]] = {}
        fresh: dict[int, list[int]] = {}
        for node, added in freed.items():
            domain = self.scope_of[node]
            sums = out.get(domain)
            if sums is None:
                sums = out[domain] = list(self.base_sums[domain])
            self.recount(node, added, fresh, sums)
        return out

    def domain_sums(self, pods: Iterable[SearchPod], domain: int) -> list[int]:
        """The sums of ``domain`` with ``pods`` removed."""
        return self.sums(pods).get(domain, self.base_sums[domain])


def scope(snapshot: Snapshot, required_level: str | None, near: Sequence[str]) -> tuple[int, set[int]] | None:
    """The depth whose domains must each hold the whole gang (the required level's, else
    the cluster's) and the domains allowed there (those holding a ``near`` node, as
    :func:`~reconciler.engine.placement.place.place_gang` allows them); None for an unknown
    level."""
    depth = 0
    if required_level is not None:
        found = snapshot.levels.depth_of(required_level)
        if found is None:
            return None
        depth = found
    if near:
        owner = snapshot.tree.domain_of[depth]
        return depth, {owner[snapshot.index[name]] for name in near if name in snapshot.index}
    return depth, set(range(snapshot.tree.size(depth)))
