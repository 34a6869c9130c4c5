"""Release as created, decided on plain data (docs/decisions/034-release-as-created.md): the
reservation made from a Job's pod template, held in every snapshot, each member released
onto its rank's node as it comes, dropped when complete or stale, rolled back whole at its
timeout or when a member no longer fits; and the property that a reserved node is never
committed twice."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision import actions
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs import lifecycle
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from reconciler.engine.placement.place import place_gang as place
from testbed.as_created import (
    NAMESPACE,
    gangs_of,
    job_object,
    member_pod,
    snapshot_of,
    workloads_of,
)
from testbed.engine_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config
from troupe.policies import RELEASE_MODE, WHEN_COMPLETE

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z, when the Job was created
KEY = f"{NAMESPACE}/job:train"


def nodes(count: int = 8, gpus: int = 8) -> list[NodeInfo]:
    """``count`` nodes of ``gpus`` GPUs, 4 per subblock."""
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(gpu=gpus).topology("b0", f"s{i // 4}", f"h{i}").build())
            for i in range(count)]


def world(job: dict[str, Any], pods: list[dict[str, Any]] = (), count: int = 8,
          extra: list[PodInfo] = ()) -> tuple[Snapshot, Any]:
    """The snapshot (holding the Job's reservation, if any) and the Job's gang."""
    known = workloads_of(job)
    snapshot = snapshot_of(nodes(count), [*(PodInfo.from_object(p) for p in pods), *extra], known)
    return snapshot, gangs_of(snapshot, known, CONFIG)[KEY]


def reserved(size: int = 4, **kw: Any) -> tuple[dict[str, Any], Record]:
    """The Job of ``size`` and the reservation its first decision makes."""
    job = job_object("train", size, **kw)
    snapshot, gang = world(job)
    decision = decide(gang, snapshot, NOW)
    found = decision.find(actions.Reserve)
    assert found is not None, decision.reason
    return job_object("train", size, record=found.record, **kw), found.record


def test_a_job_is_reserved_from_its_template_before_any_member_exists():
    job = job_object("train", 4, annotations={contract.TOPOLOGY_REQUIRED_LEVEL: "cloud.google.com/gce-topology-subblock"})
    snapshot, gang = world(job)
    assert gang.as_created and gang.members == () and gang.size == 4

    decision = decide(gang, snapshot, NOW)

    assert decision.rule is lifecycle.RESERVED and decision.phase is lifecycle.Phase.PLACED
    reserve = decision.find(actions.Reserve)
    assert reserve is not None and reserve.workload == ("Job", NAMESPACE, "train")
    assert reserve.record.gang == "job:train" and len(set(reserve.record.nodes)) == 4
    assert len({int(n[1:]) // 4 for n in reserve.record.nodes}) == 1, "one subblock"
    assert "reserved 4 node(s) from the Job train pod template (0 of 4 members exist)" in decision.reason
    assert decision.recheck_at == NOW + 30, "looked at again when the reservation can first run out"


def test_a_reservation_holds_its_ranks_nodes_for_every_other_gang():
    job, record = reserved(4)
    snapshot, _ = world(job)
    held = [snapshot.free(n).get("nvidia.com/gpu") for n in record.nodes]
    assert held == [0, 0, 0, 0]
    wide = [PodInfo.from_object(member_pod(job_object("other", 8), i)) for i in range(8)]
    assert not place(snapshot, wide).placed, "8 whole nodes do not fit in the 4 left"


def test_each_member_is_released_onto_its_ranks_node_as_it_comes():
    job, record = reserved(4)
    pods = [member_pod(job, 2), member_pod(job, 0)]
    snapshot, gang = world(job, pods)

    decision = decide(gang, snapshot, NOW + 2)

    assert decision.rule is lifecycle.RELEASE_AS_CREATED and decision.phase is lifecycle.Phase.RELEASING
    released = {m.pod: (m.node, m.rank, m.planned_at) for m in decision.release}
    assert released == {f"{NAMESPACE}/train-0-x": (record.nodes[0], 0, record.planned_at),
                        f"{NAMESPACE}/train-2-x": (record.nodes[2], 2, record.planned_at)}
    assert "4 node(s) reserved; 2 of 4 members exist, 2 released, 0 bound" in decision.reason


def test_a_released_member_uses_its_node_and_its_rank_holds_nothing_more():
    job, record = reserved(4)
    pods = [member_pod(job, 1, gated=False, node=record.nodes[1], planned_at=record.planned_at)]
    snapshot, _ = world(job, pods)
    assert [snapshot.free(n).get("nvidia.com/gpu") for n in record.nodes] == [0, 0, 0, 0], "counted once"
    assert snapshot.free("n7" if "n7" not in record.nodes else "n0").get("nvidia.com/gpu") == 8


def test_the_reservation_is_dropped_once_every_member_is_bound():
    job, record = reserved(4)
    pods = [member_pod(job, i, gated=False, node=record.nodes[i], planned_at=record.planned_at, bound=True,
                       phase="Running") for i in range(4)]
    snapshot, gang = world(job, pods)

    decision = decide(gang, snapshot, NOW + 5)

    assert decision.rule is lifecycle.ALL_RELEASED
    drop = decision.find(actions.DropReservation)
    assert drop is not None and drop.complete and drop.planned_at == record.planned_at


def test_a_gang_whose_last_members_never_come_is_rolled_back_whole_at_its_timeout():
    job, record = reserved(4)
    pods = [member_pod(job, i, gated=False, node=record.nodes[i], planned_at=record.planned_at, bound=True,
                       phase="Running", created="2027-01-15T08:00:01Z") for i in range(2)]
    snapshot, gang = world(job, pods)

    early = decide(gang, snapshot, NOW + 30)
    late = decide(gang, snapshot, NOW + 31)

    assert early.rule is lifecycle.RELEASE_AS_CREATED and early.recheck_at == NOW + 31, "30 s after the newest member"
    assert late.rule is lifecycle.TIMED_OUT and late.phase is lifecycle.Phase.ROLLED_BACK
    rollback = late.find(actions.RollBack)
    assert rollback is not None and sorted(rollback.delete) == [f"{NAMESPACE}/train-0-x", f"{NAMESPACE}/train-1-x"]
    drop = late.find(actions.DropReservation)
    assert drop is not None and not drop.complete
    assert "2 of 4 members exist, 2 released, 2 bound" in late.reason


def test_a_member_that_no_longer_fits_its_ranks_node_rolls_the_whole_reservation_back():
    job, record = reserved(4)
    pods = [member_pod(job, 0, gated=False, node=record.nodes[0], planned_at=record.planned_at),
            member_pod(job, 1, gpus=16)]
    snapshot, gang = world(job, pods)

    decision = decide(gang, snapshot, NOW + 2)

    assert decision.rule is lifecycle.RESERVATION_BROKEN and decision.phase is lifecycle.Phase.ROLLED_BACK
    assert "member train-1-x does not fit its reserved node" in decision.reason
    rollback = decision.find(actions.RollBack)
    assert rollback is not None and rollback.delete == (f"{NAMESPACE}/train-0-x",)
    assert decision.find(actions.DropReservation) is not None
    assert not decision.release, "nothing more released"


def busy(node: str) -> PodInfo:
    """A pod not Troupe's, bound to ``node`` directly, taking its 8 GPUs."""
    return PodInfo.from_object(make_pod(f"busy-{node}").requests(gpu=8).on(node).build())


def test_a_pod_on_a_reserved_node_before_any_member_is_released_drops_the_reservation_and_deletes_nothing():
    """The reservation decided without a pod bound there directly (its watch event came
    later than the Job's): found whole at the first member, not when the member of that
    rank comes after the others were released and would be deleted."""
    job, record = reserved(4)
    taken = record.nodes[3]
    snapshot, gang = world(job, [member_pod(job, 0)], extra=[busy(taken)])

    decision = decide(gang, snapshot, NOW + 1)

    assert decision.rule is lifecycle.RESERVATION_DROPPED, decision.reason
    assert f"the reserved node {taken} is overcommitted (nvidia.com/gpu: 8 short)" in decision.reason
    assert decision.find(actions.RollBack) is None and not decision.release, "nothing released, nothing deleted"
    drop = decision.find(actions.DropReservation)
    assert drop is not None and drop.planned_at == record.planned_at and not drop.complete

    after, gang = world(job_object("train", 4), [member_pod(job, 0)], extra=[busy(taken)])
    again = decide(gang, after, NOW + 2).find(actions.Reserve)
    assert again is not None and taken not in again.record.nodes, "reserved again, around the pod"


def test_a_pod_on_a_reserved_node_once_a_member_is_released_rolls_the_reservation_back():
    job, record = reserved(4)
    taken = record.nodes[3]
    pods = [member_pod(job, 0, gated=False, node=record.nodes[0], planned_at=record.planned_at),
            member_pod(job, 1)]
    snapshot, gang = world(job, pods, extra=[busy(taken)])

    decision = decide(gang, snapshot, NOW + 2)

    assert decision.rule is lifecycle.RESERVATION_BROKEN, decision.reason
    assert f"the reserved node {taken} is overcommitted" in decision.reason
    rollback = decision.find(actions.RollBack)
    assert rollback is not None and rollback.delete == (f"{NAMESPACE}/train-0-x",)
    assert not decision.release, "the member that came is not released onto a broken reservation"


def test_a_pod_on_a_node_whose_ranks_all_run_breaks_nothing():
    job, record = reserved(4)
    pods = [member_pod(job, 0, gated=False, node=record.nodes[0], planned_at=record.planned_at, bound=True,
                       phase="Running"), member_pod(job, 1)]
    snapshot, gang = world(job, pods, extra=[busy(record.nodes[0])])

    decision = decide(gang, snapshot, NOW + 2)

    assert decision.rule is lifecycle.RELEASE_AS_CREATED, decision.reason
    assert [m.node for m in decision.release] == [record.nodes[1]]


def test_a_reserved_node_that_is_gone_rolls_the_reservation_back_at_once():
    job, record = reserved(4)
    known = workloads_of(job)
    kept = [n for n in nodes() if n.name != record.nodes[3]]
    snapshot = snapshot_of(kept, [], known)
    gang = gangs_of(snapshot, known, CONFIG)[KEY]

    decision = decide(gang, snapshot, NOW + 1)

    assert decision.rule is lifecycle.TIMED_OUT
    assert f"the reserved node {record.nodes[3]} of rank 3 no longer exists" in decision.reason


def test_a_suspended_or_resized_job_drops_its_reservation():
    _, record = reserved(4)
    for job, why in ((job_object("train", 4, record=record, suspend=True), "suspended"),
                     (job_object("train", 6, record=record), "now runs 6 member(s), the reservation holds 4")):
        snapshot, gang = world(job)
        decision = decide(gang, snapshot, NOW + 1)
        assert decision.rule is lifecycle.RESERVATION_DROPPED, decision.reason
        assert why in decision.reason
        assert snapshot.free(record.nodes[0]).get("nvidia.com/gpu") == (8 if "suspended" in why else 0)


def test_when_complete_and_other_gangs_are_not_reserved():
    for job in (job_object("train", 4, annotations={RELEASE_MODE: WHEN_COMPLETE}),
                job_object("train", 4, job_annotations={RELEASE_MODE: WHEN_COMPLETE}),
                job_object("train", 4, annotations={"troupe.io/gang-size": "6", "troupe.io/gang-name": "t"})):
        known = workloads_of(job)
        snapshot = Snapshot(nodes(), [], TopologyLevels.default())
        assert gangs_of(snapshot, known, CONFIG) == {}
    config = Config(release_mode="WhenComplete")
    snapshot = Snapshot(nodes(), [], TopologyLevels.default())
    assert gangs_of(snapshot, workloads_of(job_object("train", 4)), config) == {}


def test_a_gang_that_does_not_fit_waits_unplaced_without_a_reservation():
    job = job_object("train", 12)
    snapshot, gang = world(job)
    decision = decide(gang, snapshot, NOW)
    assert decision.rule is lifecycle.UNPLACED and decision.find(actions.Reserve) is None
    assert decision.reason.startswith("reservation: ")
    assert "preemption is considered once every member exists" in decision.reason


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 6), released=st.sets(st.integers(0, 5)), other=st.integers(1, 8),
       gpus=st.sampled_from([2, 4, 8]))
