"""A Kubeflow TrainJob runs as its JobSet, one gang, with the trainer's own controller
(docs/decisions/078-trainjob-with-its-controller.md).

Kubeflow Trainer v2's controller manager (``trainer``: built from its module, with its CRDs,
webhooks and the ``torch-distributed`` ClusterTrainingRuntime it ships) turns a TrainJob into
a JobSet; the JobSet controller (``workload_controllers``) makes its Jobs and pods. The
namespace is labelled ``troupe.io/gang-mode: auto`` and nothing else names a gang. Each pod
asks for a whole node of examples/nodes.yaml (8 GPUs, 30 of 32 CPUs, 200 of 256 GiB)::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster.trainer import TORCH_RUNTIME, TRAINER_API
from tests.support.e2e import delete_namespace, new_namespace, wait_for
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
GANG_GROUP, GANG_VERSION, GANG_PLURAL = contract.GANG_API
#: One node's worth of everything a pod of the TrainJob asks for.
WHOLE_NODE = {"requests": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}


@pytest.fixture
def opted_in(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace labelled ``troupe.io/gang-mode: auto``, deleted afterwards."""
    name = new_namespace(admin_core, "trainjob")
    admin_core.patch_namespace(name, {"metadata": {"labels": {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO}}})
    yield name
    delete_namespace(admin_core, name, timeout=90)


