"""Slices, balanced placement and exclusive domains on the real control plane (issue 25).

The nodes of examples/nodes.yaml, 8 GPUs each: blocks gpu-b0 and gpu-b1, two subblocks of
four hosts each (one node per host). The balanced test adds a block of two subblocks of
ten nodes for itself and removes it again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support import e2e
from troupe import contract
from troupe.layers import (
    TOPOLOGY_EXCLUSIVE_LEVEL,
    TOPOLOGY_PLACEMENT,
    TOPOLOGY_SLICE_REQUIRED_LEVEL,
    TOPOLOGY_SLICE_SIZE,
)

BLOCK = "cloud.google.com/gce-topology-block"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
WIDE = "gpu-b9"


def subblock_of(core: client.CoreV1Api, node: str) -> str:
    return str(core.read_node(node).metadata.labels[SUBBLOCK])


def test_an_indexed_job_of_32_in_slices_of_8_per_subblock_lands_as_four_whole_subblocks_in_rank_order(
        troupe, admin_api, admin_core, namespace):
    # Members of 2 GPUs, four to a node; the first node of every subblock is taken, so each
    # subblock holds 12 members: the plain gang takes 12 + 12 + 8 and its second slice of 8
    # straddles two subblocks. Slices of 8 take 8 in each of the four.
    for subblock in ("gpu-b0-s0", "gpu-b0-s1", "gpu-b1-s0", "gpu-b1-s1"):
        busy = e2e.pod_body(f"busy-{subblock}", gpus=8)
        busy["spec"]["nodeName"] = f"{subblock}-h0"
        admin_core.create_namespaced_pod(namespace, busy)
    annotations = {**e2e.gang_annotations("train", 32, timeout=90), TOPOLOGY_SLICE_SIZE: "8",
                   TOPOLOGY_SLICE_REQUIRED_LEVEL: SUBBLOCK}
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, e2e.indexed_job("train", 32, annotations, gpus=2))
    pods = e2e.running_job_pods(admin_core, namespace, "train", 32, timeout=120)
    nodes = [p.spec.node_name for p in pods]  # by completion index
    subblocks = {n: subblock_of(admin_core, n) for n in set(nodes)}
    slices = [[subblocks[n] for n in nodes[8 * k:8 * k + 8]] for k in range(4)]
    assert all(len(set(s)) == 1 for s in slices), slices
    assert [s[0] for s in slices] == ["gpu-b0-s0", "gpu-b0-s1", "gpu-b1-s0", "gpu-b1-s1"], "slices in rank order"
    assert nodes == sorted(nodes), "ranks walk the hosts of each slice in order"
    assert not any(n.endswith("-h0") for n in nodes)


@pytest.fixture
def wide_block(admin_core: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Block gpu-b9: two subblocks of ten 8-GPU nodes, one node per host; deleted after the
    test's pods are gone. Node names, in topology order."""
    names = [f"{WIDE}-s{s}-h{h}" for s in range(2) for h in range(10)]
    e2e.create_gpu_nodes(admin_core, names)
    # The reconciler sees every new node once a gang that needs all 20 is placed there.
    for i in range(len(names)):
        body = e2e.pod_body(f"probe-{i}", e2e.gang_annotations("probe", len(names), timeout=60), gpus=8)
        body["spec"]["nodeSelector"] = {BLOCK: WIDE}
        admin_core.create_namespaced_pod(namespace, body)
    e2e.running_members(admin_core, namespace, "probe", len(names))
    admin_core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    e2e.wait_for("the probe gang gone", lambda: not admin_core.list_namespaced_pod(namespace).items or None)
    try:
        yield names
    finally:
        e2e.delete_nodes_after_pods(admin_core, namespace, names)


def test_a_balanced_gang_of_12_over_two_10_node_subblocks_lands_6_and_6(troupe, admin_core, namespace, wide_block):
    for i in range(12):
        body = e2e.pod_body(f"bal-{i}", {**e2e.gang_annotations("bal", 12, timeout=60),
                                     TOPOLOGY_PLACEMENT: "Balanced"}, gpus=8)
        body["spec"]["nodeSelector"] = {BLOCK: WIDE}
        admin_core.create_namespaced_pod(namespace, body)
    pods = e2e.running_members(admin_core, namespace, "bal", 12)
    used = [p.spec.node_name.rsplit("-", 1)[0] for p in pods]
    why = [c.message for c in pods[0].status.conditions or [] if c.type == contract.GANG_CONDITION]
    assert sorted((used.count(f"{WIDE}-s0"), used.count(f"{WIDE}-s1"))) == [6, 6], (used, why)


def test_an_exclusive_gang_keeps_a_second_gang_out_of_its_subblock(troupe, admin_core, namespace):
    first = e2e.pod_body("solo-0", {**e2e.gang_annotations("solo", 1, timeout=60),
                                TOPOLOGY_EXCLUSIVE_LEVEL: SUBBLOCK}, gpus=4)
    admin_core.create_namespaced_pod(namespace, first)
    [solo] = e2e.running_members(admin_core, namespace, "solo", 1)
    mine = subblock_of(admin_core, solo.spec.node_name)
    for i in range(2):  # two members of 4 GPUs: without the exclusive gang, the next node of its subblock
        admin_core.create_namespaced_pod(namespace, e2e.pod_body(f"next-{i}", e2e.gang_annotations("next", 2, timeout=60),
                                                             gpus=4))
    pods = e2e.running_members(admin_core, namespace, "next", 2)
    assert all(subblock_of(admin_core, p.spec.node_name) != mine for p in pods), \
        [(p.spec.node_name, mine) for p in pods]
