"""RayClusters and RayJobs ganged by Troupe with the real KubeRay operator (v1.5.0, built from
its module, batch scheduler off: devtools/devcluster/kuberay.py, rayoperator.py;
docs/decisions/075-ray-and-mpi-workloads.md, 076-kuberay-in-tests.md).

The clusters are KubeRay's own sample (``config/samples/ray-cluster.sample.yaml``: a head
of 1 CPU and 2G, one worker group of 1 CPU and 1G) with whole-node workers (8 GPUs each) and
``troupe.io/topology-required-level`` on their pod templates, in a namespace labelled
``troupe.io/gang-mode: auto``; KubeRay makes the pods, Troupe gates, reserves and releases
them. Six hosts of the nodes of examples/nodes.yaml (8 GPUs each) are taken first, so one
subblock alone has room for more than two whole-node workers::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
    busy       XX XX  .  .         . XX XX  .        .  . XX XX         .  .  .  .
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from devtools.devcluster.kuberay import RAY_API
from tests.support import e2e
from tests.support.e2e import delete_namespace, new_namespace, pod_body, wait_for
from troupe import contract

pytestmark = pytest.mark.e2e

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
BUSY = ("gpu-b0-s0-h0", "gpu-b0-s0-h1", "gpu-b0-s1-h1", "gpu-b0-s1-h2", "gpu-b1-s0-h2", "gpu-b1-s0-h3")
#: The one subblock with more than two free hosts once :data:`BUSY` are taken.
ROOMY = "gpu-b1-s1"
GROUP, VERSION = RAY_API.split("/")
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
NODE_TYPE = "ray.io/node-type"


@pytest.fixture
def opted_in(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace labelled ``troupe.io/gang-mode: auto`` with :data:`BUSY` taken by
    pods bound there directly; deleted afterwards."""
    name = new_namespace(admin_core, "ray")
    admin_core.patch_namespace(name, {"metadata": {"labels": {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO}}})
    try:
        for node in BUSY:
            body = pod_body(f"busy-{node}", gpus=8)
            body["spec"]["nodeName"] = node
            admin_core.create_namespaced_pod(name, body)
        wait_for("the busy pods Running", lambda: all(
            admin_core.read_namespaced_pod(f"busy-{n}", name).status.phase == "Running" for n in BUSY))
        yield name
    finally:
        delete_namespace(admin_core, name, timeout=90)


def cluster_spec(workers: int, max_workers: int = 5) -> dict[str, Any]:
    """The spec of KubeRay's sample RayCluster, its ``workergroup`` of ``workers``
    (``replicas`` and ``minReplicas``; ``maxReplicas`` ``max_workers``) whole-node workers,
    every pod required in one subblock."""
    required = {"annotations": {contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}}

    def container(name: str, memory: str, gpus: int = 0) -> dict[str, Any]:
        resources = {"cpu": "1", "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {"name": name, "image": "rayproject/ray:2.46.0", "resources": {"limits": resources, "requests": resources}}

    head = container("ray-head", "2G")
    head["ports"] = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                     {"containerPort": 10001, "name": "client"}]
    return {"rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"metadata": required, "spec": {"containers": [head]}}},
            "workerGroupSpecs": [{"replicas": workers, "minReplicas": workers, "maxReplicas": max_workers,
                                  "groupName": "workergroup", "rayStartParams": {},
                                  "template": {"metadata": required,
                                               "spec": {"containers": [container("ray-worker", "1G", gpus=8)]}}}]}


def ray_cluster(name: str, workers: int) -> dict[str, Any]:
    return {"apiVersion": RAY_API, "kind": "RayCluster", "metadata": {"name": name}, "spec": cluster_spec(workers)}


def ray_pods(core: client.CoreV1Api, namespace: str, cluster: str) -> list[Any]:
    return [p for p in core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={cluster}").items
            if not p.metadata.deletion_timestamp]


def running_ray_pods(core: client.CoreV1Api, namespace: str, cluster: str, count: int, timeout: float = 120) -> list[Any]:
    def probe() -> list[Any] | None:
        pods = ray_pods(core, namespace, cluster)
        return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None
    return wait_for(f"{count} Running pods of RayCluster {cluster}", probe, timeout=timeout)


def rank(pod: Any) -> int:
    return int(pod.metadata.annotations[contract.ASSIGNED_RANK])


def subblocks(core: client.CoreV1Api, pods: list[Any]) -> set[str]:
    return {core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods}


