"""SharedDeviceGroups on the local control plane: real groups (the chart's CRD), real pods
through the webhook, the reconciler allocating device IDs, kube-scheduler binding.

A cluster and Troupe of this module's own (one test kills the reconciler). Besides the 16
GPU nodes of examples/nodes.yaml, two kwok nodes opted in to shared devices, with the
recommended taint (``deviceshare.io/mode=shared:NoSchedule``, which keeps ordinary pods
off them)::

    shared-0  8 nvidia.com/gpu   deviceshare.io/mode=shared
    shared-1  8 nvidia.com/gpu   deviceshare.io/mode=shared
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.devcluster import Cluster
from devtools.devcluster.nodes import make_node
from devtools.devcluster.stack import Stack
from tests.support.e2e import (
    gang_annotations,
    pod_body,
    temporary_namespace,
    wait_for,
)
from troupe import contract

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
SHARED = ("shared-0", "shared-1")
API = contract.DEVICE_GROUP_API


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("sdg") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 1\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster:
        core = client.CoreV1Api(cluster.api_client("admin"))
        for name in SHARED:
            core.create_node(make_node(
                name, {"cpu": "32", "memory": "256Gi", "pods": "110", GPU: "8"},
                labels={contract.DEVICE_MODE_LABEL: contract.DEVICE_MODE_SHARED},
                taints=[{"key": contract.DEVICE_MODE_LABEL, "value": contract.DEVICE_MODE_SHARED,
                         "effect": "NoSchedule"}]))
        wait_for("the shared nodes Ready", lambda: all(
            any(c.type == "Ready" and c.status == "True" for c in core.read_node(n).status.conditions or [])
            for n in SHARED))
        with Stack(cluster, config, lease_seconds=4) as running:
            yield running


@pytest.fixture
def api(stack: Stack) -> Any:
    return stack.cluster.api_client("admin")


@pytest.fixture
def core(api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    with temporary_namespace(core, "sdg", timeout=60) as name:
        yield name


@pytest.fixture
def groups(api: Any, core: client.CoreV1Api, ns: str) -> Iterator[list[str]]:
    """Names of the groups a test creates. Deleted after the test's pods: each must then be
    gone within seconds, its finalizer removed by the reconciler since none of its pods runs
    any more."""
    made: list[str] = []
    yield made
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for(f"the pods of {ns} gone", lambda: not core.list_namespaced_pod(ns).items, timeout=60)
    custom = client.CustomObjectsApi(api)
    for name in made:
        try:
            custom.delete_cluster_custom_object(*API, name)
        except ApiException as e:
            if e.status != 404:
                raise

    def gone(name: str) -> bool:
        try:
            read_group(api, name)
        except ApiException as e:
            return e.status == 404
        return False

    for name in made:
        wait_for(f"group {name} gone", lambda n=name: gone(n), timeout=30)


def create_group(api: Any, groups: list[str], gpus: int, strategy: str = "binpack") -> str:
    name = f"g-{uuid.uuid4().hex[:6]}"
    client.CustomObjectsApi(api).create_cluster_custom_object(*API, {
        "apiVersion": f"{API[0]}/{API[1]}", "kind": "SharedDeviceGroup", "metadata": {"name": name},
        "spec": {"resources": {GPU: gpus}, "schedulingStrategy": strategy}})
    groups.append(name)
    return name


def read_group(api: Any, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_cluster_custom_object(*API, name)


def group_pod(name: str, group: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod joining ``group``: no GPU request of its own (the webhook refuses one); it
    tolerates the shared nodes' taint."""
    body = pod_body(name, {contract.DEVICE_GROUP: group, **(annotations or {})}, cpu="500m")
    body["spec"]["tolerations"] = [{"key": contract.DEVICE_MODE_LABEL, "operator": "Equal",
                                    "value": contract.DEVICE_MODE_SHARED, "effect": "NoSchedule"}]
    return body


def running(core: client.CoreV1Api, ns: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, ns)
    return pod if pod.status.phase == "Running" and pod.spec.node_name else None


def devices_of(pod: Any) -> list[int]:
    raw = json.loads(pod.metadata.annotations[contract.SELECTED_DEVICES])
    return [int(i) for i in raw[GPU].split(",")]


def test_two_groups_on_one_shared_node_get_disjoint_ids_and_their_pods_see_them(stack, api, core, ns, groups):
    first, second = create_group(api, groups, 2), create_group(api, groups, 2)
    core.create_namespaced_pod(ns, group_pod("a", first))
    a = wait_for("pod a Running", lambda: running(core, ns, "a"))
    core.create_namespaced_pod(ns, group_pod("b", second))
    b = wait_for("pod b Running", lambda: running(core, ns, "b"))
    # binpack: the second group goes to the node the first already uses (6 free < 8 free).
    assert a.spec.node_name == b.spec.node_name and a.spec.node_name in SHARED
    assert devices_of(a) == [0, 1] and devices_of(b) == [2, 3]
    for pod, ids in ((a, "0,1"), (b, "2,3")):
        assert pod.metadata.annotations["deviceshare.io/env.NVIDIA_VISIBLE_DEVICES"] == ids
        env = {e.name: e for e in pod.spec.containers[0].env}
        ref = env["NVIDIA_VISIBLE_DEVICES"].value_from.field_ref
        assert ref.field_path == "metadata.annotations['deviceshare.io/env.NVIDIA_VISIBLE_DEVICES']"
        assert pod.spec.node_selector == {contract.HOSTNAME_LABEL: pod.spec.node_name}
    for name, ids in ((first, "0,1"), (second, "2,3")):
        group = wait_for(f"group {name} Bound", lambda n=name: (g := read_group(api, n)).get("status", {}).get(
            "phase") == "Bound" and g)
        assert group["status"]["nodeName"] == a.spec.node_name
        assert group["status"]["selectedDevices"] == {GPU: ids}
        assert contract.DEVICE_GROUP_FINALIZER in group["metadata"]["finalizers"]
        assert [(c["type"], c["status"], c["reason"]) for c in group["status"]["conditions"]] == [
            ("Allocated", "True", "Allocated")]
    table = stack.cluster.kubectl("get", "sdg", first, second).stdout
    print(table)
    assert "Bound" in table and a.spec.node_name in table