def test_a_reserved_node_is_never_committed_twice(size, released, other, gpus):
    """Whatever part of a reserved gang is released, another gang's placement on the same
    snapshot never overcommits a node: each rank is counted once, as its slot or as its
    member."""
    job, record = reserved(size, gpus=gpus)
    pods = [member_pod(job, i, gated=False, node=record.nodes[i], planned_at=record.planned_at)
            for i in sorted(released) if i < size]
    snapshot, _ = world(job, pods)
    used = {n.name: 0 for n in snapshot.nodes}
    for node in record.nodes:
        used[node] += gpus
    assert all(snapshot.free(n).get("nvidia.com/gpu", 0) == 8 - used[n] for n in used)
    wanted = [PodInfo.from_object(member_pod(job_object("b", other, gpus=gpus), i)) for i in range(other)]
    result = place(snapshot, wanted)
    for a in result.assignments:
        used[a.node] += gpus
    assert all(total <= 8 for total in used.values()), used


def test_under_strict_fifo_a_job_behind_a_blocked_gang_is_queued_not_reserved():
    from reconciler.engine.gangs.queueing import QueueView

    job = job_object("train", 4)
    snapshot, gang = world(job)

    decision = decide(gang, snapshot, NOW, queue=QueueView(blocked_by="gang ml/big (priority 0, waiting 1m)"))

    assert decision.rule is lifecycle.QUEUED and decision.find(actions.Reserve) is None
    assert "queued behind gang ml/big (priority 0, waiting 1m) (StrictFIFO)" in decision.reason