def trainjob(name: str, nodes: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A TrainJob on the trainer's ``torch-distributed`` runtime with ``nodes`` whole-node
    pods; ``annotations`` go to its JobSet (``spec.annotations``)."""
    spec: dict[str, Any] = {"runtimeRef": {"name": TORCH_RUNTIME},
                            "trainer": {"numNodes": nodes, "resourcesPerNode": WHOLE_NODE}}
    if annotations:
        spec["annotations"] = annotations
    return {"apiVersion": "/".join(TRAINER_API), "kind": "TrainJob", "metadata": {"name": name}, "spec": spec}


def create_trainjob(api: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(api).create_namespaced_custom_object(*TRAINER_API, namespace, "trainjobs",
                                                                             body))


def pods_of(core: client.CoreV1Api, namespace: str, jobset: str) -> list[Any]:
    return [p for p in core.list_namespaced_pod(namespace, label_selector=f"{contract.JOBSET_NAME_LABEL}={jobset}").items
            if not p.metadata.deletion_timestamp]


def gang_object(api: Any, namespace: str, key: str) -> dict[str, Any] | None:
    """The Gang object whose ``reconciler.troupe.io/gang-key`` is ``namespace/key``."""
    gangs = client.CustomObjectsApi(api).list_namespaced_custom_object(GANG_GROUP, GANG_VERSION, namespace, GANG_PLURAL)
    for g in gangs["items"]:
        if (g["metadata"].get("annotations") or {}).get("reconciler.troupe.io/gang-key") == f"{namespace}/{key}":
            return dict(g)
    return None


def test_a_trainjob_runs_as_its_jobset_one_gang_of_4_whole_nodes_in_one_subblock(trainer, troupe, admin_api,
                                                                                 admin_core, opted_in):
    made = create_trainjob(admin_api, opted_in, trainjob("llm", 4))

    def running() -> list[Any] | None:
        pods = pods_of(admin_core, opted_in, "llm")
        return pods if len(pods) == 4 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for("the TrainJob's 4 pods Running", running, timeout=180)

    jobset = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(*JOBSET_API[:2], opted_in,
                                                                            JOBSET_API[2], "llm")
    [owner] = [o for o in jobset["metadata"]["ownerReferences"] if o.get("controller")]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", made["metadata"]["uid"]), "the trainer made the JobSet"
    assert len({p.metadata.annotations[contract.PLANNED_AT] for p in pods}) == 1, "one plan: released together"
    for p in pods:
        assert p.metadata.annotations["troupe.io/gang-size"] == "auto", "stamped by the webhook, no user key"
        assert not p.spec.scheduling_gates
        assert p.spec.node_selector == {contract.HOSTNAME_LABEL: p.spec.node_name}
    assert len({p.spec.node_name for p in pods}) == 4, "a whole node each"
    labels = {n.metadata.name: n.metadata.labels for n in admin_core.list_node().items}
    assert len({labels[p.spec.node_name][SUBBLOCK] for p in pods}) == 1, "the smallest domain: one subblock"
    ranks = sorted((int(p.metadata.annotations[contract.ASSIGNED_RANK]), int(p.metadata.labels[contract.JOB_COMPLETION_INDEX]))
                   for p in pods)
    assert ranks == [(i, i) for i in range(4)], "rank = the node's completion index"

    def bound() -> dict[str, Any] | None:
        gang = gang_object(admin_api, opted_in, "jobset:llm:0")
        return gang if gang and (gang.get("status") or {}).get("bound") == 4 else None

    status = wait_for("the JobSet gang's object with 4 bound", bound, timeout=60)["status"]
    assert status["size"] == 4, status
    assert status["domain"].startswith(f"{SUBBLOCK}="), status


def test_a_trainjob_with_no_subblock_big_enough_binds_nothing_and_its_gang_says_why(trainer, troupe, admin_api,
                                                                                  admin_core, opted_in):
    # 5 whole nodes, all inside one subblock (the TrainJob's annotations go to its JobSet):
    # a subblock has 4 hosts, so there is no room for it anywhere, though 16 nodes are free.
    create_trainjob(admin_api, opted_in, trainjob("wide", 5, {contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}))

    def told() -> dict[str, Any] | None:
        gang = gang_object(admin_api, opted_in, "jobset:wide:0")
        status = (gang or {}).get("status") or {}
        return status if status.get("present") == 5 and status.get("phase") == "Unschedulable" else None

    status = wait_for("the JobSet gang's object Unschedulable with its 5 members", told, timeout=180)
    assert (status["size"], status["gated"], status["released"], status["bound"]) == (5, 5, 0, 0), status
    assert status["reason"] == "Unschedulable", status
    assert status["message"].startswith(f"fits 4 of 5 members in one {SUBBLOCK}"), status
    time.sleep(3)  # a decision made meanwhile would have released someone
    pods = pods_of(admin_core, opted_in, "wide")
    assert len(pods) == 5
    assert all(p.spec.scheduling_gates and not p.spec.node_name for p in pods), "nothing bound, every member gated"


def test_a_trainjob_larger_than_the_free_nodes_binds_nothing_beside_a_running_one(trainer, troupe, admin_api,
                                                                                admin_core, opted_in):
    create_trainjob(admin_api, opted_in, trainjob("small", 4))
    wait_for("the first TrainJob's 4 pods Running",
             lambda: len(pods := pods_of(admin_core, opted_in, "small")) == 4 and all(p.status.phase == "Running" for p in pods),
             timeout=180)
    # 13 whole nodes where 12 are free: too little room anywhere, and no one to preempt
    # (gangPreemptionMode off, the default).
    create_trainjob(admin_api, opted_in, trainjob("big", 13))

    def told() -> dict[str, Any] | None:
        gang = gang_object(admin_api, opted_in, "jobset:big:0")
        status = (gang or {}).get("status") or {}
        return status if status.get("present") == 13 and status.get("phase") == "Unschedulable" else None

    status = wait_for("the second JobSet gang's object Unschedulable with its 13 members", told, timeout=180)
    assert (status["size"], status["gated"], status["released"], status["bound"]) == (13, 13, 0, 0), status
    assert status["reason"] == "Unschedulable", status
    # e.g. "fits 12 of 13 members; 4 nodes excluded: insufficient cpu: 4, ... nvidia.com/gpu: 4"
    assert status["message"].startswith("fits 12 of 13 members"), status
    time.sleep(3)  # a decision made meanwhile would have released someone
    assert all(p.spec.scheduling_gates and not p.spec.node_name for p in pods_of(admin_core, opted_in, "big"))
    assert all(p.status.phase == "Running" for p in pods_of(admin_core, opted_in, "small")), "the first runs on"
