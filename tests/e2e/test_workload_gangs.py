"""Whole workloads as gangs, with no hand-counted size, on the local control plane.

Namespaces opt in with the label ``troupe.io/gang-mode: auto``; the pods carry no Troupe
annotation of their own. The JobSet and LeaderWorkerSet controllers are the real ones,
built from their modules (``workload_controllers``); Kubeflow's PyTorchJob is its CRD
with pods shaped as the training operator creates them. The nodes of examples/nodes.yaml,
8 GPUs each::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.support import e2e
from tests.support.e2e import delete_namespace, indexed_job, new_namespace, pod_body, wait_for
from troupe import contract
from troupe.policies import RELEASE_MODE, WHEN_COMPLETE

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
PYTORCH_API = ("kubeflow.org", "v1", "pytorchjobs")


@pytest.fixture
def opted_in(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace labelled ``troupe.io/gang-mode: auto``, deleted afterwards."""
    name = new_namespace(admin_core, "auto")
    admin_core.patch_namespace(name, {"metadata": {"labels": {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO}}})
    yield name
    delete_namespace(admin_core, name, timeout=90)


def template(gpus: int = 0, cpu: str = "100m") -> dict[str, Any]:
    body = pod_body("unused", gpus=gpus, cpu=cpu)
    spec = dict(body["spec"], restartPolicy="Never")
    return {"metadata": {}, "spec": spec}


def running_pods(core: client.CoreV1Api, namespace: str, count: int, selector: str = "", timeout: float = 120) -> list[Any]:
    def probe() -> list[Any] | None:
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if not p.metadata.deletion_timestamp]
        return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None
    return wait_for(f"{count} Running pods in {namespace} ({selector or 'all'})", probe, timeout=timeout)


def planned_at(pod: Any) -> str:
    return str(pod.metadata.annotations[contract.PLANNED_AT])


def released_together(pods: list[Any], when_complete: bool = False) -> None:
    """Every member was released from one plan (a release, or the reservation of a gang
    released as created: docs/decisions/034), planned after the last member existed when
    released ``when_complete``, and carries the Troupe annotations the webhook stamped
    (none were the user's)."""
    assert len({planned_at(p) for p in pods}) == 1, "one plan: all members share planned-at"
    if when_complete:
        plan = dt.datetime.fromisoformat(planned_at(pods[0]))
        newest = max(p.metadata.creation_timestamp for p in pods)
        assert plan >= newest.replace(microsecond=0), "not planned before the last member existed"
    for p in pods:
        assert p.metadata.annotations["troupe.io/gang-size"] == "auto", "stamped by the webhook"
        assert not p.spec.scheduling_gates
        assert p.spec.node_selector == {contract.HOSTNAME_LABEL: p.spec.node_name}


def gangs_of(troupe: Any) -> dict[str, dict[str, str]]:
    return {g["gang"]: g for g in e2e.debug_gangs(troupe)}


def test_an_indexed_job_of_6_in_an_opted_in_namespace_runs_as_one_gang(workload_controllers, troupe, admin_api,
                                                                         admin_core, opted_in):
    job = indexed_job("train", 6, {}, gpus=8)
    assert job["spec"]["template"]["metadata"]["annotations"] == {}, "no Troupe annotation"
    client.BatchV1Api(admin_api).create_namespaced_job(opted_in, job)

    pods = running_pods(admin_core, opted_in, 6, "job-name=train")

    released_together(pods)
    ranks = sorted((int(p.metadata.annotations[contract.ASSIGNED_RANK]),
                    int(p.metadata.labels[contract.JOB_COMPLETION_INDEX])) for p in pods)
    assert ranks == [(i, i) for i in range(6)], "rank = completion index"
    gang = gangs_of(troupe)[f"{opted_in}/job:train"]
    assert gang["phase"] == "Released", gang


def jobset(name: str, replicated: list[tuple[str, int, int, dict[str, Any]]], max_restarts: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicatedJobs": [
        {"name": rj, "replicas": replicas,
         "template": {"spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": tpl}}}
        for rj, replicas, pods, tpl in replicated]}
    if max_restarts:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}, "spec": spec}


