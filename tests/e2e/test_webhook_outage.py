"""While the webhook is down, the pods of a released gang can still be deleted.

A released member carries the reconciler's annotations. The Job controller removes its
``batch.kubernetes.io/job-tracking`` finalizer with an UPDATE that leaves those annotations
alone; if that UPDATE were sent to the webhook (``failurePolicy: Fail``), a webhook outage
would leave every deleted Job's pods Terminating. The registration's CEL compares the
reserved annotations (and Troupe's keys and gate) of ``oldObject`` and ``object``, so such
an UPDATE never reaches the webhook.

The outage: Troupe's registration (``webhook_configuration()``, the same matchConditions,
``failurePolicy: Fail``) pointed at a port where nothing listens, as when every replica is
down, for the test's namespace only, so the rest of the session's cluster is untouched.
"""

from __future__ import annotations

import contextlib
import socket

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.e2e import gang_annotations, indexed_job, job_pods, running_job_pods, wait_for
from troupe import contract
from webhook.registration import webhook_configuration


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def webhook_down(troupe, admin_api, namespace):
    """Troupe's registration for ``namespace``, pointing at a dead address."""
    admission = client.AdmissionregistrationV1Api(admin_api)
    name = f"troupe-down-{namespace}"
    hook = webhook_configuration(troupe.config, url=f"https://127.0.0.1:{_dead_port()}/mutate",
                                 ca_bundle_pem=(troupe.dir / "ca.crt").read_bytes(), name=name)
    webhook = hook["webhooks"][0]  # the pods entry (not the namespace opt-in one)
    hook["webhooks"] = [webhook]
    webhook["name"] = "down.pods.troupe.io"
    webhook["namespaceSelector"] = {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}]}
    admission.create_mutating_webhook_configuration(hook)
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            admission.delete_mutating_webhook_configuration(name)


def test_a_released_gangs_pods_finish_terminating_while_the_webhook_is_down(
        troupe, admin_api, admin_core, namespace, request):
    batch = client.BatchV1Api(admin_api)
    batch.create_namespaced_job(namespace, indexed_job("train", 2, gang_annotations("train", 2), gpus=1))

    pods = running_job_pods(admin_core, namespace, "train", 2)
    for pod in pods:
        assert contract.ASSIGNED_NODE in pod.metadata.annotations, "released by the reconciler"
        assert "batch.kubernetes.io/job-tracking" in (pod.metadata.finalizers or [])

    request.getfixturevalue("webhook_down")
    probe = {"metadata": {"generateName": "probe-", "annotations": gang_annotations("probe", 1)},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

    def outage_in_effect():
        try:
            admin_core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as e:
            return "down.pods.troupe.io" in (e.body or "")
        return False

    wait_for("the outage to take effect (a gang pod cannot be created)", outage_in_effect, timeout=30)

    batch.delete_namespaced_job("train", namespace, propagation_policy="Background")
    wait_for("the Job's pods deleted, finalizers removed without the webhook",
             lambda: job_pods(admin_core, namespace, "train") == [], timeout=60)
