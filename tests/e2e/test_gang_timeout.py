"""A released gang that does not bind in time is rolled back, on the real control plane.

Each member of the Job also carries another component's gate (``example.com/hold``), which
Troupe leaves alone: once Troupe releases the gang, kube-scheduler still cannot bind it, so
the gang's timeout runs out. Troupe then marks the members DisruptionTarget and deletes them
(the Job owns them), and the Job controller recreates them, gated by the webhook again.
"""

from __future__ import annotations

from kubernetes import client

from tests.support.e2e import gang_annotations, indexed_job, job_pods, wait_for
from troupe import contract


def test_a_gang_that_cannot_bind_in_time_is_deleted_and_recreated_by_its_job(troupe, admin_api, admin_core, namespace):
    job = indexed_job("stuck", 2, gang_annotations("stuck", 2, timeout=3), gpus=1)
    # backoffLimit 0: the Job survives only if the rollback's deletions are not counted as
    # failures, which the DisruptionTarget condition and this policy see to (KEP-3329).
    job["spec"]["backoffLimit"] = 0
    job["spec"]["podFailurePolicy"] = {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)

    def released():
        pods = job_pods(admin_core, namespace, "stuck")
        ok = len(pods) == 2 and all(
            [g.name for g in p.spec.scheduling_gates] == ["example.com/hold"]
            and contract.RELEASED_AT in p.metadata.annotations for p in pods)
        return pods if ok else None

    first = {p.metadata.uid for p in wait_for("both members released by Troupe", released, timeout=60)}

    seen: dict[str, object] = {}  # the recreated members as first seen: a later rollback may delete them again

    def recreated():
        for pod in job_pods(admin_core, namespace, "stuck"):
            if pod.metadata.uid not in first and not pod.metadata.deletion_timestamp:
                seen.setdefault(pod.metadata.uid, pod)
        return list(seen.values()) if len(seen) >= 2 else None

    pods = wait_for("the Job to recreate both members after the rollback", recreated, timeout=150)
    for pod in pods:
        assert contract.GATE in [g.name for g in pod.spec.scheduling_gates] or contract.RELEASED_AT in pod.metadata.annotations
    status = client.BatchV1Api(admin_api).read_namespaced_job("stuck", namespace).status
    assert not [c for c in status.conditions or [] if c.type == "Failed"], "the rollback cost the Job nothing"
    events = [e for e in admin_core.list_namespaced_event(namespace).items if e.reason == "GangTimedOut"]
    assert events, "the rollback is told"
    # Released as created (the default): the reservation's clock (docs/decisions/034).
    assert any("not complete within 3s" in e.message and "2 released, 0 bound" in e.message
               and "deleting 2 member(s): their controller recreates them" in e.message for e in events), \
        [e.message for e in events]
    # One per change of the gang (a rollback, its finishing, a later rollback), never one per member.
    assert all("member(s): their controller recreates them" in e.message for e in events)
