"""Plans kube-scheduler does not refuse, on the real control plane: a required hostname
anti-affinity, a zone spread and host ports in use (issue 23).

The nodes of examples/nodes.yaml, 8 GPUs each: blocks gpu-b0 and gpu-b1, two subblocks of
four hosts each. Each test gives its gang members of 4 GPUs, which Troupe would otherwise
pack two to a node inside the first subblock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.e2e import (
    gang_annotations,
    indexed_job,
    pod_body,
    running_job_pods,
    running_members,
    wait_for,
)
from troupe import contract

ZONE = "topology.kubernetes.io/zone"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
BLOCK = "cloud.google.com/gce-topology-block"
TRAIN = {"app": "train"}


def test_an_indexed_job_with_hostname_anti_affinity_runs_one_member_per_node_first_time(
        troupe, admin_api, admin_core, namespace):
    job = indexed_job("train", 4, gang_annotations("train", 4, timeout=60), gpus=4)
    template = job["spec"]["template"]
    template["metadata"]["labels"] = dict(TRAIN)
    template["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": contract.HOSTNAME_LABEL, "labelSelector": {"matchLabels": TRAIN}}]}}
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)
    first = wait_for("4 pods of the Job", lambda: (
        pods if len(pods := admin_core.list_namespaced_pod(namespace, label_selector="job-name=train").items) == 4
        else None))
    pods = running_job_pods(admin_core, namespace, "train", 4)
    assert len({p.spec.node_name for p in pods}) == 4, [p.spec.node_name for p in pods]
    assert {p.metadata.uid for p in pods} == {p.metadata.uid for p in first}, "the first pods ran: no rollback"
    assert len({p.metadata.annotations[contract.PLANNED_AT] for p in pods}) == 1, "one release"


@pytest.fixture
def zones(admin_core: client.CoreV1Api) -> Iterator[dict[str, str]]:
    """Every node labelled ``topology.kubernetes.io/zone`` with its subblock (four zones),
    removed again afterwards; node name -> zone."""
    nodes = {n.metadata.name: n.metadata.labels[SUBBLOCK] for n in admin_core.list_node().items
             if SUBBLOCK in (n.metadata.labels or {})}
    for name, zone in nodes.items():
        admin_core.patch_node(name, {"metadata": {"labels": {ZONE: zone}}})
    try:
        yield nodes
    finally:
        for name in nodes:
            admin_core.patch_node(name, {"metadata": {"labels": {ZONE: None}}})


def test_a_gang_with_a_max_skew_1_zone_spread_lands_spread(troupe, admin_core, namespace, zones):
    for i in range(4):
        body = pod_body(f"spread-{i}", gang_annotations("spread", 4), gpus=4, labels=TRAIN)
        body["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": TRAIN}}]
        admin_core.create_namespaced_pod(namespace, body)
    pods = running_members(admin_core, namespace, "spread", 4)
    assert sorted(zones[p.spec.node_name] for p in pods) == sorted(set(zones.values())), "one member per zone"


def test_a_gang_needing_a_host_port_used_on_half_the_nodes_lands_on_the_other_half(troupe, admin_core, namespace):
    half = sorted(n.metadata.name for n in admin_core.list_node().items
                  if (n.metadata.labels or {}).get(BLOCK) == "gpu-b0")
    assert len(half) == 8
    for node in half:
        body = pod_body(f"port-{node}")
        body["spec"]["nodeName"] = node
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
        admin_core.create_namespaced_pod(namespace, body)
    wait_for("port holders Running", lambda: all(
        admin_core.read_namespaced_pod(f"port-{n}", namespace).status.phase == "Running" for n in half))
    for i in range(4):
        body = pod_body(f"served-{i}", gang_annotations("served", 4, timeout=60), gpus=4)
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
        admin_core.create_namespaced_pod(namespace, body)
    pods = running_members(admin_core, namespace, "served", 4)
    nodes = [p.spec.node_name for p in pods]
    assert not set(nodes) & set(half) and len(set(nodes)) == 4, nodes
