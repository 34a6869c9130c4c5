"""The webhook in the real API server's admission chain: protected decisions, device env vars.

``alice`` is an ordinary user with the ``edit`` role in the test namespace; ``reconciler``
is Troupe's own identity (``system:serviceaccount:troupe-system:troupe-reconciler``).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.helpers import pod_body, wait_for
from troupe import contract

SELECTED = contract.SELECTED_DEVICES
ENV_KEY = contract.DEVICE_ENV_PREFIX + "NVIDIA_VISIBLE_DEVICES"


@pytest.fixture
def alice(cluster, admin_api, namespace):
    client.RbacAuthorizationV1Api(admin_api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    })
    return client.CoreV1Api(cluster.api_client("alice"))


@pytest.fixture
def reconciler_core(cluster):
    return client.CoreV1Api(cluster.api_client("reconciler"))


def refused(call) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    return json.loads(err.value.body)["message"]


def test_a_user_cannot_create_a_pod_carrying_the_reconcilers_decisions(troupe, alice, namespace):
    body = pod_body("forged", {SELECTED: '{"nvidia.com/gpu": "0,1"}'})
    message = refused(lambda: alice.create_namespaced_pod(namespace, body))
    assert SELECTED in message and "alice" in message
    assert alice.list_namespaced_pod(namespace).items == []


def test_only_the_reconciler_may_change_the_decisions_later(troupe, alice, reconciler_core, admin_core, namespace):
    alice.create_namespaced_pod(namespace, pod_body("worker"))
    message = refused(lambda: alice.patch_namespaced_pod(
        "worker", namespace, {"metadata": {"annotations": {SELECTED: '{"nvidia.com/gpu": "3"}'}}}))
    assert SELECTED in message

    reconciler_core.patch_namespaced_pod(
        "worker", namespace, {"metadata": {"annotations": {SELECTED: '{"nvidia.com/gpu": "0"}', ENV_KEY: "0"}}})
    pod = admin_core.read_namespaced_pod("worker", namespace)
    assert pod.metadata.annotations[SELECTED] == '{"nvidia.com/gpu": "0"}'

    for change in ({ENV_KEY: "0,1"}, {ENV_KEY: None}, {contract.ASSIGNED_NODE: "gpu-b0-s0-h0"}):
        message = refused(lambda change=change: alice.patch_namespaced_pod(
            "worker", namespace, {"metadata": {"annotations": change}}))
        assert next(iter(change)) in message
    # An unrelated change by the user is still fine.
    alice.patch_namespaced_pod("worker", namespace, {"metadata": {"labels": {"team": "a"}}})
    assert admin_core.read_namespaced_pod("worker", namespace).metadata.annotations[ENV_KEY] == "0"


def test_a_device_group_pod_gets_its_env_var_from_the_downward_api_and_stays_gated(troupe, alice, admin_core, namespace):
    body = pod_body("shared", {contract.DEVICE_GROUP: "team-a-gpus"})
    body["spec"]["initContainers"] = [{"name": "setup", "image": "registry.k8s.io/pause:3.10"}]
    body["spec"]["containers"][0]["env"] = [{"name": "KEEP", "value": "me"}]
    pod = alice.create_namespaced_pod(namespace, body)
    assert [g.name for g in pod.spec.scheduling_gates] == [contract.GATE]
    for container in [*pod.spec.init_containers, *pod.spec.containers]:
        env = {e.name: e for e in container.env}
        ref = env["NVIDIA_VISIBLE_DEVICES"].value_from.field_ref
        assert ref.field_path == f"metadata.annotations['{ENV_KEY}']"
    assert {e.name: e.value for e in pod.spec.containers[0].env}["KEEP"] == "me"
    wait_for("the reconciler's SharedDeviceGroupPending event", lambda: [
        e for e in admin_core.list_namespaced_event(namespace).items if e.reason == "SharedDeviceGroupPending"])
    pod = admin_core.read_namespaced_pod("shared", namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == [contract.GATE], "not released without its device IDs"
    assert pod.spec.node_name is None


def test_a_user_cannot_lift_troupes_gate_and_release_one_member_alone(troupe, alice, admin_core, namespace):
    alice.create_namespaced_pod(namespace, pod_body("lonely", {"troupe.io/gang-name": "pair", "troupe.io/gang-size": "2"}))
    message = refused(lambda: alice.patch_namespaced_pod(
        "lonely", namespace, [{"op": "remove", "path": "/spec/schedulingGates/0"}],
        _content_type="application/json-patch+json"))
    assert "scheduling gate troupe.io/placement" in message
    pod = admin_core.read_namespaced_pod("lonely", namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == [contract.GATE]
