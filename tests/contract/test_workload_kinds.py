"""The workload kinds' contract facts (troupe/workloadkinds.py) give what the webhook and
its CEL read: the controller owners and the labels that make a pod a workload's member."""

from __future__ import annotations

from troupe import contract, ranks, workloadkinds
from troupe.workloadkinds import KIND_OF, KINDS, MEMBER_LABELS, POD_OWNERS


def test_the_kinds_give_the_owners_and_labels_a_workloads_pod_is_known_by() -> None:
    assert POD_OWNERS == (("batch", "Job"), ("kubeflow.org", "PyTorchJob"), ("kubeflow.org", "MPIJob"),
                          ("ray.io", "RayCluster"))
    assert MEMBER_LABELS == (contract.LWS_NAME_LABEL,)
    assert [k.kind for k in workloadkinds.CUSTOM_KINDS] == [
        "JobSet", "LeaderWorkerSet", "PyTorchJob", "MPIJob", "RayCluster", "RayJob"]
    assert {name: k.api_version for name, k in KIND_OF.items()} == {
        "Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
        "PyTorchJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1", "RayCluster": "ray.io/v1",
        "RayJob": "ray.io/v1"}


def test_every_rank_label_of_a_kind_is_read_by_the_rank_order() -> None:
    read = {*ranks.RANK_KEYS, contract.JOBSET_GLOBAL_INDEX_LABEL, contract.KUBEFLOW_REPLICA_TYPE,
            contract.RAY_NODE_TYPE_LABEL, contract.RAY_GROUP_LABEL}
    for kind in KINDS:
        assert kind.rank_labels, kind.kind
        assert set(kind.rank_labels) <= read, kind.kind


def test_a_pod_of_every_kind_is_known_as_a_workloads_member() -> None:
    for kind in KINDS:
        if kind.owns_pods == "labels":
            pod = {"metadata": {"name": "p", "labels": {kind.name_label: "w"},
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s",
                                                     "controller": True}]}}
        else:
            owner = {"controller": kind, "jobs": KIND_OF["Job"], "workloads": KIND_OF["RayCluster"]}[kind.owns_pods]
            pod = {"metadata": {"name": "p", "ownerReferences": [
                {"apiVersion": owner.api_version, "kind": owner.kind, "name": "w", "controller": True}]}}
        assert contract.created_by_workload(pod), kind.kind