@contextmanager
def reservations_seen(api: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """Every value of ``reconciler.troupe.io/reservation`` the RayClusters of ``namespace``
    carry while the block runs, as a watch delivers them (parsed), in order."""
    seen: list[dict[str, Any]] = []
    stream = watch.Watch()
    custom = client.CustomObjectsApi(api)

    stopped = threading.Event()

    def run() -> None:
        try:
            for event in stream.stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "rayclusters",
                                       timeout_seconds=300):
                value = (event["object"]["metadata"].get("annotations") or {}).get(contract.RESERVATION)
                if value and (not seen or seen[-1] != json.loads(value)):
                    seen.append(json.loads(value))
        except Exception:
            if not stopped.is_set():  # cut by stop(): the block is over
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stopped.set()
        stream.stop()


def released_from(reservation: dict[str, Any], pods: list[Any]) -> None:
    """Every pod was released from ``reservation``, after it was planned: its plan time, each
    rank on the node it reserved, pinned there, ungated."""
    assert {p.metadata.annotations[contract.PLANNED_AT] for p in pods} == {reservation["plannedAt"]}
    planned = dt.datetime.fromisoformat(reservation["plannedAt"])
    assert all(dt.datetime.fromisoformat(p.metadata.annotations[contract.RELEASED_AT]) >= planned for p in pods)
    assert [p.spec.node_name for p in sorted(pods, key=rank)] == reservation["nodes"]
    for p in pods:
        assert not p.spec.scheduling_gates
        assert p.spec.node_selector[contract.HOSTNAME_LABEL] == p.spec.node_name


def gang_phase(troupe: Any, gang: str) -> str | None:
    return next((g["phase"] for g in e2e.debug_gangs(troupe) if g["gang"] == gang), None)


def test_a_raycluster_runs_whole_in_the_one_subblock_with_room_reserved_from_it_and_a_scaled_worker_joins_it(
        kuberay, troupe, admin_api, admin_core, opted_in):
    custom = client.CustomObjectsApi(admin_api)
    with reservations_seen(admin_api, opted_in) as seen:
        custom.create_namespaced_custom_object(GROUP, VERSION, opted_in, "rayclusters", ray_cluster("rc", 3))
        pods = running_ray_pods(admin_core, opted_in, "rc", 4)

    assert seen and seen[0]["gang"] == "raycluster:rc", seen
    released_from(seen[0], pods)
    ordered = sorted(pods, key=rank)
    assert [p.metadata.labels[NODE_TYPE] for p in ordered] == ["head", "worker", "worker", "worker"], "head first"
    assert subblocks(admin_core, pods) == {ROOMY}, "whole, in the one subblock with room"
    print(f"\nRayCluster rc by rank: {[(p.metadata.name, p.spec.node_name) for p in ordered]}", file=sys.stderr)
    assert gang_phase(troupe, f"{opted_in}/raycluster:rc") == "Released"
    wait_for("the reservation removed once every member is bound", lambda: contract.RESERVATION not in (
        custom.get_namespaced_custom_object(GROUP, VERSION, opted_in, "rayclusters", "rc")["metadata"]
        .get("annotations") or {}), timeout=30)

    # Ray's autoscaler raises a group's replicas: the new worker joins the running gang in its subblock.
    groups = custom.get_namespaced_custom_object(GROUP, VERSION, opted_in, "rayclusters", "rc")["spec"]["workerGroupSpecs"]
    groups[0]["replicas"] = 4
    custom.patch_namespaced_custom_object(GROUP, VERSION, opted_in, "rayclusters", "rc",
                                          {"spec": {"workerGroupSpecs": groups}})
    scaled = running_ray_pods(admin_core, opted_in, "rc", 5)
    [added] = [p for p in scaled if p.metadata.name not in {q.metadata.name for q in pods}]
    assert added.metadata.labels[NODE_TYPE] == "worker"
    assert subblocks(admin_core, [added]) == {ROOMY}, "in the running gang's subblock"
    assert added.spec.node_selector[contract.HOSTNAME_LABEL] == added.spec.node_name, "placed by Troupe"
    assert added.spec.node_name not in {p.spec.node_name for p in pods if p.metadata.labels[NODE_TYPE] == "worker"}
    assert gang_phase(troupe, f"{opted_in}/raycluster:rc") == "Released"


