"""The webhook in the real API server's admission chain: protected decisions (on pods, on
``pods/status``, on pods posing as mirror pods), Troupe keys fixed at creation, device env
vars and the device-group rules.

``alice`` is an ordinary user with the ``edit`` role in the test namespace; ``reconciler``
is Troupe's own identity (``system:serviceaccount:troupe-system:troupe-reconciler``).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.e2e import gang_annotations, pod_body, wait_for
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
    api = cluster.api_client("alice")
    # The API server's authorizer learns of a new binding from its informer, a moment later.
    review = {"spec": {"resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "pods"}}}
    wait_for("alice's role binding in effect", lambda: client.AuthorizationV1Api(api).create_self_subject_access_review(
        review).status.allowed, timeout=30)
    return client.CoreV1Api(api)


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
    shared = [t for t in pod.spec.tolerations if t.key == contract.DEVICE_SHARED_TAINT_KEY]
    assert [(t.operator, t.value, t.effect) for t in shared] == [
        ("Equal", contract.DEVICE_SHARED_TAINT_VALUE, contract.DEVICE_SHARED_TAINT_EFFECT)], "tolerates shared nodes"
    wait_for("the reconciler's SharedDeviceGroupUnavailable event (no such group)", lambda: [
        e for e in admin_core.list_namespaced_event(namespace).items if e.reason == "SharedDeviceGroupUnavailable"])
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


def test_a_device_group_pod_may_not_request_gpus_itself(troupe, alice, namespace):
    body = pod_body("greedy", {contract.DEVICE_GROUP: "team-a-gpus"}, gpus=2)
    with pytest.raises(ApiException) as err:
        alice.create_namespaced_pod(namespace, body)
    assert err.value.status == 400, err.value.body
    message = json.loads(err.value.body)["message"]
    assert "container main" in message and "nvidia.com/gpu" in message
    assert alice.list_namespaced_pod(namespace).items == []


def test_a_pod_with_too_many_containers_is_refused_naming_the_field_while_another_is_admitted(troupe, alice, namespace):
    """Issue 22, finding 3: the webhook's patch grows with a device-group pod's containers,
    so such a pod may have at most ``MAX_CONTAINERS`` in all (decision 028)."""
    from webhook.admission import MAX_CONTAINERS

    body = pod_body("crowded", {contract.DEVICE_GROUP: "team-a-gpus"})
    main = body["spec"]["containers"][0]
    body["spec"]["containers"] = [{**main, "name": f"c{i}"} for i in range(MAX_CONTAINERS + 1)]
    with pytest.raises(ApiException) as err:
        alice.create_namespaced_pod(namespace, body)
    assert err.value.status == 400, err.value.body
    message = json.loads(err.value.body)["message"]
    assert f"spec.containers: {MAX_CONTAINERS + 1}" in message and f"at most {MAX_CONTAINERS}" in message
    admitted = alice.create_namespaced_pod(namespace, pod_body("roomy", {contract.DEVICE_GROUP: "team-a-gpus"}))
    assert [g.name for g in admitted.spec.scheduling_gates] == [contract.GATE]
    assert [p.metadata.name for p in alice.list_namespaced_pod(namespace).items] == ["roomy"]


@pytest.fixture
def alice_writes_status(admin_api, namespace, alice):
    """alice may also patch pods/status in the namespace (as a controller of hers would)."""
    rbac = client.RbacAuthorizationV1Api(admin_api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "pod-status-writer"}, "rules": [
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-pod-status"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-status-writer"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    })
    return alice


def test_pods_status_cannot_forge_the_reconcilers_decisions(troupe, alice_writes_status, admin_core, namespace):
    alice = alice_writes_status
    alice.create_namespaced_pod(namespace, pod_body("worker", gang_annotations("pair", 2)))
    condition = {"status": {"conditions": [{"type": "example.com/Checked", "status": "True"}]}}

    def status_patched():
        try:
            alice.patch_namespaced_pod_status("worker", namespace, condition)
        except ApiException as e:
            if e.status == 403 and "cannot patch" in (e.body or ""):  # her role is not in effect yet
                return False
            raise
        return True

    wait_for("alice's status patch that leaves the decisions alone", status_patched, timeout=30)
    for change in ({contract.ASSIGNED_NODE: "gpu-b0-s0-h0"}, {SELECTED: '{"nvidia.com/gpu": "0"}'}):
        message = refused(lambda change=change: alice.patch_namespaced_pod_status(
            "worker", namespace, {"metadata": {"annotations": change}}))
        assert next(iter(change)) in message and "only Troupe's reconciler" in message
    pod = admin_core.read_namespaced_pod("worker", namespace)
    assert not any(contract.is_reserved_annotation(k) for k in pod.metadata.annotations)


def test_a_pod_posing_as_a_mirror_pod_cannot_carry_decisions(troupe, alice, namespace):
    body = pod_body("static-like", {contract.MIRROR_POD_ANNOTATION: "forged", **gang_annotations("g", 1),
                                    contract.ASSIGNED_NODE: "gpu-b0-s0-h0"})
    message = refused(lambda: alice.create_namespaced_pod(namespace, body))
    assert contract.ASSIGNED_NODE in message and "alice" in message
    assert alice.list_namespaced_pod(namespace).items == []


def test_gang_keys_are_fixed_once_the_pod_exists(troupe, alice, namespace):
    alice.create_namespaced_pod(namespace, pod_body("member", gang_annotations("pair", 2)))
    with pytest.raises(ApiException) as err:
        alice.patch_namespaced_pod("member", namespace, {"metadata": {"annotations": {"troupe.io/gang-size": "3"}}})
    assert err.value.status == 400, err.value.body
    message = json.loads(err.value.body)["message"]
    assert "troupe.io/gang-size" in message and "from '2' to '3'" in message
    # Other annotations of the waiting member may still change.
    alice.patch_namespaced_pod("member", namespace, {"metadata": {"annotations": {"example.com/owner": "b"}}})
