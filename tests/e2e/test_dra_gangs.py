"""Gangs whose members claim DRA devices, placed by Troupe on the real control plane
(docs/decisions/044-dra.md): the reconciler counts the devices the kwok nodes publish in
ResourceSlices, releases a gang whole where its members' claims fit, and kube-scheduler
allocates the claims on the nodes Troupe pinned.

Each test adds DRA nodes of its own (:func:`tests.support.e2e.dra_nodes`: 8 devices of
driver gpu.troupe.dev each, no nvidia.com/gpu) and removes them with its pods.
"""

from __future__ import annotations

import uuid

from kubernetes import client

from tests.support.dra_e2e import (
    H100,
    allocated,
    claim_spec,
    create,
    pod_claim,
    read_claim,
    with_claim,
)
from tests.support.e2e import (
    dra_nodes,
    gang_annotations,
    indexed_job,
    pod_body,
    running_job_pods,
    wait_for,
)
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def claim_allocated(api: client.ApiClient, core: client.CoreV1Api, namespace: str, pod: str) -> bool:
    """Whether pod ``pod``'s claim exists (made from its template) and is allocated."""
    found = core.read_namespaced_pod(pod, namespace)
    if not found.status.resource_claim_statuses and not found.spec.resource_claims[0].resource_claim_name:
        return False
    return bool(allocated(pod_claim(api, found)))


def test_a_gang_of_8_claiming_8_devices_each_is_released_whole_into_the_one_subblock_with_room(
        troupe, admin_api, admin_core, namespace):
    block = f"dra{uuid.uuid4().hex[:4]}-b0"
    with dra_nodes(admin_api, namespace, 8, H100, subblock=f"{block}-s0") as busy_block, \
            dra_nodes(admin_api, namespace, 8, H100, subblock=f"{block}-s1") as free_block:
        create(admin_api, namespace, "resourceclaimtemplates", "one", claim_spec(1))
        create(admin_api, namespace, "resourceclaimtemplates", "eight", claim_spec(8))
        other = with_claim(pod_body("other", gpus=0), template="one")
        other["spec"]["nodeSelector"] = {"kubernetes.io/hostname": busy_block[0]}  # s0 loses a device: 8 whole nodes only in s1
        admin_core.create_namespaced_pod(namespace, other)
        wait_for("the other pod's claim allocated", lambda: claim_allocated(admin_api, admin_core, namespace, "other"),
                 timeout=60)

        keys = {**gang_annotations("train", 8, timeout=60), contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}
        job = with_claim(indexed_job("train", 8, keys, gpus=0), template="eight")
        client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)
        pods = running_job_pods(admin_core, namespace, "train", 8, timeout=120)

        assert sorted(p.spec.node_name for p in pods) == sorted(free_block), "whole, in the subblock with room"
        for p in pods:
            assert p.metadata.annotations[contract.ASSIGNED_NODE] == p.spec.node_name, "bound where Troupe pinned it"
            results = allocated(pod_claim(admin_api, p))
            assert len(results) == 8 and {r["pool"] for r in results} == {p.spec.node_name}, results


def test_a_gang_that_does_not_fit_for_devices_allocated_to_others_waits_saying_so_then_runs(
        troupe, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 2, H100) as nodes:
        create(admin_api, namespace, "resourceclaimtemplates", "four", claim_spec(4))
        create(admin_api, namespace, "resourceclaimtemplates", "eight", claim_spec(8))
        for i, node in enumerate(nodes):
            other = with_claim(pod_body(f"other-{i}", gpus=0), template="four")
            other["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # kube-scheduler allocates its claim
            admin_core.create_namespaced_pod(namespace, other)
        for i in range(2):
            wait_for(f"other-{i}'s claim allocated", lambda i=i: claim_allocated(admin_api, admin_core, namespace,
                                                                                 f"other-{i}"), timeout=60)
        for i in range(2):
            admin_core.create_namespaced_pod(namespace, with_claim(
                pod_body(f"train-{i}", gang_annotations("train", 2), gpus=0), template="eight"))

        def told() -> str | None:
            pod = admin_core.read_namespaced_pod("train-0", namespace)
            found = [c.message for c in pod.status.conditions or [] if c.type == contract.GANG_CONDITION]
            return found[0] if found and "devices/gpu.troupe.dev" in found[0] else None

        message = wait_for("the gang's reason naming the devices", told, timeout=60)
        assert "fits 0 of 2 members" in message and "insufficient devices/gpu.troupe.dev" in message, message
        for i in range(2):
            admin_core.delete_namespaced_pod(f"other-{i}", namespace, grace_period_seconds=0)
        wait_for("both members Running", lambda: all(
            admin_core.read_namespaced_pod(f"train-{i}", namespace).status.phase == "Running" for i in range(2)),
            timeout=90)
        placed = {admin_core.read_namespaced_pod(f"train-{i}", namespace).spec.node_name for i in range(2)}
        assert placed == set(nodes)


def test_two_members_sharing_one_claim_land_on_its_node(troupe, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 3, H100) as nodes:
        create(admin_api, namespace, "resourceclaims", "shared", claim_spec(2))
        for i in range(2):  # each its own gang of one: the second follows the first's claim
            admin_core.create_namespaced_pod(namespace, with_claim(
                pod_body(f"infer-{i}", gang_annotations(f"infer-{i}", 1), gpus=0), claim="shared"))

        wait_for("both Running", lambda: all(
            admin_core.read_namespaced_pod(f"infer-{i}", namespace).status.phase == "Running" for i in range(2)),
            timeout=90)
        placed = {admin_core.read_namespaced_pod(f"infer-{i}", namespace).spec.node_name for i in range(2)}
        claim = read_claim(admin_api, namespace, "shared")
        assert len(placed) == 1 and placed <= set(nodes)
        assert {r["pool"] for r in allocated(claim)} == placed
        assert len(claim["status"]["reservedFor"]) == 2
