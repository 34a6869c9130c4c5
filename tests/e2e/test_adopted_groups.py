"""Pods adopted from Volcano and KAI that name no group, on a control plane of their own with
Troupe configured ``adoptSchedulerNames: [volcano, kai-scheduler]``
(docs/decisions/065-adopted-pods-join-their-peers-groups.md): each runs in the group its
peer's own controller would make, whole or not at all, never one pod alone.

- Volcano's own getting-started tutorial, verbatim: a Deployment of 3 with
  ``scheduling.volcano.sh/group-min-member: "2"`` and ``schedulerName: volcano``. Volcano's
  controller makes one PodGroup per ReplicaSet, its minimum the annotation the Deployment
  controller copies to the ReplicaSet. Adopted, its pods are gated; with room for one pod
  only, none binds; with room, all three run, released together.
- KAI: pods with ``schedulerName: kai-scheduler`` and no group, made by one PyTorchJob (KAI's
  pod-grouper makes one group of all its pods): with room for three of four, none binds;
  with room, all four run. The same for the pods of a plain Job, one gang of its parallelism.
  A TFJob's pod (owner a TFJob, whose group Troupe cannot size yet) is not adopted.

Room is made by cordoning nodes (a cluster of its own: nothing else runs on it)::

    gpu-b0-s0 [h0 h1 h2 h3]  gpu-b0-s1 [....]  gpu-b1-s0 [....]  gpu-b1-s1 [....]   32 CPUs, 8 GPUs each
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from devtools.devcluster.workloads import install_crds
from tests.support import e2e
from troupe import contract
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NODES_FILE = REPO / "examples" / "nodes.yaml"
NODES = [f"gpu-b{b}-s{s}-h{h}" for b in (0, 1) for s in (0, 1) for h in range(4)]

#: Volcano's getting-started tutorial, "Deploy Standard Kubernetes Workloads (Deployment,
#: StatefulSet, etc.)", step 1, verbatim: volcano-sh/website, docs/GettingStarted/Tutorials.md
#: at 0ef50ca74346b4ef89576f9d864089b5b6b341df (https://volcano.sh/en/docs/tutorials/).
VOLCANO_TUTORIAL = """\
# deployment-with-minmember.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: my-app-deployment
  annotations:
    # Crucial for gang scheduling: This annotation tells Volcano to treat this deployment as a gang,
    # requiring at least 2 pods to be schedulable together before any are launched.
    scheduling.volcano.sh/group-min-member: "2"
  labels:
    app: my-app
