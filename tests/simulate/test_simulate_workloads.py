"""The simulator groups and sizes workload gangs as the reconciler does, from the workload
objects in the snapshot (``kubectl get nodes,pods,jobs,jobsets,leaderworkersets -A``)."""

from __future__ import annotations

import json

from reconciler.tools import simulate
from testbed.engine_builders import make_node, make_pod
from tests.support.snapshots import write_list
from troupe import contract

NODES = [make_node(f"b0-s{s}-h{h}").topology("b0", f"b0-s{s}", f"b0-s{s}-h{h}").allocatable(cpu="32", gpu=8).build()
         for s in range(2) for h in range(4)]
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "ml"},
          "spec": {"replicatedJobs": [
              {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
              {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}}]}}


def jobset_pod(name: str, job: int, index: int, gpus: int) -> dict:
    b = (make_pod(name, "ml").gated().annotate("troupe.io/gang-size", "auto")
         .label(contract.JOBSET_NAME_LABEL, "js").label(contract.JOBSET_RESTART_LABEL, "0")
         .label(contract.JOBSET_GLOBAL_INDEX_LABEL, str(job)).index(index).owned_by("Job", f"js-{job}")
         .requests(cpu="1", gpu=gpus or None))
    return b.build()


PODS = [jobset_pod("js-driver-0-0", 0, 0, 0)] + [
    jobset_pod(f"js-workers-{j}-{i}", 1 + j, i, 8) for j in range(2) for i in range(4)]


def run_json(tmp_path, capsys, objects):
    path = write_list(tmp_path, objects)
    assert simulate.main([str(path), "--output", "json", "--now", "2024-05-01T10:00:00Z"]) == 0
    return json.loads(capsys.readouterr().out)["gangs"]


def test_a_jobset_in_the_snapshot_sizes_its_gang_and_the_driver_is_rank_0(tmp_path, capsys):
    [gang] = run_json(tmp_path, capsys, [*NODES, JOBSET, *PODS])
    assert (gang["name"], gang["phase"], gang["size"], gang["members"]) == ("jobset:js:0", "Placed", 9, 9)
    ranks = {p["pod"]: p["rank"] for p in gang["placements"]}
    assert ranks["js-driver-0-0"] == 0 and ranks["js-workers-1-3"] == 8
    by_job = {j: {p["topology"].split("/")[1] for p in gang["placements"] if p["pod"].startswith(f"js-workers-{j}-")}
              for j in range(2)}
    assert by_job == {0: {"b0-s0"}, 1: {"b0-s1"}}, "each worker Job in one subblock"


def test_without_the_jobset_object_the_gang_waits_saying_what_is_missing(tmp_path, capsys):
    [gang] = run_json(tmp_path, capsys, [*NODES, *PODS])
    assert (gang["phase"], gang["rule"]) == ("Waiting", "WorkloadUnknown")
    assert gang["reason"] == "9 members present; size unknown: JobSet ml/js not found (deleted, or not readable by the reconciler)"


def test_a_what_if_on_the_workload_object_changes_the_gang(tmp_path, capsys):
    bigger = json.loads(json.dumps(JOBSET))
    bigger["spec"]["replicatedJobs"][1]["replicas"] = 3
    [gang] = run_json(tmp_path, capsys, [*NODES, bigger, *PODS])
    assert (gang["phase"], gang["reason"]) == ("Waiting", "9 of 13 members present (JobSet js: driver 1x1 + workers 3x4)")
