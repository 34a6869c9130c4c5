"""kube-scheduler allocates the fake DRA GPUs of kwok nodes (devtools/devcluster/dra.py) and
kwok runs the pods: plain pods and Jobs with ResourceClaims, no Troupe.

Each test adds nodes of its own (:func:`tests.support.e2e.dra_nodes`: 8 devices of driver
gpu.troupe.dev each, published in a ResourceSlice per node) to the session's cluster and
removes them, with its pods, at the end.
"""

from __future__ import annotations

import uuid
from typing import Any

import yaml
from kubernetes import client

from devtools.devcluster import dra
from tests.support.dra_e2e import (
    A100,
    DRIVER,
    H100,
    allocated,
    claim_spec,
    create,
    device_attribute,
    pod_claim,
    read_claim,
    running_pods,
    with_claim,
)
from tests.support.e2e import dra_nodes, indexed_job, pod_body, running_job_pods, wait_for


def test_an_indexed_job_of_2_pods_claiming_8_gpus_each_runs_one_pod_per_node_with_its_claim_allocated(
        cluster, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 2, H100) as nodes:
        create(admin_api, namespace, "resourceclaimtemplates", "eight", claim_spec(8))
        job = with_claim(indexed_job("train", 2, {}, gpus=0), template="eight")
        client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)

        pods = running_job_pods(admin_core, namespace, "train", 2, timeout=60)

        assert sorted(p.spec.node_name for p in pods) == nodes
        for pod in pods:
            claim = pod_claim(admin_api, pod)
            results = allocated(claim)
            assert sorted(r["device"] for r in results) == [f"gpu-{i}" for i in range(8)]
            assert {(r["driver"], r["pool"], r["request"]) for r in results} == {(DRIVER, pod.spec.node_name, "gpus")}
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.metadata.uid]
            assert claim["metadata"]["ownerReferences"][0]["name"] == pod.metadata.name

    assert dra.published_slices(admin_api, nodes) == []
    assert not {n.metadata.name for n in admin_core.list_node().items} & set(nodes)


