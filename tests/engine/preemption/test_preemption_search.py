"""The search's shared state: the subset enumeration, the budget, the sweep that finds
objective (1), the objective of a victim set and its estimate."""

from __future__ import annotations

from itertools import combinations

import pytest

from reconciler.engine.preemption.capacity import Target
from reconciler.engine.preemption.plan import new_search
from reconciler.engine.preemption.search import Budget, Mode, OutOfBudget, least_subsets
from tests.support.preemption_cases import Running, candidates, cluster, preemptor
from troupe.contract import TopologyRequest


def test_least_subsets_stops_at_the_first_size_and_keeps_every_tie_in_order() -> None:
    def subsets(size: int) -> list[tuple[int, ...]]:
        return list(combinations([1, 2, 3, 4], size))

    def by_sum(combo: tuple[int, ...], _: object) -> tuple[int, tuple[int, ...]] | None:
        return (0, combo) if sum(combo) >= 5 else None

    assert least_subsets(range(1, 5), subsets, by_sum) == (0, [(1, 4), (2, 3), (2, 4), (3, 4)])
    ranked = least_subsets(range(1, 5), subsets, lambda c, _: (-sum(c), c) if sum(c) >= 5 else None, every_size=True)
    assert ranked == (-10, [(1, 2, 3, 4)])
    assert least_subsets(range(1, 3), subsets, lambda c, _: None) is None


def test_the_budget_raises_past_its_last_evaluation() -> None:
    budget = Budget(1, 0)
    budget.evaluate()
    with pytest.raises(OutOfBudget):
        budget.evaluate()


def test_the_sweep_admits_the_lowest_priorities_until_the_gang_fits() -> None:
    """n1: [L:8] priority 1, n2: [M:8] priority 3, n3: [H:8] priority 5; two members of 8
    GPUs: L and M suffice, H is never admitted."""
    snapshot = cluster(["n1", "n2", "n3"], [Running("l", [("n1", 8)], priority=1), Running("m", [("n2", 8)], priority=3),
                                            Running("h", [("n3", 8)], priority=5)])
    search = new_search(snapshot, preemptor(2, 8), candidates(snapshot), Mode.ATOMIC, TopologyRequest(), (), "")
    assert search is not None
    assert search.sweep() == (3, [0])
    assert [g.key for g in search.gangs] == ["batch/l", "batch/m"]
    assert search.gain == {0: 1, 1: 1}
    assert search.least_gangs(0, search.gangs) == 2
    pods = [p for g in search.gangs for p in g.pods]
    placement = search.place(pods)
    assert placement.placed
    assert search.key(pods, placement)[:4] == (3, 2, 2, (0,))
    assert search.estimate(pods)[:4] == (3, 2, 2, (0,))
    assert search.victims(0, search.gangs) == pods
    assert search.enough(0, pods, Target.ENVELOPE)
    assert not search.enough(0, pods[:1], Target.ENVELOPE)