spec:
  replicas: 3 # We desire 3 replicas for our application
  selector:
    matchLabels:
      app: my-app
  template:
    metadata:
      # annotations:
      #   Optional: You can also specify a specific Volcano queue for the PodGroup created by this deployment.
      #   scheduling.volcano.sh/queue-name: "my-deployment-queue"
      labels:
        app: my-app
    spec:
      schedulerName: volcano # Crucial: ensures the Volcano scheduler is used for this deployment's pods
      containers:
        - name: my-container
          image: busybox
          command: ["sh", "-c", "echo 'Hello Volcano from Deployment'; sleep 3600"] # A long-running command for demonstration
          resources:
            requests:
              cpu: 1
            limits:
              cpu: 1
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A cluster of its own, the workload CRDs installed, Troupe adopting Volcano's and KAI's names."""
    with Cluster(nodes=NODES_FILE) as cluster:
        install_crds(cluster)
        config = tmp_path_factory.mktemp("troupe") / "config.yaml"
        config.write_text("gangScheduleTimeoutJitterSeconds: 1\nadoptSchedulerNames: [volcano, kai-scheduler]\n")
        with Stack(cluster, config) as running:
            yield running


@pytest.fixture
def core(stack: Stack) -> client.CoreV1Api:
    return client.CoreV1Api(stack.cluster.api_client("admin"))


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    with e2e.temporary_namespace(core, "adopted") as name:
        yield name


@contextmanager
def room_on(core: client.CoreV1Api, open_nodes: list[str]) -> Iterator[None]:
    """Every node but ``open_nodes`` cordoned, uncordoned again on exit."""
    closed = [n for n in NODES if n not in open_nodes]
    for name in closed:
        core.patch_node(name, {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        reopen(core, closed)


def reopen(core: client.CoreV1Api, names: list[str]) -> None:
    for name in names:
        core.patch_node(name, {"spec": {"unschedulable": None}})


def pods_of(core: client.CoreV1Api, namespace: str, selector: str) -> list[Any]:
    return sorted(core.list_namespaced_pod(namespace, label_selector=selector).items, key=lambda p: p.metadata.name)


def bound(pods: list[Any]) -> list[Any]:
    return [p for p in pods if p.spec.node_name]


def stays_unbound(core: client.CoreV1Api, namespace: str, selector: str, count: int, seconds: float = 8.0) -> list[Any]:
    """Wait until ``count`` pods match ``selector``, then check that none binds for ``seconds``."""
    pods = e2e.wait_for(f"{count} pods of {selector}",
                        lambda: (p if len(p := pods_of(core, namespace, selector)) == count else None))
    with pytest.raises(AssertionError):
        e2e.wait_for("a pod bound", lambda: bound(pods_of(core, namespace, selector)) or None, timeout=seconds)
    return pods


def all_running(core: client.CoreV1Api, namespace: str, selector: str, count: int) -> list[Any]:
    return e2e.wait_for(f"{count} Running pods of {selector}", lambda: (
        p if len(p := pods_of(core, namespace, selector)) == count and all(x.status.phase == "Running" for x in p)
        else None), timeout=90)


def test_volcanos_tutorial_deployment_binds_nothing_with_room_for_one_then_runs_whole(stack, core, ns):
    filler = e2e.pod_body("filler", cpu="31")
    filler["spec"]["nodeName"] = "gpu-b0-s0-h0"
    core.create_namespaced_pod(ns, filler)  # 1 CPU left on the one node open: room for one pod
    with room_on(core, ["gpu-b0-s0-h0"]):
        stack.cluster.kubectl("create", "-n", ns, "-f", "-", input=VOLCANO_TUTORIAL)  # as the tutorial's user does
        pods = stays_unbound(core, ns, "app=my-app", 3)
        for pod in pods:
            assert pod.spec.scheduler_name == "default-scheduler"
            assert pod.metadata.annotations[ORIGINAL_SCHEDULER_NAME] == "volcano"
            assert [g.name for g in pod.spec.scheduling_gates or []] == [contract.GATE], "held by Troupe, gated"
        replica_set = pods[0].metadata.owner_references[0]
        gang = f"volcano:podgroup-{replica_set.uid}"
        condition = e2e.wait_for("the gang's reason on its members", lambda: next(
            (c for c in core.read_namespaced_pod(pods[0].metadata.name, ns).status.conditions or []
             if c.type == contract.GANG_CONDITION), None))
        assert condition.status == "False", condition
    running = all_running(core, ns, "app=my-app", 3)
    assert all(p.metadata.annotations.get(contract.ASSIGNED_NODE) == p.spec.node_name for p in running)
    out = stack.cluster.kubectl("get", "gangs", "-n", ns, "-o", "json").stdout
    names = [g["spec"]["gangName"] for g in json.loads(out)["items"]]
    assert gang in names, names


def pytorch_job(name: str) -> dict[str, Any]:
    template = {"spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "pytorch", "image": "pause"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 3, "template": template}}}}


def pytorch_pod(job: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    """A pod as the training operator makes one for ``job``, with KAI's scheduler and no group."""
    name = job["metadata"]["name"]
    pod = e2e.pod_body(f"{name}-{role}-{index}", gpus=8, labels={
        "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": role,
        "training.kubeflow.org/replica-index": str(index)})
    pod["spec"]["schedulerName"] = "kai-scheduler"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name,
                                           "uid": job["metadata"]["uid"], "controller": True}]
    return pod


def test_a_kai_pytorchjobs_pods_bind_none_with_room_for_three_of_four_then_run_whole(stack, core, ns):
    custom = client.CustomObjectsApi(stack.cluster.api_client("admin"))
    job = custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", pytorch_job("pt"))
    with room_on(core, ["gpu-b0-s0-h0", "gpu-b0-s0-h1", "gpu-b0-s0-h2"]):
        for role, index in (("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)):
            core.create_namespaced_pod(ns, pytorch_pod(job, role, index))
        pods = stays_unbound(core, ns, "training.kubeflow.org/job-name=pt", 4)
        assert all(p.spec.scheduler_name == "default-scheduler" for p in pods)
    running = all_running(core, ns, "training.kubeflow.org/job-name=pt", 4)
    assert len({p.spec.node_name for p in running}) == 4


def test_a_kai_jobs_pods_bind_none_with_room_for_two_of_four_then_run_whole(stack, core, ns):
    batch = client.BatchV1Api(stack.cluster.api_client("admin"))
    job = e2e.indexed_job("batch", 4, {}, gpus=8)
    job["spec"]["template"]["spec"]["schedulerName"] = "kai-scheduler"
    with room_on(core, ["gpu-b1-s1-h0", "gpu-b1-s1-h1"]):
        batch.create_namespaced_job(ns, job)
        pods = stays_unbound(core, ns, "job-name=batch", 4)
        assert all(p.spec.scheduler_name == "default-scheduler" and p.spec.scheduling_gates for p in pods), \
            "adopted and held, gated, as one gang of the Job's parallelism"
    running = all_running(core, ns, "job-name=batch", 4)
    assert len({p.spec.node_name for p in running}) == 4


def test_a_tfjob_pod_for_kai_is_not_adopted(stack, core, ns):
    pod = e2e.pod_body("tfjob-mnist-worker-0", labels={"training.kubeflow.org/replica-type": "worker"})
    pod["spec"]["schedulerName"] = "kai-scheduler"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                           "name": "tfjob-mnist", "uid": "6b1f0c7e-0000-4000-8000-000000000001",
                                           "controller": True}]
    stored = core.create_namespaced_pod(ns, pod, dry_run="All")
    assert stored.spec.scheduler_name == "kai-scheduler", "left to kai-scheduler: Troupe cannot size its group"
    assert not stored.spec.scheduling_gates
    assert ORIGINAL_SCHEDULER_NAME not in (stored.metadata.annotations or {})
