"""Nodes that keep failing gang members (docs/decisions/041-failing-nodes.md), on plain data:
when a node is avoided and until when, placements off avoided nodes and the fallback that
says so, and which failures a decision asks to record (each once)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from reconciler.engine.gangs.avoidance import (
    Avoidance,
    NodeFailure,
    merged,
    place_avoiding,
    to_record,
)
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import rfc3339
from testbed.engine_builders import make_node, make_pod
from troupe.config import Config
from troupe.contract import NODE_FAILURES, NODE_FAILURES_KEPT, TopologyRequest

NOW = 1_800_000_000.0
RULE = Avoidance(threshold=2, window=3600, cooldown=1800)


def node(name: str, *ages: float, namespaces: int = 2) -> NodeInfo:
    """Node ``name`` with member failures ``ages`` seconds before NOW, 8 GPUs, its own host;
    the failing members' namespaces taken in turn from ``namespaces`` tenants (``team-0``...)."""
    obj = make_node(name).allocatable(gpu=8).topology("b0", "s0", name).build()
    entries = [{"uid": f"u{i}", "pod": f"team-{i % namespaces}/p{i}", "at": rfc3339(NOW - age), "why": "Failed"}
               for i, age in enumerate(ages)]
    if entries:
        obj["metadata"].setdefault("annotations", {})[NODE_FAILURES] = json.dumps(entries)
    return NodeInfo.from_object(obj)


def test_two_failures_within_the_window_avoid_a_node_for_the_cooldown_after_the_last():
    assert RULE.until(node("n", 100, 50)) == NOW - 50 + 1800
    assert RULE.until(node("n", 50)) is None, "one failure is not a pattern"
    assert RULE.until(node("n", 5000, 10)) is None, "two failures more than the window apart"
    snapshot = Snapshot([node("a", 100, 50), node("b", 4000, 3000), node("c")], [], TopologyLevels.default())
    assert list(RULE.avoided(snapshot, NOW)) == ["a"]
    assert RULE.avoided(snapshot, NOW + 1800) == {}, "the cooldown runs out"
    assert "avoided until" in RULE.avoided(snapshot, NOW)["a"]


@given(st.lists(st.integers(min_value=0, max_value=20_000), max_size=8), st.integers(min_value=1, max_value=4))
def test_a_node_is_avoided_until_the_cooldown_after_the_last_run_of_threshold_failures_within_the_window(ages, k):
    rule = Avoidance(threshold=k, window=3600, cooldown=1800, namespaces=1)
    times = sorted(NOW - a for a in ages)
    runs = [times[j] for j in range(len(times)) for i in range(j + 1) if j - i + 1 >= k and times[j] - times[i] <= 3600]
    assert rule.until(node("n", *ages)) == (max(runs) + 1800 if runs else None)


def test_one_tenants_members_failing_on_a_node_do_not_steer_every_tenant_off_it():
    pinned_and_failing = node("n", 300, 200, 100, 50, namespaces=1)
    assert RULE.until(pinned_and_failing) is None, "four failures, all of one namespace"
    assert Avoidance(threshold=2, window=3600, cooldown=1800, namespaces=1).until(pinned_and_failing) == NOW - 50 + 1800
    assert RULE.until(node("n", 300, 200, 100, 50, namespaces=2)) == NOW - 50 + 1800


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=20_000), st.integers(min_value=0, max_value=3)),
                max_size=8), st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=3))
def test_a_node_is_avoided_only_when_a_run_of_failures_spans_enough_namespaces(failures, k, m):
    rule = Avoidance(threshold=k, window=3600, cooldown=1800, namespaces=m)
    obj = make_node("n").allocatable(gpu=8).topology("b0", "s0", "n").build()
    obj["metadata"]["annotations"] = {NODE_FAILURES: json.dumps(
        [{"uid": f"u{i}", "pod": f"team-{t}/p{i}", "at": rfc3339(NOW - age), "why": "Failed"}
         for i, (age, t) in enumerate(failures)])}
    until = rule.until(NodeInfo.from_object(obj))
    times = sorted((NOW - age, t) for age, t in failures)
    ends = [end for end, _ in times
            if len(run := [t for at, t in times if at <= end and end - at <= 3600]) >= k and len(set(run)) >= m]
    assert until == (max(ends) + 1800 if ends else None)
    if until is not None:
        assert len({t for _, t in failures}) >= m


