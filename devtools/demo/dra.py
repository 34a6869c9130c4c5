"""The demo's DRA scenario: a gang whose members claim GPUs through Dynamic Resource
Allocation (docs/guide/dra.md, docs/decisions/044-dra.md). The devices are those nodes
publish in ResourceSlices (on the local cluster, the fake GPUs of examples/demo-nodes.yaml's
``dra`` group: no ``nvidia.com/gpu`` at all); Troupe counts them, releases the gang whole in
one subblock, and kube-scheduler allocates each member's claim on the node Troupe pinned."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from devtools.demo.stage import GPU, Stage, indexed_job, pod, running
from troupe import contract

GROUP, VERSION = "resource.k8s.io", "v1"


def dra_layout(stage: Stage) -> tuple[str, int, list[list[str]]] | str:
    """``(driver, devices per node, nodes of each subblock with DRA devices)`` with at least
    two such subblocks of 2+ nodes, the driver having a DeviceClass of its name; or why not."""
    try:
        slices = stage.custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
        classes = {c["metadata"]["name"] for c in stage.custom.list_cluster_custom_object(
            GROUP, VERSION, "deviceclasses")["items"]}
    except Exception as e:  # noqa: BLE001  no resource.k8s.io/v1 (Kubernetes < 1.34), or not allowed
        return f"needs resource.k8s.io/v1 ResourceSlices ({type(e).__name__})"
    per_node: dict[str, tuple[str, int]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("nodeName") and spec.get("driver") in classes:
            per_node[spec["nodeName"]] = (spec["driver"], len(spec.get("devices") or []))
    by_sub: dict[str, list[str]] = defaultdict(list)
    for node in stage.core.list_node().items:
        sub = (node.metadata.labels or {}).get(stage.layout.subblock_label)
        if node.metadata.name in per_node and sub:
            by_sub[sub].append(node.metadata.name)
    subs = [sorted(names) for _, names in sorted(by_sub.items()) if len(names) >= 2][:2]
    if len(subs) < 2 or not per_node:
        return "needs nodes publishing DRA devices (ResourceSlices with a DeviceClass of the driver's name) in 2 subblocks"
    driver, count = per_node[subs[0][0]]
    return driver, count, subs


def _claim_template(name: str, driver: str, count: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": driver, "count": count}}]}}}}


def _claiming(body: dict[str, Any], template: str) -> dict[str, Any]:
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return body


def _allocated(stage: Stage, ns: str, pod_obj: Any) -> list[dict[str, Any]]:
    statuses = pod_obj.status.resource_claim_statuses or []
    if not statuses:
        return []
    claim = stage.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "resourceclaims",
                                                       statuses[0].resource_claim_name)
    return list(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []))


def gang_claiming_dra_devices(stage: Stage) -> str:
    """A gang of as many members as a subblock has DRA nodes, each claiming every device of a
    node through a ResourceClaimTemplate, required in one subblock; another pod holds one
    device of the first subblock, so the gang goes whole to the second."""
    found = dra_layout(stage)
    assert not isinstance(found, str)
    driver, count, (busy, free) = found
    ns = stage.namespace("demo-dra")
    size, level = min(len(busy), len(free)), stage.layout.subblock_label
    stage.say(f"These nodes have no {GPU}: their GPUs are DRA devices, {count} per node, in ResourceSlices "
              f"of driver {driver}:")
    stage.show("get", "resourceslices", "--field-selector", f"spec.nodeName={free[0]}")
    for name, n in (("one-gpu", 1), ("node-gpus", count)):
        stage.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "resourceclaimtemplates",
                                                     _claim_template(name, driver, n))
    other = _claiming(pod("notebook", node_selector={"kubernetes.io/hostname": busy[0]}), "one-gpu")
    stage.core.create_namespaced_pod(ns, other)
    stage.wait("the notebook's claim allocated on " + busy[0],
               lambda: _allocated(stage, ns, stage.core.read_namespaced_pod("notebook", ns)) or None)
    stage.say(f"A notebook holds 1 device on {busy[0]}. Job train: {size} members, each claiming {count} devices "
              f"(ResourceClaimTemplate node-gpus), required in one {level.rsplit('/', 1)[-1]}.")
    template = _claiming(pod("w", labels={"gang": "dra"}, annotations=stage.gang(
        "train", size, extra={contract.TOPOLOGY_REQUIRED_LEVEL: level})), "node-gpus")
    stage.batch.create_namespaced_job(ns, indexed_job("train", size, template))
    pods = stage.wait(f"the {size} members Running", lambda: running(stage.pods(ns, "gang=dra"), size), timeout=90)
    nodes = sorted(p.spec.node_name for p in pods)
    stage.show("get", "resourceclaims", "-n", ns)
    stage.expect(set(nodes) <= set(free), f"whole in the subblock with room ({', '.join(nodes)})")
    for p in pods:
        results = _allocated(stage, ns, p)
        stage.expect(len(results) == count and {r["pool"] for r in results} == {p.spec.node_name},
                     f"{p.metadata.name}'s claim: {count} devices allocated on {p.spec.node_name}")
    stage.troupe("status", "-n", ns)
    return f"gang of {size} x {count} DRA devices whole on {nodes[0]}..{nodes[-1]}; every claim allocated where pinned"
