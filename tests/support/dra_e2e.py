"""DRA objects on the real control plane, for the end-to-end tests: the fake GPUs of
devtools/devcluster/dra.py, claims and claim templates of class gpu.troupe.dev, pods and
Jobs that use them, and reading back what kube-scheduler allocated."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from devtools.devcluster import dra
from devtools.devcluster.nodes import FakeDevices
from tests.support.e2e import wait_for

DRIVER = "gpu.troupe.dev"
H100 = FakeDevices(DRIVER, 8, {"model": {"string": "H100-SXM5-80GB"}}, {"memory": "80Gi"})
A100 = FakeDevices(DRIVER, 8, {"model": {"string": "A100-SXM4-40GB"}}, {"memory": "40Gi"})


def claim_spec(count: int, selector: str | None = None, match: str | None = None) -> dict[str, Any]:
    """A ResourceClaim spec asking for ``count`` devices of class gpu.troupe.dev in request
    ``gpus``: with a CEL ``selector``, all of them sharing attribute ``match`` if given."""
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": match}]
    return {"devices": devices}


def with_claim(body: dict[str, Any], template: str | None = None, claim: str | None = None) -> dict[str, Any]:
    """``body`` (a pod, or a Job's pod template spec holder) whose pod claims ``gpus`` from
    ResourceClaimTemplate ``template`` or ResourceClaim ``claim``, used by its container."""
    spec = body["spec"]["template"]["spec"] if body["kind"] == "Job" else body["spec"]
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    spec["resourceClaims"] = [{"name": "gpus", **source}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return body


def create(api: client.ApiClient, namespace: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    """Create a ResourceClaim (``kind`` ``resourceclaims``) or ResourceClaimTemplate
    (``resourceclaimtemplates``, ``spec`` wrapped as its ``spec.spec``) ``name``."""
    body = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim" if kind == "resourceclaims"
            else "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": spec if kind == "resourceclaims" else {"spec": spec}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(dra.GROUP, dra.VERSION, namespace, kind, body)


def read_claim(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """ResourceClaim ``name`` as a dict."""
    got: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        dra.GROUP, dra.VERSION, namespace, "resourceclaims", name)
    return got


def pod_claim(api: client.ApiClient, pod: Any) -> dict[str, Any]:
    """The ResourceClaim of ``pod``'s claim ``gpus`` (made from its template, or named)."""
    source = pod.spec.resource_claims[0]
    name = source.resource_claim_name
    if name is None:
        (status,) = [s for s in pod.status.resource_claim_statuses or [] if s.name == "gpus"]
        name = status.resource_claim_name
    return read_claim(api, pod.metadata.namespace, name)


def allocated(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The device results of ``claim``'s allocation ([] when it has none)."""
    return ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])


def running_pods(core: client.CoreV1Api, namespace: str, names: list[str]) -> list[Any]:
    """Wait until pods ``names`` are all Running; they, in that order."""
    def probe() -> list[Any] | None:
        pods = [core.read_namespaced_pod(n, namespace) for n in names]
        return pods if all(p.status.phase == "Running" for p in pods) else None

    return wait_for(f"pods {', '.join(names)} Running", probe, timeout=60)


def device_attribute(api: client.ApiClient, node: str, device: str, name: str) -> Any:
    """The value of attribute ``name`` of ``device`` in ``node``'s ResourceSlice, as published."""
    (published,) = dra.published_slices(api, [node])
    (entry,) = [d for d in published["spec"]["devices"] if d["name"] == device]
    return next(iter(entry["attributes"][name].values()))
