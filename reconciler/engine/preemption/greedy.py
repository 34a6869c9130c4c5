"""The greedy preemption search (package docstring, "greedy").

In the feasible domains, least lower bound of gangs first (at most
:data:`GREEDY_DOMAINS`, skipping domains whose bound exceeds the best found), evict the
*move* (one gang, or every remaining candidate gang of one node) with the most member
slots gained per gang, unless a move that completes the need costs no more gangs than
the rest would: then the completing move with the fewest pods and least freed (the
Volcano proposal's "least overage"), keeping the next :data:`ALTERNATIVES` - 1 as other
plans. A reverse pass then keeps the fewest of the chosen gangs that suffice and, in
``minimal`` mode, drops their pods that are not needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from itertools import combinations

from reconciler.engine.preemption.candidates import SearchGang
from reconciler.engine.preemption.capacity import SearchPod, Target, freed_by_node
from reconciler.engine.preemption.search import Budget, OutOfBudget, Proposal, Search, least_subsets

#: The reverse pass tries every subset of the greedy's gangs when they are at most this
#: many, evaluating at most :data:`REVERSE_BUDGET` of them; else it drops them in order.
REVERSE_GANGS = 10
REVERSE_BUDGET = 200
#: Completing moves the greedy keeps as alternative last picks (each its own plan).
ALTERNATIVES = 4
#: Domains the greedy searches at most, least lower bound of gangs first.
GREEDY_DOMAINS = 6

#: A move's effect: (change of the domain's sums per kind, pods evicted, freed per model
#: resource, its first node)
Effect = tuple[list[int], int, tuple[int, ...], int]


def greedy(search: Search, relevant: Mapping[int, list[SearchGang]], bounds: Mapping[int, int],
           target: Target) -> list[Proposal]:
    """Proposals from the feasible domains (``relevant``: domain -> its gangs), visited by
    their lower bound of gangs (``bounds``), at most :data:`GREEDY_DOMAINS`; a domain
    whose bound exceeds the gangs of the best proposal so far is skipped."""
    out = []
    fewest = math.inf
    for domain in sorted(relevant, key=lambda domain: (bounds[domain], domain))[:GREEDY_DOMAINS]:
        if bounds[domain] > fewest:
            break
        for chosen in DomainGreedy(search, domain, relevant[domain], target).run():
            pods = reverse(search, domain, chosen, target)
            out.append(search.propose(pods))
            fewest = min(fewest, len({pod.gang for pod in pods}))
    return out


def _primary(search: Search) -> int:
    """The model index of the first resource the members (their envelope) request; -1:
    none."""
    requests = search.model.kind_requests[search.model.main_kind]
    return requests[0][0] if requests else -1


def _fewest_gangs(search: Search, domain: int, chosen: list[SearchGang], target: Target,
                  primary: int) -> list[SearchGang] | None:
    """The fewest of ``chosen`` that suffice, then fewest pods, least freed of the
    primary resource, gang keys; every subset by increasing size, short of the whole.
    None when ``chosen`` are more than :data:`REVERSE_GANGS` or past
    :data:`REVERSE_BUDGET` subsets."""
    if len(chosen) > REVERSE_GANGS:
        return None
    model = search.model
    need = search.need(domain)
    potential = search.potentials(domain, chosen)
    budget = Budget(REVERSE_BUDGET, 0)

    def rank(combo: tuple[SearchGang, ...], _: object) -> tuple[tuple[object, ...], list[SearchGang]] | None:
        budget.evaluate()
        if model.single and sum(potential[gang.index] for gang in combo) < need:
            return None
        pods = search.victims(domain, combo)
        if not search.enough(domain, pods, target):
            return None
        return (len(pods), _freed(domain, combo, primary), tuple(gang.key for gang in combo)), list(combo)

    try:
        found = least_subsets(range(search.least_gangs(domain, chosen), len(chosen)),
                              partial(combinations, chosen), rank)
    except OutOfBudget:
        return None
    return found[1][0] if found is not None else list(chosen)


def _freed(domain: int, gangs: Sequence[SearchGang], primary: int) -> int:
    """What ``gangs`` free of the ``primary`` resource in ``domain`` (model units)."""
    return sum(_primary_of(pod, primary) for gang in gangs for pod in gang.local[domain])


def _primary_of(pod: SearchPod, primary: int) -> int:
    return sum(amount for resource, amount in pod.vector if resource == primary)


def reverse(search: Search, domain: int, chosen: list[SearchGang], target: Target) -> list[SearchPod]:
    """The fewest of the ``chosen`` gangs the arithmetic says suffice (then fewest pods,
    least freed): every subset by increasing size (:data:`REVERSE_GANGS`,
    :data:`REVERSE_BUDGET`), else dropping the gangs that free least first; then, in
    ``minimal`` mode, their pods, smallest first."""
    primary = _primary(search)
    kept = _fewest_gangs(search, domain, chosen, target, primary)
    if kept is None:
        kept = list(chosen)
        least_first = sorted(chosen, key=lambda candidate: (_freed(domain, [candidate], primary),
                                                            -len(candidate.local[domain]), candidate.key))
        for gang in least_first:
            rest = [other for other in kept if other is not gang]
            if rest and search.enough(domain, search.victims(domain, rest), target):
                kept = rest
    pods = search.victims(domain, kept)
    if search.atomic:
        return pods
    return drop_pods(search, domain, pods, target, primary)


def drop_pods(search: Search, domain: int, pods: list[SearchPod], target: Target, primary: int) -> list[SearchPod]:
    """Drop pods, smallest (in the ``primary`` resource) first, while the arithmetic
    says the rest suffice; each try recounts only the pod's node."""
    model = search.model
    added = freed_by_node(pods, model.width)
    caps: dict[int, list[int]] = {}
    sums = list(model.base_sums[domain])
    for node, vector in added.items():
        model.recount(node, vector, caps, sums)
    gone: set[int] = set()
    for pod in sorted(pods, key=lambda pod: (_primary_of(pod, primary), -pod.node, pod.key)):
        if len(gone) == len(pods) - 1:
            break
        without = list(added[pod.node])
        for resource, amount in pod.vector:
            without[resource] -= amount
        new = model.node_caps(pod.node, without)
        after = list(sums)
        model.shift(after, caps[pod.node], new)
        if model.enough(after, target):
            added[pod.node], caps[pod.node], sums = without, new, after
            gone.add(id(pod))
    return [pod for pod in pods if id(pod) not in gone]