def test_a_group_that_fits_nowhere_stays_pending_with_the_shortage(api, core, ns, groups):
    big = create_group(api, groups, 12)
    core.create_namespaced_pod(ns, group_pod("big", big))
    group = wait_for("the group Pending for devices", lambda: (g := read_group(api, big)).get("status", {}).get(
        "conditions", [{}])[0].get("reason") == "InsufficientDevices" and g)
    [condition] = group["status"]["conditions"]
    print(json.dumps(condition, indent=2))
    assert group["status"]["phase"] == "Pending"
    assert (condition["status"], condition["reason"]) == ("False", "InsufficientDevices")
    assert condition["message"].startswith(f"SharedDeviceGroup {big} (12 nvidia.com/gpu): no shared node has 12 free "
                                           f"nvidia.com/gpu; largest free: 8 on node")
    assert core.read_namespaced_pod("big", ns).spec.scheduling_gates, "its pod stays gated"


def test_deleting_a_group_frees_its_ids_for_a_waiting_group(api, core, ns, groups):
    holders = [create_group(api, groups, 8) for _ in SHARED]
    for i, g in enumerate(holders):
        core.create_namespaced_pod(ns, group_pod(f"h{i}", g))
        wait_for(f"pod h{i} Running", lambda i=i: running(core, ns, f"h{i}"))
    waiting = create_group(api, groups, 8)
    core.create_namespaced_pod(ns, group_pod("w", waiting))
    wait_for("the third group Pending for devices", lambda: any(
        c.get("reason") == "InsufficientDevices" for c in read_group(api, waiting).get("status", {}).get("conditions", [])))
    freed = core.read_namespaced_pod("h0", ns).spec.node_name
    custom = client.CustomObjectsApi(api)
    custom.delete_cluster_custom_object(*API, holders[0])
    # Its pod still runs: the finalizer keeps the group, and its devices stay taken.
    wait_for("the deleted group marked", lambda: read_group(api, holders[0])["metadata"].get("deletionTimestamp"))
    assert core.read_namespaced_pod("w", ns).spec.scheduling_gates
    core.delete_namespaced_pod("h0", ns, grace_period_seconds=0)
    w = wait_for("pod w Running on the freed node", lambda: running(core, ns, "w"), timeout=60)
    assert w.spec.node_name == freed and devices_of(w) == list(range(8))
    with pytest.raises(ApiException) as gone:
        read_group(api, holders[0])
    assert gone.value.status == 404


def test_a_gang_of_two_sharing_one_group_runs_on_one_node_with_the_same_ids(api, core, ns, groups):
    g = create_group(api, groups, 4)
    for i in range(2):
        core.create_namespaced_pod(ns, group_pod(f"w-{i}", g, gang_annotations("pair", 2)))
    pods = [wait_for(f"pod w-{i} Running", lambda i=i: running(core, ns, f"w-{i}")) for i in range(2)]
    assert pods[0].spec.node_name == pods[1].spec.node_name
    assert devices_of(pods[0]) == devices_of(pods[1]) == [0, 1, 2, 3]


def test_a_reconciler_killed_between_two_allocations_never_hands_out_an_id_twice(stack, api, core, ns, groups):
    first = create_group(api, groups, 3)
    core.create_namespaced_pod(ns, group_pod("before", first))
    before = wait_for("pod before Running", lambda: running(core, ns, "before"))
    os.kill(stack.process("troupe-reconciler").record.pid, signal.SIGKILL)
    # While no reconciler runs, a second group and its pod arrive.
    second = create_group(api, groups, 3)
    core.create_namespaced_pod(ns, group_pod("after", second))
    stack.start_reconciler("troupe-reconciler-restarted")
    after = wait_for("pod after Running", lambda: running(core, ns, "after"), timeout=60)
    if after.spec.node_name == before.spec.node_name:
        assert not set(devices_of(after)) & set(devices_of(before)), "an ID handed out twice"
    # binpack: the restarted reconciler saw the 3 IDs the first group holds, so it packed the
    # second group onto the same node, after them.
    assert (after.spec.node_name, devices_of(after)) == (before.spec.node_name, [3, 4, 5])


def test_kubectl_shows_groups_by_their_short_name(stack, api, groups):
    name = create_group(api, groups, 1)
    out = stack.cluster.kubectl("get", "sdg", name).stdout
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "NODE", "DEVICES", "AGE"]


def test_the_api_server_refuses_a_bad_group_spec(stack):
    bad = stack.cluster.kubectl("apply", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup", "metadata": {"name": "bad"},
        "spec": {"resources": {GPU: 0}, "schedulingStrategy": "random"}}))
    assert bad.returncode != 0
    assert "spec.resources.nvidia.com/gpu: Invalid value: 0" in bad.stderr
    assert 'spec.schedulingStrategy: Unsupported value: "random"' in bad.stderr
    for resource in ("memory", "kubernetes.io/batteries"):  # measured, not counted: never device IDs
        measured = stack.cluster.kubectl("apply", "-f", "-", check=False, input=json.dumps({
            "apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup", "metadata": {"name": "measured"},
            "spec": {"resources": {resource: 1}}}))
        assert measured.returncode != 0, resource
        assert "resource names must be counted devices" in measured.stderr, measured.stderr
