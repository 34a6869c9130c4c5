"""Workloads written for Kueue's topology-aware scheduling on the real control plane
(docs/decisions/039-kueue-annotations.md): a Job whose template asks with
``kueue.x-k8s.io/podset-required-topology`` and names no gang runs whole in one subblock; a
Job Kueue admitted (its template marked by Kueue) is left alone; a pod both would place is
refused at creation, naming both."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.support import e2e
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def test_a_job_written_for_kueue_runs_as_one_gang_in_one_subblock(troupe, admin_api, admin_core, namespace):
    # Whole-node members: three fit a subblock of four hosts even when another test's pod
    # holds one of them.
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, e2e.indexed_job("kueue", 3, {REQUIRED: SUBBLOCK},
                                                                                  gpus=8))
    pods = e2e.running_job_pods(admin_core, namespace, "kueue", 3, timeout=90)
    for pod in pods:
        assert pod.metadata.annotations["troupe.io/gang-size"] == "auto", "the webhook made it a workload gang"
        assert pod.metadata.annotations[REQUIRED] == SUBBLOCK
        assert pod.spec.node_selector == {contract.HOSTNAME_LABEL: pod.spec.node_name}
    assert len({admin_core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods}) == 1


def test_a_job_kueue_admitted_is_left_to_kueue(troupe, admin_api, admin_core, namespace):
    job = e2e.indexed_job("admitted", 2, {REQUIRED: SUBBLOCK, "kueue.x-k8s.io/workload": "job-admitted-1"}, gpus=1)
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)
    pods = e2e.running_job_pods(admin_core, namespace, "admitted", 2, timeout=60)
    for pod in pods:  # kube-scheduler placed them; Troupe neither gated nor annotated them
        assert "troupe.io/gang-size" not in pod.metadata.annotations
        assert contract.ASSIGNED_NODE not in pod.metadata.annotations


def test_a_pod_kueue_places_that_also_names_a_troupe_gang_is_refused_naming_both(troupe, admin_core, namespace):
    pod = e2e.pod_body("both", {**e2e.gang_annotations("g", 1), REQUIRED: SUBBLOCK},
                       labels={"kueue.x-k8s.io/podset": "main"})
    with pytest.raises(client.ApiException) as refused:
        admin_core.create_namespaced_pod(namespace, pod)
    assert refused.value.status == 400
    for text in (REQUIRED, "label kueue.x-k8s.io/podset", "troupe.io/gang-name", "keep one of them"):
        assert text in refused.value.body, refused.value.body
