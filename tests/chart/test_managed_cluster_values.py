"""The chart values a managed cluster needs (docs/guide/install.md, "Values for managed
clusters"; docs/decisions/050-managed-cluster-values.md): the webhook on the node's network,
the cluster's DNS domain, extra arguments and environment, the log level, ServiceAccount and
Service annotations, an image digest. Each is rendered where Kubernetes (or the component's
own command line) reads it, and a bad value is refused by the schema naming it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from reconciler.__main__ import _parser as reconciler_parser
from reconciler.__main__ import webhook_certificate_settings
from tests.support.helm import CHART, NOT_BUILT, HelmFailed, helm, one, render
from webhook.cli import parser as webhook_parser

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

DIGEST = "sha256:" + "0123456789abcdef" * 4


def container(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    [found] = one(objects, "Deployment", f"troupe-{component}")["spec"]["template"]["spec"]["containers"]
    return dict(found)


def pod_spec(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return dict(one(objects, "Deployment", f"troupe-{component}")["spec"]["template"]["spec"])


def webhook_args(objects: list[dict[str, Any]]) -> Any:
    _module, *args = container(objects, "webhook")["args"]
    return webhook_parser().parse_args(args)


def reconciler_args(objects: list[dict[str, Any]]) -> Any:
    _module, *args = container(objects, "reconciler")["args"]
    return reconciler_parser().parse_args(args)


def refused(*values: str) -> str:
    with pytest.raises(HelmFailed) as failed:
        render(*values)
    return str(failed.value)


# --- the webhook on the node's network ----------------------------------------------------------


def test_on_the_host_network_the_webhook_serves_on_the_nodes_ports_and_everything_follows() -> None:
    objects = render("--set", "webhook.hostNetwork=true")

    spec, webhook = pod_spec(objects, "webhook"), container(objects, "webhook")
    args = webhook_args(objects)
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert (args.bind, args.health_bind) == ("0.0.0.0:10263", "0.0.0.0:10264")
    assert {p["name"]: p["containerPort"] for p in webhook["ports"]} == {"https": 10263, "health": 10264}
    assert webhook["readinessProbe"]["httpGet"]["port"] == webhook["livenessProbe"]["httpGet"]["port"] == "health"
    service = one(objects, "Service", "troupe-webhook")["spec"]["ports"]
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service} == {"https": (443, "https"),
                                                                        "health": (10264, "health")}
    assert "sysctls" not in spec["securityContext"], "no namespaced sysctl on the host's network"
    policies = [o["metadata"]["name"] for o in objects if o["kind"] == "NetworkPolicy"]
    assert policies == ["troupe-reconciler"], "a NetworkPolicy does not select a pod on the host network"


def test_on_the_host_network_the_ports_are_the_values_given_and_off_it_nothing_changes() -> None:
    objects = render("--set", "webhook.hostNetwork=true", "--set", "webhook.hostNetworkPort=12443",
                     "--set", "webhook.hostNetworkHealthPort=12081")
    assert (webhook_args(objects).bind, webhook_args(objects).health_bind) == ("0.0.0.0:12443", "0.0.0.0:12081")

    default = render("--set", "webhook.hostNetworkPort=12443")
    spec = pod_spec(default, "webhook")
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    assert webhook_args(default).bind == "0.0.0.0:8443"
    assert [o["metadata"]["name"] for o in default if o["kind"] == "NetworkPolicy"] == [
        "troupe-webhook", "troupe-reconciler"]


def test_a_host_network_port_below_1024_or_shared_by_both_ports_is_refused_naming_it() -> None:
    assert "/webhook/hostNetworkPort': minimum: got 443, want 1,024" in refused(
        "--set", "webhook.hostNetwork=true", "--set", "webhook.hostNetworkPort=443")
    assert "webhook.hostNetworkHealthPort: the HTTPS and the health port must differ, both are 10263" in refused(
        "--set", "webhook.hostNetwork=true", "--set", "webhook.hostNetworkHealthPort=10263")


# --- the cluster's DNS domain -------------------------------------------------------------------


def test_the_cluster_domain_names_the_webhook_in_every_certificate_and_nowhere_is_cluster_local_left() -> None:
    with_cert_manager = render("--set", "clusterDomain=corp.internal", "--set", "certManager.enabled=true")
    self_managed = render("--set", "clusterDomain=corp.internal")

    names = one(with_cert_manager, "Certificate", "troupe-webhook")["spec"]["dnsNames"]
    assert names[-1] == "troupe-webhook.troupe-system.svc.corp.internal"
    args = reconciler_args(self_managed)
    assert args.cluster_domain == "corp.internal"
    assert webhook_certificate_settings(args).sans[3] == "troupe-webhook.troupe-system.svc.corp.internal"
    for objects in (with_cert_manager, self_managed):
        assert "cluster.local" not in yaml.safe_dump_all(objects)
    default = one(render("--set", "certManager.enabled=true"), "Certificate", "troupe-webhook")["spec"]["dnsNames"]
    assert default[-1] == "troupe-webhook.troupe-system.svc.cluster.local"


def test_a_cluster_domain_that_is_no_dns_name_is_refused_naming_it() -> None:
    assert "/clusterDomain': 'Corp_Local' does not match pattern" in refused("--set", "clusterDomain=Corp_Local")


# --- extra arguments, environment and the log level ------------------------------------------


def test_extra_arguments_are_appended_to_each_components_own_and_parse() -> None:
    objects = render("--set-json", 'webhook.extraArgs=["--max-connections=500","--request-timeout=20"]',
                     "--set-json", 'reconciler.extraArgs=["--log-format=text"]')

    assert container(objects, "webhook")["args"][-2:] == ["--max-connections=500", "--request-timeout=20"]
    assert (webhook_args(objects).max_connections, webhook_args(objects).request_timeout) == (500, 20.0)
    assert container(objects, "reconciler")["args"][-1] == "--log-format=text"
    assert reconciler_args(objects).log_format == "text"
    assert "/webhook/extraArgs/0': got number, want string" in refused("--set-json", "webhook.extraArgs=[1]")


def test_extra_environment_reaches_both_containers_then_each_components_own() -> None:
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "token"}}}
    objects = render("--set-json", "extraEnv=" + json.dumps([{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                                                             secret]),
                     "--set-json", 'webhook.extraEnv=[{"name":"W","value":"1"}]',
                     "--set-json", 'reconciler.extraEnv=[{"name":"R","value":"2"}]')

    webhook, reconciler = (container(objects, c)["env"] for c in ("webhook", "reconciler"))
    assert [e["name"] for e in webhook] == ["PROMETHEUS_MULTIPROC_DIR", "HTTPS_PROXY", "TOKEN", "W"]
    assert [e["name"] for e in reconciler] == ["HTTPS_PROXY", "TOKEN", "R"]
    assert reconciler[1] == secret
    assert "env" not in container(render(), "reconciler")


def test_an_environment_variable_without_a_name_or_one_the_chart_sets_is_refused_naming_it() -> None:
    assert "/extraEnv/0': missing property 'name'" in refused("--set-json", 'extraEnv=[{"value":"1"}]')
    assert "webhook.extraEnv: PROMETHEUS_MULTIPROC_DIR is set by the chart" in refused(
        "--set-json", 'webhook.extraEnv=[{"name":"PROMETHEUS_MULTIPROC_DIR","value":"/x"}]')
    assert "reconciler.extraEnv: A is set by the chart (or given twice)" in refused(
        "--set-json", 'extraEnv=[{"name":"A","value":"1"}]', "--set-json", 'reconciler.extraEnv=[{"name":"A"}]')


@pytest.mark.parametrize("level", ["debug", "warning", "error"])
def test_the_log_level_reaches_both_components(level: str) -> None:
    objects = render("--set", f"logLevel={level}")

    assert webhook_args(objects).log_level == reconciler_args(objects).log_level == level


def test_the_default_log_level_is_info_and_another_name_is_refused_naming_it() -> None:
    assert webhook_args(render()).log_level == reconciler_args(render()).log_level == "info"
    assert "/logLevel': value must be one of 'debug', 'info', 'warning', 'error'" in refused("--set", "logLevel=trace")


# --- annotations and the image ----------------------------------------------------------------


def test_service_account_annotations_are_on_every_service_account_and_the_services_on_the_webhooks() -> None:
    objects = render("--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/troupe",
                     "--set", "webhook.service.annotations.example\\.com/owner=platform")

    accounts = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert len(accounts) == 2
    for account in accounts:
        assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/troupe"}
    assert one(objects, "Service", "troupe-webhook")["metadata"]["annotations"] == {"example.com/owner": "platform"}
    assert not [o for o in render() if o["kind"] in ("ServiceAccount", "Service") and "annotations" in o["metadata"]]
    assert "/serviceAccount/annotations/a': got number, want string" in refused(
        "--set", "serviceAccount.annotations.a=1")


def test_an_image_digest_pins_both_components_and_a_malformed_one_is_refused_naming_it() -> None:
    objects = render("--set", f"image.digest={DIGEST}", "--set", "image.tag=ignored")

    for component in ("webhook", "reconciler"):
        assert container(objects, component)["image"] == f"ghcr.io/troupe-dev/troupe@{DIGEST}"
    assert container(render("--set", "image.tag=1.2.3"), "webhook")["image"] == "ghcr.io/troupe-dev/troupe:1.2.3"
    assert "/image/digest': 'sha256:abc' does not match pattern" in refused("--set", "image.digest=sha256:abc")
    assert "/image/digest'" in refused("--set", f"image.digest={DIGEST.upper()}")


def test_helm_lint_strict_passes_with_every_managed_cluster_value(tmp_path) -> None:
    values = {"clusterDomain": "corp.internal", "logLevel": "warning", "image": {"digest": DIGEST},
              "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
              "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "troupe@p.iam.gserviceaccount.com"}},
              "webhook": {"hostNetwork": True, "extraArgs": ["--max-connections=500"], "service": {"annotations": {}},
                          "extraEnv": [{"name": "W", "value": "1"}]},
              "reconciler": {"extraArgs": ["--log-format=text"], "extraEnv": []}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))

    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", str(path))


def test_the_values_file_lists_each_managed_cluster_value_with_a_default_that_changes_nothing() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    assert (values["clusterDomain"], values["logLevel"], values["extraEnv"]) == ("cluster.local", "info", [])
    assert values["serviceAccount"] == {"annotations": {}} and values["image"]["digest"] == ""
    webhook, reconciler = values["webhook"], values["reconciler"]
    assert (webhook["hostNetwork"], webhook["hostNetworkPort"], webhook["hostNetworkHealthPort"]) == (False, 10263, 10264)
    assert webhook["extraArgs"] == webhook["extraEnv"] == reconciler["extraArgs"] == reconciler["extraEnv"] == []
    assert webhook["service"] == {"annotations": {}}
