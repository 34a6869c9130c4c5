"""Only the reservations the reconciler wrote hold capacity
(docs/decisions/049-hostile-tenants-third-round.md): a record whose signature does not verify
under the reconciler's key (none, another key, or copied from another workload) is no
record, and a record the gang could not have made (planned in the future, or spread over
domains its required level forbids) is dropped instead of released onto."""

from __future__ import annotations

import dataclasses

from reconciler.engine.decision import actions
from reconciler.engine.decision.decide import decide
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs import lifecycle
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record, authentic, sign
from reconciler.engine.placement.place import place_gang as place
from testbed.as_created import NAMESPACE, gangs_of, job_object, member_pod, snapshot_of
from testbed.engine_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

KEY = b"the reconciler's own key"
CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
RECORD = Record("job:train", "2027-01-15T08:00:00.000+00:00", ("n0", "n1", "n2", "n3"))


def carrying(record: Record, signature: str, name: str = "train", **kw: object) -> dict[str, object]:
    job = job_object(name, 4, **kw)
    job["metadata"]["annotations"][contract.RESERVATION] = dataclasses.replace(record, signature=signature).encode()  # type: ignore[index]
    return job


def read(job: dict[str, object]) -> wl.Workload:
    found = wl.workload("Job", job, KEY)
    assert found is not None
    return found


def test_a_record_signed_by_the_reconciler_for_that_very_workload_is_read() -> None:
    job = job_object("train", 4)
    signature = sign(RECORD, ("Job", NAMESPACE, "train"), job["metadata"]["uid"], KEY)
    assert read(carrying(RECORD, signature)).record == RECORD


def test_an_unsigned_or_forged_or_copied_record_is_no_record() -> None:
    other_uid = sign(RECORD, ("Job", NAMESPACE, "train"), "uid-of-another-job", KEY)
    other_key = sign(RECORD, ("Job", NAMESPACE, "train"), "uid-train-train", b"a tenant's guess")
    for signature in ("", "0" * 64, other_uid, other_key):
        found = read(carrying(RECORD, signature))
        assert found.record is None, signature
        assert "not written by this reconciler (its signature does not verify): ignored" in found.record_error
    assert not authentic(dataclasses.replace(RECORD, signature=other_uid), ("Job", NAMESPACE, "train"),
                         "uid-train-train", KEY)


def test_without_the_key_a_record_is_read_as_the_reconcilers() -> None:
    found = wl.workload("Job", carrying(RECORD, ""))
    assert found is not None and found.record == RECORD  # the simulator and kubectl troupe


def nodes() -> list[NodeInfo]:
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(gpu=8).topology("b0", f"s{i // 4}", f"h{i}").build())
            for i in range(8)]


def decided(record: Record, **kw: object) -> Decision:
    job = carrying(record, "", **kw)
    known = wl.Workloads(wl.workloads_of("Job", [job]))
    pods = [PodInfo.from_object(member_pod(job, i)) for i in range(4)]
    snapshot = snapshot_of(nodes(), pods, known)
    gang = gangs_of(snapshot, known, CONFIG)[f"{NAMESPACE}/job:train"]
    return decide(gang, snapshot, NOW)


def test_a_record_planned_in_year_9999_is_dropped_not_released_onto() -> None:
    future = dataclasses.replace(RECORD, planned_at="9999-01-01T00:00:00.000+00:00")
    decision = decided(future)
    assert decision.rule is lifecycle.RESERVATION_DROPPED, decision.reason
    assert decision.find(actions.Release) is None
    assert "not a time that has come" in decision.reason


def test_a_record_across_subblocks_for_a_gang_that_requires_one_is_dropped() -> None:
    spread = dataclasses.replace(RECORD, nodes=("n0", "n1", "n4", "n5"))
    decision = decided(spread, annotations={contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK})
    assert decision.rule is lifecycle.RESERVATION_DROPPED, decision.reason
    assert f"span 2 domains of {SUBBLOCK}" in decision.reason


def test_a_record_on_a_workload_troupe_does_not_plan_holds_nothing_for_anyone() -> None:
    # A tenant's plain Job (no Troupe key in its template) carrying a record of all 8 nodes,
    # even one that verifies: only the workloads Troupe plans have reservations.
    plain = job_object("plain", 4)
    del plain["spec"]["template"]["metadata"]["annotations"]["troupe.io/gang-size"]  # type: ignore[index]
    everything = Record("job:plain", RECORD.planned_at, tuple(f"n{i}" for i in range(8)))
    plain["metadata"]["annotations"][contract.RESERVATION] = everything.encode()  # type: ignore[index]
    known = wl.Workloads(wl.workloads_of("Job", [plain]))
    assert known.objects[("Job", NAMESPACE, "plain")].record == everything
    other = [PodInfo.from_object(make_pod_of_other_team(i)) for i in range(2)]
    snapshot = snapshot_of(nodes(), other, known)
    assert snapshot.reservations == {}
    assert place(snapshot, other).placed, "every node is free for another team's gang"


def make_pod_of_other_team(i: int) -> dict[str, object]:
    return make_pod(f"w-{i}", "team-b").gang("g", 2).requests(gpu=8).gated().build()
