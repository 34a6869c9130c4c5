"""The exact search: every gang set (then pod set) by increasing size, checked by the
capacity model and, where it is unsure, by the placement engine; and its size bound."""

from __future__ import annotations

import pytest

from reconciler.engine.placement.place import place_gang
from reconciler.engine.preemption import plan_preemption
from reconciler.engine.preemption.exact import exact, exact_work
from reconciler.engine.preemption.plan import new_search
from reconciler.engine.preemption.search import Budget, Mode, OutOfBudget
from testbed.engine_builders import GPU, make_pod
from tests.support.preemption_cases import Running, candidates, cluster, names, preemptor
from troupe.contract import TopologyRequest


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_members_of_two_shapes_the_engines_fill_cannot_place_without_help(mode: str) -> None:
    """n1 free, n2: [V:2], n3: [U:8]; members 6, 4, 4 GPUs in rank order. Each shape fits
    the free capacity, but the placement engine's rank-order fill puts the 6 on n1 and then
    finds room for one 4 only. Evicting V (2 GPUs) lets both 4s share n2: the exact search
    confirms it with the engine. Without the exact search the greedy's plan aims at the
    members' envelope (three nodes with 6 free): U, 4 GPUs beyond the need."""
    snapshot = cluster(["n1", "n2", "n3"], [Running("v", [("n2", 2)]), Running("u", [("n3", 8)])])
    members = [make_pod(f"w-{i}", "ml").requests(gpu=g).gang("train", 3).index(i).priority(9).gated().info()
               for i, g in enumerate([6, 4, 4])]
    assert not place_gang(snapshot, members).placed
    plan = plan_preemption(snapshot, members, candidates(snapshot), mode)
    assert plan is not None
    assert (names(plan), plan.method, plan.overage) == (["v-0"], "exact", ((GPU, 0),))
    assert plan.placement.nodes() == {"ml/w-0": "n1", "ml/w-1": "n2", "ml/w-2": "n2"}
    greedy = plan_preemption(snapshot, members, candidates(snapshot), mode, exact=False)
    assert greedy is not None
    assert (names(greedy), greedy.method, greedy.overage) == (["u-0"], "greedy", ((GPU, 4),))


def test_exact_work_counts_the_gang_sets_up_to_the_greedys_size() -> None:
    relevant = {0: ["a", "b", "c", "d"], 1: ["e"]}
    assert exact_work(relevant, None) == 15 + 1  # type: ignore[arg-type]
    assert exact_work(relevant, 2) == 4 + 6 + 1  # type: ignore[arg-type]


def test_every_set_tied_on_gangs_and_pods_and_the_budget() -> None:
    """n1: [A:4 B:4], n2: [C:4 D:4]; one 4-GPU member: any one gang's pod will do, so the
    four single-gang sets tie; with one evaluation the search gives way."""
    snapshot = cluster(["n1", "n2"], [Running(g, [(n, 4)]) for g, n in
                                      (("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", "n2"))])
    search = new_search(snapshot, preemptor(1, 4), candidates(snapshot), Mode.MINIMAL, TopologyRequest(), (), "")
    assert search is not None
    priority, feasible = search.sweep() or (None, [])
    assert priority == 0
    relevant = search.relevant(feasible)
    ties = exact(search, 0, relevant, Budget(100, 4), None)
    assert sorted(p.key for proposal in ties for p in proposal.pods) == [f"batch/{g}-0" for g in "abcd"]
    with pytest.raises(OutOfBudget):
        exact(search, 0, relevant, Budget(1, 4), None)
