"""A gang with a minimum size on the real control plane (docs/decisions/038-minimum-size.md):
an indexed Job of 8 with ``troupe.io/gang-min-size: "4"`` and a required subblock runs with
4 (the first 4 the Job controller created) while the rest wait for room there, then grows
to 8 as room appears, never moving the 4.

The nodes of examples/nodes.yaml, 8 GPUs each, four hosts per subblock. Members ask for 4
GPUs (two to a node); a busy pod on two hosts of every subblock leaves room for 4 members
in each.
"""

from __future__ import annotations

from kubernetes import client

from tests.support import e2e
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
SUBBLOCKS = ("gpu-b0-s0", "gpu-b0-s1", "gpu-b1-s0", "gpu-b1-s1")


def test_a_gang_of_eight_with_minimum_four_runs_with_four_then_grows_to_eight_in_its_subblock(
        troupe, admin_api, admin_core, namespace):
    for subblock in SUBBLOCKS:
        for host in ("h2", "h3"):
            busy = e2e.pod_body(f"busy-{subblock}-{host}", gpus=8)
            busy["spec"]["nodeName"] = f"{subblock}-{host}"
            admin_core.create_namespaced_pod(namespace, busy)
    annotations = {**e2e.gang_annotations("train", 8, timeout=60), "troupe.io/gang-min-size": "4",
                   contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, e2e.indexed_job("train", 8, annotations, gpus=4))

    def four_running():
        pods = e2e.job_pods(admin_core, namespace, "train")
        running = [p for p in pods if p.status.phase == "Running"]
        return (pods, running) if len(pods) == 8 and len(running) == 4 else None

    pods, running = e2e.wait_for("4 of 8 members Running", four_running, timeout=90,
                                 explain=lambda: (e2e.pod_states(admin_core, namespace), e2e.debug_gangs(troupe)))
    first = {p.metadata.name: p.spec.node_name for p in running}
    assert all(not p.spec.scheduling_gates for p in running)
    home = {admin_core.read_node(n).metadata.labels[SUBBLOCK] for n in first.values()}
    assert len(home) == 1, first
    (subblock,) = home

    def waiting_with_progress():
        waiting = [p for p in e2e.job_pods(admin_core, namespace, "train") if p.spec.scheduling_gates]
        messages = [c.message for p in waiting for c in (p.status.conditions or []) if c.type == contract.GANG_CONDITION]
        return messages if len(waiting) == 4 and len(messages) == 4 and all(
            "4 of 8 running (minimum 4)" in m for m in messages) else None

    messages = e2e.wait_for("the other 4 gated, saying the gang's progress", waiting_with_progress, timeout=60,
                            explain=lambda: e2e.pod_states(admin_core, namespace))
    assert "fits 0 of 4 members" in messages[0], messages[0]

    for host in ("h2", "h3"):  # room appears in the gang's subblock
        admin_core.delete_namespaced_pod(f"busy-{subblock}-{host}", namespace, grace_period_seconds=0)
    pods = e2e.running_job_pods(admin_core, namespace, "train", 8, timeout=90)
    assert {p.metadata.name: p.spec.node_name for p in pods if p.metadata.name in first} == first, \
        "no running member is moved"
    assert {admin_core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods} == {subblock}, \
        "the members beyond the minimum joined the gang's subblock"
