"""Kueue's topology-aware scheduling annotations in the engine
(docs/decisions/039-kueue-annotations.md): a workload written for Kueue is a gang whose
level is Kueue's, released as created from its template; a workload Kueue admitted is not
Troupe's; a member behind one of Kueue's gates is held, saying why."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.membership import planned_gangs
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from testbed.as_created import NAMESPACE, gangs_of, job_object, member_pod, workloads_of
from testbed.engine_builders import make_node
from troupe.config import Config
from troupe.layers import SliceLayer

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0
KEY = f"{NAMESPACE}/job:train"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def kueue_job(size: int, **annotations: str) -> dict[str, Any]:
    """A Job written for Kueue: its template asks with Kueue's annotations, names no gang."""
    job = job_object("train", size, annotations=annotations)
    del job["spec"]["template"]["metadata"]["annotations"]["troupe.io/gang-size"]
    return job


def nodes() -> list[NodeInfo]:
    """Eight nodes of 8 GPUs, 4 per subblock; the first subblock has one node busy."""
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(gpu=8).topology("b0", f"s{i // 4}", f"h{i}").build())
            for i in range(8)]


def test_a_job_written_for_kueues_required_topology_is_reserved_whole_inside_one_subblock() -> None:
    job = kueue_job(4, **{REQUIRED: SUBBLOCK})
    known = workloads_of(job)
    assert KEY in planned_gangs(known, CONFIG), "its template counts as <prefix>-size: auto"
    snapshot = Snapshot(nodes(), [], TopologyLevels.default())
    gang = gangs_of(snapshot, known, CONFIG)[KEY]
    assert gang.topology.required_level == SUBBLOCK
    decision = decide(gang, snapshot, NOW)
    assert decision.rule is lifecycle.RESERVED, decision.reason
    assert "gce-topology-subblock=b0/s" in decision.reason


def test_a_job_kueue_admitted_is_not_troupes() -> None:
    job = kueue_job(4, **{REQUIRED: SUBBLOCK, "kueue.x-k8s.io/workload": "job-train-1"})
    assert planned_gangs(workloads_of(job), CONFIG) == {}
    labelled = kueue_job(4, **{REQUIRED: SUBBLOCK})
    labelled["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "main"
    assert planned_gangs(workloads_of(labelled), CONFIG) == {}


def test_a_gang_with_a_minimum_reserves_every_rank_when_they_fit_else_its_first_minimum() -> None:
    job = job_object("train", 8, annotations={"troupe.io/gang-min-size": "4"})
    known = workloads_of(job)
    assert KEY in planned_gangs(known, CONFIG)
    roomy = Snapshot(nodes(), [], TopologyLevels.default())
    decision = decide(gangs_of(roomy, known, CONFIG)[KEY], roomy, NOW)
    assert decision.rule is lifecycle.RESERVED and "reserved 8 node(s)" in decision.reason
    busy = [PodInfo.from_object(make_pod_on(f"n{i}")) for i in range(4, 8)]  # the second subblock taken
    tight = Snapshot(nodes(), busy, TopologyLevels.default())
    decision = decide(gangs_of(tight, known, CONFIG)[KEY], tight, NOW)
    assert decision.rule is lifecycle.RESERVED, decision.reason
    assert "reserved 4 node(s)" in decision.reason and "room for the first 4 (minimum 4)" in decision.reason
    record = decision.actions[0].record
    assert record.nodes == ("n0", "n1", "n2", "n3")
    stale = gangs_of(Snapshot(nodes(), busy, TopologyLevels.default()),
                     workloads_of(job_object("train", 8, annotations={"troupe.io/gang-min-size": "4"},
                                             record=record)), CONFIG)[KEY]
    assert stale.reservation_stale == "", "a reservation of the first minimum fits its workload"


def make_pod_on(node: str) -> dict[str, Any]:
    """A running pod outside any gang that takes every GPU of ``node``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{node}", "namespace": "other", "uid": f"busy-{node}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {
                "nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running"}}


def test_the_members_of_a_kueue_job_read_kueues_slices() -> None:
    job = kueue_job(4, **{"kueue.x-k8s.io/podset-slice-required-topology": SUBBLOCK,
                          "kueue.x-k8s.io/podset-slice-size": "2"})
    pods = [member_pod(job, i) for i in range(4)]
    for p in pods:  # as the webhook admits them
        p["metadata"]["annotations"]["troupe.io/gang-size"] = "auto"
    members = [PodInfo.from_object(p) for p in pods]
    gang = build_gang(KEY, members, CONFIG, {}, workloads_of(job))
    assert gang.topology.slices == (SliceLayer(2, SUBBLOCK),)


@pytest.mark.parametrize(("gate", "want"), [
    ("kueue.x-k8s.io/topology", "carries Kueue's scheduling gate kueue.x-k8s.io/topology: Kueue's topology-aware "
                                "scheduling places it, so Troupe does not"),
    ("kueue.x-k8s.io/admission", "waits for Kueue to admit its workload (scheduling gate kueue.x-k8s.io/admission)"),
])
def test_a_member_behind_one_of_kueues_gates_holds_its_gang_saying_why(gate: str, want: str) -> None:
    job = job_object("train", 2, annotations={"troupe.io/release": "WhenComplete"})
    pods = [member_pod(job, i) for i in range(2)]
    pods[1]["spec"]["schedulingGates"].append({"name": gate})
    snapshot = Snapshot(nodes(), [PodInfo.from_object(p) for p in pods], TopologyLevels.default())
    gang = gangs_of(snapshot, workloads_of(job), CONFIG)[KEY]
    decision = decide(gang, snapshot, NOW)
    assert decision.phase is lifecycle.Phase.HELD
    assert want in decision.reason
    assert decision.release == ()
