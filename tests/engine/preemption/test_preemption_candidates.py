"""Who may be a victim: the one victim rule, the candidate gangs of a snapshot (as the
caller builds them, and as the reconciler memoises them per snapshot), and the planner
holding the caller's candidates to the same rule."""

from __future__ import annotations

import pytest

from reconciler.engine.model.pods import PodInfo
from reconciler.engine.preemption import VictimGang, candidate_gangs, may_be_victim, plan_preemption
from reconciler.engine.preemption.candidates import candidates as gangs_for
from reconciler.engine.preemption.candidates import gang_of_pod, leaving, victim_gangs
from testbed.engine_builders import make_node, make_pod, snapshot_of
from tests.support.preemption_cases import Running, candidates, cluster, names, preemptor


def test_the_victim_rule_is_strictly_lower_priority_not_the_own_gang_not_refused() -> None:
    assert may_be_victim("batch/a", 5, "ml/train", 10)
    assert not may_be_victim("batch/a", 10, "ml/train", 10)
    assert not may_be_victim("batch/a", 11, "ml/train", 10)
    assert not may_be_victim("ml/train", 0, "ml/train", 10)
    assert not may_be_victim("batch/a", 0, "ml/train", 10, refused=frozenset({"batch/a"}))


def test_candidates_of_equal_or_higher_priority_and_the_own_gang_are_never_victims() -> None:
    """n1: [same:8] priority 100 (the preemptor's), n2: [own:8], n3: [high:8] priority 200.
    Nothing may be evicted: no plan."""
    snapshot = cluster(["n1", "n2", "n3"], [
        Running("same", [("n1", 8)], priority=100), Running("own", [("n2", 8)]),
        Running("high", [("n3", 8)], priority=200)])
    cands = candidates(snapshot)
    assert plan_preemption(snapshot, preemptor(1, 8), cands, "minimal", gang="batch/own") is None
    plan = plan_preemption(snapshot, preemptor(1, 8), cands, "minimal")
    assert plan is not None
    assert plan.gangs == ("batch/own",)


def test_pods_that_use_no_node_are_never_victims() -> None:
    """A candidate's pending pod and its finished pod use nothing: only its running pod on
    n1 is evicted, even in ``atomic`` mode."""
    snapshot = snapshot_of(
        [make_node("n1").allocatable(gpu=8)],
        [make_pod("a-0", "batch").requests(gpu=8).on("n1").label("gang", "a"),
         make_pod("a-1", "batch").requests(gpu=8).label("gang", "a"),
         make_pod("a-2", "batch").requests(gpu=8).on("n1", phase="Succeeded").label("gang", "a")])
    gang = VictimGang("batch/a", 0, tuple(snapshot.pods[f"batch/a-{i}"] for i in range(3)))
    plan = plan_preemption(snapshot, preemptor(1, 8), [gang], "atomic")
    assert plan is not None
    assert names(plan) == ["a-0"]
    assert VictimGang.of("batch/a", snapshot.pods.values(), snapshot).pods == (snapshot.pods["batch/a-0"],)


def test_candidate_gangs_groups_running_pods_and_leaves_out_what_may_not_be_evicted() -> None:
    """By gang annotation (here a label stands in for the gang key function); a pod outside
    any gang is a gang of one; pending, finished and terminating pods use nothing to take
    back; gangs at the preemptor's priority or above, and its own gang, are left out."""
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)], [
        make_pod("a-0", "batch").requests(gpu=2).on("n1").label("gang", "a"),
        make_pod("a-1", "batch").requests(gpu=2).on("n2").label("gang", "a"),
        make_pod("a-2", "batch").requests(gpu=2).label("gang", "a"),
        make_pod("lone", "batch").requests(gpu=1).on("n1").priority(5),
        make_pod("done", "batch").requests(gpu=1).on("n1", phase="Succeeded"),
        make_pod("going", "batch").requests(gpu=1).on("n2").deleting(),
        make_pod("hi-0", "batch").requests(gpu=1).on("n2").priority(50).label("gang", "hi"),
        make_pod("own-0", "ml").requests(gpu=1).on("n2").label("gang", "own"),
    ])

    def gang_of(pod: PodInfo) -> str | None:
        return f"{pod.namespace}/{pod.labels['gang']}" if "gang" in pod.labels else None

    got = candidate_gangs(snapshot, gang_of, below=50, exclude="ml/own")
    assert [(c.key, c.priority, [p.name for p in c.pods]) for c in got] == [
        ("batch/a", 0, ["a-0", "a-1"]),
        ("batch/pod:lone", 5, ["lone"]),
    ]


def test_a_candidate_gang_given_twice_is_refused() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    cands = candidates(snapshot)
    with pytest.raises(ValueError, match="candidate gang 'batch/a' given twice"):
        plan_preemption(snapshot, preemptor(1, 8), cands + cands, "minimal")


def test_a_pod_in_two_candidate_gangs_is_refused() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    pod = snapshot.pods["batch/a-0"]
    with pytest.raises(ValueError, match="pod 'batch/a-0' is in candidate gangs 'batch/a' and 'batch/b'"):
        plan_preemption(snapshot, preemptor(1, 8), [VictimGang("batch/a", 0, (pod,)), VictimGang("batch/b", 0, (pod,))],
                        "minimal")


def test_the_reconcilers_candidates_follow_the_same_rule_once_per_snapshot() -> None:
    """Gangs by Troupe's gang annotations, made once per snapshot: the preemptor's own
    gang, gangs of its priority or above and refused gangs are left out; pods being deleted
    are room being freed, not candidates."""
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)], [
        make_pod("a-0", "batch").requests(gpu=2).on("n1").gang("a", 1).priority(1),
        make_pod("b-0", "batch").requests(gpu=2).on("n1").gang("b", 1).priority(7),
        make_pod("own-0", "ml").requests(gpu=2).on("n1").gang("own", 2),
        make_pod("going", "batch").requests(gpu=2).on("n1").deleting(),
    ])
    prefix = "troupe.io/gang"
    every = victim_gangs(snapshot, prefix)
    assert victim_gangs(snapshot, prefix) is every
    assert sorted(every) == ["batch/a", "batch/b", "ml/own"]
    assert gang_of_pod(snapshot, prefix) == {"batch/a-0": "batch/a", "batch/b-0": "batch/b", "ml/own-0": "ml/own"}
    assert [g.key for g in gangs_for(snapshot, prefix, "ml/own", 7)] == ["batch/a"]
    assert [g.key for g in gangs_for(snapshot, prefix, "ml/own", 8)] == ["batch/a", "batch/b"]
    assert [g.key for g in gangs_for(snapshot, prefix, "ml/own", 8, frozenset({"batch/b"}))] == ["batch/a"]
    assert leaving(snapshot) == ["batch/going"]
