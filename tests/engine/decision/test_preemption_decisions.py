"""Preemption and the queue inside the one decision: a gang that does not fit evicts
lower-priority gangs (``Preempting``), holds the room with its nomination while they
terminate (``AwaitingVictims``), and is placed once they are gone; gangs ahead in the queue
block (StrictFIFO) or hold capacity (BestEffortFIFO after ``headOfLineSeconds``).

Nodes (8 GPUs each)::

    block b0 / subblock s0:  n0 n1          block b0 / subblock s1:  n2 n3
"""

from __future__ import annotations

import pytest

from reconciler.engine.decision.actions import ClearNominations, Preempt
from reconciler.engine.decision.decide import decide
from reconciler.engine.decision.step import queue_effect
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.records import Nomination
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config
from troupe.contract import NOMINATION

CONFIG = Config()
NOW = 1_800_000_000.0
MINIMAL, ATOMIC = Policy("minimal"), Policy("atomic")


def nodes():
    return [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(4)]


def running(gang, i, node, priority=0, gpus=8, size=2):
    return make_pod(f"{gang}-{i}").gang(gang, size).index(i).requests(gpu=gpus).priority(priority).on(node)


def waiting(gang, size, priority=100, gpus=8, created="2024-01-01T00:00:00Z"):
    return [make_pod(f"{gang}-{i}").gang(gang, size).index(i).requests(gpu=gpus).priority(priority).gated()
            .created(created) for i in range(size)]


def gang_of(snapshot: Snapshot, key: str):
    pods = group_by_gang(snapshot.pods.values(), CONFIG)[key]
    return build_gang(key, pods, CONFIG, {})


def decide_key(snapshot, key, policy=MINIMAL, queue=None, now=NOW):
    return decide(gang_of(snapshot, key), snapshot, now, policy, queue)


def test_off_never_evicts():
    snap = snapshot_of(nodes(), [running("low", i, f"n{i}", size=4) for i in range(4)] + waiting("high", 2))
    d = decide_key(snap, "default/high", Policy("off"))
    assert (d.phase, d.victims) == (Phase.UNSCHEDULABLE, ())


def test_a_high_priority_gang_evicts_a_whole_lower_priority_gang_and_nominates_its_room():
    # low (priority 0) runs on n0, n1; other (priority 50) on n2, n3.
    pods = [running("low", 0, "n0"), running("low", 1, "n1"),
            running("other", 0, "n2", priority=50), running("other", 1, "n3", priority=50), *waiting("high", 2)]
    d = decide_key(snapshot_of(nodes(), pods), "default/high")
    assert (d.phase, d.rule.name) == (Phase.PREEMPTING, "Preempting")
    assert d.victims == ("default/low-0", "default/low-1"), "the lowest priority goes first"
    assert d.find(Preempt).nomination is not None and sorted(d.find(Preempt).nomination.nodes.values()) == ["n0", "n1"]
    assert d.find(Preempt).nominee == "default/high-0"
    assert d.find(Preempt).nomination.victims == ("uid-default-low-0", "uid-default-low-1"), "the victims by UID"
    assert d.release == (), "nothing is released before the victims are gone"


def test_equal_priority_is_never_a_victim():
    pods = [running("low", i, f"n{i}", priority=100, size=4) for i in range(4)] + waiting("high", 2)
    d = decide_key(snapshot_of(nodes(), pods), "default/high")
    assert d.phase is Phase.UNSCHEDULABLE
    assert d.reason.endswith("; no lower-priority gangs whose eviction makes room")


