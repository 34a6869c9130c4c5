"""Gang-aware preemption: which lower-priority gangs to evict so that a gang can be placed.

:func:`plan_preemption` is the entry point; docs/decisions/009-preemption-planner.md has
the reasoning, worked examples and measurements. DESIGN.md "Gang-aware preemption" is the
contract; the Volcano proposal (``seeds/003``) is the behaviour it improves on.

**Victims.** Candidates are the caller's :class:`VictimGang` values: gangs of running (or
released) pods of strictly lower priority than the preemptor, a pod outside any gang
being a gang of one. The planner also drops, defensively, candidates that are not of
strictly lower priority than every member, the preemptor's own gang (``gang``), pods that
use no node in the snapshot (terminal ones use none) and the members themselves; it never
returns a pod that is not among what remains.

**Feasibility.** A plan is feasible when :func:`~reconciler.engine.placement.place_gang`,
on the snapshot without the victims, places every member, with the gang's required or
preferred level and ``near`` nodes; that placement is part of the plan. With a required
level the victims come from one domain of that level (the one the placement uses).

**Objective**, lexicographic, in this order:

1. the highest priority among the victim gangs;
2. the number of gangs disrupted (gangs with at least one pod evicted);
3. the number of pods evicted;
4. the *overage*: capacity freed beyond the need. For each resource ``r`` the members
   request (``pods`` excluded: evicted pods are (3)), in the units of
   :mod:`.resources` (millicores for ``cpu``, bytes for ``memory``, devices for extended
   resources)::

       overage[r] = sum over nodes n of  freed[n][r] - clamp(demand[n][r] - free[n][r], 0, freed[n][r])

   where ``freed[n][r]`` is what the victims on ``n`` request, ``free[n][r]`` what ``n``
   has free before the eviction and ``demand[n][r]`` what the placement's members on ``n``
   request: the freed capacity that the placement does not use. The vector is compared
   in the order: extended resources by name (``nvidia.com/gpu``), then ``cpu``,
   ``memory``, ``ephemeral-storage``; for members asking only for GPUs it reads as GPUs.

Then, for equal objectives, the victims' nodes in topology order (earlier first), then
the gang keys: the same input gives the same plan whatever the order of the candidates.

**Modes** (``gangPreemptionMode``): ``off`` returns None. ``minimal`` evicts only pods the
plan needs: every victim pod ``v`` is needed, that is the returned placement does not
fit on the snapshot without the other victims. ``atomic`` evicts every pod of each
chosen gang, on every node; (3) then counts whole gangs.

**Search.** The placement engine's capacity arithmetic (members per node, summed over
the domains of the scope level, :meth:`TopologyTree.caps_by_depth` in spirit) decides
feasibility without calling it, exactly for members of one shape; for several shapes a
necessary test (each shape fits) and a sufficient one (their envelope fits) bound it and
the placement engine decides between them. Then:

- a sweep over candidate priorities, lowest first, finds (1) and the domains that can
  hold the gang at that priority, in ``O(candidate pods)``; gangs above (1) are never
  looked at further;
- **greedy**, in the feasible domains (least lower bound of gangs first, at most
  :data:`GREEDY_DOMAINS`, skipping domains whose bound exceeds the best found):
  repeatedly evict the move (one gang, or every remaining candidate gang of one node)
  with the most member slots gained per gang, unless a move that completes the need costs no more gangs than the rest would (then the
  completing move with the fewest pods and least freed: the proposal's "least overage",
  keeping the next :data:`ALTERNATIVES` - 1 as other plans); then a reverse pass keeps
  the fewest of the chosen gangs that suffice and, in ``minimal`` mode, drops their pods
  that are not needed;
- **exact** when it is small: the gang sets of at most the greedy's number of gangs, in
  the domains whose bound allows it, are at most :data:`EXACT_BUDGET`, and in ``minimal``
  mode the relevant pods (on nodes a member can use, in those domains) at most
  :data:`EXACT_PODS`. Gang sets by increasing size, then (``minimal``) their pod sets by
  increasing size, each checked by the arithmetic, give every set tied on (1)-(3); they
  are placed best-first by a lower bound of their overage (:meth:`_Planner.estimate`),
  at most :data:`PLACEMENT_BUDGET`, until the bound passes the best overage found. Past
  :data:`EXACT_BUDGET` evaluations in all, the greedy's plans stand.

Every candidate plan is then *settled*: placed, trimmed against its placement (gangs,
then per node the fewest pods that cover the deficit), placed again, until nothing more
can be dropped. The plan with the least objective wins. Exactness: with members of one shape and at most
:data:`PLACEMENT_BUDGET` ties, the exact search returns an optimal plan (the property
tests hold it to a brute force over every subset).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from operator import attrgetter

from reconciler.engine.cluster import PodInfo
from reconciler.engine.placement import PlacementResult, place_gang
from reconciler.engine.resources import PODS, resource_order
from reconciler.engine.snapshot import UNBOUNDED, Snapshot
from troupe.config import PREEMPTION_MODES

#: Exact search only when, in ``minimal`` mode, the relevant candidate pods are at most
#: this many (and the gang sets to enumerate at most :data:`EXACT_BUDGET`).
EXACT_PODS = 24
#: Subset evaluations (each a capacity computation over the subset's nodes) the exact
#: search may make: it runs only when the gang sets it would enumerate are at most this
#: many, and gives way to the greedy's plans if the pod sets (``minimal``) exceed it too.
EXACT_BUDGET = 4_000
#: Calls of :func:`place_gang` spent on choosing among plans tied on (1)-(3), and on
#: confirming greedy plans, before settling the winner.
PLACEMENT_BUDGET = 32
#: The reverse pass tries every subset of the greedy's gangs when they are at most this
#: many, evaluating at most :data:`REVERSE_BUDGET` of them; else it drops them in order.
REVERSE_GANGS = 10
REVERSE_BUDGET = 200
#: Settling tries every subset of a plan's gangs (of a node's victim pods) to drop (to
#: keep) when they are at most this many; else it goes in order.
TRIM_GANGS = 9
#: Completing moves the greedy keeps as alternative last picks (each its own plan).
ALTERNATIVES = 4
#: Domains the greedy searches at most, least lower bound of gangs first.
GREEDY_DOMAINS = 6
#: Greedy plans (best estimated objective first) settled and compared.
GREEDY_SETTLED = 3

_YES, _MAYBE, _NO = 2, 1, 0


@dataclass(frozen=True)
class VictimGang:
    """A candidate victim gang.

    ``key``: the gang key (``namespace/name``, or ``namespace/pod:<name>`` for a pod
    outside any gang); ``priority``: the highest ``spec.priority`` of its pods; ``pods``:
    its pods that use a node in the snapshot (``snapshot.using(p.key) is not None``).
    """

    key: str
    priority: int
    pods: tuple[PodInfo, ...]

    @classmethod
    def of(cls, key: str, pods: Iterable[PodInfo], snapshot: Snapshot) -> VictimGang:
        """The gang ``key`` of ``pods``: those that use a node in ``snapshot``, priority
        the highest among all of them (0 for none)."""
        pods = list(pods)
        return cls(key, max((p.priority for p in pods), default=0),
                   tuple(p for p in pods if snapshot.using(p.key) is not None))


def candidate_gangs(snapshot: Snapshot, gang_of: Callable[[PodInfo], str | None], below: int,
                    exclude: str = "") -> list[VictimGang]:
    """The candidates for a preemptor of priority ``below``, sorted by key: every pod that
    uses a node in ``snapshot`` and is neither terminal, nor being deleted (its capacity
    comes back without an eviction), nor gated (a member of a release still in progress,
    or of another preemptor's nomination: running or released pods only, DESIGN.md),
    grouped by ``gang_of(pod)`` (e.g.
    :func:`reconciler.engine.gang.gang_key` with the configuration), a pod outside any gang
    being the gang of one ``namespace/pod:<name>``; gangs of priority ``below`` or more and
    the gang ``exclude`` (the preemptor's own) are left out."""
    by_gang: dict[str, list[PodInfo]] = {}
    for pod in snapshot.pods.values():
        if pod.deleting or pod.gated or snapshot.node_index_of(pod.key) is None:
            continue
        key = gang_of(pod) or f"{pod.namespace}/pod:{pod.name}"
        by_gang.setdefault(key, []).append(pod)
    out = []
    for key in sorted(by_gang):
        pods = by_gang[key]
        priority = max(p.priority for p in pods)
        if priority < below and key != exclude:
            out.append(VictimGang(key, priority, tuple(sorted(pods, key=lambda p: p.key))))
    return out


@dataclass(frozen=True)
class PreemptionPlan:
    """Victims whose eviction lets the gang be placed, and that placement.

    ``victims``: pod keys (``namespace/name``) to evict, sorted; ``gangs``: their gang
    keys, sorted; ``placement``: :func:`place_gang` on the snapshot without the victims
    (``placed`` is true). The objective: ``max_priority`` (1), ``len(gangs)`` (2), ``pods``
    (3, ``len(victims)``) and ``overage`` (4): ``(resource, units)`` pairs in comparison
    order (module docstring). ``method``: ``exact`` or ``greedy``; ``reason``: one line
    for Events, e.g. ``evict 2 gangs (5 pods, priority <= 10) to place 4 members in
    cloud.google.com/gce-topology-subblock=b0/b0s1, freeing 4 nvidia.com/gpu beyond the
    need``. ``nodes``: victim pod key -> node.
    """

    victims: tuple[str, ...]
    gangs: tuple[str, ...]
    placement: PlacementResult
    max_priority: int
    pods: int
    overage: tuple[tuple[str, int], ...]
    method: str
    reason: str
    nodes: Mapping[str, str] = field(default_factory=dict)

    def objective(self) -> tuple[int, int, int, tuple[int, ...]]:
        """(1)-(4) as one comparable tuple."""
        return (self.max_priority, len(self.gangs), self.pods, tuple(v for _, v in self.overage))


def overage_order(name: str) -> tuple[int, tuple[int, str]]:
    """Sort key of resources in the overage vector: extended resources first (by name),
    then cpu, memory, ephemeral-storage (kube-scheduler's order)."""
    key = resource_order(name)
    return (0 if key[0] == 4 else 1, key)


# --- candidates, normalised ------------------------------------------------------------
class _Pod:
    """A candidate pod: its gang (index), node (index), requests, ``vec`` ((model
    resource index, amount) for the resources the model tracks), the scope domain of its
    node (-1: none) and whether a member could use its node (``relevant``)."""

    __slots__ = ("gang", "key", "node", "relevant", "requests", "scope", "vec")

    def __init__(self, key: str, gang: int, node: int, requests: Mapping[str, int],
                 vec: tuple[tuple[int, int], ...], scope: int, relevant: bool) -> None:
        self.key = key
        self.gang = gang
        self.node = node
        self.requests = requests
        self.vec = vec
        self.scope = scope
        self.relevant = relevant


@dataclass(eq=False)
class _Gang:
    key: str
    priority: int
    index: int
    pods: list[_Pod] = field(default_factory=list)
    #: scope domain -> relevant pods there
    local: dict[int, list[_Pod]] = field(default_factory=dict)


class _Model:
    """Capacity arithmetic for the members: per *kind* (each shape of members, plus their
    envelope when there are several shapes), per node, how many members fit, and its sum
    over each scope domain (the domains of the required level, or the cluster)."""

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], depth: int, scope: set[int]) -> None:
        groups: dict[tuple[tuple[tuple[str, int], ...], object], list[PodInfo]] = {}
        for p in members:
            groups.setdefault((tuple(sorted(p.requests.items())), p.node_filter), []).append(p)
        shapes = list(groups.values())
        self.x = len(members)
        requests: list[Mapping[str, int]] = [s[0].requests for s in shapes]
        eligible = [snapshot.eligible(s[0].node_filter) for s in shapes]
        self.counts = [len(s) for s in shapes]
        self.single = len(shapes) == 1
        if not self.single:
            names = sorted({r for q in requests for r in q})
            requests.append({r: max(q.get(r, 0) for q in requests) for r in names})
            eligible.append([all(t) for t in zip(*eligible, strict=True)])
        self.main = len(requests) - 1  # the shape when single, else the envelope
        self.resources = sorted({r for q in requests for r, v in q.items() if v > 0}, key=overage_order)
        self.index = {r: i for i, r in enumerate(self.resources)}
        self.q = [tuple((self.index[r], v) for r, v in q.items() if v > 0) for q in requests]
        self.eligible = eligible
        self.kinds = range(len(requests))
        self.free = [snapshot.free_units(r) for r in self.resources]
        tree = snapshot.tree
        owner = tree.domain_of[depth]
        n = len(snapshot.nodes)
        self.scope_of = [owner[i] if owner[i] in scope else -1 for i in range(n)]
        any_eligible = [any(e[i] for e in eligible) for i in range(n)]
        self.usable = [self.scope_of[i] >= 0 and any_eligible[i] for i in range(n)]
        columns = [snapshot.capacity(q, e) for q, e in zip(requests, eligible, strict=True)]
        self.base = [list(t) for t in zip(*columns, strict=True)]
        by_domain = [tree.caps_by_depth(col)[depth] for col in columns]
        self.base_sums: dict[int, list[int]] = {d: [col[d] for col in by_domain] for d in scope}

    def cap(self, kind: int, i: int, add: Sequence[int] | None) -> int:
        """Members of ``kind`` that fit on node ``i`` with ``add`` (per model resource)
        freed on it; what :meth:`Snapshot.capacity` computes."""
        if not self.eligible[kind][i]:
            return 0
        best = UNBOUNDED
        for r, q in self.q[kind]:
            f = self.free[r][i] + (add[r] if add is not None else 0)
            if f < q:
                return 0
            c = f // q
            if c < best:
                best = c
        return best

    def status(self, sums: Sequence[int]) -> int:
        """_YES: the members fit in a domain with these sums; _NO: they cannot; _MAYBE:
        several shapes, each fits but their envelope does not (the placement engine's
        mixed fill decides)."""
        if self.single:
            return _YES if sums[0] >= self.x else _NO
        if any(sums[k] < c for k, c in enumerate(self.counts)):
            return _NO
        return _YES if sums[self.main] >= self.x else _MAYBE

    def deficit(self, sums: Sequence[int], strict: bool) -> int:
        """Member slots still missing in a domain: for one shape, the members beyond its
        capacity; for several, the per-shape shortfalls (or, ``strict``, the envelope's)."""
        if self.single or strict:
            return max(0, self.x - sums[self.main])
        return sum(max(0, c - sums[k]) for k, c in enumerate(self.counts))

    def sums(self, pods: Iterable[_Pod]) -> dict[int, list[int]]:
        """The domain sums with ``pods`` removed, for the domains they touch."""
        adds: dict[int, list[int]] = {}
        width = len(self.resources)
        for p in pods:
            if p.scope < 0:
                continue
            a = adds.get(p.node)
            if a is None:
                a = adds[p.node] = [0] * width
            for r, v in p.vec:
                a[r] += v
        out: dict[int, list[int]] = {}
        for i, a in adds.items():
            d = self.scope_of[i]
            s = out.get(d)
            if s is None:
                s = out[d] = list(self.base_sums[d])
            base = self.base[i]
            for k in self.kinds:
                s[k] += self.cap(k, i, a) - base[k]
        return out

