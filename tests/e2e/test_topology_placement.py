"""Topology-aware placement of real gangs, and the simulator on a live cluster's snapshot.

The nodes of examples/nodes.yaml, 8 GPUs each::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
    filled     XX XX  .  .         .  .  .  .        .  .  .  .         .  .  .  .
"""

from __future__ import annotations

import json
import subprocess
import sys

from kubernetes import client

from tests.support.e2e import gang_annotations, pod_body, wait_for
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
FULL_NODES = ("gpu-b0-s0-h0", "gpu-b0-s0-h1")


def fill(core: client.CoreV1Api, namespace: str, nodes: tuple[str, ...]) -> None:
    """Take all 8 GPUs of each node with a pod bound there directly (no gate, no scheduler)."""
    for node in nodes:
        body = pod_body(f"filler-{node}", gpus=8)
        body["spec"]["nodeName"] = node
        core.create_namespaced_pod(namespace, body)
    wait_for("fillers Running", lambda: all(
        core.read_namespaced_pod(f"filler-{n}", namespace).status.phase == "Running" for n in nodes))


def create_gang(core: client.CoreV1Api, namespace: str, name: str, members: int, gpus: int) -> None:
    for i in range(members):
        core.create_namespaced_pod(namespace, pod_body(f"{name}-{i}", gang_annotations(name, members), gpus=gpus))


def subblocks_of(core: client.CoreV1Api, namespace: str, gang: str, members: int) -> set[str]:
    """The subblocks a gang's Running members are on (waits for all of them to run)."""
    def running():
        pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith(f"{gang}-")]
        return pods if len(pods) == members and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for(f"{members} Running members of {gang}", running, timeout=90)
    for pod in pods:
        assert pod.spec.node_selector == {contract.HOSTNAME_LABEL: pod.spec.node_name}
        assert pod.metadata.annotations[contract.ASSIGNED_NODE] == pod.spec.node_name
    return {core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods}


def test_two_gangs_each_land_inside_one_subblock_around_full_nodes(troupe, admin_core, namespace):
    fill(admin_core, namespace, FULL_NODES)
    # 8 x 4 GPUs = a whole subblock: only the three untouched subblocks can hold it.
    create_gang(admin_core, namespace, "big", 8, gpus=4)
    # 4 x 4 GPUs = 16 GPUs: best fit is the two free nodes left in gpu-b0-s0.
    create_gang(admin_core, namespace, "small", 4, gpus=4)
    big = subblocks_of(admin_core, namespace, "big", 8)
    small = subblocks_of(admin_core, namespace, "small", 4)
    assert len(big) == 1 and big != {"gpu-b0-s0"}
    assert small == {"gpu-b0-s0"}, "the smaller gang fills the partly used subblock (best fit)"


def kubectl_snapshot(cluster) -> str:
    return cluster.kubectl("get", "nodes,pods", "-A", "-o", "yaml").stdout


def simulate(snapshot: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", "simulate", "-", *args],
                          input=snapshot, capture_output=True, text=True, check=False)


def test_the_simulator_reads_a_live_kubectl_snapshot(troupe, cluster, admin_core, namespace):
    fill(admin_core, namespace, FULL_NODES)
    for i in range(3):  # a gang of 4 whose 4th member never comes
        admin_core.create_namespaced_pod(namespace, pod_body(f"part-{i}", gang_annotations("part", 4), gpus=8))
    wait_for("3 gated members of part", lambda: len([
        p for p in admin_core.list_namespaced_pod(namespace).items
        if p.metadata.name.startswith("part-") and p.spec.scheduling_gates]) == 3)
    snapshot = kubectl_snapshot(cluster)
    done = simulate(snapshot, "--output", "json")
    assert done.returncode == 0, done.stderr
    part = next(g for g in json.loads(done.stdout)["gangs"] if g["namespace"] == namespace and g["name"] == "part")
    assert part["phase"] == "Waiting"
    assert part["placements"] == []

    # What if the gang were of size 3? Edit the live snapshot and ask again.
    what_if = snapshot.replace('troupe.io/gang-size: "4"', 'troupe.io/gang-size: "3"')
    assert what_if != snapshot
    part = next(g for g in json.loads(simulate(what_if, "--output", "json").stdout)["gangs"]
                if g["namespace"] == namespace and g["name"] == "part")
    assert part["phase"] == "Placed", part
    assert [p["rank"] for p in part["placements"]] == [0, 1, 2]
    nodes = [p["node"] for p in part["placements"]]
    assert len(set(nodes)) == 3 and not set(nodes) & set(FULL_NODES), "8-GPU members need empty nodes"
    labels = {n.metadata.name: n.metadata.labels for n in admin_core.list_node().items}
    assert len({labels[n][SUBBLOCK] for n in nodes}) == 1
    table = simulate(what_if, "--output", "table")
    assert table.returncode == 0 and "part" in table.stdout and nodes[0] in table.stdout
