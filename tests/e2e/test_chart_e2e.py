"""The chart on the real kube-apiserver: every object it renders is accepted (schema of each
object, and the CEL of the webhook's matchConditions compiled by the API server)."""

from __future__ import annotations

import base64

import pytest
import yaml

import certs
from devtools.devcluster import Cluster
from tests.chart.helm import CHART, helm, template

RELEASE = "troupe-chart"
PFN_PREFIX = "gang-scheduling.preferred.jp/gang"


@pytest.mark.parametrize("values", [
    [],
    ["--set", f"config.gangAnnotationPrefix={PFN_PREFIX}", "--set", "config.gangPreemptionMode=atomic",
     "--set-json", "config.excludedNamespaces=[]", "--set", "webhook.replicas=1"],
], ids=["defaults", "pfn-prefix-nothing-excluded-one-webhook"])
def test_every_object_the_chart_renders_is_accepted_by_the_api_server(
    cluster: Cluster, namespace: str, values: list[str]
) -> None:
    ca = base64.b64encode(certs.create_ca("chart-e2e-ca", days=1).cert_pem).decode()
    manifest = template(*values, "--set", f"webhook.tls.caBundle={ca}", release=RELEASE, namespace=namespace,
                        binary=cluster.binaries.helm)
    objects = [o for o in yaml.safe_load_all(manifest) if o]

    applied = cluster.kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", "-", input=manifest, check=False)

    assert applied.returncode == 0, applied.stderr
    accepted = yaml.safe_load(applied.stdout)
    accepted_items = accepted["items"] if accepted.get("kind") == "List" else [accepted]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in accepted_items) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects)
    hooks = next(o for o in accepted_items if o["kind"] == "MutatingWebhookConfiguration")["webhooks"]
    rendered = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == len(rendered) == 2, "the pods entry and the namespace opt-in entry"
    for hook, want in zip(hooks, rendered, strict=True):
        assert hook["matchConditions"] == want["matchConditions"], "the API server compiled the CEL as rendered"
        assert hook["clientConfig"]["caBundle"] == ca


def test_helm_installs_the_chart_on_the_cluster_as_a_server_dry_run_and_prints_its_notes(
    cluster: Cluster, namespace: str
) -> None:
    out = helm("install", RELEASE, str(CHART), "--namespace", namespace, "--dry-run=server",
               "--kubeconfig", str(cluster.kubeconfig("admin")), binary=cluster.binaries.helm)

    assert "STATUS: pending-install" in out
    assert f"Secret {RELEASE}-webhook-tls" in out
    assert "WARNING: webhook.tls.caBundle is empty" in out
