"""Workloads as gangs: grouping, sizes read from the workload object, ranks, restarts,
the workload's topology request, and the decision when the workload is not known."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.membership import group_by_gang
from testbed.engine_builders import SUBBLOCK, make_node, make_pod, snapshot_of
from troupe import contract
from troupe.config import Config
from troupe.layers import TOPOLOGY_SLICE_REQUIRED_LEVEL, TOPOLOGY_SLICE_SIZE, SliceLayer

CONFIG = Config()
NOW = 1_800_000_000.0
AUTO = {"troupe.io/gang-size": "auto", "troupe.io/gang-schedule-timeout-seconds": "30"}


def auto_pod(name: str, namespace: str = "ml") -> Any:
    b = make_pod(name, namespace).gated()
    for k, v in AUTO.items():
        b.annotate(k, v)
    return b


def job(name: str, parallelism: int | None = None, completions: int | None = None, succeeded: int = 0,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}}, "spec": spec,
            "status": {"succeeded": succeeded} if succeeded else {}}


def jobset(name: str, *replicated: tuple[str, int, int], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
            "spec": {"replicatedJobs": [
                {"name": rj, "replicas": replicas, "template": {"spec": {"parallelism": pods, "completions": pods}}}
                for rj, replicas, pods in replicated]}}


def lws(name: str, size: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": size}}}


def pytorchjob(name: str, workers: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers}, "Master": {"replicas": 1}}}}


# --- sizes --------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "obj", "want_size", "want_from"), [
    ("Job", job("train", 6, 6), 6, "Job train parallelism"),
    ("Job", job("train"), 1, "Job train parallelism"),
    ("Job", job("train", 8, 10, succeeded=4), 6, "Job train parallelism, 4 completed"),
    ("Job", job("train", 4, 10, succeeded=3), 4, "Job train parallelism, 3 completed"),
    ("JobSet", jobset("js", ("driver", 1, 1), ("workers", 2, 4)), 9, "JobSet js: driver 1x1 + workers 2x4"),
    ("JobSet", jobset("js", ("workers", 3, 16)), 48, "JobSet js: workers 3x16"),
    ("LeaderWorkerSet", lws("serve", 4), 4, "LeaderWorkerSet serve group size"),
    ("PyTorchJob", pytorchjob("pt", 3), 4, "PyTorchJob pt: Master 1 + Worker 3"),
], ids=["an indexed Job of 6", "a Job without parallelism is 1", "completions left cap parallelism",
        "parallelism below completions left", "a JobSet: driver and two worker Jobs",
        "a JobSet of 3 Jobs of 16", "a LeaderWorkerSet group", "a PyTorchJob master and workers"])
def test_the_size_is_read_from_the_workload_object(kind: str, obj: dict[str, Any], want_size: int, want_from: str) -> None:
    got = wl.workload(kind, obj)
    assert got is not None
    assert (got.size, got.size_from) == (want_size, want_from)


INT32 = 2**31 - 1
TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}


@pytest.mark.parametrize(("kind", "obj", "want"), [
    ("PyTorchJob", {"metadata": {"name": "pt", "namespace": "ml"}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": TEMPLATE}, "Worker": {"replicas": INT32, "template": TEMPLATE}}}},
     "PyTorchJob pt: Master 1 + Worker 2147483647: 2147483648 members, more than the 10000 one gang may have (held)"),
    ("JobSet", {"metadata": {"name": "js", "namespace": "ml"}, "spec": {"replicatedJobs": [
        {"name": "w", "replicas": INT32, "template": {"spec": {"parallelism": 2, "template": TEMPLATE}}}]}},
     "JobSet js: w 2147483647x2: 4294967294 members, more than the 10000 one gang may have (held)"),
    ("Job", {"metadata": {"name": "big", "namespace": "ml"}, "spec": {"parallelism": 10_001, "template": TEMPLATE}},
     "Job big parallelism: 10001 members, more than the 10000 one gang may have (held)"),
    ("JobSet", {"metadata": {"name": "none", "namespace": "ml"}, "spec": {"replicatedJobs": [
        {"name": "w", "replicas": INT32, "template": {"spec": {"parallelism": 0, "template": TEMPLATE}}}]}}, ""),
], ids=["a PyTorchJob of 2147483647 workers", "a JobSet of 2147483647 Jobs of 2", "a Job of 10001",
        "a JobSet of 2147483647 Jobs of none"])
def test_a_workload_of_more_members_than_a_gang_may_have_costs_nothing_and_says_why(
        kind: str, obj: dict[str, Any], want: str) -> None:
    tracemalloc.start()
    started = time.process_time()
    got = wl.workload(kind, obj)
    spent = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert got is not None and got.slots == () and got.too_large == want
    assert peak < 1_000_000 and spent < 0.5, (peak, spent)  # counted, never made one by one


def test_a_gang_whose_workload_is_too_large_is_held_with_the_workloads_reason() -> None:
    workers = {"apiVersion": "kubeflow.org/v1", "metadata": {"name": "pt", "namespace": "ml"}, "spec": {
        "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": INT32}}}}
    member = auto_pod("pt-master-0").owned_by("PyTorchJob", "pt", api_version="kubeflow.org/v1").info()
    gang = build_gang("ml/pytorchjob:pt", [member], CONFIG, {},
                      wl.Workloads(wl.workloads_of("PyTorchJob", [workers])))
    assert gang.held == "PyTorchJob pt: Master 1 + Worker 2147483647: 2147483648 members, more than the 10000 one gang may have (held)"


def test_an_unsupported_kind_or_a_nameless_object_gives_no_workload() -> None:
    assert wl.workload("Deployment", job("x", 1)) is None
    assert wl.workload("Job", {"metadata": {}, "spec": {}}) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=3),
                    max_leaves=15), st.sampled_from([k.kind for k in wl.KINDS]))
def test_malformed_workload_objects_never_crash_and_size_at_least_one(junk: Any, kind: str) -> None:
    obj = {"metadata": {"name": "w"}, "spec": junk}
    got = wl.workload(kind, obj)
    assert got is not None and got.size >= 1


# --- grouping -----------------------------------------------------------------------------
def jobset_pod(name: str, rj_index: int, completion: int, attempt: int = 0) -> Any:
    return (auto_pod(name).label(contract.JOBSET_NAME_LABEL, "js").label(contract.JOBSET_RESTART_LABEL, str(attempt))
            .label(contract.JOBSET_GLOBAL_INDEX_LABEL, str(rj_index)).index(completion)
            .owned_by("Job", f"js-{rj_index}"))


@pytest.mark.parametrize(("pod", "want"), [
    (auto_pod("p").owned_by("Job", "train"), "ml/job:train"),
    (jobset_pod("p", 1, 0), "ml/jobset:js:0"),
    (jobset_pod("p", 1, 0, attempt=2), "ml/jobset:js:2"),
    (auto_pod("p").label(contract.LWS_NAME_LABEL, "serve").label(contract.LWS_GROUP_INDEX_LABEL, "1")
     .owned_by("StatefulSet", "serve-1", "apps/v1"), "ml/lws:serve:1"),
    (auto_pod("p").owned_by("PyTorchJob", "pt", "kubeflow.org/v1"), "ml/pytorchjob:pt"),
    (auto_pod("p").owned_by("ReplicaSet", "web", "apps/v1"), "ml/pod:p"),
    (auto_pod("p"), "ml/pod:p"),
    (make_pod("p", "ml").owned_by("Job", "train").gang("own", 2).gated(), "ml/own"),
], ids=["a Job's pod", "a JobSet's pod", "a JobSet's pod after two restarts", "a LeaderWorkerSet group's pod",
        "a PyTorchJob's pod", "a ReplicaSet's pod stays alone", "an ownerless pod stays alone",
        "a pod's own gang name wins"])
def test_auto_members_are_grouped_by_their_workload(pod: Any, want: str) -> None:
    assert gang_key(pod.info(), CONFIG) == want


def test_an_auto_member_no_workload_made_is_held_saying_so() -> None:
    pod = auto_pod("lonely").info()
    gang = build_gang("ml/pod:lonely", [pod], CONFIG, {})
    assert gang.held == ("member lonely: troupe.io/gang-size: auto, but no supported workload "
                         "(Job, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster, RayJob) created it")


# --- the JobSet of the issue: a driver and 2 worker Jobs of 4 -----------------------------
#
#   block      b0                                  b1
#   subblock   b0-s0             b0-s1             b1-s0             b1-s1
#   host       h0 h1 h2 h3       h0 h1 h2 h3       h0 h1 h2 h3       h0 h1 h2 h3      8 GPUs each
NODES = [make_node(f"b{b}-s{s}-h{h}").topology(f"b{b}", f"b{b}-s{s}", f"b{b}-s{s}-h{h}").allocatable(cpu="32", gpu=8)
         for b in range(2) for s in range(2) for h in range(4)]
JOBSET_PODS = [jobset_pod("js-driver-0-0", 0, 0).requests(cpu="1")] + [
    jobset_pod(f"js-workers-{j}-{i}", 1 + j, i).requests(cpu="1", gpu=8) for j in range(2) for i in range(4)]
JOBSET_WORKLOADS = wl.Workloads(wl.workloads_of("JobSet", [jobset("js", ("driver", 1, 1), ("workers", 2, 4))]))


def test_a_jobset_is_one_gang_of_nine_with_the_driver_at_rank_0_and_each_worker_job_in_one_subblock() -> None:
    snapshot = snapshot_of(NODES, JOBSET_PODS)
    [(key, pods)] = group_by_gang(snapshot.pods.values(), CONFIG).items()
    gang = build_gang(key, pods, CONFIG, {}, JOBSET_WORKLOADS)
    assert (key, gang.size, gang.size_from) == ("ml/jobset:js:0", 9, "JobSet js: driver 1x1 + workers 2x4")

    decision = decide(gang, snapshot, NOW)

    assert decision.phase is Phase.PLACED, decision.reason
    ranks = {m.pod.split("/")[1]: m.rank for m in decision.release}
    assert ranks["js-driver-0-0"] == 0
    assert [ranks[f"js-workers-0-{i}"] for i in range(4)] == [1, 2, 3, 4]
    assert [ranks[f"js-workers-1-{i}"] for i in range(4)] == [5, 6, 7, 8]
    subblocks = {j: {snapshot.nodes[snapshot.index[m.node]].labels[SUBBLOCK] for m in decision.release
                     if m.pod.startswith(f"ml/js-workers-{j}-")} for j in range(2)}
    assert all(len(s) == 1 for s in subblocks.values()), subblocks
    assert subblocks[0] != subblocks[1]


def test_a_jobset_waits_for_its_ninth_member_all_or_nothing() -> None:
    snapshot = snapshot_of(NODES, JOBSET_PODS[:-1])
    [(key, pods)] = group_by_gang(snapshot.pods.values(), CONFIG).items()
    decision = decide(build_gang(key, pods, CONFIG, {}, JOBSET_WORKLOADS), snapshot, NOW)
    assert (decision.phase, decision.rule.name) == (Phase.WAITING, "MembersMissing")
    assert decision.reason == "8 of 9 members present (JobSet js: driver 1x1 + workers 2x4)"
    assert decision.release == ()


def test_a_jobset_restart_is_a_new_gang_that_never_counts_the_old_pods() -> None:
    old = [jobset_pod(f"old-{i}", 1, i).requests(gpu=1).on(f"b0-s0-h{i}") for i in range(3)]
    for p in old:
        del p.obj["spec"]["schedulingGates"]
    new = [jobset_pod(f"new-{i}", 1, i, attempt=1).requests(gpu=1) for i in range(3)]
    snapshot = snapshot_of(NODES, [*old, *new])
    groups = group_by_gang(snapshot.pods.values(), CONFIG)
    assert set(groups) == {"ml/jobset:js:0", "ml/jobset:js:1"}
    workloads = wl.Workloads(wl.workloads_of("JobSet", [jobset("js", ("workers", 1, 3))]))
    gang = build_gang("ml/jobset:js:1", groups["ml/jobset:js:1"], CONFIG, {}, workloads)
    decision = decide(gang, snapshot, NOW)
    assert decision.phase is Phase.PLACED
    assert [m.rank for m in decision.release] == [0, 1, 2], "released together, as a gang of its own"


# --- LeaderWorkerSet groups -------------------------------------------------------------------
def lws_pod(name: str, group: int, worker: int, created: str = "2024-01-01T00:00:00Z") -> Any:
    return (auto_pod(name).label(contract.LWS_NAME_LABEL, "serve").label(contract.LWS_GROUP_INDEX_LABEL, str(group))
            .label(contract.LWS_WORKER_INDEX_LABEL, str(worker)).created(created).requests(gpu=1))


def test_a_leader_worker_set_of_two_groups_of_four_is_two_gangs_of_four_leader_first() -> None:
    pods = [lws_pod(f"serve-{g}" if w == 0 else f"serve-{g}-{w}", g, w) for g in range(2) for w in range(4)]
    snapshot = snapshot_of(NODES, pods)
    workloads = wl.Workloads(wl.workloads_of("LeaderWorkerSet", [lws("serve", 4)]))
    groups = group_by_gang(snapshot.pods.values(), CONFIG)
    assert sorted(groups) == ["ml/lws:serve:0", "ml/lws:serve:1"]
    for key, members in groups.items():
        gang = build_gang(key, members, CONFIG, {}, workloads)
        assert gang.size == 4
        assert gang.members[0].name == f"serve-{key[-1]}", "the leader is rank 0"


def test_a_recreated_group_leaves_out_the_old_groups_pods_on_their_way_out() -> None:
    old = lws_pod("serve-0-1", 0, 1, "2024-01-01T00:00:00Z").on("b0-s0-h0")
    del old.obj["spec"]["schedulingGates"]
    new = [lws_pod("serve-0", 0, 0, "2024-01-01T00:05:00Z"), lws_pod("serve-0-2", 0, 2, "2024-01-01T00:05:01Z")]
    snapshot = snapshot_of(NODES, [old, *new])
    workloads = wl.Workloads(wl.workloads_of("LeaderWorkerSet", [lws("serve", 3)]))
    gang = build_gang("ml/lws:serve:0", list(snapshot.pods.values()), CONFIG, {}, workloads)
    assert [p.name for p in gang.members] == ["serve-0", "serve-0-2"]
    decision = decide(gang, snapshot, NOW)
    assert (decision.phase, decision.rule.name) == (Phase.WAITING, "MembersMissing"), \
        "the new leader is not released alone as a replacement next to the old worker"


# --- the workload is the source of truth -------------------------------------------------------
def test_a_job_whose_parallelism_drops_needs_only_the_new_size() -> None:
    pods = [auto_pod(f"train-{i}").owned_by("Job", "train").index(i).requests(gpu=1) for i in range(4)]
    snapshot = snapshot_of(NODES, pods)
    members = list(snapshot.pods.values())
    before = build_gang("ml/job:train", members, CONFIG, {}, wl.Workloads(wl.workloads_of("Job", [job("train", 6, 6)])))
    assert decide(before, snapshot, NOW).rule.name == "MembersMissing"
    after = build_gang("ml/job:train", members, CONFIG, {}, wl.Workloads(wl.workloads_of("Job", [job("train", 4, 6)])))
    assert decide(after, snapshot, NOW).phase is Phase.PLACED


def test_a_topology_level_given_once_on_the_workload_applies_unless_a_member_asks_for_one() -> None:
    pods = [auto_pod(f"train-{i}").owned_by("Job", "train").index(i).info() for i in range(2)]
    on_job = {contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}
    workloads = wl.Workloads(wl.workloads_of("Job", [job("train", 2, 2, annotations=on_job)]))
    assert build_gang("ml/job:train", pods, CONFIG, {}, workloads).topology.required_level == SUBBLOCK
    own = [auto_pod(f"train-{i}").owned_by("Job", "train").index(i)
           .annotate(contract.TOPOLOGY_PREFERRED_LEVEL, SUBBLOCK).info() for i in range(2)]
    mine = build_gang("ml/job:train", own, CONFIG, {}, workloads).topology
    assert (mine.required_level, mine.preferred_level) == (None, SUBBLOCK)
    bad = wl.Workloads(wl.workloads_of("Job", [job("train", 2, 2, annotations={contract.TOPOLOGY_REQUIRED_LEVEL: "rack"})]))
    assert build_gang("ml/job:train", pods, CONFIG, {}, bad).held.startswith(
        "Job train: annotation troupe.io/topology-required-level: must name a configured level")


@pytest.mark.parametrize(("workloads", "want"), [
    (wl.Workloads(), "2 members present; size unknown: JobSet ml/js not found (deleted, or not readable by the reconciler)"),
    (wl.Workloads(unavailable={"JobSet": "the resource jobsets.jobset.x-k8s.io is not served"}),
     "2 members present; size unknown: JobSet ml/js cannot be read: the resource jobsets.jobset.x-k8s.io is not served"),
], ids=["not found", "its CRD is not installed"])
def test_a_gang_whose_workload_is_unknown_stays_gated_with_a_reason_that_says_so(workloads: wl.Workloads, want: str) -> None:
    snapshot = snapshot_of(NODES, [jobset_pod(f"p-{i}", 0, i) for i in range(2)])
    gang = build_gang("ml/jobset:js:0", list(snapshot.pods.values()), CONFIG, {}, workloads)
    decision = decide(gang, snapshot, NOW + 3600)
    assert (decision.phase, decision.rule.name, decision.reason) == (Phase.WAITING, "WorkloadUnknown", want)
    assert decision.release == () and decision.recheck_at is None



def test_slices_given_on_the_workload_are_the_gangs_and_its_plan_keeps_them() -> None:
    # 8 members of 4 GPUs in slices of 4 per subblock; b1 is full, b0's subblocks hold 6
    # each: the plain plan puts 6 in one and 2 in the other, the slices 4 and 4.
    pods = [auto_pod(f"train-{i}").owned_by("Job", "train").index(i).requests(gpu=4) for i in range(8)]
    busy = [make_pod(f"busy-{s}-{h}", "other").requests(gpu=8).on(f"b1-s{s}-h{h}") for s in range(2) for h in range(4)]
    busy += [make_pod(f"busy-{s}", "other").requests(gpu=8).on(f"b0-s{s}-h0") for s in range(2)]
    snapshot = snapshot_of(NODES, [*pods, *busy])
    on_job = {TOPOLOGY_SLICE_SIZE: "4", TOPOLOGY_SLICE_REQUIRED_LEVEL: SUBBLOCK}
    workloads = wl.Workloads(wl.workloads_of("Job", [job("train", 8, 8, annotations=on_job)]))
    members = [p for p in snapshot.pods.values() if p.name.startswith("train")]
    gang = build_gang("ml/job:train", members, CONFIG, {}, workloads)
    assert gang.topology.slices == (SliceLayer(4, SUBBLOCK),)
    decision = decide(gang, snapshot, NOW)
    assert decision.phase is Phase.PLACED, decision.reason
    nodes = {m.pod.split("/")[1]: m.node for m in decision.release}
    subblocks = [nodes[f"train-{i}"].rsplit("-", 1)[0] for i in range(8)]
    assert len(set(subblocks[:4])) == 1 and len(set(subblocks[4:])) == 1
    assert subblocks[0] != subblocks[4]
