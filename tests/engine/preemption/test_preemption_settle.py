"""Settling: place a victim set, trim it against the placement (gangs, then per node the
fewest pods that cover the deficit), place again, until nothing more can be dropped."""

from __future__ import annotations

from reconciler.engine.placement.place import place_gang
from reconciler.engine.preemption.plan import new_search
from reconciler.engine.preemption.search import Budget, Mode
from reconciler.engine.preemption.settle import can_drop, cover, settle
from testbed.engine_builders import GPU
from tests.support.preemption_cases import Running, candidates, cluster, preemptor
from troupe.contract import TopologyRequest


def test_settling_drops_the_victims_the_placement_does_not_need() -> None:
    """The last step of every search, on a redundant victim set. n1: [A:4 B:4], n2: [A:4
    C:4]; one 4-GPU member. With all four pods gone it goes to n1. Gangs first: B and C
    together, or A and C, can go back (A and C: three pods kept out of the plan); on n1, B's
    pod covers the member. Placed again without B only, the member still goes to n1: done.
    (The searches themselves leave nothing to drop for members of one shape; this guards
    plans whose arithmetic was only a bound, for members of several shapes.)"""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4), ("n2", 4)]), Running("b", [("n1", 4)]),
                                      Running("c", [("n2", 4)])])
    search = new_search(snapshot, preemptor(1, 4), candidates(snapshot), Mode.MINIMAL, TopologyRequest(), (), "")
    assert search is not None
    assert search.sweep() is not None
    everything = [p for g in search.gangs for p in g.pods]
    settled = settle(search, everything, Budget(0, 4))
    assert settled is not None
    pods, placement = settled
    assert [p.key for p in pods] == ["batch/b-0"]
    assert placement.nodes() == {"ml/w-0": "n1"}
    with snapshot.without(["batch/b-0"]) as s:
        assert place_gang(s, preemptor(1, 4)) == placement


def test_cover_takes_the_fewest_pods_preferring_gangs_evicted_elsewhere() -> None:
    """n1: [A:4 B:4 C:2]; a deficit of 4 GPUs on n1: A's or B's pod covers it; A also has a
    victim on n2, so its pod costs no new gang here. C's alone does not cover it."""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4), ("n2", 4)]), Running("b", [("n1", 4)]),
                                      Running("c", [("n1", 2)])])
    search = new_search(snapshot, preemptor(1, 4), candidates(snapshot), Mode.MINIMAL, TopologyRequest(), (), "")
    assert search is not None
    assert search.sweep() is not None
    on_n1 = [p for g in search.gangs for p in g.pods if p.node == 0]
    index = {g.key: g.index for g in search.gangs}
    nodes_of = {index["batch/a"]: {0, 1}, index["batch/b"]: {0}, index["batch/c"]: {0}}
    assert [p.key for p in cover(search, on_n1, {GPU: 4}, nodes_of, 0)] == ["batch/a-0"]
    assert [p.key for p in cover(search, on_n1, {GPU: 6}, nodes_of, 0)] == ["batch/a-0", "batch/c-0"]
    assert can_drop(on_n1, {1: {GPU: 0}})
    assert not can_drop(on_n1, {0: {GPU: 4}})