def test_a_nodes_file_with_dra_devices_is_applied_with_a_slice_per_node_that_goes_with_its_node(
        cluster, admin_api, admin_core, tmp_path):
    group = f"dra{uuid.uuid4().hex[:4]}"
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump({"kind": "FakeNodes", "groups": [{
        "name": group, "count": 2, "resources": {"cpu": "8", "pods": "110"},
        "draDevices": {"count": 4, "attributes": {"model": "L4"}, "capacity": {"memory": "24Gi"}}}]}))

    custom = client.CustomObjectsApi(admin_api)
    class_existed = bool(custom.list_cluster_custom_object(
        dra.GROUP, dra.VERSION, "deviceclasses", field_selector=f"metadata.name={DRIVER}")["items"])
    names = cluster.apply_nodes(nodes_file)
    try:
        published = {s["spec"]["nodeName"]: s for s in dra.published_slices(admin_api, names)}
        assert sorted(published) == names == [f"{group}-0", f"{group}-1"]
        for name, entry in published.items():
            assert entry["spec"]["pool"] == {"name": name, "generation": 1, "resourceSliceCount": 1}
            assert [d["attributes"]["model"] for d in entry["spec"]["devices"]] == [{"string": "L4"}] * 4
        device_class = custom.get_cluster_custom_object(dra.GROUP, dra.VERSION, "deviceclasses", DRIVER)
        assert device_class["spec"]["selectors"] == [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
        assert cluster.apply_nodes(nodes_file) == names  # again: the pools' generation goes up
        assert {s["spec"]["pool"]["generation"] for s in dra.published_slices(admin_api, names)} == {2}
    finally:
        for name in names:
            admin_core.delete_node(name)
        if not class_existed:
            custom.delete_cluster_custom_object(dra.GROUP, dra.VERSION, "deviceclasses", DRIVER)
    wait_for("the slices of deleted nodes collected", lambda: dra.published_slices(admin_api, names) == [])


def test_two_pods_sharing_one_claim_land_on_one_node_and_share_its_devices(cluster, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 2, H100):
        create(admin_api, namespace, "resourceclaims", "shared", claim_spec(2))
        for name in ("infer-a", "infer-b"):
            admin_core.create_namespaced_pod(namespace, with_claim(pod_body(name), claim="shared"))

        a, b = running_pods(admin_core, namespace, ["infer-a", "infer-b"])

        assert a.spec.node_name == b.spec.node_name
        claim = read_claim(admin_api, namespace, "shared")
        assert {r["pool"] for r in allocated(claim)} == {a.spec.node_name} and len(allocated(claim)) == 2
        assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["infer-a", "infer-b"]


def test_a_cel_selector_on_model_and_memory_is_allocated_only_matching_devices(cluster, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 1, A100) as (a100,), dra_nodes(admin_api, namespace, 1, H100) as (h100,):
        selector = (f'device.attributes["{DRIVER}"].model == "H100-SXM5-80GB" && '
                    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0')
        create(admin_api, namespace, "resourceclaims", "big", claim_spec(4, selector))
        admin_core.create_namespaced_pod(namespace, with_claim(pod_body("big"), claim="big"))

        (pod,) = running_pods(admin_core, namespace, ["big"])

        assert pod.spec.node_name == h100 != a100
        results = allocated(read_claim(admin_api, namespace, "big"))
        assert len(results) == 4 and {r["pool"] for r in results} == {h100}


def test_a_match_attribute_constraint_on_the_pcie_root_gets_a_whole_pair(cluster, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 1, H100) as (node,):
        create(admin_api, namespace, "resourceclaims", "one", claim_spec(1))
        admin_core.create_namespaced_pod(namespace, with_claim(pod_body("one"), claim="one"))
        running_pods(admin_core, namespace, ["one"])
        create(admin_api, namespace, "resourceclaims", "pair", claim_spec(2, match=dra.PCIE_ROOT))
        admin_core.create_namespaced_pod(namespace, with_claim(pod_body("pair"), claim="pair"))

        running_pods(admin_core, namespace, ["pair"])

        (taken,) = [r["device"] for r in allocated(read_claim(admin_api, namespace, "one"))]
        pair = [r["device"] for r in allocated(read_claim(admin_api, namespace, "pair"))]
        roots = {device_attribute(admin_api, node, d, dra.PCIE_ROOT) for d in pair}
        assert len(pair) == 2 and taken not in pair and len(roots) == 1
        assert device_attribute(admin_api, node, taken, dra.PCIE_ROOT) not in roots


def test_when_every_device_is_allocated_a_further_claim_leaves_its_pod_pending_naming_the_claim(
        cluster, admin_api, admin_core, namespace):
    with dra_nodes(admin_api, namespace, 1, H100) as (node,):
        create(admin_api, namespace, "resourceclaimtemplates", "eight", claim_spec(8))
        create(admin_api, namespace, "resourceclaimtemplates", "one", claim_spec(1))
        admin_core.create_namespaced_pod(namespace, with_claim(pod_body("all"), template="eight"))
        (holder,) = running_pods(admin_core, namespace, ["all"])
        admin_core.create_namespaced_pod(namespace, with_claim(pod_body("more"), template="one"))

        def unschedulable() -> Any:
            pod = admin_core.read_namespaced_pod("more", namespace)
            return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"
                         and c.status == "False" and c.reason == "Unschedulable"), None)

        condition = wait_for("pod more Unschedulable", unschedulable, timeout=30)

        assert holder.spec.node_name == node
        assert admin_core.read_namespaced_pod("more", namespace).status.phase == "Pending"
        assert "cannot allocate all claims" in condition.message, condition.message
        assert allocated(pod_claim(admin_api, admin_core.read_namespaced_pod("more", namespace))) == []
