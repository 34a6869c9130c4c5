"""A gang of real pods on the local control plane: released whole, or not at all.

Runs the webhook and the reconciler as processes (the ``troupe`` fixture) against
kube-apiserver, kube-scheduler, kube-controller-manager and kwok's 16 fake GPU nodes.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.e2e import (
    gang_annotations,
    indexed_job,
    job_pods,
    pod_body,
    wait_for,
)
from troupe import contract
from troupe.policies import RELEASE_MODE, WHEN_COMPLETE


def test_an_indexed_job_runs_as_one_gang_pinned_to_kwok_nodes(troupe, admin_api, admin_core, namespace):
    batch = client.BatchV1Api(admin_api)
    when_complete = {**gang_annotations("train", 4), RELEASE_MODE: WHEN_COMPLETE}
    batch.create_namespaced_job(namespace, indexed_job("train", 4, when_complete, gpus=1))

    def all_running():
        pods = job_pods(admin_core, namespace, "train")
        return pods if len(pods) == 4 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for("4 Running pods of Job train", all_running, timeout=90)
    for pod in pods:
        assert pod.spec.node_name, "bound by kube-scheduler"
        node = admin_core.read_node(pod.spec.node_name)
        assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
        assert pod.spec.node_selector == {contract.HOSTNAME_LABEL: pod.spec.node_name}, "pinned to its node"
        assert pod.metadata.annotations[contract.ASSIGNED_NODE] == pod.spec.node_name
        assert not pod.spec.scheduling_gates
        assert pod.metadata.annotations["troupe.io/gang-schedule-timeout-seconds"] == "30", "the webhook stamped the default"
    released = [e for e in admin_core.list_namespaced_event(namespace).items if e.reason == "GangReleased"]
    assert len(released) == 1, "one Event for the gang's release; each member's condition tells its own part"
    assert released[0].message.startswith("released 4 member(s) (ranks 0-3)")
    with urllib.request.urlopen(f"http://127.0.0.1:{troupe.metrics_port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    released_count = re.search(r'^troupe_reconciles_total\{phase="Released"\} (\S+)$', metrics, re.M)
    assert released_count and float(released_count.group(1)) >= 1, "the reconciler's metrics show the release"


def test_a_gang_missing_a_member_stays_gated(troupe, admin_core, namespace):
    for i in range(3):
        admin_core.create_namespaced_pod(namespace, pod_body(f"w-{i}", gang_annotations("short", 4), gpus=1))
    wait_for("3 gated pods", lambda: len([p for p in admin_core.list_namespaced_pod(namespace).items
                                          if p.spec.scheduling_gates]) == 3)
    time.sleep(5)  # give the reconciler every chance to (wrongly) release them
    pods = admin_core.list_namespaced_pod(namespace).items
    assert len(pods) == 3
    for pod in pods:
        assert [g.name for g in pod.spec.scheduling_gates] == [contract.GATE]
        assert pod.spec.node_name is None
        assert not (pod.spec.node_selector or {})
    # The fourth member completes the gang: all four are released together.
    admin_core.create_namespaced_pod(namespace, pod_body("w-3", gang_annotations("short", 4), gpus=1))
    wait_for("4 bound pods", lambda: len([p for p in admin_core.list_namespaced_pod(namespace).items
                                          if p.spec.node_name]) == 4, timeout=60)


def test_an_invalid_gang_size_is_refused_by_the_api_server_with_the_webhooks_message(troupe, admin_core, namespace):
    with pytest.raises(ApiException) as err:
        admin_core.create_namespaced_pod(namespace, pod_body("bad", {"troupe.io/gang-name": "g", "troupe.io/gang-size": "abc"}))
    assert err.value.status == 400
    assert "troupe.io/gang-size" in err.value.body and "'abc'" in err.value.body
    assert admin_core.list_namespaced_pod(namespace).items == []


def test_a_pod_without_troupe_keys_is_scheduled_normally_and_untouched(troupe, admin_core, namespace):
    admin_core.create_namespaced_pod(namespace, pod_body("plain", {"example.com/note": "hi"}, gpus=1))
    pod = wait_for("plain pod Running", lambda: (lambda p: p if p.status.phase == "Running" else None)(
        admin_core.read_namespaced_pod("plain", namespace)))
    assert not pod.spec.scheduling_gates
    assert not (pod.spec.node_selector or {})
    assert pod.metadata.annotations == {"example.com/note": "hi"}
