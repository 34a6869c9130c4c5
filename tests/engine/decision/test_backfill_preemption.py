"""Under ``queueingStrategy: Backfill`` a waiting gang of higher priority still preempts as
``gangPreemptionMode`` says: preemption is decided before the queue effect, so the gang is
reserved a start only when eviction cannot help or is off
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md, Decision 5).

Nodes (8 GPUs each), every one running a priority-0 pod with a deadline 60 s away::

    block b0 / subblock s0:  n0 n1          block b0 / subblock s1:  n2 n3
"""

from __future__ import annotations

from reconciler.engine.decision.step import step
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy, QueueState
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.timestamps import rfc3339
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config, PreemptionMode

NOW = 1_800_000_000.0
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def decide_big(preemption: PreemptionMode) -> tuple[Phase, str, object]:
    """The big gang's phase, reason and hold under Backfill and ``preemption``."""
    nodes = [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(4)]
    pods = []
    for i in range(4):
        pod = make_pod(f"low{i}").gang(f"low{i}", 1).requests(gpu=8).priority(0).on(f"n{i}")
        pod.obj["status"]["startTime"] = rfc3339(NOW - 10)
        pod.spec["activeDeadlineSeconds"] = 70
        pods.append(pod)
    for i in range(2):
        pod = make_pod(f"big-{i}").gang("big", 2).index(i).requests(gpu=8).priority(100).gated()
        pod.annotate("troupe.io/topology-required-level", SUBBLOCK)
        pods.append(pod)
    config = Config(queueing_strategy="Backfill")
    snapshot = snapshot_of(nodes, pods, config=config)
    members = group_by_gang(snapshot.pods.values(), config)["default/big"]
    gang = build_gang("default/big", members, config, {})
    policy = Policy(preemption=preemption, queueing="Backfill")
    turn = step(gang, snapshot, NOW, policy, QueueState("Backfill"))
    return turn.decision.phase, turn.decision.reason, turn.effect.hold


def test_a_higher_priority_gang_preempts_instead_of_waiting_for_its_reservation() -> None:
    phase, reason, hold = decide_big("atomic")
    assert phase is Phase.PREEMPTING, reason
    assert "reserved" not in reason and hold is None, hold


def test_with_preemption_off_the_same_gang_waits_for_its_reserved_start() -> None:
    phase, reason, hold = decide_big("off")
    assert phase is Phase.UNSCHEDULABLE, reason
    assert hold is not None and hold.reservation and hold.start == NOW + 60, hold
    assert f"from {rfc3339(NOW + 60)[11:19]} (in 60s)" in reason, reason