def test_placement_avoids_a_failing_node_and_falls_back_to_it_only_when_nothing_else_fits():
    nodes = [node("a", 100, 50), node("b")]
    member = [make_pod("w-0", "ml").requests(gpu=8).gang("g", 1).gated().info()]
    snapshot = Snapshot(nodes, [], TopologyLevels.default())
    avoided = RULE.avoided(snapshot, NOW)
    found, note = place_avoiding(snapshot, member, TopologyRequest(), (), avoided)
    assert [a.node for a in found.result.assignments] == ["b"] and note == ""
    two = [make_pod(f"w-{i}", "ml").requests(gpu=8).gang("g", 2).gated().info() for i in range(2)]
    found, note = place_avoiding(snapshot, two, TopologyRequest(), (), avoided)
    assert sorted(a.node for a in found.result.assignments) == ["a", "b"]
    assert note == "on node(s) a, avoided after repeated member failures, as nothing else fits"


def test_a_failed_member_is_recorded_on_its_node_once_and_a_member_on_a_long_not_ready_node_too():
    failed = make_pod("w-0", "ml").requests(gpu=1).gang("g", 2).node_name("a").phase("Failed") \
        .annotate("reconciler.troupe.io/planned-at", "2027-01-15T07:00:00.000Z").build()
    running = make_pod("w-1", "ml").requests(gpu=1).gang("g", 2).node_name("c").phase("Running") \
        .annotate("reconciler.troupe.io/planned-at", "2027-01-15T07:00:00.000Z").build()
    down = make_node("c").allocatable(gpu=8).topology("b0", "s0", "c").build()
    down["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "lastTransitionTime": rfc3339(NOW - 120)}]
    pods = [PodInfo.from_object(failed), PodInfo.from_object(running)]
    snapshot = Snapshot([node("a"), NodeInfo.from_object(down)], pods, TopologyLevels.default())
    gang = build_gang("ml/g", pods, Config(), {})
    released = [p for p in gang.members if not p.gated]
    got = to_record(gang, released, snapshot, NOW)
    assert [(f.node, f.pod, f.why) for f in got] == [("a", "ml/w-0", "Failed"),
                                                    ("c", "ml/w-1", "lost with its NotReady node")]
    again = Snapshot([NodeInfo.from_object(_with_record(make_node("a").allocatable(gpu=8).build(), got[0])),
                      NodeInfo.from_object(down)], pods, TopologyLevels.default())
    assert [f.node for f in to_record(gang, released, again, NOW)] == ["c"], "the failure on a is recorded already"


def _with_record(obj, failure: NodeFailure):
    obj["metadata"].setdefault("annotations", {})[NODE_FAILURES] = merged(None, [failure])
    return obj


def test_the_record_keeps_the_newest_and_never_names_a_pod_twice():
    failures = [NodeFailure("a", f"u{i}", f"ml/p{i}", rfc3339(NOW + i), "Failed") for i in range(NODE_FAILURES_KEPT + 4)]
    raw = merged(None, failures)
    raw = merged(raw, failures[-2:])
    entries = json.loads(raw)
    assert len(entries) == NODE_FAILURES_KEPT
    assert [e["uid"] for e in entries] == [f"u{i}" for i in range(4, NODE_FAILURES_KEPT + 4)]
    assert merged("not json", failures[:1]) == json.dumps([failures[0].entry()], separators=(",", ":"))


def test_a_member_failed_by_a_disruption_is_no_failure_unless_its_node_was_lost():
    def failed_pod(reason):
        b = make_pod("w-0", "ml").requests(gpu=1).gang("g", 1).node_name("a").phase("Failed") \
            .annotate("reconciler.troupe.io/planned-at", "2027-01-15T07:00:00.000Z")
        obj = b.build()
        if reason:
            obj["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
        return PodInfo.from_object(obj)

    deleted = failed_pod("")
    from dataclasses import replace
    assert not to_record(build_gang("ml/g", [replace(deleted, deleting=True)], Config(), {}),
                         [], Snapshot([node("a")], [], TopologyLevels.default()), NOW), \
        "a member deleted (its namespace, its controller) did not fail"
    snapshot = Snapshot([node("a")], [], TopologyLevels.default())
    for reason, counts in (("", True), ("DeletionByTaintManager", True), ("DeletionByPodGC", True),
                           ("PreemptionByScheduler", False), ("EvictionByEvictionAPI", False),
                           ("TroupeGangTimeout", False)):
        gang = build_gang("ml/g", [failed_pod(reason)], Config(), {})
        assert bool(to_record(gang, [], snapshot, NOW)) is counts, reason
