"""Helpers for tests on the local control plane: namespaces, waits on real objects, pod and Job
builders (:func:`wait_for` also serves tests of threads and servers started in-process)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes import client

from devtools.devcluster import dra
from devtools.devcluster.nodes import FakeDevices, make_node
from troupe import contract

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.3,
             explain: Callable[[], Any] | None = None) -> T:
    """Poll ``probe`` until it returns a truthy value; raise ``AssertionError`` naming
    ``what`` and the last value after ``timeout`` seconds, with what ``explain`` returns then
    (the state a probe that answers None does not show: the pods, the gang's reason), or
    the error it raised: the timeout stays the failure."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    seen = ""
    if explain is not None:
        try:
            seen = f"; then: {explain()!r}"
        except Exception as e:  # noqa: BLE001 - told in the timeout's message, which stays the failure
            seen = f"; then: {what} could not be explained: {e!r}"
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{seen}")


def new_namespace(core: client.CoreV1Api, prefix: str) -> str:
    """Create a uniquely named namespace and wait for its default ServiceAccount."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(f"serviceaccount default in {name}",
             lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items))
    return name


def delete_namespace(core: client.CoreV1Api, name: str, timeout: float = 60.0) -> None:
    """Delete namespace ``name`` and wait until none of its pods is left, which is what the next
    test on the cluster reads (every node's capacity free again, no gang of it in the
    reconciler's queue); the namespace object and the rest of its content go in the background.

    The namespace is deleted first: from then on it is Terminating and the API server admits
    no new object in it, so no controller can recreate a pod. Its pods are then deleted with
    a grace period of 0 at once, rather than when the namespace controller gets to them
    (about 5 s later, 10 s with a Job), and each is gone as soon as its finalizers are (a
    Job's pod tracking finalizer: under a second). Raises ``AssertionError`` when a pod is
    still there after ``timeout`` seconds.
    """
    core.delete_namespace(name, grace_period_seconds=0)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    wait_for(f"the pods of namespace {name} gone", lambda: not core.list_namespaced_pod(name).items,
             timeout=timeout)


@contextlib.contextmanager
def temporary_namespace(core: client.CoreV1Api, prefix: str, timeout: float = 60.0) -> Iterator[str]:
    """A fresh namespace (:func:`new_namespace`), deleted on exit by :func:`delete_namespace`
    (which waits ``timeout`` seconds at most for its pods to be gone)."""
    name = new_namespace(core, prefix)
    yield name
    delete_namespace(core, name, timeout)


def admission_policies_settled(api: client.ApiClient, timeout: float = 60.0) -> None:
    """Wait until the API server's admission judges by the ValidatingAdmissionPolicies and
    bindings stored now, those deleted included: it loads them from its own informers and
    compiles them in the background, so a policy a test's ``helm uninstall`` just deleted may
    refuse the next test's writes for a while (a Gang object the admin creates, a record on a
    workload).

    A canary: a policy and binding refusing a dry-run ConfigMap of a name of its own. Once it
    refuses, the API server's policies were rebuilt after the deletions before it (bindings
    arrive in order, a policy without a binding judges nothing, and every rebuild reads them
    all); it is then deleted, and waited out the same way. Raises ``AssertionError`` after
    ``timeout`` seconds at either wait."""
    policies = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    name = f"settle-{uuid.uuid4().hex[:8]}"
    policies.create_validating_admission_policy({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "matchConditions": [{"name": "the-canary", "expression": f"object.metadata.name == '{name}'"}],
                 "validations": [{"expression": "false", "message": "the canary"}]}})
    policies.create_validating_admission_policy_binding(
        {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}})

    def refused() -> bool:
        try:
            core.create_namespaced_config_map("default", {"metadata": {"name": name}}, dry_run="All")
        except client.ApiException as e:
            if e.status in (403, 422):
                return True
            raise
        return False

    try:
        wait_for(f"the admission policy {name} in effect", refused, timeout=timeout)
    finally:
        policies.delete_validating_admission_policy_binding(name)
        policies.delete_validating_admission_policy(name)
    wait_for(f"the admission policy {name} out of effect", lambda: not refused(), timeout=timeout)


def gang_annotations(name: str, size: int, timeout: int | None = None) -> dict[str, str]:
    """Troupe gang annotations with the default prefix."""
    a = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(size)}
    if timeout is not None:
        a["troupe.io/gang-schedule-timeout-seconds"] = str(timeout)
    return a


def pod_body(name: str, annotations: dict[str, str] | None = None, gpus: int = 0, cpu: str = "100m",
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pause pod requesting ``gpus`` nvidia.com/gpu."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
                 "terminationGracePeriodSeconds": 0},
    }


def indexed_job(name: str, parallelism: int, annotations: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    """An Indexed Job of ``parallelism`` pause pods, each requesting ``gpus`` GPUs."""
    template = pod_body("unused", annotations, gpus=gpus)
    del template["metadata"]["name"]
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"completionMode": "Indexed", "completions": parallelism, "parallelism": parallelism,
                 "backoffLimit": 0, "template": {"metadata": {"annotations": template["metadata"]["annotations"]},
                                                 "spec": template["spec"]}},
    }


def job_pods(core: client.CoreV1Api, namespace: str, job: str) -> list[Any]:
    """The Job's pods, by completion index."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    return sorted(pods, key=lambda p: int(p.metadata.labels.get("batch.kubernetes.io/job-completion-index", 0)))


def pod_states(core: client.CoreV1Api, namespace: str) -> list[str]:
    """A line per pod of ``namespace``: its name, phase, node, scheduling gates, whether it
    is being deleted, and the message of its gang condition (what a timed-out wait reports)."""
    lines = []
    for p in core.list_namespaced_pod(namespace).items:
        gates = ",".join(g.name for g in p.spec.scheduling_gates or [])
        gang = [c.message for c in p.status.conditions or [] if c.type == contract.GANG_CONDITION]
        lines.append(f"{p.metadata.name} {p.status.phase} node={p.spec.node_name} gates=[{gates}]"
                     f"{' deleting' if p.metadata.deletion_timestamp else ''} gang={gang[0] if gang else None!r}")
    return lines


def running_job_pods(core: client.CoreV1Api, namespace: str, job: str, count: int, timeout: float = 90) -> list[Any]:
    """Wait until the Job has ``count`` pods, all Running; they, by completion index."""
    def running() -> list[Any] | None:
        pods = job_pods(core, namespace, job)
        return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None

    return wait_for(f"{count} Running pods of Job {job}", running, timeout=timeout,
                    explain=lambda: pod_states(core, namespace))


def reservation(batch: client.BatchV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    """The reservation the Job carries, decoded, or None."""
    raw = (batch.read_namespaced_job(name, namespace).metadata.annotations or {}).get(contract.RESERVATION)
    return json.loads(raw) if raw else None


def quota(core: client.CoreV1Api, namespace: str, pods: int) -> None:
    """Allow at most ``pods`` pods in ``namespace`` (created, or replaced)."""
    body = {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": str(pods)}}}
    try:
        core.replace_namespaced_resource_quota("pods", namespace, core.read_namespaced_resource_quota("pods", namespace)
                                               .to_dict() | body)
    except client.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_resource_quota(namespace, body)
    wait_for(f"quota of {pods} pods in force", lambda: core.read_namespaced_resource_quota("pods", namespace)
             .status.hard == {"pods": str(pods)} or None, timeout=30)


def released(pods: list[Any]) -> list[Any]:
    """The pods released (no scheduling gate left) and not being deleted."""
    return [p for p in pods if not p.spec.scheduling_gates and not p.metadata.deletion_timestamp]


def running_members(core: client.CoreV1Api, namespace: str, prefix: str, count: int) -> list[Any]:
    """The ``count`` pods named ``<prefix>-*``, once all are Running (pinned by Troupe)."""
    def running() -> list[Any] | None:
        pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith(f"{prefix}-")]
        return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for(f"{count} Running members of {prefix}", running, timeout=90)
    for pod in pods:
        assert pod.metadata.annotations[contract.ASSIGNED_NODE] == pod.spec.node_name
    return pods


#: The node labels of the GKE topology levels, highest first.
GKE_LEVELS = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
              "cloud.google.com/gce-topology-host")


def create_gpu_nodes(core: client.CoreV1Api, names: list[str], labels: dict[str, str] | None = None,
                     gpus: int = 8) -> None:
    """Create kwok nodes ``names`` (``<block>-s<i>-h<j>``: block, subblock and host read from
    the name) of ``gpus`` nvidia.com/gpu each (none at all with 0), with ``labels`` too, and
    wait until all are Ready."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    for name in names:
        subblock = name.rsplit("-", 1)[0]
        levels = dict(zip(GKE_LEVELS, (subblock.rsplit("-", 1)[0], subblock, name), strict=True))
        core.create_node(make_node(name, resources, labels={**levels, **(labels or {})}))
    wait_for(f"{len(names)} new nodes Ready", lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in core.read_node(n).status.conditions or [])
        for n in names))


@contextlib.contextmanager
def dra_nodes(api: client.ApiClient, namespace: str, count: int, devices: FakeDevices,
              subblock: str | None = None, labels: dict[str, str] | None = None) -> Iterator[list[str]]:
    """``count`` extra kwok nodes ``<subblock>-h0 ..`` (``subblock`` default ``dra<hex>-b0-s0``,
    fresh each time) with GKE topology labels, ``labels`` and no nvidia.com/gpu, whose
    ``devices`` are published as the local cluster publishes a nodes file's ``draDevices``
    (one ResourceSlice per node and the driver's DeviceClass: devtools/devcluster/dra.py);
    yields the node names once they are Ready. On exit every pod of ``namespace`` is deleted
    and waited for, then the nodes, their slices and the DeviceClass if it was made here."""
    core = client.CoreV1Api(api)
    subblock = subblock or f"dra{uuid.uuid4().hex[:4]}-b0-s0"
    names = [f"{subblock}-h{i}" for i in range(count)]
    published = dict.fromkeys(names, devices)
    class_existed = bool(client.CustomObjectsApi(api).list_cluster_custom_object(
        dra.GROUP, dra.VERSION, "deviceclasses", field_selector=f"metadata.name={devices.driver}")["items"])
    try:
        create_gpu_nodes(core, names, labels, gpus=0)
        dra.publish(api, published)
        yield names
    finally:
        delete_nodes_after_pods(core, namespace, names)
        dra.unpublish(api, published, device_classes=not class_existed)


def delete_nodes_after_pods(core: client.CoreV1Api, namespace: str, names: list[str]) -> None:
    """Delete every pod of ``namespace``, wait until they are gone, then delete the nodes
    ``names`` that are still there."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for("the test's pods gone", lambda: not core.list_namespaced_pod(namespace).items or None)
    for name in names:
        try:
            core.delete_node(name)
        except client.ApiException as e:
            if e.status != 404:
                raise


def service_account_token(core: client.CoreV1Api, namespace: str, name: str) -> str:
    """A token for ServiceAccount ``namespace/name`` from the TokenRequest API (what the
    kubelet mounts into the chart's pods)."""
    request = core.create_namespaced_service_account_token(
        name, namespace, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": 3600}})
    return str(request.status.token)


def debug_gangs(stack: Any, identity: str = "admin") -> list[dict[str, Any]]:
    """The leader's ``/debug/gangs`` (``[{"gang", "phase", "reason"}]``) as ``identity``'s
    bearer token reads it (the page answers an authenticated caller only)."""
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{stack.metrics_port}/debug/gangs",
                                     headers={"Authorization": f"Bearer {stack.cluster.token(identity)}"})
    with urllib.request.urlopen(request, timeout=5) as r:
        return list(json.load(r))
