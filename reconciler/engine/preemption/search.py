"""The state of one preemption search, shared by the greedy and exact searches and by
settling: the members and mode, the admitted candidates, the capacity model, the budget,
the placements already asked for, the objective of a victim set and its estimate, and the
sweep that finds objective (1) and the feasible domains.

Also :func:`least_subsets`, the one enumeration of subsets by size that the searches and
settling share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.resources import PODS
from reconciler.engine.placement.place import PlacementResult, place_gang
from reconciler.engine.preemption.candidates import CandidatePool, SearchGang
from reconciler.engine.preemption.capacity import (
    CapacityModel,
    Fit,
    SearchPod,
    Target,
    freed_by_node,
    overage_order,
)
from troupe.contract import TopologyRequest

if TYPE_CHECKING:
    from _typeshed import SupportsDunderLT

#: Calls of :func:`place_gang` spent on choosing among plans tied on (1)-(3), and on
#: confirming greedy plans, before settling the winner.
PLACEMENT_BUDGET = 32

Subset = TypeVar("Subset")
Rank = TypeVar("Rank", bound="SupportsDunderLT[Any]")
Found = TypeVar("Found")


class Mode(Enum):
    """``gangPreemptionMode`` once past the entry (``off`` never gets this far)."""

    #: Evict only the pods the plan needs.
    MINIMAL = "minimal"
    #: Evict every pod of each chosen gang, on every node.
    ATOMIC = "atomic"


def least_subsets(sizes: Iterable[int], subsets: Callable[[int], Iterable[Subset]],
                  rank: Callable[[Subset, Rank | None], tuple[Rank, Found] | None],
                  every_size: bool = False) -> tuple[Rank, list[Found]] | None:
    """The least rank over the subsets of each size in ``sizes`` (``subsets(size)``
    enumerates them), and what ``rank`` found for every subset tied at it, in the order
    enumerated; None when ``rank`` accepts none. ``rank(subset, least)`` gets the least
    rank so far (None: none yet) and returns None to refuse the subset. The search stops
    after the first size with an accepted subset unless ``every_size``."""
    least: Rank | None = None
    found: list[Found] = []
    for size in sizes:
        for subset in subsets(size):
            ranked = rank(subset, least)
            if ranked is None:
                continue
            key, what = ranked
            if least is None or key < least:
                least, found = key, [what]
            elif key == least:
                found.append(what)
        if least is not None and not every_size:
            break
    return None if least is None else (least, found)


class Budget:
    """What a search may still spend: ``evaluations`` of the arithmetic and
    ``placements`` (calls of :func:`place_gang`)."""

    def __init__(self, evaluations: int, placements: int) -> None:
        self.evaluations = evaluations
        self.placements = placements

    def evaluate(self) -> None:
        """Spend one evaluation; raises :class:`OutOfBudget` past the last."""
        self.evaluations -= 1
        if self.evaluations < 0:
            raise OutOfBudget


class OutOfBudget(Exception):
    """The budget is spent: the search gives way to the plans it has."""


@dataclass
class Proposal:
    """A victim set to settle, with its estimated objective (:meth:`Search.estimate`)."""

    pods: list[SearchPod]
    estimate: tuple[object, ...]


class Search:
    """One call's search: the members, the candidates admitted so far, the arithmetic, and
    the placements already asked for (by victim set)."""

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], pool: CandidatePool, mode: Mode,
                 request: TopologyRequest, near: Sequence[str], model: CapacityModel) -> None:
        self.snapshot = snapshot
        self.request = request
        self.members = members
        self.pool = pool
        self.gangs = pool.gangs
        self.atomic = mode is Mode.ATOMIC
        self.near = near
        self.model = model
        self.over_resources = sorted({resource for member in members for resource, amount in member.requests.items()
                                      if amount > 0 and resource != PODS},
                                     key=overage_order)
        self._placed: dict[frozenset[str], PlacementResult] = {}
        #: node -> member slots it gains when every admitted candidate on it goes (sweep)
        self.gain: dict[int, int] = {}

    # --- placement and the objective ----------------------------------------------------
    def place(self, pods: Iterable[SearchPod]) -> PlacementResult:
        """:func:`place_gang` on the snapshot without ``pods``, asked once per set."""
        keys = frozenset(pod.key for pod in pods)
        cached = self._placed.get(keys)
        if cached is None:
            with self.snapshot.without(sorted(keys)) as without:
                cached = place_gang(without, self.members, self.request, near=self.near)
            self._placed[keys] = cached
        return cached

    def spend_place(self, pods: Iterable[SearchPod], budget: Budget, force: bool = False) -> PlacementResult:
        """:meth:`place`, spending one of ``budget``'s placements on a set not placed yet;
        raises :class:`OutOfBudget` when none is left, unless ``force``."""
        pods = list(pods)
        if frozenset(pod.key for pod in pods) not in self._placed:
            if budget.placements <= 0 and not force:
                raise OutOfBudget
            budget.placements -= 1
        return self.place(pods)

    def demand(self, placement: PlacementResult) -> dict[int, dict[str, int]]:
        """Node index -> what the members ``placement`` puts there request (units)."""
        out: dict[int, dict[str, int]] = {}
        for assignment in placement.assignments:
            need = out.setdefault(self.snapshot.index[assignment.node], {})
            for resource, amount in assignment.requests.items():
                need[resource] = need.get(resource, 0) + amount
        return out

    def freed(self, pods: Iterable[SearchPod]) -> dict[int, dict[str, int]]:
        """Node index -> what ``pods`` request there of each overage resource."""
        out: dict[int, dict[str, int]] = {}
        for pod in pods:
            freed = out.setdefault(pod.node, {})
            for resource in self.over_resources:
                freed[resource] = freed.get(resource, 0) + pod.requests.get(resource, 0)
        return out

    def overage(self, pods: Sequence[SearchPod], placement: PlacementResult) -> tuple[tuple[str, int], ...]:
        """Objective (4) of victims ``pods`` and their ``placement`` (package docstring)."""
        demand = self.demand(placement)
        total = dict.fromkeys(self.over_resources, 0)
        for node, freed in self.freed(pods).items():
            free = self.snapshot.free(node)
            need = demand.get(node, {})
            for resource, amount in freed.items():
                used = min(max(need.get(resource, 0) - free.get(resource, 0), 0), amount)
                total[resource] += amount - used
        return tuple(total.items())

    def _ranked(self, pods: Sequence[SearchPod], overage: tuple[int, ...]) -> tuple[object, ...]:
        gangs = sorted({pod.gang for pod in pods})
        return (max((self.gangs[index].priority for index in gangs), default=0), len(gangs), len(pods), overage,
                tuple(sorted(pod.node for pod in pods)), tuple(self.gangs[index].key for index in gangs))

    def key(self, pods: Sequence[SearchPod], placement: PlacementResult) -> tuple[object, ...]:
        """The objective (1)-(4) of ``pods`` placed as ``placement``, then the tie-breaks
        (their nodes, their gang keys)."""
        return self._ranked(pods, tuple(amount for _, amount in self.overage(pods, placement)))

    def estimate(self, pods: Sequence[SearchPod]) -> tuple[object, ...]:
        """The objective of ``pods`` before placing them, with a lower bound of the
        overage: on a node, the members can use at most the freed capacity that
        ``min(members that fit there, all members)`` of them need beyond what is free (one
        shape), or that all of them need (several); a node they cannot use, none. The
        bound is per resource, so it is below the true vector in the lexicographic order
        too: among victim sets equal in (1)-(3), the placements are tried least bound
        first until the bound passes the best overage found."""
        model = self.model
        freed = self.freed(pods)
        added = freed_by_node((pod for pod in pods if pod.relevant), model.width)
        total = {resource: sum(member.requests.get(resource, 0) for member in self.members)
                 for resource in self.over_resources}
        shape = dict(self.members[0].requests) if model.single else None
        bounds = []
        for resource in self.over_resources:
            position = model.index[resource]
            bound = 0
            for node, amounts in freed.items():
                node_added = added.get(node)
                if node_added is None:
                    bound += amounts[resource]
                    continue
                if shape is not None:
                    fitting = min(model.cap(model.main_kind, node, node_added), model.member_count)
                    need = fitting * shape.get(resource, 0)
                else:
                    need = total[resource]
                bound += amounts[resource] - min(max(need - model.free[position][node], 0), amounts[resource])
            bounds.append(bound)
        return self._ranked(pods, tuple(bounds))

    def propose(self, pods: list[SearchPod]) -> Proposal:
        """``pods`` as a proposal, with its estimate."""
        return Proposal(pods, self.estimate(pods))

    # --- the victims of a gang set, and whether they are enough --------------------------
    def victims(self, domain: int, gangs: Iterable[SearchGang]) -> list[SearchPod]:
        """The pods of ``gangs`` to evict for scope ``domain``: every pod (``atomic``), or
        their relevant pods there."""
        if self.atomic:
            return [pod for gang in gangs for pod in gang.pods]
        return [pod for gang in gangs for pod in gang.local[domain]]

    def enough(self, domain: int, pods: Iterable[SearchPod], target: Target) -> bool:
        """Whether the arithmetic says ``pods`` evicted let the members into ``domain``."""
        return self.model.enough(self.model.domain_sums(pods, domain), target)

    # --- objective (1), the feasible domains and their bounds ---------------------------
    def sweep(self) -> tuple[int, list[int]] | None:
        """Objective (1) and the scope domains where the members fit at that priority:
        candidates are removed lowest priority first until some domain holds the gang."""
        model = self.model
        added: dict[int, list[int]] = {}
        caps: dict[int, list[int]] = {}
        sums = {domain: list(base) for domain, base in model.base_sums.items()}
        removed: list[SearchPod] = []
        confirmations = PLACEMENT_BUDGET
        for priority in sorted(self.pool.levels):
            level = [pod for gang in self.pool.admit(priority) for pod in gang.pods if pod.relevant]
            freed_by_node(level, model.width, into=added)
            removed.extend(level)
            for node in {pod.node for pod in level}:
                model.recount(node, added[node], caps, sums[model.scope_of[node]])
            fits = {domain: model.status(domain_sums) for domain, domain_sums in sums.items()}
            ready = sorted(domain for domain, fit in fits.items() if fit is Fit.YES)
            maybe = sorted(domain for domain, fit in fits.items() if fit is Fit.MAYBE)
            if ready or (maybe and confirmations > 0 and self.place(removed).placed):
                self.gain = {node: counts[model.main_kind] - model.base_caps[node][model.main_kind]
                             for node, counts in caps.items()}
                return priority, ready + maybe
            confirmations -= bool(maybe)
        return None

    def relevant(self, domains: Sequence[int]) -> dict[int, list[SearchGang]]:
        """Per feasible domain, the admitted gangs with a pod a member could use there."""
        out: dict[int, list[SearchGang]] = {domain: [] for domain in domains}
        for gang in self.gangs:
            for domain in gang.local:
                if domain in out:
                    out[domain].append(gang)
        return out

    def potentials(self, domain: int, gangs: Iterable[SearchGang]) -> dict[int, int]:
        """Gang index -> the member slots its nodes in ``domain`` gain when every admitted
        candidate on them goes: no set of gangs gains more than the sum of theirs
        (capacity only grows as pods go)."""
        return {gang.index: sum(self.gain.get(node, 0) for node in {pod.node for pod in gang.local[domain]})
                for gang in gangs}

    def need(self, domain: int) -> int:
        """Member slots ``domain`` lacks now, by the envelope."""
        return self.model.deficit(self.model.base_sums[domain], Target.ENVELOPE)

    def least_gangs(self, domain: int, gangs: Sequence[SearchGang]) -> int:
        """A lower bound of the gangs ``domain`` needs evicted: the fewest whose
        potentials add up to its deficit, a gang's potential being the member slots its
        nodes there gain when every candidate on them goes (one shape; 1 for several)."""
        if not self.model.single:
            return 1
        need = self.need(domain)
        potentials = sorted(self.potentials(domain, gangs).values(), reverse=True)
        total = 0
        for count, potential in enumerate(potentials, 1):
            total += potential
            if total >= need:
                return count
        return len(potentials) + 1
