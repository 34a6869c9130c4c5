"""The chart's admission policies on nodes, workloads and tolerations, judged by the real
kube-apiserver: what the reconciler's own identity may write on a node and a workload, that
nobody else writes Troupe's records on a workload, and that only pods Troupe gates tolerate
its nominated-node taint (docs/decisions/049-hostile-tenants-third-round.md).

The chart is installed for its RBAC and policies only (no CRDs, nothing started): the
reconciler's identity is its ServiceAccount's token, from the TokenRequest API.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from devtools.devcluster import Cluster
from devtools.devcluster.pki import write_kubeconfig
from tests.support.e2e import (
    admission_policies_settled,
    new_namespace,
    service_account_token,
    wait_for,
)
from tests.support.helm import CHART, helm

pytestmark = pytest.mark.e2e

RELEASE = "troupe-policies"
MERGE = "application/merge-patch+json"
RESERVATION = "reconciler.troupe.io/reservation"


class Identities:
    """The admin's and the reconciler's API clients, and the release's namespace."""

    def __init__(self, admin: client.ApiClient, reconciler: client.ApiClient, namespace: str) -> None:
        self.admin, self.reconciler, self.namespace = admin, reconciler, namespace


@pytest.fixture(scope="module")
def identities(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Identities]:
    admin = cluster.api_client("admin")
    core = client.CoreV1Api(admin)
    namespace = new_namespace(core, "troupe-policies")
    kubeconfig = str(cluster.kubeconfig("admin"))
    helm("install", RELEASE, str(CHART), "--namespace", namespace, "--kubeconfig", kubeconfig,
         "--set", "crds.install=false", "--set", "reconciler.replicas=0",
         binary=cluster.binaries.helm)
    try:
        token = service_account_token(core, namespace, f"{RELEASE}-reconciler")
        path = write_kubeconfig(tmp_path_factory.mktemp("policies") / "reconciler.kubeconfig", cluster.server,
                                cluster.ca_pem, f"{RELEASE}-reconciler", token)
        reconciler = config.new_client_from_config(config_file=str(path))
        # The API server compiles each new policy asynchronously, on its own: wait until every
        # one this module judges refuses a write of its own kind (dry runs: nothing is kept).
        probe = f"probe-{uuid.uuid4().hex[:6]}"
        core.create_node({"metadata": {"name": probe}})
        batch = client.BatchV1Api(admin)
        batch.create_namespaced_job(namespace, _job(probe))
        as_reconciler = (client.CoreV1Api(reconciler), client.BatchV1Api(reconciler))
        probes = {
            "tolerations": lambda: _tolerating_pod(core, gated=False),
            "node writes": lambda: as_reconciler[0].patch_node(
                probe, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All", _content_type=MERGE),
            "workload writes": lambda: as_reconciler[1].patch_namespaced_job(
                probe, namespace, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All", _content_type=MERGE),
            "workload records": lambda: batch.create_namespaced_job(
                namespace, _job(f"{probe}-r", {RESERVATION: "{}"}), dry_run="All"),
        }
        for what, write in probes.items():
            wait_for(f"the {what} policy in effect", lambda write=write: _refused(write))
        core.delete_node(probe)
        yield Identities(admin, reconciler, namespace)
    finally:
        helm("uninstall", RELEASE, "--namespace", namespace, "--kubeconfig", kubeconfig, binary=cluster.binaries.helm)
        core.delete_namespace(namespace, grace_period_seconds=0)
        admission_policies_settled(admin)  # the next module on this cluster is judged without them


def _refused(write: Callable[[], Any]) -> str:
    """The message of the API server's refusal of ``write``, ``""`` when it was allowed."""
    try:
        write()
    except ApiException as e:
        assert e.status in (403, 422), e.body  # a 409 (the object changed) is the caller's to retry
        return str(json.loads(e.body)["message"])
    return ""


def _tolerating_pod(core: client.CoreV1Api, gated: bool, toleration: dict[str, str] | None = None) -> Any:
    """Create (dry run) a pod in kube-system (no Troupe webhook looks there) tolerating the
    nominated taint by its key, with or without Troupe's gate."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                            "tolerations": [toleration or {"key": "troupe.io/nominated", "operator": "Exists"}]}
    if gated:
        spec["schedulingGates"] = [{"name": "troupe.io/placement"}]
    body = {"metadata": {"name": f"tol-{uuid.uuid4().hex[:6]}"}, "spec": spec}
    return core.create_namespaced_pod("kube-system", body, dry_run="All")


# --- nodes ----------------------------------------------------------------------------------


@pytest.fixture
def node(identities: Identities) -> Iterator[str]:
    """A node object of no kubelet, cordoned, with a label, an annotation, a taint and a
    NoExecute taint with its ``timeAdded`` (as the node lifecycle controller adds one)."""
    core = client.CoreV1Api(identities.admin)
    name = f"policy-{uuid.uuid4().hex[:6]}"
    core.create_node({"metadata": {"name": name, "labels": {"pool": "gpu"}, "annotations": {"team": "infra"}},
                      "spec": {"unschedulable": True, "taints": [
                          {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
                          {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                           "timeAdded": "2027-01-15T08:00:00Z"}]}})
    yield name
    core.delete_node(name)


OWN_TAINT = {"key": "troupe.io/nominated", "effect": "NoSchedule"}


def taints(added: list[dict[str, str]], removed: str = "") -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """A patch of a node's whole taint list (a merge patch replaces the list, as the
    reconciler's own writes do): the taints it has, other components' included (the node
    lifecycle controller's on a node of no kubelet), without ``removed``, plus ``added``."""
    return lambda have: {"spec": {"taints": [t for t in have if t["key"] != removed] + added}}


@pytest.mark.parametrize(("what", "patch", "refused_with"), [
    ("its own taint added", taints([OWN_TAINT]), None),
    ("its failures record", lambda _: {"metadata": {"annotations": {"reconciler.troupe.io/failures": "[]"}}}, None),
    ("a NoExecute taint", taints([{"key": "evil", "effect": "NoExecute"}]),
     "only its own taint troupe.io/nominated:NoSchedule"),
    ("its own key with NoExecute", taints([{"key": "troupe.io/nominated", "effect": "NoExecute"}]),
     "only its own taint troupe.io/nominated:NoSchedule"),
    ("another taint removed", taints([], removed="dedicated"), "only its own taint troupe.io/nominated:NoSchedule"),
    ("a label", lambda _: {"metadata": {"labels": {"pool": "cpu"}}}, "may not change a node's labels"),
    ("another annotation", lambda _: {"metadata": {"annotations": {"team": "ml"}}}, "only its own annotation"),
    ("uncordoned", lambda _: {"spec": {"unschedulable": False}}, "spec other than its own taint"),
])
def test_the_reconciler_writes_only_its_taint_and_its_failures_on_a_node(
    identities: Identities, node: str, what: str, patch: Callable[[list[dict[str, Any]]], dict[str, Any]],
    refused_with: str | None,
) -> None:
    as_reconciler = client.CoreV1Api(identities.reconciler)

    def attempt() -> str | None:
        """The refusal of the patch made on the node as it is now, under its resourceVersion
        as the reconciler writes it; None when the node changed meanwhile (the node
        lifecycle controller taints a node of no kubelet when it gets round to it)."""
        found = client.CoreV1Api(identities.admin).read_node(node)
        # As the API serves them (camelCase, timeAdded as RFC 3339): to_dict() would name it time_added,
        # which the API drops, and the NoExecute taint the node lifecycle controller added would change.
        have = identities.admin.sanitize_for_serialization(found.spec.taints or [])
        body = patch(have)
        body.setdefault("metadata", {})["resourceVersion"] = found.metadata.resource_version
        try:
            return _refused(lambda: as_reconciler.patch_node(node, body, _content_type=MERGE))
        except AssertionError:
            return None  # 409: read it again

    for _ in range(10):
        message = attempt()
        if message is not None:
            break
    else:
        raise AssertionError(f"{what}: the node changed under every one of 10 patches")

    assert bool(message) == (refused_with is not None), f"{what}: {message or 'allowed'}"
    assert refused_with is None or refused_with in message, message


# --- workloads ------------------------------------------------------------------------------


def _job(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}


@pytest.fixture
def job(identities: Identities) -> Iterator[str]:
    """A suspended Job the admin made in the release's namespace."""
    batch = client.BatchV1Api(identities.admin)
    name = f"job-{uuid.uuid4().hex[:6]}"
    batch.create_namespaced_job(identities.namespace, _job(name))
    yield name
    batch.delete_namespaced_job(name, identities.namespace, propagation_policy="Background")


@pytest.mark.parametrize(("what", "patch", "refused_with"), [
    ("its reservation", {"metadata": {"annotations": {RESERVATION: "{}"}}}, None),
    ("unsuspended", {"spec": {"suspend": False}}, "may not change a workload's spec"),
    ("a label", {"metadata": {"labels": {"x": "y"}}}, "may not change a workload's spec, labels"),
    ("a user annotation", {"metadata": {"annotations": {"team": "x"}}}, "only its own annotations"),
])
def test_the_reconciler_writes_only_its_records_on_a_workload(
    identities: Identities, job: str, what: str, patch: dict[str, Any], refused_with: str | None
) -> None:
    as_reconciler = client.BatchV1Api(identities.reconciler)

    message = _refused(lambda: as_reconciler.patch_namespaced_job(job, identities.namespace, patch,
                                                                  _content_type=MERGE))

    assert bool(message) == (refused_with is not None), f"{what}: {message or 'allowed'}"
    assert refused_with is None or refused_with in message, message


def test_nobody_else_writes_troupes_records_on_a_workload(identities: Identities, job: str) -> None:
    admin = client.BatchV1Api(identities.admin)
    ns = identities.namespace

    forged = _refused(lambda: admin.patch_namespaced_job(job, ns, {"metadata": {"annotations": {
        RESERVATION: json.dumps({"gang": "x", "plannedAt": "9999-01-01T00:00:00.000+00:00", "nodes": ["n1"]})}}},
        _content_type=MERGE))
    assert "written only by its reconciler" in forged, forged
    made = _refused(lambda: admin.create_namespaced_job(ns, _job(f"forged-{uuid.uuid4().hex[:6]}", {RESERVATION: "{}"})))
    assert "written only by its reconciler" in made, made

    client.BatchV1Api(identities.reconciler).patch_namespaced_job(
        job, ns, {"metadata": {"annotations": {RESERVATION: "{}"}}}, _content_type=MERGE)
    assert _refused(lambda: admin.patch_namespaced_job(job, ns, {"metadata": {"annotations": {"team": "x"}}},
                                                       _content_type=MERGE)) == ""
    removed = _refused(lambda: admin.patch_namespaced_job(job, ns, {"metadata": {"annotations": {RESERVATION: None}}},
                                                          _content_type=MERGE))
    assert "written only by its reconciler" in removed, removed


# --- tolerations ------------------------------------------------------------------------------


def test_only_pods_troupe_gates_tolerate_its_nominated_taint(identities: Identities) -> None:
    core = client.CoreV1Api(identities.admin)

    refused = _refused(lambda: _tolerating_pod(core, gated=False))
    assert "only the pods Troupe gates" in refused, refused
    assert _refused(lambda: _tolerating_pod(core, gated=True)) == ""
    every_taint = {"operator": "Exists"}
    assert _refused(lambda: _tolerating_pod(core, gated=False, toleration=every_taint)) == ""
