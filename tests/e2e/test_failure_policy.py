"""``troupe.io/gang-failure-policy: RestartGang`` on the real control plane
(docs/decisions/040-failure-policy.md): the node of a running member is deleted, and the
whole gang is deleted once and placed again whole on the nodes left.

The test brings five 8-GPU nodes of its own (label ``e2e-pool: restart``, one subblock) and
selects them, so the node it deletes is nobody else's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support import e2e
from troupe import contract
from troupe.policies import FAILURE_POLICY, RESTART_GANG

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
POOL = {"e2e-pool": "restart"}


@pytest.fixture
def pool(admin_core: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Five Ready 8-GPU nodes in subblock gpu-b7-s0; those left are deleted after the test's pods."""
    names = [f"gpu-b7-s0-h{h}" for h in range(5)]
    e2e.create_gpu_nodes(admin_core, names, POOL)
    try:
        yield names
    finally:
        e2e.delete_nodes_after_pods(admin_core, namespace, names)


def test_a_restart_gang_gang_whose_node_is_deleted_restarts_whole_once(troupe, admin_api, admin_core, namespace,
                                                                         pool):
    annotations = {**e2e.gang_annotations("train", 4, timeout=60), FAILURE_POLICY: RESTART_GANG}
    job = e2e.indexed_job("train", 4, annotations, gpus=8)
    job["spec"]["template"]["spec"]["nodeSelector"] = dict(POOL)
    job["spec"]["backoffLimit"] = 4
    job["spec"]["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)
    first = e2e.running_job_pods(admin_core, namespace, "train", 4, timeout=90)
    before = {p.metadata.uid for p in first}
    lost = first[0].spec.node_name
    admin_core.delete_node(lost)
    e2e.wait_for("the restart's Event", lambda: admin_core.list_namespaced_event(
        namespace, field_selector="reason=GangMemberFailed").items or None, timeout=30)
    # What the pod garbage collector does to a pod bound to a node that is gone, without its
    # 40 s quarantine (no kubelet finishes a deletion there): it marks the pod Failed, so the
    # Job, whose pod failure policy waits for terminal pods, recreates it.
    admin_core.patch_namespaced_pod_status(first[0].metadata.name, namespace, {"status": {
        "phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                                           "message": "PodGC: node no longer exists"}]}})

    def restarted():
        pods = [p for p in e2e.job_pods(admin_core, namespace, "train") if not p.metadata.deletion_timestamp]
        fresh = [p for p in pods if p.metadata.uid not in before and p.status.phase == "Running"]
        return fresh if len(fresh) == 4 else None

    fresh = e2e.wait_for("the gang running again, four new members", restarted, timeout=120)
    assert lost not in {p.spec.node_name for p in fresh}
    assert sorted(p.spec.node_name for p in fresh) == sorted(n for n in pool if n != lost), "placed again whole"
    survivors = [p for p in e2e.job_pods(admin_core, namespace, "train") if p.metadata.uid in before
                 and p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    assert survivors == [], "every member of the first run was deleted"
    events = admin_core.list_namespaced_event(namespace, field_selector="reason=GangMemberFailed").items
    assert len(events) == 1, [e.message for e in events]
    assert f"node {lost} of member" in events[0].message and "restarting the whole gang (RestartGang)" in \
        events[0].message


@pytest.fixture
def two_subblocks(admin_core: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Two subblocks of three 8-GPU nodes (gpu-b5-s0, gpu-b5-s1), label ``e2e-pool: replace``;
    those left are deleted after the test's pods."""
    names = [f"gpu-b5-s{s}-h{h}" for s in range(2) for h in range(3)]
    e2e.create_gpu_nodes(admin_core, names, {"e2e-pool": "replace"})
    try:
        yield names
    finally:
        e2e.delete_nodes_after_pods(admin_core, namespace, names)


def test_a_replacement_for_a_member_whose_node_is_deleted_goes_back_into_the_gangs_subblock(
        troupe, admin_api, admin_core, namespace, two_subblocks):
    annotations = {**e2e.gang_annotations("train", 2, timeout=60), contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}
    job = e2e.indexed_job("train", 2, annotations, gpus=8)
    job["spec"]["template"]["spec"]["nodeSelector"] = {"e2e-pool": "replace"}
    job["spec"]["backoffLimit"] = 4
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)
    first = e2e.running_job_pods(admin_core, namespace, "train", 2, timeout=90)
    home = admin_core.read_node(first[0].spec.node_name).metadata.labels[SUBBLOCK]
    lost, kept = first[0], first[1]
    admin_core.delete_node(lost.spec.node_name)
    # What the pod garbage collector does to a pod bound to a node that is gone, without
    # its 40 s quarantine: the Job controller then creates the replacement.
    admin_core.delete_namespaced_pod(lost.metadata.name, namespace, grace_period_seconds=0)

    def replaced():
        pods = [p for p in e2e.job_pods(admin_core, namespace, "train") if not p.metadata.deletion_timestamp]
        fresh = [p for p in pods if p.metadata.uid != kept.metadata.uid and p.status.phase == "Running"]
        return fresh[0] if len(fresh) == 1 else None

    replacement = e2e.wait_for("the replacement Running", replaced, timeout=90)
    assert admin_core.read_node(replacement.spec.node_name).metadata.labels[SUBBLOCK] == home, \
        "back in the gang's subblock, though the other subblock is empty"
    still = admin_core.read_namespaced_pod(kept.metadata.name, namespace)
    assert still.metadata.uid == kept.metadata.uid and still.spec.node_name == kept.spec.node_name, \
        "ReplaceMember: the running member is left alone"
