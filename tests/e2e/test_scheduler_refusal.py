"""A member kube-scheduler refuses for a reason Troupe does not model is planned again off
that node, long before the gang's timeout, on the real control plane (docs/decisions/032).

The reason: kube-scheduler's ``VolumeRestrictions`` refuses a node where another pod
already mounts the same GCE persistent disk read-write ("node(s) had no available disk").
The engine does not model inline disk conflicts, so it plans the gang on the two nodes of
subblock gpu-b0-s0 it may use, one of which holds the disk. kube-scheduler leaves that
member unbound (``PodScheduled=False``, ``Unschedulable``); Troupe reads it, rolls the
release back, avoids the node and releases the Job's recreated pods elsewhere.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client

from tests.support.e2e import gang_annotations, indexed_job, job_pods, pod_body, wait_for
from troupe import contract

HELD = "gpu-b0-s0-h0"  # the node where another pod holds the disk, Troupe's first choice
ALLOWED = [HELD, "gpu-b0-s0-h1", "gpu-b1-s1-h3"]
DISK = {"name": "data", "gcePersistentDisk": {"pdName": "troupe-e2e-shared-disk", "fsType": "ext4"}}
#: The gang's timeout, seconds: the Job controller alone waits 10 s before it recreates a
#: deleted pod (its pod-failure backoff), so a margin for a loaded machine.
TIMEOUT = 90


def why_of(cluster, namespace: str, pod: str) -> subprocess.CompletedProcess[str]:
    """``kubectl troupe why POD`` as the installed plugin answers it."""
    return subprocess.run([str(Path(sys.executable).parent / "kubectl-troupe"), "why", pod, "-n", namespace,
                           "--kubeconfig", str(cluster.kubeconfig("admin"))],
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_member_refused_for_a_reason_troupe_does_not_model_is_planned_again_off_that_node(
        troupe, cluster, admin_api, admin_core, namespace):
    holder = pod_body("disk-holder")
    holder["spec"]["nodeSelector"] = {contract.HOSTNAME_LABEL: HELD}
    holder["spec"]["volumes"] = [DISK]
    admin_core.create_namespaced_pod(namespace, holder)
    wait_for("the disk holder running on its node",
             lambda: admin_core.read_namespaced_pod("disk-holder", namespace).status.phase == "Running" or None)

    job = indexed_job("disk", 2, gang_annotations("disk", 2, timeout=TIMEOUT), gpus=8)
    job["spec"]["podFailurePolicy"] = {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    spec = job["spec"]["template"]["spec"]
    spec["volumes"] = [DISK]
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": contract.HOSTNAME_LABEL, "operator": "In", "values": ALLOWED}]}]}}}
    started = time.monotonic()
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)

    def released():
        pods = job_pods(admin_core, namespace, "disk")
        pinned = {p.metadata.uid: p.metadata.annotations.get(contract.ASSIGNED_NODE) for p in pods}
        return pods if len(pods) == 2 and all(pinned.values()) else None

    first = wait_for("the first release", released, timeout=60)
    assert {p.metadata.annotations[contract.ASSIGNED_NODE] for p in first} == set(ALLOWED[:2]), (
        "the engine, blind to inline disk conflicts, plans the gang in one subblock, on the node that holds the "
        "disk (if the engine now models them, this test needs another reason it does not model)")
    first_uids = {p.metadata.uid for p in first}

    def running_elsewhere():
        pods = [p for p in job_pods(admin_core, namespace, "disk") if not p.metadata.deletion_timestamp]
        ok = (len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
              and not first_uids & {p.metadata.uid for p in pods})
        return pods if ok else None

    pods = wait_for("the recreated members running off the refused node", running_elsewhere, timeout=TIMEOUT)
    took = time.monotonic() - started
    assert took < TIMEOUT, f"planned again before the {TIMEOUT}s timeout, not after it ({took:.0f}s)"
    assert HELD not in {p.spec.node_name for p in pods}
    assert {p.spec.node_name for p in pods} == set(ALLOWED[1:])

    events = [e for e in admin_core.list_namespaced_event(namespace).items if e.reason == "GangRefused"]
    assert events, "the refusal is told"
    assert any(f"on node {HELD}: 0/16 nodes are available" in e.message and "had no available disk" in e.message
               for e in events), [e.message for e in events]
    # The gang ran off the refused node before its timeout could run out (asserted above). A
    # GangTimedOut Event was seen once in a full parallel run, its message not kept: one is
    # printed, and failed on only if a release ran out of its time, until its cause is known.
    timed_out = [e.message for e in admin_core.list_namespaced_event(namespace).items if e.reason == "GangTimedOut"]
    if timed_out:
        print("GangTimedOut Events:", timed_out, [(e.reason, e.involved_object.name, e.message) for e in
                                                 admin_core.list_namespaced_event(namespace).items
                                                 if e.source.component == "troupe-reconciler"])
    assert not [m for m in timed_out if "within" in m], "no release ran out of its time"
    # Released as created (the default), the note is told with the reservation (docs/decisions/034).
    releases = [e.message for e in admin_core.list_namespaced_event(namespace).items
                if e.reason in ("GangReleased", "GangReserved")]
    assert any("placed without modeling: inline gcePersistentDisk volume data (kube-scheduler will check it)" in m
               and "avoiding" not in m for m in releases), releases

    def told():
        pod = admin_core.read_namespaced_pod(pods[0].metadata.name, namespace)
        return next((c for c in pod.status.conditions or [] if c.type == contract.GANG_CONDITION), None)

    condition = wait_for("the released member's condition", told, timeout=15)
    assert condition.reason == "Released"
    assert f"avoiding node {HELD} (kube-scheduler refused member" in condition.message, condition.message
    assert "had no available disk" in condition.message
    why = why_of(cluster, namespace, pods[0].metadata.name)
    assert why.returncode == 0, why.stderr
    assert f"Told:     Released: released onto node {pods[0].spec.node_name} as rank" in why.stdout, why.stdout
    assert f"avoiding node {HELD} (kube-scheduler refused member" in why.stdout
    status = client.BatchV1Api(admin_api).read_namespaced_job("disk", namespace).status
    assert not [c for c in status.conditions or [] if c.type == "Failed"], "the rollback cost the Job nothing"