class DomainGreedy:
    """Greedy gang choice in one scope domain (module docstring): the domain's sums as
    moves are applied, and each move's effect, recomputed only when a node it touches
    changed."""

    def __init__(self, search: Search, domain: int, gangs: list[SearchGang], target: Target) -> None:
        self.search = search
        self.model = search.model
        self.domain = domain
        self.target = target
        self.gangs = gangs
        self.added: dict[int, list[int]] = {}
        self.caps: dict[int, list[int]] = {}
        self.sums = list(self.model.base_sums[domain])
        # moves: one gang, or every candidate gang with a pod on one node
        moves: dict[tuple[int, ...], None] = {(gang.index,): None for gang in gangs}
        on_node: dict[int, set[int]] = {}
        for gang in gangs:
            for pod in gang.local[domain]:
                on_node.setdefault(pod.node, set()).add(gang.index)
        for node in sorted(on_node):
            if len(on_node[node]) > 1:
                moves[tuple(sorted(on_node[node]))] = None
        self.moves = list(moves)
        self.by_index = {gang.index: gang for gang in gangs}
        #: node -> the moves (by position) with a pod on it
        self.touching: dict[int, list[int]] = {}
        for position, move in enumerate(self.moves):
            for node in {pod.node for index in move for pod in self.by_index[index].local[domain]}:
                self.touching.setdefault(node, []).append(position)
        self.cache: dict[int, Effect] = {}

    def _pods(self, live: Sequence[int]) -> list[SearchPod]:
        return [pod for index in live for pod in self.by_index[index].local[self.domain]]

    def _effect(self, live: Sequence[int]) -> Effect:
        """What evicting the gangs ``live`` (indices) would do now."""
        model = self.model
        pods = self._pods(live)
        extra = freed_by_node(pods, model.width, start=self.added)
        freed = [0] * model.width
        for pod in pods:
            for resource, amount in pod.vector:
                freed[resource] += amount
        gangs = [self.by_index[index] for index in live]
        count = sum(len(gang.pods) if self.search.atomic else len(gang.local[self.domain]) for gang in gangs)
        delta = [0] * len(self.sums)
        for node, vector in extra.items():
            old = self.caps.get(node)
            model.shift(delta, old if old is not None else model.base_caps[node], model.node_caps(node, vector))
        return delta, count, tuple(freed), min(extra) if extra else -1

    def run(self) -> list[list[SearchGang]]:
        """The gangs chosen, and up to :data:`ALTERNATIVES` - 1 variants whose last pick
        is another completing move; empty when the domain cannot hold the gang."""
        model = self.model
        chosen: list[int] = []
        taken: set[int] = set()
        while True:
            need = model.deficit(self.sums, self.target)
            if need == 0:
                return [[self.by_index[index] for index in chosen]]
            completing: list[tuple[tuple[object, ...], tuple[int, ...]]] = []
            best: tuple[tuple[float, float, int, tuple[str, ...]], tuple[int, ...]] | None = None
            for position, move in enumerate(self.moves):
                live = tuple(index for index in move if index not in taken)
                if not live:
                    continue
                effect = self.cache.get(position)
                if effect is None:
                    effect = self.cache[position] = self._effect(live)
                delta, count, freed, first = effect
                after = [total + amount for total, amount in zip(self.sums, delta, strict=True)]
                gain = need - model.deficit(after, self.target)
                if gain <= 0:
                    continue
                keys = tuple(self.by_index[index].key for index in live)
                if gain >= need:
                    completing.append(((len(live), count, freed, first, keys), live))
                # most gain per gang, then fewest pods per gang: compare as fractions
                rank = (-gain / len(live), count / len(live), first, keys)
                if best is None or rank < best[0]:
                    best = (rank, live)
            if best is None:
                return []
            if completing:
                completing.sort()
                rate = -best[0][0]
                if len(completing[0][1]) <= math.ceil(need / rate - 1e-9):
                    base = [self.by_index[index] for index in chosen]
                    return [base + [self.by_index[index] for index in live] for _, live in completing[:ALTERNATIVES]]
            self._apply(best[1])
            chosen.extend(best[1])
            taken.update(best[1])

    def _apply(self, live: Sequence[int]) -> None:
        """Evict the gangs ``live``: recount their nodes and forget the effects of the
        moves that touch them."""
        pods = self._pods(live)
        freed_by_node(pods, self.model.width, into=self.added)
        for node in {pod.node for pod in pods}:
            self.model.recount(node, self.added[node], self.caps, self.sums)
            for position in self.touching.get(node, ()):
                self.cache.pop(position, None)
