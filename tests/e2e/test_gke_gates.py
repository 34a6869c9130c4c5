"""Pods created with the GKE topology scheduler's gate (``seeds/002``), no Troupe keys."""

from __future__ import annotations

from kubernetes import client

from tests.support.e2e import indexed_job, job_pods, wait_for
from troupe import contract

GKE_GATE = contract.GKE_GATE_PREFIX + "train"


def test_a_job_with_the_gke_gate_runs_whole_once_all_its_parallelism_exists(troupe, admin_api, admin_core, namespace):
    job = indexed_job("gke", 4, {}, gpus=8)
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GKE_GATE}]
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)

    def running():
        pods = job_pods(admin_core, namespace, "gke")
        return pods if len(pods) == 4 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for("4 Running pods", running, timeout=90)
    subblocks = set()
    for pod in pods:
        assert not pod.spec.scheduling_gates, "the GKE gate is removed on release"
        assert pod.spec.node_selector == {contract.HOSTNAME_LABEL: pod.spec.node_name}
        assert not any(k.startswith("troupe.io/gang") for k in pod.metadata.annotations), "the webhook left it alone"
        subblocks.add(admin_core.read_node(pod.spec.node_name).metadata.labels["cloud.google.com/gce-topology-subblock"])
    assert len(subblocks) == 1, "4 whole-node members fit one subblock, neighbouring ranks close"
