"""The greedy search: moves of one gang or of every candidate gang on a node, most member
slots per gang first, a completing move when it costs no more gangs, then the reverse
pass."""

from __future__ import annotations

import pytest

from reconciler.engine.preemption import plan_preemption
from reconciler.engine.preemption.capacity import Target
from reconciler.engine.preemption.greedy import DomainGreedy, greedy, reverse
from reconciler.engine.preemption.plan import new_search
from reconciler.engine.preemption.search import Mode
from tests.support.preemption_cases import Running, candidates, cluster, preemptor
from troupe.contract import TopologyRequest


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_twelve_gangs_of_one_for_three_whole_nodes(mode: str) -> None:
    """Three nodes of four 2-GPU gangs of one each, and a fourth node's gangs at a higher
    (still lower than the preemptor's) priority: three 8-GPU members need the twelve
    lowest, the first three nodes whole."""
    running = [Running(f"p{n}{k}", [(f"n{n}", 2)], priority=1 if n == 4 else 0) for n in range(1, 5) for k in range(4)]
    snapshot = cluster(["n1", "n2", "n3", "n4"], running)
    plan = plan_preemption(snapshot, preemptor(3, 8), candidates(snapshot), mode)
    assert plan is not None
    assert (len(plan.gangs), plan.pods, plan.max_priority, plan.method) == (12, 12, 0, "greedy")
    assert {plan.nodes[v] for v in plan.victims} == {"n1", "n2", "n3"}


def test_a_move_frees_a_whole_node_and_the_reverse_pass_drops_what_is_not_needed() -> None:
    """n1: [A:4 B:4], n2: [C:8]; one 8-GPU member. One gang gains nothing on n1 but C
    completes the need alone: the greedy picks C, the reverse pass keeps it."""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4)]), Running("b", [("n1", 4)]),
                                      Running("c", [("n2", 8)])])
    search = new_search(snapshot, preemptor(1, 8), candidates(snapshot), Mode.MINIMAL, TopologyRequest(), (), "")
    assert search is not None
    found = search.sweep()
    assert found is not None
    relevant = search.relevant(found[1])
    [domain] = relevant
    runs = DomainGreedy(search, domain, relevant[domain], Target.EACH_SHAPE).run()
    assert [g.key for g in runs[0]] == ["batch/c"]
    kept = reverse(search, domain, list(search.gangs), Target.EACH_SHAPE)
    assert [p.key for p in kept] == ["batch/c-0"]
    proposals = greedy(search, relevant, {domain: 1}, Target.EACH_SHAPE)
    assert [p.key for p in proposals[0].pods] == ["batch/c-0"]


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_without_the_exact_search_the_greedy_gives_the_plan(mode: str) -> None:
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 8), ("n2", 8)]), Running("b", [("n2", 4)], priority=1)])
    plan = plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), mode, exact=False)
    assert plan is not None
    assert (plan.method, plan.gangs) == ("greedy", ("batch/a",))
    assert plan.pods == (1 if mode == "minimal" else 2)