class _Budget:
    def __init__(self, evaluations: int, placements: int) -> None:
        self.evaluations = evaluations
        self.placements = placements


class _OutOfBudget(Exception):
    pass


@dataclass
class _Candidate:
    """A victim set to settle, with its estimated objective."""

    pods: list[_Pod]
    estimate: tuple[object, ...]


class _Planner:
    """One call's search: the members, the candidates admitted so far, the arithmetic, and
    the placements already asked for (by victim set)."""

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], pool: _Candidates, mode: str,
                 required_level: str | None, preferred_level: str | None, near: Sequence[str],
                 model: _Model, depth: int) -> None:
        self.snapshot = snapshot
        self.members = members
        self.pool = pool
        self.gangs = pool.gangs
        self.atomic = mode == "atomic"
        self.required_level = required_level
        self.preferred_level = preferred_level
        self.near = near
        self.model = model
        self.depth = depth
        self.over_resources = sorted({r for p in members for r, v in p.requests.items() if v > 0 and r != PODS},
                                     key=overage_order)
        self._placed: dict[frozenset[str], PlacementResult] = {}
        #: node -> member slots it gains when every admitted candidate on it goes (sweep)
        self.gain: dict[int, int] = {}

    # --- placement and the objective ----------------------------------------------------
    def place(self, pods: Iterable[_Pod]) -> PlacementResult:
        keys = frozenset(p.key for p in pods)
        cached = self._placed.get(keys)
        if cached is None:
            with self.snapshot.without(sorted(keys)) as s:
                cached = place_gang(s, self.members, self.required_level, self.preferred_level, near=self.near)
            self._placed[keys] = cached
        return cached

    def _demand(self, placement: PlacementResult) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for a in placement.assignments:
            d = out.setdefault(self.snapshot.index[a.node], {})
            for r, v in a.requests.items():
                d[r] = d.get(r, 0) + v
        return out

    def overage(self, pods: Sequence[_Pod], placement: PlacementResult) -> tuple[tuple[str, int], ...]:
        """Objective (4) of victims ``pods`` and their ``placement`` (module docstring)."""
        demand = self._demand(placement)
        freed: dict[int, dict[str, int]] = {}
        for p in pods:
            f = freed.setdefault(p.node, {})
            for r in self.over_resources:
                f[r] = f.get(r, 0) + p.requests.get(r, 0)
        total = dict.fromkeys(self.over_resources, 0)
        for i, f in freed.items():
            free = self.snapshot.free(i)
            need = demand.get(i, {})
            for r, amount in f.items():
                used = min(max(need.get(r, 0) - free.get(r, 0), 0), amount)
                total[r] += amount - used
        return tuple(total.items())

    def key(self, pods: Sequence[_Pod], placement: PlacementResult) -> tuple[object, ...]:
        gangs = sorted({p.gang for p in pods})
        return (
            max((self.gangs[g].priority for g in gangs), default=0),
            len(gangs),
            len(pods),
            tuple(v for _, v in self.overage(pods, placement)),
            tuple(sorted(p.node for p in pods)),
            tuple(self.gangs[g].key for g in gangs),
        )

    def estimate(self, pods: Sequence[_Pod]) -> tuple[object, ...]:
        """The objective of ``pods`` before placing them, with a lower bound of the
        overage: on a node, the members can use at most the freed capacity that
        ``min(members that fit there, all members)`` of them need beyond what is free (one
        shape), or that all of them need (several); a node they cannot use, none. The
        bound is per resource, so it is below the true vector in the lexicographic order
        too: among victim sets equal in (1)-(3), the placements are tried least bound
        first until the bound passes the best overage found."""
        gangs = sorted({p.gang for p in pods})
        m = self.model
        width = len(m.resources)
        adds: dict[int, list[int]] = {}
        freed: dict[int, dict[str, int]] = {}
        for p in pods:
            f = freed.setdefault(p.node, {})
            for r in self.over_resources:
                f[r] = f.get(r, 0) + p.requests.get(r, 0)
            if p.relevant:
                a = adds.get(p.node)
                if a is None:
                    a = adds[p.node] = [0] * width
                for ri, v in p.vec:
                    a[ri] += v
        total = {r: sum(q.requests.get(r, 0) for q in self.members) for r in self.over_resources}
        shape = dict(self.members[0].requests) if m.single else None
        over = []
        for r in self.over_resources:
            ri = m.index[r]
            bound = 0
            for i, f in freed.items():
                a = adds.get(i)
                if a is None:
                    bound += f[r]
                    continue
                if shape is not None:
                    need = min(m.cap(m.main, i, a), m.x) * shape.get(r, 0)
                else:
                    need = total[r]
                bound += f[r] - min(max(need - m.free[ri][i], 0), f[r])
            over.append(bound)
        return (max((self.gangs[g].priority for g in gangs), default=0), len(gangs), len(pods), tuple(over),
                tuple(sorted(p.node for p in pods)), tuple(self.gangs[g].key for g in gangs))

    # --- settling: trimming against the placement --------------------------------------
    def _slack(self, pods: Sequence[_Pod], demand: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
        """Per node the placement uses: free + freed - demand, per requested resource."""
        out: dict[int, dict[str, int]] = {}
        for i, need in demand.items():
            free = self.snapshot.free(i)
            out[i] = {r: free.get(r, 0) - v for r, v in need.items()}
        for p in pods:
            s = out.get(p.node)
            if s is not None:
                for r in s:
                    s[r] += p.requests.get(r, 0)
        return out

    @staticmethod
    def _can_drop(drop: Iterable[_Pod], slack: dict[int, dict[str, int]]) -> bool:
        taken: dict[int, dict[str, int]] = {}
        for p in drop:
            s = slack.get(p.node)
            if s is None:
                continue
            t = taken.setdefault(p.node, {})
            for r in s:
                t[r] = t.get(r, 0) + p.requests.get(r, 0)
                if t[r] > s[r]:
                    return False
        return True

    def trim(self, pods: list[_Pod], placement: PlacementResult) -> list[_Pod]:
        """The victims ``placement`` needs: gangs whose pods it can do without are dropped
        (most at once, then most pods), then, in ``minimal`` mode, on each node the fewest
        pods that cover the deficit there (preferring gangs evicted elsewhere anyway)."""
        demand = self._demand(placement)
        slack = self._slack(pods, demand)
        by_gang: dict[int, list[_Pod]] = {}
        for p in pods:
            by_gang.setdefault(p.gang, []).append(p)
        order = sorted(by_gang, key=lambda g: (-len(by_gang[g]), self.gangs[g].key))
        dropped: list[int] = []
        if len(order) <= TRIM_GANGS:
            best: tuple[tuple[int, int, str], tuple[int, ...]] | None = None
            for size in range(len(order), 0, -1):
                for combo in combinations(order, size):
                    if self._can_drop((p for g in combo for p in by_gang[g]), slack):
                        k = (-size, -sum(len(by_gang[g]) for g in combo), ",".join(self.gangs[g].key for g in combo))
                        if best is None or k < best[0]:
                            best = (k, combo)
                if best is not None:
                    break
            dropped = list(best[1]) if best is not None else []
        else:
            for g in order:
                if self._can_drop((p for h in [*dropped, g] for p in by_gang[h]), slack):
                    dropped.append(g)
        gone = set(dropped)
        kept = [p for p in pods if p.gang not in gone]
        if self.atomic:
            return kept
        return self._trim_pods(kept, demand)

    def _trim_pods(self, pods: list[_Pod], demand: dict[int, dict[str, int]]) -> list[_Pod]:
        by_node: dict[int, list[_Pod]] = {}
        for p in pods:
            by_node.setdefault(p.node, []).append(p)
        nodes_of: dict[int, set[int]] = {}
        for p in pods:
            nodes_of.setdefault(p.gang, set()).add(p.node)
        keep: dict[int, list[_Pod]] = {}
        for i in sorted(by_node):
            need = demand.get(i)
            victims = by_node[i]
            if need is None:
                keep[i] = []
                for p in victims:
                    nodes_of[p.gang].discard(i)
                continue
            free = self.snapshot.free(i)
            deficit = {r: v - free.get(r, 0) for r, v in need.items() if v - free.get(r, 0) > 0}
            keep[i] = self._cover(victims, deficit, nodes_of, i) if deficit else []
            still = {p.gang for p in keep[i]}
            for p in victims:
                if p.gang not in still:
                    nodes_of[p.gang].discard(i)
        chosen = {id(p) for ps in keep.values() for p in ps}
        return [p for p in pods if id(p) in chosen]

    def _cover(self, victims: list[_Pod], deficit: dict[str, int], nodes_of: dict[int, set[int]],
               node: int) -> list[_Pod]:
        """The victims on one node that cover its deficit, least by (gangs with no victim
        on another node, pods, freed in overage order, position)."""
        victims = sorted(victims, key=lambda p: p.key)

        def covers(s: Sequence[_Pod]) -> bool:
            return all(sum(p.requests.get(r, 0) for p in s) >= v for r, v in deficit.items())

        def rank(s: Sequence[_Pod]) -> tuple[object, ...]:
            only_here = len({p.gang for p in s if nodes_of.get(p.gang, set()) <= {node}})
            freed = tuple(sum(p.requests.get(r, 0) for p in s) for r in self.over_resources)
            return (only_here, len(s), freed, tuple(p.key for p in s))

        if len(victims) <= TRIM_GANGS:
            best: tuple[tuple[object, ...], Sequence[_Pod]] | None = None
            for size in range(1, len(victims) + 1):
                for combo in combinations(victims, size):
                    if covers(combo):
                        k = rank(combo)
                        if best is None or k < best[0]:
                            best = (k, combo)
            return list(best[1]) if best is not None else victims
        primary = self.over_resources[0] if self.over_resources else PODS
        chosen = sorted(victims, key=lambda p: (-p.requests.get(primary, 0), p.key))
        for p in sorted(chosen, key=lambda p: (p.requests.get(primary, 0), p.key)):
            rest = [q for q in chosen if q is not p]
            if covers(rest):
                chosen = rest
        return chosen

    def settle(self, pods: list[_Pod], budget: _Budget) -> tuple[list[_Pod], PlacementResult] | None:
        """Place ``pods`` removed, trim them against the placement, place again, until
        nothing more can be dropped; None when the first placement fails."""
        placement = self._spend_place(pods, budget)
        if not placement.placed:
            return None
        while True:
            trimmed = self.trim(pods, placement)
            if len(trimmed) == len(pods):
                return pods, placement
            again = self._spend_place(trimmed, budget, force=True)
            if again.placed:
                pods, placement = trimmed, again
                continue
            # Several shapes: the engine's fill can miss a placement that exists. Drop
            # what it confirms, one pod at a time.
            for p in [p for p in pods if p not in trimmed]:
                rest = [q for q in pods if q is not p]
                again = self._spend_place(rest, budget, force=True)
                if again.placed:
                    pods, placement = rest, again
                    break
            else:
                return pods, placement

    def _spend_place(self, pods: Iterable[_Pod], budget: _Budget, force: bool = False) -> PlacementResult:
        pods = list(pods)
        if frozenset(p.key for p in pods) not in self._placed:
            if budget.placements <= 0 and not force:
                raise _OutOfBudget
            budget.placements -= 1
        return self.place(pods)

    # --- the search ---------------------------------------------------------------------
    def sweep(self) -> tuple[int, list[int]] | None:
        """Objective (1) and the scope domains where the members fit at that priority:
        candidates are removed lowest priority first until some domain holds the gang."""
        m = self.model
        width = len(m.resources)
        adds: dict[int, list[int]] = {}
        caps: dict[int, list[int]] = {}
        sums = {d: list(s) for d, s in m.base_sums.items()}
        removed: list[_Pod] = []
        confirmations = PLACEMENT_BUDGET
        for t in sorted(self.pool.levels):
            touched: set[int] = set()
            level = [p for g in self.pool.admit(t) for p in g.pods if p.relevant]
            for p in level:
                a = adds.get(p.node)
                if a is None:
                    a = adds[p.node] = [0] * width
                for r, v in p.vec:
                    a[r] += v
                touched.add(p.node)
            removed.extend(level)
            for i in touched:
                old = caps.get(i, m.base[i])
                new = [m.cap(k, i, adds[i]) for k in m.kinds]
                caps[i] = new
                s = sums[m.scope_of[i]]
                for k in m.kinds:
                    s[k] += new[k] - old[k]
            ready = sorted(d for d in sums if m.status(sums[d]) == _YES)
            maybe = sorted(d for d in sums if m.status(sums[d]) == _MAYBE)
            if ready or (maybe and confirmations > 0 and self.place(removed).placed):
                self.gain = {i: c[m.main] - m.base[i][m.main] for i, c in caps.items()}
                return t, ready + maybe
            confirmations -= bool(maybe)
        return None

    def potentials(self, d: int, gangs: Iterable[_Gang]) -> dict[int, int]:
        """Gang index -> the member slots its nodes in domain ``d`` gain when every
        admitted candidate on them goes: no set of gangs gains more than the sum of
        theirs (capacity only grows as pods go)."""
        return {g.index: sum(self.gain.get(i, 0) for i in {p.node for p in g.local[d]}) for g in gangs}

    def relevant(self, domains: Sequence[int]) -> dict[int, list[_Gang]]:
        """Per feasible domain, the admitted gangs with a pod a member could use there."""
        out: dict[int, list[_Gang]] = {d: [] for d in domains}
        for g in self.gangs:
            for d in g.local:
                if d in out:
                    out[d].append(g)
        return out

    def least_gangs(self, d: int, gangs: Sequence[_Gang]) -> int:
        """A lower bound of the gangs domain ``d`` needs evicted: the fewest whose
        potentials add up to its deficit, a gang's potential being the member slots its
        nodes there gain when every candidate on them goes (one shape; 1 for several)."""
        if not self.model.single:
            return 1
        need = self.model.deficit(self.model.base_sums[d], True)
        potentials = sorted(self.potentials(d, gangs).values(), reverse=True)
        total = 0
        for k, v in enumerate(potentials, 1):
            total += v
            if total >= need:
                return k
        return len(potentials) + 1

    def exact(self, t: int, relevant: dict[int, list[_Gang]], budget: _Budget, most: int | None) -> list[_Candidate]:
        """Every victim set tied at the least (gangs, pods) over the domains, with at most
        ``most`` gangs when given (module docstring); raises _OutOfBudget past
        :data:`EXACT_BUDGET` evaluations."""
        m = self.model
        best: tuple[int, int] | None = None
        found: list[list[_Pod]] = []

        def check(pods: Sequence[_Pod], d: int) -> bool:
            budget.evaluations -= 1
            if budget.evaluations < 0:
                raise _OutOfBudget
            st = m.status(m.sums(pods).get(d, m.base_sums[d]))
            if st == _MAYBE:
                return self._spend_place(pods, budget).placed
            return st == _YES

        top = max(len(r) for r in relevant.values())
        single = m.single
        needs = {d: m.deficit(m.base_sums[d], True) for d in relevant}
        potentials = {d: self.potentials(d, gangs) for d, gangs in relevant.items()}
        for k in range(1, (top if most is None else min(top, most)) + 1):
            for d, gangs in sorted(relevant.items()):
                need, potential = needs[d], potentials[d]
                for combo in combinations(gangs, k):
                    if max(g.priority for g in combo) != t:
                        continue
                    if single and sum(potential[g.index] for g in combo) < need:
                        continue  # cannot fit: the potentials bound the slots gained
                    local = [p for g in combo for p in g.local[d]]
                    if not check(local, d):
                        continue
                    if self.atomic:
                        pods = [p for g in combo for p in g.pods]
                        cand = [(len(pods), pods)]
                    else:
                        cand = self._least_pods(local, k, d, best[1] if best else None, budget, check)
                    for n, pods in cand:
                        if best is None or (k, n) < best:
                            best, found = (k, n), []
                        if (k, n) == best:
                            found.append(pods)
            if best is not None:
                break
        return [_Candidate(p, self.estimate(p)) for p in found]

    @staticmethod
    def _least_pods(local: list[_Pod], k: int, d: int, bound: int | None, budget: _Budget,
                    check: Callable[[Sequence[_Pod], int], bool]) -> list[tuple[int, list[_Pod]]]:
        """In ``minimal`` mode: the fewest of a gang set's pods in domain ``d`` that still
        let the members fit, each of the ``k`` gangs contributing (else fewer gangs would
        do); every tied set."""
        out: list[tuple[int, list[_Pod]]] = []
        for n in range(k, len(local) + 1):
            if bound is not None and n > bound:
                break
            for combo in combinations(local, n):
                budget.evaluations -= 1
                if budget.evaluations < 0:
                    raise _OutOfBudget
                if len({p.gang for p in combo}) != k:
                    continue
                if check(combo, d):
                    out.append((n, list(combo)))
            if out:
                break
        return out

    def greedy(self, relevant: dict[int, list[_Gang]], bounds: Mapping[int, int], strict: bool) -> list[_Candidate]:
        """Candidates from the feasible domains (module docstring, "greedy"), visited by
        their lower bound of gangs (``bounds``), at most :data:`GREEDY_DOMAINS`; a domain
        whose bound exceeds the gangs of the best candidate so far is skipped."""
        out = []
        fewest = math.inf
        for d in sorted(relevant, key=lambda d: (bounds[d], d))[:GREEDY_DOMAINS]:
            if bounds[d] > fewest:
                break
            for chosen in _Greedy(self, d, relevant[d], strict).run():
                pods = self._reverse(d, chosen, strict)
                out.append(_Candidate(pods, self.estimate(pods)))
                fewest = min(fewest, len({p.gang for p in pods}))
        return out

    def _victims(self, d: int, gangs: Iterable[_Gang]) -> list[_Pod]:
        if self.atomic:
            return [p for g in gangs for p in g.pods]
        return [p for g in gangs for p in g.local[d]]

    def _ok(self, d: int, pods: Sequence[_Pod], strict: bool) -> bool:
        st = self.model.status(self.model.sums(pods).get(d, self.model.base_sums[d]))
        return st == _YES or (st == _MAYBE and not strict)

    def _reverse(self, d: int, chosen: list[_Gang], strict: bool) -> list[_Pod]:
        """The fewest of the ``chosen`` gangs the arithmetic says suffice (then fewest
        pods, least freed): every subset by increasing size (:data:`REVERSE_GANGS`,
        :data:`REVERSE_BUDGET`), else dropping the gangs that free least first; then, in
        ``minimal`` mode, their pods, smallest first."""
        m = self.model
        main = m.q[m.main][0][0] if m.q[m.main] else -1

        def freed(gs: Sequence[_Gang]) -> int:
            return sum(v for g in gs for p in g.local[d] for r, v in p.vec if r == main)

        kept: list[_Gang] | None = None
        left = REVERSE_BUDGET
        need = m.deficit(m.base_sums[d], True)
        potential = self.potentials(d, chosen)
        least = self.least_gangs(d, chosen) if m.single else 1
        if len(chosen) > REVERSE_GANGS:
            left = -1
        for size in range(least, len(chosen) if left >= 0 else 0):
            best: tuple[tuple[object, ...], list[_Gang]] | None = None
            for combo in combinations(chosen, size):
                left -= 1
                if left < 0:
                    break
                if m.single and sum(potential[g.index] for g in combo) < need:
                    continue
                pods = self._victims(d, combo)
                if self._ok(d, pods, strict):
                    k = (len(pods), freed(combo), tuple(g.key for g in combo))
                    if best is None or k < best[0]:
                        best = (k, list(combo))
            if left < 0:
                break
            if best is not None:
                kept = best[1]
                break
        if kept is None and left >= 0:
            kept = list(chosen)
        if kept is None:
            kept = list(chosen)
            for g in sorted(chosen, key=lambda g: (freed([g]), -len(g.local[d]), g.key)):
                rest = [h for h in kept if h is not g]
                if rest and self._ok(d, self._victims(d, rest), strict):
                    kept = rest
        pods = self._victims(d, kept)
        if self.atomic:
            return pods
        return self._drop_pods(d, pods, strict, main)

    def _drop_pods(self, d: int, pods: list[_Pod], strict: bool, main: int) -> list[_Pod]:
        """Drop pods, smallest first, while the arithmetic says the rest suffice; each
        try recomputes only the pod's node."""
        m = self.model
        width = len(m.resources)
        adds: dict[int, list[int]] = {}
        for p in pods:
            a = adds.setdefault(p.node, [0] * width)
            for r, v in p.vec:
                a[r] += v
        caps = {i: [m.cap(k, i, a) for k in m.kinds] for i, a in adds.items()}
        sums = list(m.base_sums[d])
        for i, c in caps.items():
            for k in m.kinds:
                sums[k] += c[k] - m.base[i][k]
        gone: set[int] = set()
        for p in sorted(pods, key=lambda p: (sum(v for r, v in p.vec if r == main), -p.node, p.key)):
            if len(gone) == len(pods) - 1:
                break
            a = list(adds[p.node])
            for r, v in p.vec:
                a[r] -= v
            new = [m.cap(k, p.node, a) for k in m.kinds]
            after = [sums[k] + new[k] - caps[p.node][k] for k in m.kinds]
            st = m.status(after)
            if st == _YES or (st == _MAYBE and not strict):
                adds[p.node], caps[p.node], sums = a, new, after
                gone.add(id(p))
        return [p for p in pods if id(p) not in gone]


class _Greedy:
    """Greedy gang choice in one scope domain (module docstring)."""

    def __init__(self, planner: _Planner, d: int, gangs: list[_Gang], strict: bool) -> None:
        self.p = planner
        self.m = planner.model
        self.d = d
        self.strict = strict
        self.gangs = gangs
        self.adds: dict[int, list[int]] = {}
        self.caps: dict[int, list[int]] = {}
        self.sums = list(self.m.base_sums[d])
        # moves: one gang, or every candidate gang with a pod on one node
        moves: dict[tuple[int, ...], None] = {(g.index,): None for g in gangs}
        on_node: dict[int, set[int]] = {}
        for g in gangs:
            for pod in g.local[d]:
                on_node.setdefault(pod.node, set()).add(g.index)
        for i in sorted(on_node):
            if len(on_node[i]) > 1:
                moves[tuple(sorted(on_node[i]))] = None
        self.moves = list(moves)
        self.by_index = {g.index: g for g in gangs}
        self.touching: dict[int, list[int]] = {}
        for j, move in enumerate(self.moves):
            for i in {pod.node for g in move for pod in self.by_index[g].local[d]}:
                self.touching.setdefault(i, []).append(j)
        self.cache: dict[int, tuple[list[int], int, tuple[int, ...], int]] = {}

    def _cap(self, i: int) -> list[int]:
        c = self.caps.get(i)
        return c if c is not None else self.m.base[i]

    def _gain(self, live: Sequence[int]) -> tuple[list[int], int, tuple[int, ...], int]:
        """(sum deltas per kind, pods evicted, freed per model resource, first node)."""
        m = self.m
        width = len(m.resources)
        extra: dict[int, list[int]] = {}
        freed = [0] * width
        count = 0
        for g in live:
            gang = self.by_index[g]
            for pod in gang.local[self.d]:
                a = extra.get(pod.node)
                if a is None:
                    base = self.adds.get(pod.node)
                    a = extra[pod.node] = list(base) if base is not None else [0] * width
                for r, v in pod.vec:
                    a[r] += v
                    freed[r] += v
            count += len(gang.pods) if self.p.atomic else len(gang.local[self.d])
        delta = [0] * len(m.base_sums[self.d])
        for i, a in extra.items():
            old = self._cap(i)
            for k in m.kinds:
                delta[k] += m.cap(k, i, a) - old[k]
        return delta, count, tuple(freed), min(extra) if extra else -1

    def run(self) -> list[list[_Gang]]:
        """The gangs chosen, and up to :data:`ALTERNATIVES` - 1 variants whose last pick
        is another completing move; empty when the domain cannot hold the gang."""
        m = self.m
        chosen: list[int] = []
        taken: set[int] = set()
        while True:
            need = m.deficit(self.sums, self.strict)
            if need == 0:
                return [[self.by_index[g] for g in chosen]]
            completing: list[tuple[tuple[object, ...], tuple[int, ...]]] = []
            best_r: tuple[tuple[object, ...], tuple[int, ...]] | None = None
            for j, move in enumerate(self.moves):
                live = tuple(g for g in move if g not in taken)
                if not live:
                    continue
                cached = self.cache.get(j)
                if cached is None:
                    cached = self.cache[j] = self._gain(live)
                delta, count, freed, first = cached
                after = [s + v for s, v in zip(self.sums, delta, strict=True)]
                gain = need - m.deficit(after, self.strict)
                if gain <= 0:
                    continue
                keys = tuple(self.by_index[g].key for g in live)
                if gain >= need:
                    completing.append(((len(live), count, freed, first, keys), live))
                # most gain per gang, then fewest pods per gang: compare as fractions
                kr = (-gain / len(live), count / len(live), first, keys)
                if best_r is None or kr < best_r[0]:
                    best_r = (kr, live)
            if best_r is None:
                return []
            pick = best_r[1]
            if completing:
                completing.sort()
                rate = -float(best_r[0][0])  # type: ignore[arg-type]
                if len(completing[0][1]) <= math.ceil(need / rate - 1e-9):
                    base = [self.by_index[g] for g in chosen]
                    return [base + [self.by_index[g] for g in live] for _, live in completing[:ALTERNATIVES]]
            self._apply(pick)
            chosen.extend(pick)
            taken.update(pick)

    def _apply(self, live: Sequence[int]) -> None:
        m = self.m
        width = len(m.resources)
        touched: set[int] = set()
        for g in live:
            for pod in self.by_index[g].local[self.d]:
                a = self.adds.get(pod.node)
                if a is None:
                    a = self.adds[pod.node] = [0] * width
                for r, v in pod.vec:
                    a[r] += v
                touched.add(pod.node)
        for i in touched:
            old = self._cap(i)
            new = [m.cap(k, i, self.adds[i]) for k in m.kinds]
            self.caps[i] = new
            for k in m.kinds:
                self.sums[k] += new[k] - old[k]
            for j in self.touching.get(i, ()):
                self.cache.pop(j, None)


def _exact_work(relevant: Mapping[int, Sequence[_Gang]], most: int | None) -> int:
    """Gang sets the exact search enumerates at most: in each domain, those of up to
    ``most`` gangs (the greedy's: no better plan has more), or all of them."""
    return sum(math.comb(len(r), k) for r in relevant.values()
               for k in range(1, len(r) + 1 if most is None else min(most, len(r)) + 1))


def _scope(snapshot: Snapshot, required_level: str | None, near: Sequence[str]) -> tuple[int, set[int]] | None:
    """The depth whose domains must each hold the whole gang (the required level's, else
    the cluster's) and the domains allowed there (those holding a ``near`` node, as
    :func:`place_gang` allows them); None for an unknown level."""
    depth = 0
    if required_level is not None:
        found = snapshot.levels.depth_of(required_level)
        if found is None:
            return None
        depth = found
    if near:
        owner = snapshot.tree.domain_of[depth]
        return depth, {owner[snapshot.index[n]] for n in near if n in snapshot.index}
    return depth, set(range(snapshot.tree.size(depth)))


class _Candidates:
    """The candidate gangs the planner may use, by priority; a level's gangs are turned
    into :class:`_Gang` values (sorted by key, their pods on nodes sorted by node) only
    when the sweep reaches it, so gangs above objective (1) cost almost nothing."""

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], candidates: Sequence[VictimGang],
                 gang: str, model: _Model) -> None:
        self.snapshot = snapshot
        self.model = model
        self.member_keys = {p.key for p in members}
        ceiling = max(p.priority for p in members)
        seen: set[str] = set()
        self.levels: dict[int, list[VictimGang]] = {}
        for c in candidates:
            if c.key in seen:
                raise ValueError(f"candidate gang {c.key!r} given twice")
            seen.add(c.key)
            priority = c.priority
            for pod in c.pods:
                if pod.priority > priority:
                    priority = pod.priority
            if priority < ceiling and c.key != gang:
                self.levels.setdefault(priority, []).append(c)
        self.gangs: list[_Gang] = []
        self._owner: dict[str, str] = {}
        self._vecs: dict[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]] = {}

    def admit(self, priority: int) -> list[_Gang]:
        """The gangs of one priority level, now part of :attr:`gangs`. Raises
        ``ValueError`` for a pod that is in two candidate gangs."""
        model, owner, vecs = self.model, self._owner, self._vecs
        index, scope_of, usable = model.index, model.scope_of, model.usable
        node_of = self.snapshot.node_index_of
        out = []
        for c in sorted(self.levels.get(priority, ()), key=lambda c: c.key):
            g = _Gang(c.key, priority, len(self.gangs))
            for pod in c.pods:
                key = pod.key
                if key in owner:
                    raise ValueError(f"pod {key!r} is in candidate gangs {owner[key]!r} and {c.key!r}")
                owner[key] = c.key
                i = node_of(key)
                if i is None or pod.terminal or key in self.member_keys:
                    continue
                items = tuple(pod.requests.items())
                vec = vecs.get(items)
                if vec is None:
                    vec = vecs[items] = tuple((index[r], v) for r, v in items if v > 0 and r in index)
                g.pods.append(_Pod(key, g.index, i, pod.requests, vec, scope_of[i], usable[i]))
            if g.pods:
                g.pods.sort(key=_pod_order)
                for gp in g.pods:
                    if gp.relevant:
                        g.local.setdefault(gp.scope, []).append(gp)
                self.gangs.append(g)
                out.append(g)
        return out


