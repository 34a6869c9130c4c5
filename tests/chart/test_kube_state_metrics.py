"""The chart's kube-state-metrics glue (``kubeStateMetrics.customResourceState``): off by
default; on, the shipped custom resource state config as a ConfigMap, a ClusterRole that
lists and watches gangs, and its binding to kube-state-metrics' ServiceAccount when named.
kube-state-metrics itself reads the config in tests/e2e/test_gang_metrics.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, HelmFailed, helm, one, render

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

CONFIG = CHART / "files" / "kube-state-metrics-gangs.yaml"
ON = ("--set", "kubeStateMetrics.customResourceState.enabled=true")
COMPONENT = "kube-state-metrics"


def ksm_objects(*values: str) -> list[dict[str, Any]]:
    return [o for o in render(*values) if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == COMPONENT]


@pytest.mark.parametrize("values", [
    ON,
    (*ON, "--set", "kubeStateMetrics.customResourceState.serviceAccount.name=kube-state-metrics",
     "--set", "kubeStateMetrics.customResourceState.namespace=monitoring"),
], ids=["on", "on-bound"])
def test_helm_lint_strict_passes_with_it_on(values: tuple[str, ...]) -> None:
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), *values)


def test_nothing_is_rendered_by_default() -> None:
    assert ksm_objects() == []


def test_on_it_renders_the_shipped_config_and_a_reading_cluster_role() -> None:
    objects = ksm_objects(*ON)

    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", "troupe-kube-state-metrics-gangs"), ("ConfigMap", "troupe-kube-state-metrics")]
    config_map = one(objects, "ConfigMap")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["data"] == {"gangs.yaml": CONFIG.read_text().rstrip("\n")}
    assert yaml.safe_load(config_map["data"]["gangs.yaml"])["kind"] == "CustomResourceStateMetrics"
    rules = one(objects, "ClusterRole")["rules"]
    assert rules == [
        {"apiGroups": ["troupe.io"], "resources": ["gangs"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
    ]


@pytest.mark.parametrize(("values", "config_namespace", "subject_namespace"), [
    ((), NAMESPACE, NAMESPACE),
    (("--set", "kubeStateMetrics.customResourceState.namespace=monitoring"), "monitoring", "monitoring"),
    (("--set", "kubeStateMetrics.customResourceState.namespace=monitoring",
      "--set", "kubeStateMetrics.customResourceState.serviceAccount.namespace=kube-system"), "monitoring", "kube-system"),
], ids=["release-namespace", "its-namespace", "service-account-elsewhere"])
def test_a_named_service_account_is_bound_to_the_cluster_role(
        values: tuple[str, ...], config_namespace: str, subject_namespace: str) -> None:
    objects = ksm_objects(*ON, "--set", "kubeStateMetrics.customResourceState.serviceAccount.name=ksm", *values)

    binding = one(objects, "ClusterRoleBinding", "troupe-kube-state-metrics-gangs")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "troupe-kube-state-metrics-gangs"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ksm", "namespace": subject_namespace}]
    assert one(objects, "ConfigMap")["metadata"]["namespace"] == config_namespace


def test_the_schema_refuses_an_unknown_key() -> None:
    with pytest.raises(HelmFailed, match="schema"):
        render(*ON, "--set", "kubeStateMetrics.customResourceState.configMap=x")
