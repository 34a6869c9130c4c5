"""The exact preemption search (package docstring, "exact"), run when it is small.

Gang sets by increasing size, in the feasible domains whose lower bound allows them, then
(``minimal``) their pod sets by increasing size, each checked by the capacity model (the
placement engine confirming where several shapes leave it unsure), give every victim set
tied at the least (gangs, pods) for objective (1). :func:`exact_work` says whether the
enumeration fits :data:`EXACT_BUDGET`; the caller checks :data:`EXACT_PODS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from itertools import combinations

from reconciler.engine.preemption.candidates import SearchGang
from reconciler.engine.preemption.capacity import Fit, SearchPod
from reconciler.engine.preemption.search import Budget, Proposal, Search, least_subsets

#: Exact search only when, in ``minimal`` mode, the relevant candidate pods are at most
#: this many (and the gang sets to enumerate at most :data:`EXACT_BUDGET`).
EXACT_PODS = 24
#: Subset evaluations (each a capacity computation over the subset's nodes) the exact
#: search may make: it runs only when the gang sets it would enumerate are at most this
#: many, and gives way to the greedy's plans if the pod sets (``minimal``) exceed it too.
EXACT_BUDGET = 4_000

Check = Callable[[Sequence[SearchPod], int], bool]


def exact_work(relevant: Mapping[int, Sequence[SearchGang]], most: int | None) -> int:
    """Gang sets the exact search enumerates at most: in each domain, those of up to
    ``most`` gangs (the greedy's: no better plan has more), or all of them."""
    return sum(math.comb(len(gangs), size) for gangs in relevant.values()
               for size in range(1, len(gangs) + 1 if most is None else min(most, len(gangs)) + 1))


def relevant_pods(relevant: Mapping[int, Sequence[SearchGang]]) -> int:
    """The candidate pods a member could use, over the domains of ``relevant``."""
    return sum(len(gang.local[domain]) for domain, gangs in relevant.items() for gang in gangs)


def exact(search: Search, priority: int, relevant: Mapping[int, list[SearchGang]], budget: Budget,
          most: int | None) -> list[Proposal]:
    """Every victim set tied at the least (gangs, pods) over the domains (``relevant``:
    domain -> its gangs), whose highest priority is ``priority`` (objective (1)), with at
    most ``most`` gangs when given; raises :class:`~.search.OutOfBudget` past
    ``budget``'s evaluations (or its placements, confirming an unsure fit)."""
    model = search.model

    def check(pods: Sequence[SearchPod], domain: int) -> bool:
        budget.evaluate()
        fit = model.status(model.domain_sums(pods, domain))
        if fit is Fit.MAYBE:
            return search.spend_place(pods, budget).placed
        return fit is Fit.YES

    needs = {domain: search.need(domain) for domain in relevant}
    potentials = {domain: search.potentials(domain, gangs) for domain, gangs in relevant.items()}

    def gang_sets(size: int) -> Iterator[tuple[int, tuple[SearchGang, ...]]]:
        for domain, gangs in sorted(relevant.items()):
            for combo in combinations(gangs, size):
                yield domain, combo

    def rank(subset: tuple[int, tuple[SearchGang, ...]],
             least: tuple[int, int] | None) -> tuple[tuple[int, int], list[list[SearchPod]]] | None:
        domain, combo = subset
        size = len(combo)
        if max(gang.priority for gang in combo) != priority:
            return None
        if model.single and sum(potentials[domain][gang.index] for gang in combo) < needs[domain]:
            return None  # cannot fit: the potentials bound the slots gained
        local = [pod for gang in combo for pod in gang.local[domain]]
        if not check(local, domain):
            return None
        if search.atomic:
            pods = [pod for gang in combo for pod in gang.pods]
            return (size, len(pods)), [pods]
        found = least_pods(local, size, domain, least[1] if least is not None else None, budget, check)
        if found is None:
            return None
        return (size, found[0]), found[1]

    top = max(len(gangs) for gangs in relevant.values())
    ties = least_subsets(range(1, (top if most is None else min(top, most)) + 1), gang_sets, rank)
    if ties is None:
        return []
    return [search.propose(pods) for group in ties[1] for pods in group]


def least_pods(local: list[SearchPod], gangs: int, domain: int, bound: int | None, budget: Budget,
               check: Check) -> tuple[int, list[list[SearchPod]]] | None:
    """In ``minimal`` mode: the fewest of a gang set's pods in ``domain`` (``local``; at
    most ``bound``) that still let the members fit, each of the set's ``gangs`` gangs
    contributing (else fewer gangs would do); their number and every tied set."""

    def rank(combo: tuple[SearchPod, ...], _: object) -> tuple[int, list[SearchPod]] | None:
        budget.evaluate()
        if len({pod.gang for pod in combo}) != gangs or not check(combo, domain):
            return None
        return len(combo), list(combo)

    largest = len(local) if bound is None else min(len(local), bound)
    return least_subsets(range(gangs, largest + 1), partial(combinations, local), rank)
