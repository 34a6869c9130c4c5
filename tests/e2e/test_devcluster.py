"""The local control plane works the way Troupe's tests rely on: real API server with
RBAC, stock scheduler, kwok nodes that run pods, scheduling gates honoured."""

from __future__ import annotations

import os
import signal
import ssl
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devtools.devcluster import Cluster, ComponentDied
from devtools.devcluster.cluster import exists
from devtools.devcluster.toolchain import control_plane_version
from tests.support.e2e import wait_for

T = TypeVar("T")

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GATE = "example.com/gate"


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[k8s.ApiClient]:
    with cluster.api_client("admin") as api:
        yield api


@pytest.fixture(scope="module")
def core(admin: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(admin)


@pytest.fixture(scope="module")
def namespace(core: k8s.CoreV1Api) -> Iterator[str]:
    name = f"devcluster-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    wait_for(
        f"ServiceAccount {name}/default",
        lambda: exists(lambda: core.read_namespaced_service_account("default", name)),
    )
    yield name
    core.delete_namespace(name)


def pod(name: str, gates: list[str] | None = None) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PodSpec(
            containers=[
                k8s.V1Container(
                    name="main",
                    image=PAUSE_IMAGE,
                    resources=k8s.V1ResourceRequirements(requests={"cpu": "1"}),
                )
            ],
            scheduling_gates=[k8s.V1PodSchedulingGate(name=g) for g in gates] if gates else None,
        ),
    )


def test_the_api_server_answers_readyz_and_is_the_kubernetes_release_chosen(
    cluster: Cluster, admin: k8s.ApiClient
):
    request = urllib.request.Request(
        f"{cluster.server}/readyz", headers={"Authorization": f"Bearer {cluster.token('admin')}"}
    )
    context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    with urllib.request.urlopen(request, context=context, timeout=5) as response:
        assert response.status == 200
        assert response.read() == b"ok"

    assert cluster.server.startswith("https://127.0.0.1:")
    # v1.37.2, or the older release a compatibility run picks ($TROUPE_KUBERNETES_VERSION)
    assert k8s.VersionApi(admin).get_code().git_version == control_plane_version()


def test_kubectl_talks_to_the_cluster_as_admin(cluster: Cluster):
    result = cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")

    assert result.stdout == "admin"


def test_the_16_fake_nodes_are_ready_and_offer_8_gpus_each(core: k8s.CoreV1Api):
    nodes = core.list_node(label_selector="type=kwok").items

    assert len(nodes) == 16
    for node in nodes:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"], node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "32"
        assert node.metadata.labels["cloud.google.com/gce-topology-host"] == node.metadata.name


def test_a_plain_pod_is_scheduled_onto_a_kwok_node_and_reaches_running(
    core: k8s.CoreV1Api, namespace: str
):
    core.create_namespaced_pod(namespace, pod("plain"))

    def running() -> k8s.V1Pod | None:
        got = core.read_namespaced_pod("plain", namespace)
        return got if got.status.phase == "Running" else None

    got = wait_for("pod plain to be Running", running)
    node = core.read_node(got.spec.node_name)
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert [c.status for c in got.status.conditions if c.type == "Ready"] == ["True"]


@pytest.mark.parametrize("identity", ["reconciler", "alice"])
def test_identities_other_than_admin_get_403_on_pods_and_cluster_roles_by_default(
    cluster: Cluster, namespace: str, identity: str
):
    with cluster.api_client(identity) as api:
        with pytest.raises(ApiException) as pods_denied:
            k8s.CoreV1Api(api).create_namespaced_pod(namespace, pod(f"denied-{identity}"))
        with pytest.raises(ApiException) as roles_denied:
            k8s.RbacAuthorizationV1Api(api).create_cluster_role(
                k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=f"denied-{identity}"))
            )

    assert pods_denied.value.status == 403
    assert roles_denied.value.status == 403
    user = (
        "system:serviceaccount:troupe-system:troupe-reconciler"
        if identity == "reconciler"
        else "alice"
    )
    assert f'User \\"{user}\\" cannot create resource \\"pods\\"' in pods_denied.value.body


def test_admin_can_create_cluster_roles(admin: k8s.ApiClient):
    rbac = k8s.RbacAuthorizationV1Api(admin)
    name = f"devcluster-e2e-{uuid.uuid4().hex[:6]}"

    created = rbac.create_cluster_role(
        k8s.V1ClusterRole(
            metadata=k8s.V1ObjectMeta(name=name),
            rules=[k8s.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get"])],
        )
    )
    try:
        assert created.metadata.name == name
        assert rbac.read_cluster_role(name).rules[0].resources == ["pods"]
    finally:
        rbac.delete_cluster_role(name)


def test_a_gated_pod_stays_pending_until_its_gate_is_removed_then_is_bound(
    core: k8s.CoreV1Api, namespace: str
):
    core.create_namespaced_pod(namespace, pod("gated", gates=[GATE]))

    def gated_condition() -> k8s.V1PodCondition | None:
        got = core.read_namespaced_pod("gated", namespace)
        return next((c for c in got.status.conditions or [] if c.type == "PodScheduled"), None)

    condition = wait_for("PodScheduled condition on the gated pod", gated_condition)
    assert (condition.status, condition.reason) == ("False", "SchedulingGated")
    time.sleep(2)  # give the scheduler a chance to (wrongly) bind it
    still = core.read_namespaced_pod("gated", namespace)
    assert still.spec.node_name is None
    assert still.status.phase == "Pending"
    assert [g.name for g in still.spec.scheduling_gates] == [GATE]

    core.patch_namespaced_pod(
        "gated", namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )

    def running() -> k8s.V1Pod | None:
        got = core.read_namespaced_pod("gated", namespace)
        return got if got.spec.node_name and got.status.phase == "Running" else None

    bound = wait_for("the ungated pod to be bound and Running", running)
    assert bound.spec.node_name.startswith("gpu-b")
    assert not bound.spec.scheduling_gates


def test_a_second_cluster_reports_a_dead_component_with_its_log_tail_and_stops_every_process(
    tmp_path,
):
    seen: list[Exception] = []
    second = Cluster(tmp_path / "run", on_failure=seen.append)
    second.start()
    try:
        pids = {s.record.name: s.record.pid for s in second._started}
        assert set(pids) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        assert (tmp_path / "run" / "pids.json").is_file()

        os.kill(pids["kube-scheduler"], signal.SIGKILL)
        wait_for("the monitor to report kube-scheduler", lambda: seen, timeout=10)

        message = str(seen[0])
        assert message.startswith("kube-scheduler exited with signal 9 (SIGKILL); last lines of ")
        assert str(tmp_path / "run" / "logs" / "kube-scheduler.log") in message
        assert "--leader-elect=false" in message  # the log tail starts with the command line
        with pytest.raises(ComponentDied, match="kube-scheduler exited"):
            second.check()
    finally:
        second.stop()

    for name, pid in pids.items():
        assert not _alive(pid), f"{name} (pid {pid}) still running after stop()"
    assert (tmp_path / "run" / "logs" / "kube-apiserver.log").is_file()  # a given run dir is kept


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