_pod_order = attrgetter("node", "key")


def plan_preemption(
    snapshot: Snapshot,
    members: Sequence[PodInfo],
    candidates: Sequence[VictimGang],
    mode: str,
    required_level: str | None = None,
    preferred_level: str | None = None,
    *,
    near: Sequence[str] = (),
    gang: str = "",
    exact: bool = True,
) -> PreemptionPlan | None:
    """The victims that let ``members`` be placed, least by the module docstring's
    objective, and the placement; None when no set of candidates makes the gang
    placeable, or ``mode`` is ``off``.

    ``members``: the preemptor gang's unplaced pods, as :func:`place_gang` takes them
    (their highest ``spec.priority`` is the preemptor's); ``required_level``,
    ``preferred_level`` and ``near`` as for :func:`place_gang`. ``candidates``: gangs of
    lower priority (:class:`VictimGang`); ``gang``: the preemptor's own gang key, never a
    victim. ``mode``: ``off``, ``minimal`` or ``atomic`` (``gangPreemptionMode``).
    ``exact=False`` skips the exact search (benchmarks compare the two). A gang that fits
    without evicting anything gets a plan with no victims. ``snapshot`` is left as it
    was (candidate victims are removed from it in place and restored, as
    :meth:`Snapshot.without` does: do not share it with another thread during the call).
    Deterministic: the same input in any candidate order gives the same plan.

    Raises ``ValueError`` naming the value for an unknown mode, a candidate gang given
    twice, or a pod in two candidate gangs.
    """
    if mode not in PREEMPTION_MODES:
        raise ValueError(f"gangPreemptionMode: expected one of {', '.join(PREEMPTION_MODES)}, got {mode!r}")
    if mode == "off":
        return None
    planner = _planner(snapshot, members, candidates, mode, required_level, preferred_level, near, gang)
    if planner is None:
        return None
    model = planner.model
    budget = _Budget(EXACT_BUDGET, PLACEMENT_BUDGET)

    base_status = max((model.status(s) for s in model.base_sums.values()), default=_NO)
    if base_status != _NO:
        placement = planner.place([])
        if placement.placed:
            return _plan(planner, [], placement, "exact")
    found = planner.sweep()
    if found is None:
        return None
    t, feasible = found
    relevant = planner.relevant(feasible)
    bounds = {d: planner.least_gangs(d, r) for d, r in relevant.items()}
    proposals = planner.greedy(relevant, bounds, strict=False)
    proposals.sort(key=lambda c: c.estimate)
    proposals = proposals[:GREEDY_SETTLED]
    method = "greedy"
    # The greedy's best plan bounds the gangs of a better one (a plan evicting nothing is
    # one the arithmetic could not confirm: no bound then).
    most: int | None = len({p.gang for p in proposals[0].pods}) if proposals else 0
    if most:
        relevant = {d: r for d, r in relevant.items() if bounds[d] <= most}
    else:
        most = None
    if exact and relevant and _exact_work(relevant, most) <= EXACT_BUDGET and (
            planner.atomic or sum(len(g.local[d]) for d, r in relevant.items() for g in r) <= EXACT_PODS):
        try:
            ties = planner.exact(t, relevant, budget, most)
        except _OutOfBudget:
            budget.placements = PLACEMENT_BUDGET
        else:
            if ties:
                # Equal in (1)-(3): best-first by the overage's lower bound (estimate).
                ties.sort(key=lambda c: c.estimate)
                proposals = ties[:PLACEMENT_BUDGET]
                method = "exact"
    best: tuple[tuple[object, ...], list[_Pod], PlacementResult] | None = None
    for cand in proposals:
        if best is not None and cand.estimate >= best[0]:
            break
        try:
            settled = planner.settle(cand.pods, budget)
        except _OutOfBudget:
            break
        if settled is None:
            continue
        pods, placement = settled
        k = planner.key(pods, placement)
        if best is None or k < best[0]:
            best = (k, pods, placement)
    if best is None:
        # Several shapes whose fill failed on every candidate: aim at the envelope, then
        # at everything the sweep removed in a feasible domain.
        budget = _Budget(0, PLACEMENT_BUDGET)
        fallback = planner.greedy(relevant, dict.fromkeys(relevant, 1), strict=True)
        fallback += [_Candidate(planner._victims(d, r), ()) for d, r in sorted(relevant.items())]
        for cand in fallback:
            settled = planner.settle(cand.pods, budget)
            if settled is not None:
                best = (planner.key(*settled), *settled)
                break
        method = "greedy"
    if best is None:
        return None
    return _plan(planner, best[1], best[2], method)


