"""DRA objects for engine and reconciler tests (resource.k8s.io/v1): a node's ResourceSlice
of fake GPUs, the DeviceClass that selects them, claim templates, claims, pods that use them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.troupe.dev"
CLASS = "gpu.troupe.dev"


def resource_slice(node: str, count: int = 8, model: str = "H100", driver: str = DRIVER) -> dict[str, Any]:
    """The ResourceSlice of ``node``: ``count`` devices ``gpu-0``.. of ``model`` with an
    index and 80Gi of memory each."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "model": {"string": model}},
                                  "capacity": {"memory": {"value": "80Gi"}}} for i in range(count)]}}


def device_class(name: str = CLASS, expression: str = f'device.driver == "{DRIVER}"') -> dict[str, Any]:
    """A DeviceClass selecting the fake driver's devices."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def requests(count: int, cls: str = CLASS, selectors: tuple[str, ...] = (), mode: str | None = None) -> dict[str, Any]:
    """A ResourceClaimSpec asking for ``count`` devices of ``cls``."""
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if mode:
        exactly["allocationMode"] = mode
        del exactly["count"]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def claim_template(name: str, count: int, namespace: str = "team-a", **kw: Any) -> dict[str, Any]:
    """A ResourceClaimTemplate of ``count`` devices."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": requests(count, **kw)}}


def claim(name: str, count: int, namespace: str = "team-a", allocated_on: str = "",
          devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A ResourceClaim of ``count`` devices, allocated ``devices`` on ``allocated_on`` when given."""
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": namespace}, "spec": requests(count)}
    if allocated_on:
        obj["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": allocated_on, "device": d}
                                    for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}}}
    return obj


def with_claim(pod: dict[str, Any], template: str = "", claim_name: str = "", entry: str = "gpus") -> dict[str, Any]:
    """``pod`` with one ``spec.resourceClaims`` entry (a template's or a named claim) used
    by its container."""
    ref: dict[str, Any] = {"name": entry}
    if template:
        ref["resourceClaimTemplateName"] = template
    if claim_name:
        ref["resourceClaimName"] = claim_name
    pod["spec"].setdefault("resourceClaims", []).append(ref)
    pod["spec"]["containers"][0].setdefault("resources", {}).setdefault("claims", []).append({"name": entry})
    return pod
