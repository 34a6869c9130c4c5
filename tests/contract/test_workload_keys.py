"""Rank order and workload recognition for the pods workload controllers create."""

from __future__ import annotations

from typing import Any

from troupe import contract, ranks


def pod(name: str, labels: dict[str, str] | None = None, owner: tuple[str, str] | None = None,
        controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u",
                                    "controller": controller}]
    return {"metadata": meta}


def test_jobset_ranks_follow_replicated_job_order_then_job_index_then_completion_index():
    def member(name: str, job: int, index: int) -> dict[str, Any]:
        return pod(name, {contract.JOBSET_GLOBAL_INDEX_LABEL: str(job), contract.JOB_COMPLETION_INDEX: str(index)})

    pods = [member("w-1-0", 2, 0), member("w-0-3", 1, 3), member("driver", 0, 0), member("w-0-0", 1, 0),
            member("w-1-10", 2, 10), member("w-1-2", 2, 2)]
    assert [p["metadata"]["name"] for p in sorted(pods, key=ranks.rank_key)] == [
        "driver", "w-0-0", "w-0-3", "w-1-0", "w-1-2", "w-1-10"]


def test_a_kubeflow_master_ranks_before_the_worker_of_the_same_index():
    def member(name: str, kind: str, index: int) -> dict[str, Any]:
        return pod(name, {contract.KUBEFLOW_REPLICA_TYPE: kind, contract.KUBEFLOW_REPLICA_INDEX: str(index)})

    pods = [member("pt-worker-1", "worker", 1), member("pt-worker-0", "worker", 0), member("pt-master-0", "master", 0)]
    assert [p["metadata"]["name"] for p in sorted(pods, key=ranks.rank_key)] == [
        "pt-master-0", "pt-worker-0", "pt-worker-1"]


def test_a_leader_worker_set_group_ranks_by_worker_index_leader_first():
    pods = [pod(f"s-0-{i}" if i else "s-0", {contract.LWS_WORKER_INDEX_LABEL: str(i)}) for i in (3, 0, 10, 2)]
    assert [p["metadata"]["name"] for p in sorted(pods, key=ranks.rank_key)] == ["s-0", "s-0-2", "s-0-3", "s-0-10"]


def test_the_workloads_whose_pods_a_namespace_opt_in_covers():
    assert contract.created_by_workload(pod("a", owner=("batch/v1", "Job")))
    assert contract.created_by_workload(pod("a", owner=("kubeflow.org/v1", "PyTorchJob")))
    assert contract.created_by_workload(pod("a", {contract.LWS_NAME_LABEL: "s"}, owner=("apps/v1", "StatefulSet")))
    assert not contract.created_by_workload(pod("a", owner=("apps/v1", "ReplicaSet")))
    assert not contract.created_by_workload(pod("a", owner=("batch/v1", "Job"), controller=False))
    assert not contract.created_by_workload(pod("a"))