def _planner(snapshot: Snapshot, members: Sequence[PodInfo], candidates: Sequence[VictimGang], mode: str,
             required_level: str | None, preferred_level: str | None, near: Sequence[str],
             gang: str) -> _Planner | None:
    """The search's state for one call; None when no domain is allowed (an unknown level,
    ``near`` nodes none of which exist) or there are no members."""
    members = list(members)
    if not members:
        return None
    scope = _scope(snapshot, required_level, near)
    if scope is None or not scope[1]:
        return None
    depth, domains = scope
    model = _Model(snapshot, members, depth, domains)
    pool = _Candidates(snapshot, members, candidates, gang, model)
    return _Planner(snapshot, members, pool, mode, required_level, preferred_level, near, model, depth)


def _amount(resource: str, units: int) -> str:
    """``units`` of ``resource`` as a person reads them: millicores as ``400m cpu``, bytes as
    ``2Gi memory``, anything else as a count (``4 nvidia.com/gpu``)."""
    if resource == "cpu":
        return f"{units // 1000} cpu" if units % 1000 == 0 else f"{units}m cpu"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if units >= size and units % size == 0:
                return f"{units // size}{suffix} {resource}"
        return f"{units} bytes of {resource}"
    return f"{units} {resource}"


def _plan(planner: _Planner, pods: Sequence[_Pod], placement: PlacementResult, method: str) -> PreemptionPlan:
    snapshot = planner.snapshot
    gang_keys = sorted({planner.gangs[p.gang].key for p in pods})
    top = max((planner.gangs[p.gang].priority for p in pods), default=0)
    over = planner.overage(pods, placement) if pods else tuple((r, 0) for r in planner.over_resources)
    x = len(placement.assignments)
    where = str(placement.domain) if placement.domain is not None else "cluster"
    members = _plural(x, "member")
    if not pods:
        reason = f"fits without evicting anything: placed {members} in {where}"
    else:
        reason = (f"evict {_plural(len(gang_keys), 'gang')} ({_plural(len(pods), 'pod')}, priority <= {top}: "
                  f"{', '.join(gang_keys)}) to place {members} in {where}")
        extra = [_amount(r, v) for r, v in over if v]
        if extra:
            reason += f", freeing {', '.join(extra)} beyond the need"
    return PreemptionPlan(
        victims=tuple(sorted(p.key for p in pods)),
        gangs=tuple(gang_keys),
        placement=placement,
        max_priority=top,
        pods=len(pods),
        overage=over,
        method=method,
        reason=reason,
        nodes={p.key: snapshot.nodes[p.node].name for p in sorted(pods, key=lambda p: p.key)},
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