def test_minimal_evicts_only_the_pods_on_the_nodes_the_plan_needs_and_atomic_the_whole_gang():
    # low has 4 members of 4 GPUs on n0..n3 (half of each node); n0 and n1 are otherwise full.
    pods = [running("low", i, f"n{i}", gpus=4, size=4) for i in range(4)]
    pods += [running(f"fill{i}", 0, f"n{i}", priority=90, gpus=4, size=1) for i in range(2)]
    pods += waiting("high", 1, gpus=8)
    snap = snapshot_of(nodes(), pods)
    minimal = decide_key(snap, "default/high", MINIMAL)
    assert minimal.victims == ("default/low-2",), "one pod of low on a node where it frees 8 GPUs"
    atomic = decide_key(snap, "default/high", ATOMIC)
    assert atomic.victims == tuple(f"default/low-{i}" for i in range(4)), "every pod of the chosen gang"


def test_a_required_subblock_takes_its_victims_from_one_subblock():
    pods = [running("a", 0, "n0", size=1), running("b", 0, "n2", size=1), running("c", 0, "n3", size=1)]
    pods += [make_pod(f"high-{i}").gang("high", 2).index(i).requests(gpu=8).priority(100).gated()
             .annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-subblock") for i in range(2)]
    d = decide_key(snapshot_of(nodes(), pods), "default/high")
    assert d.phase is Phase.PREEMPTING
    # s0 needs one eviction (n1 is free), s1 two: one subblock, the fewest gangs.
    assert d.victims == ("default/a-0",)
    assert sorted(d.find(Preempt).nomination.nodes.values()) == ["n0", "n1"]


def _nominated(pods, d):
    """The preemptor's first member carrying the nomination ``d`` wrote."""
    pods[-len(d.find(Preempt).nomination.nodes)].annotate(NOMINATION, d.find(Preempt).nomination.encode())
    return pods


def test_the_nomination_holds_the_room_until_the_victims_are_gone_then_the_gang_is_placed():
    low = [running("low", 0, "n0"), running("low", 1, "n1")]
    high = waiting("high", 2)
    d = decide_key(snapshot_of(nodes()[:2], [*low, *high]), "default/high")
    pods = _nominated([*low, *high], d)
    for p in low:  # evicted: terminating
        p.obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    snap = snapshot_of(nodes()[:2], pods)
    wait = decide_key(snap, "default/high")
    assert (wait.phase, wait.rule.name) == (Phase.PREEMPTING, "AwaitingVictims")
    assert wait.victims == (), "already terminating: not evicted again"
    assert wait.reason == "waiting for 2 victim pod(s) to terminate (2 terminating); their room is held for the gang"
    # A third gang of lower priority cannot take what the eviction frees.
    other = waiting("other", 1, priority=10, created="2024-01-01T00:00:05Z")
    gone = snapshot_of(nodes()[:2], [*high, *other])
    assert decide_key(gone, "default/other").phase is Phase.UNSCHEDULABLE
    placed = decide_key(gone, "default/high")
    assert placed.phase is Phase.PLACED
    assert sorted(m.node for m in placed.release) == ["n0", "n1"]


def test_a_nomination_that_ran_out_is_cleared_and_the_gang_decided_afresh():
    low = [running("low", 0, "n0"), running("low", 1, "n1")]
    high = waiting("high", 2)
    d = decide_key(snapshot_of(nodes()[:2], [*low, *high]), "default/high")
    pods = _nominated([*low, *high], d)
    later = NOW + 30 + 30 + 30 + 1  # timeout, jitter at most, victims' grace
    again = decide_key(snapshot_of(nodes()[:2], pods), "default/high", now=later)
    assert again.phase is Phase.PREEMPTING and again.rule.name == "Preempting"
    assert again.find(Preempt).nomination.at != d.find(Preempt).nomination.at, "a new nomination"


def test_a_victims_huge_grace_period_never_holds_a_nomination_past_nomination_max_seconds():
    low = [running("low", 0, "n0"), running("low", 1, "n1")]
    for p in low:  # the victim's owner chose the grace period: 68 years
        p.obj["spec"]["terminationGracePeriodSeconds"] = 2**31 - 1
    high = waiting("high", 2)
    d = decide_key(snapshot_of(nodes()[:2], [*low, *high]), "default/high")
    pods = _nominated([*low, *high], d)
    for p in low:  # evicted, and never gone
        p.obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    snap = snapshot_of(nodes()[:2], pods)
    held = decide_key(snap, "default/high", now=NOW + 599)
    assert held.rule.name == "AwaitingVictims" and held.recheck_at == pytest.approx(NOW + 600)
    after = decide_key(snap, "default/high", now=NOW + 600)
    assert after.find(ClearNominations) == ClearNominations(("default/high-0",)), "the nomination ran out at its cap"


def test_a_higher_priority_gang_takes_the_room_a_lower_priority_nomination_holds():
    """Gang low (priority 50) holds n1 with a nomination whose victim a budget protects;
    gang high (priority 100) needs n0 and n1. As kube-scheduler, a decision honours only
    nominations of equal or higher priority: high is placed, every time."""
    low = waiting("low", 1, priority=50)
    low[0].annotate(NOMINATION, Nomination("2024-01-01T00:00:00.000+00:00", {"uid-default-low-0": "n1"},
                                           ("uid-default-x-0",), ("uid-default-x-0",)).encode())
    blocker = running("x", 0, "n2", priority=10, size=1)
    high = waiting("high", 2, priority=100)
    snap = snapshot_of(nodes()[:3], [*low, blocker, *high])
    d = decide_key(snap, "default/high", now=NOW)
    assert d.phase is Phase.PLACED, d.reason
    assert sorted(m.node for m in d.release) == ["n0", "n1"]
    peer = waiting("peer", 1, priority=50)
    alone = snapshot_of(nodes()[1:2], [*low, *peer])
    assert decide_key(alone, "default/peer", now=NOW).phase is Phase.UNSCHEDULABLE, \
        "a nomination still holds its room against equal priority"


def test_a_refused_gang_is_not_chosen_again_and_another_one_is():
    pods = [running("pdb", 0, "n0", size=1, priority=0), running("spare", 0, "n1", size=1, priority=10)]
    high = waiting("high", 1)
    first = decide_key(snapshot_of(nodes()[:2], [*pods, *high]), "default/high")
    assert first.victims == ("default/pdb-0",)
    nominated = first.find(Preempt).nomination
    refused = Nomination(nominated.at, nominated.nodes, nominated.victims, ("uid-default-pdb-0",))
    high[0].annotate(NOMINATION, refused.encode())
    second = decide_key(snapshot_of(nodes()[:2], [*pods, *high]), "default/high")
    assert (second.phase, second.rule.name, second.victims) == (Phase.PREEMPTING, "Preempting", ("default/spare-0",))
    assert second.find(Preempt).nomination.refused == ("uid-default-pdb-0",), "the refused pod is kept by UID"


def test_a_refused_eviction_with_no_other_plan_waits():
    pods = [running("pdb", 0, "n0", size=1)]
    high = waiting("high", 1)
    first = decide_key(snapshot_of(nodes()[:1], [*pods, *high]), "default/high")
    nominated = first.find(Preempt).nomination
    high[0].annotate(NOMINATION, Nomination(nominated.at, nominated.nodes, nominated.victims, ("uid-default-pdb-0",)).encode())
    d = decide_key(snapshot_of(nodes()[:1], [*pods, *high]), "default/high")
    assert (d.phase, d.rule.name) == (Phase.PREEMPTING, "EvictionRefused")
    assert d.victims == ()
    assert d.reason.startswith("eviction of default/pdb refused (PodDisruptionBudget)"), "its own namespace: named"


# --- the queue ---------------------------------------------------------------------------
def _cycle(snapshot, policy, now=NOW):
    """Decide every waiting gang in queue order, as the simulator does."""
    state = QueueState(policy.queueing)
    out = {}
    keys = [k for k, pods in group_by_gang(snapshot.pods.values(), CONFIG).items() if any(p.gated for p in pods)]
    gangs = sorted((gang_of(snapshot, k) for k in keys), key=lambda g: queue_order(g.key, g.priority, g.created))
    for gang in gangs:
        order = queue_order(gang.key, gang.priority, gang.created)
        d = decide(gang, snapshot, now, policy, state.view(order, gang.namespace))
        e = queue_effect(gang, d, snapshot, policy, now)
        state.note(gang.key, order, e.standing, e.what, e.hold)
        out[gang.key] = (d, e)
        if d.phase is Phase.PLACED:
            snapshot = snapshot.with_assumed(d.placement)
    return out


def _busy_and_queue(created_big="2024-01-01T00:00:00Z"):
    # n0 busy; the big gang needs all 4 nodes; the small one fits on n1.
    return [running("busy", 0, "n0", size=1, priority=0, gpus=1),
            *waiting("big", 4, priority=50, created=created_big),
            *waiting("small", 1, priority=10, created="2024-01-01T00:00:01Z")]


@pytest.mark.parametrize(("strategy", "small_phase", "small_rule"), [
    ("BestEffortFIFO", Phase.PLACED, "Placed"),
    ("StrictFIFO", Phase.WAITING, "Queued"),
])
def test_a_gang_that_does_not_fit_blocks_those_behind_only_in_strict_fifo(strategy, small_phase, small_rule):
    out = _cycle(snapshot_of(nodes(), _busy_and_queue()), Policy(queueing=strategy, head_of_line_seconds=10**9))
    assert out["default/big"][0].phase is Phase.UNSCHEDULABLE
    small = out["default/small"][0]
    assert (small.phase, small.rule.name) == (small_phase, small_rule)
    if strategy == "StrictFIFO":
        assert small.reason.startswith("queued behind gang default/big (priority 50, waiting")


def test_best_effort_fifo_holds_the_heads_capacity_once_it_has_waited_long_enough():
    policy = Policy(queueing="BestEffortFIFO", head_of_line_seconds=600)
    snap = snapshot_of(nodes(), _busy_and_queue())
    early = _cycle(snap, policy, now=1704067200.0 + 300)  # 2024-01-01 + 5 min
    assert early["default/small"][0].phase is Phase.PLACED
    assert early["default/big"][1].recheck_at == 1704067200.0 + 600, "looked at again when it has waited long enough"
    late = _cycle(snap, policy, now=1704067200.0 + 601)
    big = late["default/big"][1]
    assert big.hold is not None and big.hold.nodes == frozenset(range(4))
    small = late["default/small"][0]
    assert small.phase is Phase.UNSCHEDULABLE
    assert "4 node(s) held for 1 gang(s) ahead in the queue (default/big, priority 50" in small.reason


def test_queue_order_is_priority_then_creation_then_name():
    keys = [queue_order("ns/b", 0, "2024-01-01T00:00:00Z"), queue_order("ns/a", 0, "2024-01-01T00:00:00Z"),
            queue_order("ns/old", 0, "2023-01-01T00:00:00Z"), queue_order("ns/vip", 10, "2025-01-01T00:00:00Z")]
    assert [k[2] for k in sorted(keys)] == ["ns/vip", "ns/old", "ns/a", "ns/b"]


def test_a_gang_ahead_of_another_namespace_is_not_named_in_the_reason():
    """What the queue tells a waiting gang names a gang ahead of it only in its own namespace
    (docs/decisions/064-preemption-names-no-other-tenant.md): StrictFIFO's blocker and
    BestEffortFIFO's hold alike."""
    from reconciler.engine.gangs.queueing import QueueState, gang_of_namespace

    queue = QueueState("StrictFIFO")
    queue.note("team-a/big", (-50, "2027-01-15T08:00:00Z", "team-a/big"), True, "priority 50, waiting 4m")
    later = (0, "2027-01-15T09:00:00Z", "x")
    assert queue.view(later, "team-a").blocked_by == "gang team-a/big (priority 50, waiting 4m)"
    assert queue.view(later, "team-c").blocked_by == "a gang of another namespace (priority 50, waiting 4m)"
    assert gang_of_namespace("team-a/big", "team-c") == "a gang of another namespace"
