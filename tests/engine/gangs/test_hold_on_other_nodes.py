"""A hold decided on one snapshot, read by a gang decided on a later one whose nodes changed
(a node added renumbers the indices): the gang behind is kept off the held nodes by name,
never off others (docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

Nodes (8 GPUs each); the later snapshot adds ``m0``, first in topology order::

    block a0 / subblock a0-s0:  (m0)
    block b0 / subblock b0-s0:  n0 n1          block b0 / subblock b0-s1:  n2 n3
"""

from __future__ import annotations

from reconciler.engine.decision.step import step
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy, QueueState
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.timestamps import rfc3339
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config

NOW = 1_800_000_000.0
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
CONFIG = Config(queueing_strategy="Backfill")
POLICY = Policy(queueing="Backfill")


def cluster(extra: bool) -> list:
    nodes = [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(4)]
    if extra:
        nodes.append(make_node("m0").topology("a0", "a0-s0", "m0").allocatable(gpu=8))
    return nodes


def pods() -> list:
    out = []
    for node, limit in (("n0", 70), ("n2", None), ("n3", None)):
        pod = make_pod(f"run-{node}").gang(f"run-{node}", 1).requests(gpu=8).on(node)
        pod.obj["status"]["startTime"] = rfc3339(NOW - 10)
        if limit is not None:
            pod.spec["activeDeadlineSeconds"] = limit
        out.append(pod)
    for i in range(2):
        pod = make_pod(f"big-{i}").gang("big", 2).index(i).requests(gpu=8).priority(10).gated()
        pod.annotate("troupe.io/topology-required-level", SUBBLOCK)
        out.append(pod)
    out.append(make_pod("small-0").gang("small", 1).index(0).requests(gpu=8).gated().created("2030-01-01T00:00:00Z"))
    return out


def gang(snapshot, key):
    return build_gang(key, group_by_gang(snapshot.pods.values(), CONFIG)[key], CONFIG, {})


def test_a_gang_decided_after_a_node_was_added_keeps_off_the_reserved_nodes_by_name() -> None:
    before = snapshot_of(cluster(False), pods(), config=CONFIG)
    queue = QueueState("Backfill")
    big = step(gang(before, "default/big"), before, NOW, POLICY, queue)
    assert big.effect.hold is not None and big.effect.hold.node_names() == ["n0", "n1"]

    after = snapshot_of(cluster(True), pods(), config=CONFIG)  # m0 is index 0 now
    assert after.index["m0"] == 0 and after.table is not before.table
    small = step(gang(after, "default/small"), after, NOW, POLICY, queue)
    held = {after.nodes[i].name for i in small.queue.held_nodes}
    assert held == {"n0", "n1"}, held
    assert small.decision.phase is Phase.PLACED, small.decision.reason
    assert [a.node for a in small.decision.placement.assignments] == ["m0"]