def test_a_jobset_with_a_driver_and_two_worker_jobs_of_4_runs_as_one_gang_of_9(workload_controllers, troupe, cluster,
                                                                                admin_api, admin_core, opted_in):
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(*JOBSET_API[:2], opted_in, JOBSET_API[2], jobset("train", [
        ("driver", 1, 1, template(cpu="1")), ("workers", 2, 4, template(gpus=8))]))

    pods = running_pods(admin_core, opted_in, 9, f"{contract.JOBSET_NAME_LABEL}=train")

    released_together(pods)
    by_name = {p.metadata.name: p for p in pods}
    rank = {n: int(p.metadata.annotations[contract.ASSIGNED_RANK]) for n, p in by_name.items()}
    [driver] = [n for n in by_name if "-driver-" in n]
    assert rank[driver] == 0, "the driver is rank 0"
    labels = {n.metadata.name: n.metadata.labels for n in admin_core.list_node().items}
    for job in ("train-workers-0", "train-workers-1"):
        members = sorted((n for n in by_name if n.startswith(job + "-")), key=lambda n: rank[n])
        assert len(members) == 4
        assert len({labels[by_name[n].spec.node_name][SUBBLOCK] for n in members}) == 1, f"{job} in one subblock"
    assert gangs_of(troupe)[f"{opted_in}/jobset:train:0"]["phase"] == "Released"
    wide = cluster.kubectl("get", "pods", "-n", opted_in, "-o", "wide").stdout
    ranked = cluster.kubectl("get", "pods", "-n", opted_in, "-o", "custom-columns=NAME:.metadata.name,"
                             "RANK:.metadata.annotations.reconciler\\.troupe\\.io/rank,NODE:.spec.nodeName").stdout
    print(f"\nkubectl get pods -n {opted_in} -o wide:\n{wide}\nranks:\n{ranked}", file=sys.stderr)


def test_a_leader_worker_set_of_2_groups_of_4_gives_two_gangs_of_4(workload_controllers, troupe, admin_api, admin_core,
                                                                   opted_in):
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "serve"},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": template(gpus=2)}}}
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["restartPolicy"] = "Always"
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(*LWS_API[:2], opted_in, LWS_API[2], lws)

    pods = running_pods(admin_core, opted_in, 8, f"{contract.LWS_NAME_LABEL}=serve")

    groups: dict[str, list[Any]] = {}
    for p in pods:
        groups.setdefault(p.metadata.labels[contract.LWS_GROUP_INDEX_LABEL], []).append(p)
    assert sorted(groups) == ["0", "1"]
    for index, members in groups.items():
        assert len(members) == 4
        released_together(members, when_complete=True)  # LeaderWorkerSet groups: when complete
        leader = next(p for p in members if p.metadata.labels[contract.LWS_WORKER_INDEX_LABEL] == "0")
        assert leader.metadata.annotations[contract.ASSIGNED_RANK] == "0", "the leader is rank 0"
        assert gangs_of(troupe)[f"{opted_in}/lws:serve:{index}"]["phase"] == "Released"
    assert planned_at(groups["0"][0]) != planned_at(groups["1"][0]), "two gangs, two releases"


def test_a_jobset_restart_releases_the_new_pods_as_a_new_gang(workload_controllers, troupe, admin_api, admin_core,
                                                              opted_in):
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(*JOBSET_API[:2], opted_in, JOBSET_API[2],
                                           jobset("elastic", [("workers", 1, 4, template(gpus=2))], max_restarts=2))
    first = running_pods(admin_core, opted_in, 4, f"{contract.JOBSET_NAME_LABEL}=elastic")
    released_together(first)
    assert {p.metadata.labels[contract.JOBSET_RESTART_LABEL] for p in first} == {"0"}

    # One worker fails: its Job fails (backoffLimit 0) and the JobSet restarts every Job.
    victim = first[0].metadata.name
    admin_core.patch_namespaced_pod_status(victim, opted_in, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "main", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})

    second = running_pods(admin_core, opted_in, 4,
                          f"{contract.JOBSET_NAME_LABEL}=elastic,{contract.JOBSET_RESTART_LABEL}=1", timeout=180)
    released_together(second)
    assert planned_at(second[0]) > planned_at(first[0])
    gangs = gangs_of(troupe)
    assert gangs[f"{opted_in}/jobset:elastic:1"]["phase"] == "Released"

    def old_gang_settled() -> bool:
        # The first run's gang is decided again once its last pods are gone (they may still be
        # terminating when the second run's are Running): then it no longer says Releasing.
        old = gangs_of(troupe).get(f"{opted_in}/jobset:elastic:0")
        return old is None or old["phase"] != "Releasing"

    wait_for("the first run's gang no longer Releasing", old_gang_settled, timeout=30)