def troupe_status(cluster: Any, namespace: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run([str(PLUGIN), "status", "-n", namespace, "-o", "json", "--kubeconfig",
                           str(cluster.kubeconfig("admin"))], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return {g["spec"]["gangName"]: g["status"] for g in json.loads(done.stdout)["items"]}


def map_rows(troupe: Any) -> dict[str, dict[str, Any]]:
    """The gangs of the reconciler's topology map (``/topology/data.json``), as the admin reads them."""
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{troupe.metrics_port}/topology/data.json",
                                     headers={"Authorization": f"Bearer {troupe.cluster.token('admin')}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return {row["gang"]: row for row in json.load(r)["gangs"]}


def test_a_raycluster_with_too_little_room_binds_nothing_and_says_why_everywhere(
        kuberay, troupe, cluster, admin_api, admin_core, opted_in):
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, opted_in, "rayclusters", ray_cluster("big", 5))
    gang = f"{opted_in}/raycluster:big"

    # Decided from the RayCluster as soon as it exists (nothing reserved), and again as KubeRay makes its pods.
    wait_for("the RayCluster's gang Unschedulable", lambda: gang_phase(troupe, gang) == "Unschedulable", timeout=90)
    wait_for("KubeRay's 6 pods, gated", lambda: len(found := ray_pods(admin_core, opted_in, "big")) == 6
             and all(p.spec.scheduling_gates for p in found), timeout=60)
    wait_for("the gang still Unschedulable with every member present", lambda: gang_phase(troupe, gang) == "Unschedulable"
             and troupe_status(cluster, opted_in)["raycluster:big"]["members"]["present"] == 6, timeout=30)
    for p in ray_pods(admin_core, opted_in, "big"):
        assert p.spec.scheduling_gates and not p.spec.node_name, f"{p.metadata.name} is held, bound nowhere"

    status = troupe_status(cluster, opted_in)["raycluster:big"]
    assert status["phase"] == "Unschedulable", status
    assert f"in one {SUBBLOCK}" in status["reason"], status
    assert status["members"]["bound"] == 0 and status["members"]["present"] == 6, status

    def listed() -> list[str] | None:
        out = cluster.kubectl("get", "gangs", "-n", opted_in, "--no-headers").stdout
        rows = [line.split() for line in out.splitlines() if line.startswith("raycluster-big-")]
        return rows[0] if rows and rows[0][1] == "Unschedulable" else None
    row = wait_for("the Gang object Unschedulable in kubectl get gangs", listed, timeout=30)
    print(f"\nkubectl get gangs -n {opted_in}: {' '.join(row)}\nkubectl troupe status: {status}", file=sys.stderr)
    assert (row[2], row[-1]) == ("6/6", "Unschedulable"), row  # every member present, none placed

    shown = map_rows(troupe)[gang]
    assert shown["waiting"] and shown["phase"] == "Unschedulable", shown
    assert shown["reason"] == status["reason"], "the map says what status says"


def test_a_rayjobs_cluster_runs_whole_and_its_submitter_is_outside_the_gang(kuberay, troupe, cluster, admin_api,
                                                                           admin_core, opted_in):
    custom = client.CustomObjectsApi(admin_api)
    with reservations_seen(admin_api, opted_in) as seen:
        custom.create_namespaced_custom_object(GROUP, VERSION, opted_in, "rayjobs", {
            "apiVersion": RAY_API, "kind": "RayJob", "metadata": {"name": "job"},
            "spec": {"entrypoint": "python -c \"import ray; ray.init(); print(ray.cluster_resources())\"",
                     "rayClusterSpec": cluster_spec(3)}})
        name = wait_for("the RayJob's RayCluster", lambda: next(
            (c["metadata"]["name"] for c in custom.list_namespaced_custom_object(
                GROUP, VERSION, opted_in, "rayclusters")["items"]), None), timeout=60)
        pods = running_ray_pods(admin_core, opted_in, name, 4)

    assert seen and seen[0]["gang"] == f"raycluster:{name}", seen
    released_from(seen[0], pods)
    assert subblocks(admin_core, pods) == {ROOMY}
    assert gang_phase(troupe, f"{opted_in}/raycluster:{name}") == "Released"

    # KubeRay submits the job from a batch Job (K8sJobMode, the default) once the cluster is ready.
    submitter = wait_for("the submitter's pod", lambda: admin_core.list_namespaced_pod(
        opted_in, label_selector="batch.kubernetes.io/job-name=job").items or None, timeout=90)
    [pod] = submitter
    members = {p.metadata.name for p in pods}
    assert pod.metadata.name not in members
    status = troupe_status(cluster, opted_in)
    assert status[f"raycluster:{name}"]["members"]["present"] == 4, "the submitter is not a member"
    assert (pod.metadata.annotations or {}).get(contract.PLANNED_AT) != seen[0]["plannedAt"]
    print(f"\nsubmitter {pod.metadata.name}: annotations {pod.metadata.annotations}, gates {pod.spec.scheduling_gates},"
          f" node {pod.spec.node_name}; gangs {sorted(status)}", file=sys.stderr)
