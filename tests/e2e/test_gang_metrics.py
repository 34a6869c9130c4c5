"""kube-state-metrics reads the Gang objects with the chart's config: kube-state-metrics
v2.20 (built once into the cache, devtools/devcluster/ecosystem.py) runs on the local control
plane with the config as the chart renders it (``kubeStateMetrics.customResourceState``), as
an identity holding only the chart's ClusterRole, on 127.0.0.1 and free ports; Gangs made
from the samples of tests/ecosystem/gangs get their status through the status subresource;
/metrics is scraped and every series checked, then one Gang's status changes and the
metrics follow. The process is stopped by its recorded pid."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from devtools.devcluster import Cluster
from devtools.devcluster.build import built_helm
from devtools.devcluster.cluster import free_ports
from devtools.devcluster.ecosystem import ensure_ksm
from devtools.devcluster.processes import spawn, stop_all, tail
from tests.support.e2e import wait_for
from tests.support.helm import NOT_BUILT, one, render
from troupe import contract

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

GANGS = Path(__file__).resolve().parents[1] / "ecosystem" / "gangs"
SAMPLES = ("waiting", "held", "running", "min-size-running")
PHASES = ("Waiting", "Held", "BackingOff", "Unschedulable", "Placed", "Releasing", "Released", "RolledBack",
          "Preempting")
CONDITIONS = ("Waiting", "Released", "Bound", "Reconciling", "Stalled")
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((GANGS / f"{name}.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """The chart's kube-state-metrics objects."""
    return render("--set", "kubeStateMetrics.customResourceState.enabled=true")


@pytest.fixture
def reader(cluster: Cluster, admin_api: Any, rendered: list[dict[str, Any]]) -> Iterator[str]:
    """The chart's kube-state-metrics ClusterRole (under a name of this test's), bound to the
    user alice; alice's kubeconfig path."""
    rbac = client.RbacAuthorizationV1Api(admin_api)
    role = one(rendered, "ClusterRole", "troupe-kube-state-metrics-gangs")
    name = f"e2e-ksm-{uuid.uuid4().hex[:6]}"
    role["metadata"] = {"name": name}
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]})
    yield str(cluster.kubeconfig("alice"))
    rbac.delete_cluster_role_binding(name)
    rbac.delete_cluster_role(name)


@pytest.fixture
def metrics_url(reader: str, rendered: list[dict[str, Any]], tmp_path: Path) -> Iterator[str]:
    """kube-state-metrics running with the chart's config as alice: its /metrics URL."""
    config = tmp_path / "gangs.yaml"
    config_map = one(rendered, "ConfigMap", "troupe-kube-state-metrics")
    config.write_text(config_map["data"]["gangs.yaml"])
    port, telemetry = free_ports(2)
    started = spawn("kube-state-metrics", [
        str(ensure_ksm()), f"--kubeconfig={reader}", "--host=127.0.0.1", f"--port={port}",
        "--telemetry-host=127.0.0.1", f"--telemetry-port={telemetry}", "--custom-resource-state-only",
        f"--custom-resource-state-config-file={config}"], tmp_path / "kube-state-metrics.log", die_with_parent=True)
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        stop_all([started.record], [started.popen])
        started.log_handle.close()
        print(tail(tmp_path / "kube-state-metrics.log"))


def make_gang(api: client.CustomObjectsApi, namespace: str, name: str, status: dict[str, Any]) -> None:
    group, version, plural = contract.GANG_API
    body = {key: value for key, value in sample("waiting").items() if key != "status"}
    body["metadata"] = {"name": name, "namespace": namespace}
    api.create_namespaced_custom_object(group, version, namespace, plural, body)
    api.patch_namespaced_custom_object_status(group, version, namespace, plural, name, {"status": status})


def scrape(url: str, namespace: str) -> Series:
    """The kube_troupe_gang_* samples of ``namespace``: (name, labels but namespace) -> value;
    none while kube-state-metrics does not answer yet (its port is not open at once)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("kube_troupe_gang_") and s.labels.get("namespace") == namespace:
                labels = {k: v for k, v in s.labels.items() if k != "namespace" and not k.startswith("customresource_")}
                out[(s.name, frozenset(labels.items()))] = s.value
    return out


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def expected(gang: str, status: dict[str, Any]) -> Series:
    """The series the config makes of one Gang with ``status`` (named ``gang``, of the
    ``waiting`` sample's spec)."""
    out: Series = {}

    def put(metric: str, number: float, **labels: str) -> None:
        out[(f"kube_troupe_gang_{metric}", frozenset({"gang": gang, **labels}.items()))] = number

    put("info", 1, gang_name="train", release_mode=status["releaseMode"])
    put("reason_info", 1, reason=status["reason"])
    for phase in PHASES:
        put("status_phase", float(phase == status["phase"]), phase=phase)
    for c in status["conditions"]:
        put("status_condition", float(c["status"] == "True"), condition=c["type"])
    for field, metric in (("size", "size"), ("minSize", "min_size"), ("present", "members_present"),
                          ("gated", "members_gated"), ("released", "members_released"),
                          ("bound", "members_bound"), ("running", "members_running")):
        if field in status:
            put(metric, status[field])
    if "waitingSince" in status:
        put("waiting_since_timestamp_seconds", datetime.fromisoformat(status["waitingSince"]).timestamp())
    return out


def test_kube_state_metrics_exports_each_gang_with_the_charts_config(
        admin_api: Any, namespace: str, metrics_url: str) -> None:
    api = client.CustomObjectsApi(admin_api)
    statuses = {name: sample(name)["status"] for name in SAMPLES}
    for name, status in statuses.items():
        make_gang(api, namespace, name, status)
    want: Series = {}
    for name, status in statuses.items():
        want.update(expected(name, status))
    assert {c["type"] for s in statuses.values() for c in s["conditions"]} == set(CONDITIONS)

    got = wait_for("every Gang's series", lambda: (s := scrape(metrics_url, namespace)) and len(s) >= len(want) and s,
                   timeout=60)

    assert got == want
    assert value(got, "kube_troupe_gang_status_condition", gang="held", condition="Stalled") == 1
    assert value(got, "kube_troupe_gang_size", gang="held") is None  # no size while the members disagree
    assert value(got, "kube_troupe_gang_min_size", gang="min-size-running") == 4

    group, version, plural = contract.GANG_API
    api.patch_namespaced_custom_object_status(group, version, namespace, plural, "waiting",
                                              {"status": {**statuses["running"], "waitingSince": None}})
    wait_for("the waiting Gang's series to follow its new status", lambda: value(
        scrape(metrics_url, namespace), "kube_troupe_gang_status_phase", gang="waiting", phase="Released") == 1)
    after = scrape(metrics_url, namespace)
    assert value(after, "kube_troupe_gang_members_running", gang="waiting") == 4
    assert value(after, "kube_troupe_gang_status_condition", gang="waiting", condition="Bound") == 1
    assert value(after, "kube_troupe_gang_waiting_since_timestamp_seconds", gang="waiting") is None