def test_a_pytorchjob_master_and_workers_run_as_one_gang_sized_by_its_replica_specs(troupe, admin_api, admin_core,
                                                                                     opted_in):
    """The training operator is not run here: the PyTorchJob CRD is, and the pods are
    made as the operator makes them (owner, labels, names) (docs/decisions/015)."""
    custom = client.CustomObjectsApi(admin_api)
    replica = {"replicas": 1, "restartPolicy": "Never", "template": template(gpus=4)}
    job = custom.create_namespaced_custom_object(*PYTORCH_API[:2], opted_in, PYTORCH_API[2], {
        # Released when complete (the workload's own key): every member waits for the last.
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "pt", "annotations": {RELEASE_MODE: WHEN_COMPLETE}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": dict(replica, replicas=3)}}})
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pt", "uid": job["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    made = [("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)]
    for i, (kind, index) in enumerate(made):
        body = pod_body(f"pt-{kind}-{index}", gpus=4, labels={
            contract.KUBEFLOW_JOB_NAME_LABEL: "pt", "training.kubeflow.org/operator-name": "pytorchjob-controller",
            contract.KUBEFLOW_REPLICA_TYPE: kind, contract.KUBEFLOW_REPLICA_INDEX: str(index)})
        body["metadata"]["ownerReferences"] = [owner]
        admin_core.create_namespaced_pod(opted_in, body)
        if i < len(made) - 1:
            pod = admin_core.read_namespaced_pod(body["metadata"]["name"], opted_in)
            assert [g.name for g in pod.spec.scheduling_gates] == [contract.GATE]

    pods = running_pods(admin_core, opted_in, 4)

    released_together(pods)
    assert {p.metadata.name: p.metadata.annotations[contract.ASSIGNED_RANK] for p in pods}["pt-master-0"] == "0"
    gang = gangs_of(troupe)[f"{opted_in}/pytorchjob:pt"]
    assert gang["phase"] == "Released"


MPIJOB_API = ("kubeflow.org", "v2beta1", "mpijobs")


def test_an_mpijob_launcher_and_workers_run_as_one_gang_reserved_from_the_mpijob(troupe, admin_api, admin_core,
                                                                                 opted_in):
    """The MPI operator is not run here (its module is not served): its CRD is, and what it
    makes is made as it makes it (pkg/controller/mpi_job_controller.go): the launcher as a
    batch Job ``<job>-launcher`` the MPIJob controls, whose pod the Job controller creates,
    and each worker as a pod the MPIJob controls. The launcher joins the workers' gang,
    rank 0, reserved from the MPIJob before any pod exists (docs/decisions/075)."""
    custom = client.CustomObjectsApi(admin_api)
    annotations = {contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}
    launcher_tpl = dict(template(cpu="100m"), metadata={"annotations": annotations})
    worker_tpl = dict(template(gpus=8), metadata={"annotations": annotations})
    job = custom.create_namespaced_custom_object(*MPIJOB_API[:2], opted_in, MPIJOB_API[2], {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
        "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": launcher_tpl},
            "Worker": {"replicas": 2, "template": worker_tpl}}}})
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": job["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}

    def reserved() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(*MPIJOB_API[:2], opted_in, MPIJOB_API[2], "pi")
        return obj if contract.RESERVATION in (obj["metadata"].get("annotations") or {}) else None
    wait_for("the MPIJob's reservation", reserved, timeout=60)

    for i in range(2):
        body = pod_body(f"pi-worker-{i}", gpus=8, labels={
            contract.KUBEFLOW_JOB_NAME_LABEL: "pi", "training.kubeflow.org/operator-name": "mpi-operator",
            contract.KUBEFLOW_JOB_ROLE: "worker", contract.KUBEFLOW_REPLICA_INDEX: str(i)})
        body["metadata"]["annotations"] = dict(annotations)
        body["metadata"]["ownerReferences"] = [owner]
        admin_core.create_namespaced_pod(opted_in, body)
    launcher_pod = dict(launcher_tpl, metadata={"annotations": annotations, "labels": {
        contract.KUBEFLOW_JOB_NAME_LABEL: "pi", "training.kubeflow.org/operator-name": "mpi-operator",
        contract.KUBEFLOW_JOB_ROLE: "launcher"}})
    client.BatchV1Api(admin_api).create_namespaced_job(opted_in, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi-launcher", "ownerReferences": [owner]},
        "spec": {"backoffLimit": 0, "template": launcher_pod}})

    pods = running_pods(admin_core, opted_in, 3)

    released_together(pods)
    ranks = {p.metadata.labels[contract.KUBEFLOW_JOB_ROLE] + p.metadata.labels.get(contract.KUBEFLOW_REPLICA_INDEX, ""):
             p.metadata.annotations[contract.ASSIGNED_RANK] for p in pods}
    assert ranks == {"launcher": "0", "worker0": "1", "worker1": "2"}
    nodes = {p.spec.node_name for p in pods}
    subblocks = {admin_core.read_node(n).metadata.labels[SUBBLOCK] for n in nodes}
    assert len(subblocks) == 1, f"one subblock: {sorted(nodes)}"
    assert gangs_of(troupe)[f"{opted_in}/mpijob:pi"]["phase"] == "Released"
