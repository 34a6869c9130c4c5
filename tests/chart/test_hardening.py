"""The chart's certificate modes, NetworkPolicies, ValidatingAdmissionPolicy, ServiceMonitor,
CRD and pod hardening, rendered by the real helm and checked against the code they deploy
(the reconciler's certificate flags, the webhook's mounts)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from reconciler.__main__ import _parser as reconciler_parser
from reconciler.__main__ import webhook_certificate_settings
from reconciler.daemon.certificates import Settings
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, HelmFailed, helm, one, render

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

CERT_MANAGER = ["--set", "certManager.enabled=true"]
MANUAL = ["--set", "webhook.tls.selfManaged=false"]
SCRAPER = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
API_SERVER = [{"ipBlock": {"cidr": "10.0.0.0/28"}}]


def kinds(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def container(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    [only] = one(objects, "Deployment", f"troupe-{component}")["spec"]["template"]["spec"]["containers"]
    return only


def certificate_settings(objects: list[dict[str, Any]]) -> Settings | None:
    _module, *args = container(objects, "reconciler")["args"]
    parsed = webhook_certificate_settings(reconciler_parser().parse_args(args))
    assert parsed is None or isinstance(parsed, Settings)
    return parsed


def tls_volume(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec = one(objects, "Deployment", "troupe-webhook")["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "tls"]
    return dict(volume["secret"])


CERT_OBJECTS = {
    ("Secret", "troupe-webhook-ca"), ("Secret", "troupe-webhook-tls"),
    ("Role", "troupe-reconciler-webhook-certificates"), ("RoleBinding", "troupe-reconciler-webhook-certificates"),
    ("ClusterRole", "troupe-reconciler-webhook-certificates"),
    ("ClusterRoleBinding", "troupe-reconciler-webhook-certificates"),
}
CERT_MANAGER_OBJECTS = {
    ("Issuer", "troupe-selfsigned"), ("Certificate", "troupe-webhook-ca"), ("Issuer", "troupe-ca"),
    ("Certificate", "troupe-webhook"),
}


# --- certificate modes ----------------------------------------------------------------------


@pytest.mark.parametrize(("values", "want_objects", "absent"), [
    ([], CERT_OBJECTS, CERT_MANAGER_OBJECTS),
    (CERT_MANAGER, CERT_MANAGER_OBJECTS, CERT_OBJECTS),
    (MANUAL, set(), CERT_OBJECTS | CERT_MANAGER_OBJECTS),
], ids=["self-managed by default", "cert-manager", "manual"])
def test_each_certificate_mode_renders_its_objects_and_none_of_the_others(
    values: list[str], want_objects: set[tuple[str, str]], absent: set[tuple[str, str]]
) -> None:
    objects = render(*values)

    assert want_objects <= kinds(objects)
    assert not absent & kinds(objects)


def test_self_managed_the_reconciler_fills_exactly_the_secrets_the_webhook_mounts() -> None:
    objects = render("--set", "webhook.tls.validitySeconds=600", "--set", "webhook.tls.renewBeforeSeconds=120",
                     "--set", "webhook.tls.caValiditySeconds=1800")

    settings = certificate_settings(objects)

    assert settings is not None
    assert (settings.namespace, settings.service) == (NAMESPACE, "troupe-webhook")
    assert one(objects, "Service", settings.service)
    assert settings.webhook_configuration == one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert tls_volume(objects) == {"secretName": settings.tls_secret, "optional": True}
    assert (settings.validity.total_seconds(), settings.renew_before.total_seconds(),
            settings.ca_validity.total_seconds()) == (600, 120, 1800)
    for name in (settings.tls_secret, settings.ca_secret):
        secret = one(objects, "Secret", name)
        assert secret["type"] == "Opaque" and "data" not in secret  # upgrades never reset what the reconciler wrote
    hooks = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert len(hooks) == 2 and all("caBundle" not in hook["clientConfig"] for hook in hooks)


def test_self_managed_rbac_names_the_two_secrets_and_the_one_webhook_configuration() -> None:
    objects = render()
    settings = certificate_settings(objects)
    assert settings is not None

    [secrets] = one(objects, "Role", "troupe-reconciler-webhook-certificates")["rules"]
    [config] = one(objects, "ClusterRole", "troupe-reconciler-webhook-certificates")["rules"]

    assert secrets == {"apiGroups": [""], "resources": ["secrets"],
                       "resourceNames": [settings.ca_secret, settings.tls_secret],
                       "verbs": ["get", "list", "watch", "patch"]}
    assert config == {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
                      "resourceNames": [settings.webhook_configuration], "verbs": ["get", "list", "watch", "patch"]}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = one(objects, kind, "troupe-reconciler-webhook-certificates")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "troupe-reconciler", "namespace": NAMESPACE}]


def test_cert_manager_issues_for_the_same_names_into_the_mounted_secret_and_injects_its_ca() -> None:
    objects = render(*CERT_MANAGER)

    serving = one(objects, "Certificate", "troupe-webhook")["spec"]
    ca = one(objects, "Certificate", "troupe-webhook-ca")["spec"]
    config = one(objects, "MutatingWebhookConfiguration")

    assert certificate_settings(objects) is None  # Troupe touches no certificate
    assert tls_volume(objects) == {"secretName": serving["secretName"], "optional": True}
    reference = Settings(namespace=NAMESPACE, service="troupe-webhook", webhook_configuration="troupe",
                         tls_secret="x", ca_secret="y")
    assert tuple(serving["dnsNames"]) == reference.sans
    assert serving["issuerRef"] == {"name": "troupe-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert one(objects, "Issuer", "troupe-ca")["spec"]["ca"]["secretName"] == ca["secretName"]
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "troupe-selfsigned"
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/troupe-webhook"}
    assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])


def test_cert_manager_with_an_issuer_of_your_own_makes_no_ca_chain() -> None:
    objects = render(*CERT_MANAGER, "--set", "certManager.issuerRef.name=corp-ca",
                     "--set", "certManager.issuerRef.kind=ClusterIssuer", "--set", "certManager.issuerRef.group=cert-manager.io")

    assert kinds(objects) & CERT_MANAGER_OBJECTS == {("Certificate", "troupe-webhook")}
    assert one(objects, "Certificate", "troupe-webhook")["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


@pytest.mark.parametrize(("values", "message"), [
    ([*CERT_MANAGER, "--set", "webhook.tls.caBundle=YWJj"], "webhook.tls.caBundle: leave it empty with certManager.enabled"),
    (["--set", "webhook.tls.caBundle=YWJj"], "webhook.tls.caBundle: set webhook.tls.selfManaged=false"),
    (["--set", "webhook.tls.secretName=mine"], "webhook.tls.secretName: set webhook.tls.selfManaged=false"),
    (["--set", "webhook.tls.renewBeforeSeconds=7776000"], "webhook.tls.renewBeforeSeconds: must be less than validitySeconds"),
    (["--set", "webhook.tls.caValiditySeconds=600"], "webhook.tls.caValiditySeconds: must be more than validitySeconds"),
], ids=["cert-manager-and-a-ca-bundle", "self-managed-and-a-ca-bundle", "self-managed-and-a-secret-name",
        "renewal-window-as-long-as-validity", "ca-shorter-than-a-certificate"])
def test_values_that_mix_certificate_modes_or_do_not_nest_fail_naming_the_value(values: list[str], message: str) -> None:
    with pytest.raises(HelmFailed, match=re.escape(message)):
        render(*values)


# --- failurePolicy, probes, hardened pods ---------------------------------------------------


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_the_failure_policy_value_reaches_the_webhook_configuration(policy: str) -> None:
    hooks = one(render("--set", f"webhook.failurePolicy={policy}"), "MutatingWebhookConfiguration")["webhooks"]

    assert [hook["failurePolicy"] for hook in hooks] == [policy, policy]


@pytest.mark.parametrize("component", ["webhook", "reconciler"])
def test_pods_run_hardened_with_probes_and_resources(component: str) -> None:
    objects = render()
    pod = one(objects, "Deployment", f"troupe-{component}")["spec"]["template"]["spec"]
    c = container(objects, component)

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]


# --- NetworkPolicies ------------------------------------------------------------------------


def policy(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return dict(one(objects, "NetworkPolicy", f"troupe-{component}")["spec"])


def test_by_default_only_the_webhook_port_is_open_and_the_reconciler_admits_nothing_but_its_probes() -> None:
    objects = render()

    webhook, reconciler = policy(objects, "webhook"), policy(objects, "reconciler")

    assert webhook["policyTypes"] == ["Ingress"]
    assert webhook["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}]}]
    assert reconciler["ingress"] == []
    assert webhook["podSelector"] == one(objects, "Deployment", "troupe-webhook")["spec"]["selector"]
    assert reconciler["podSelector"] == one(objects, "Deployment", "troupe-reconciler")["spec"]["selector"]


def test_with_the_api_server_named_the_webhook_admits_it_and_the_scrapers_only() -> None:
    objects = render("--set-json", f"networkPolicy.apiServer={json.dumps(API_SERVER)}",
                     "--set-json", f"networkPolicy.metricsFrom={json.dumps(SCRAPER)}")

    admission, scraping = policy(objects, "webhook")["ingress"]
    [reconciler_rule] = policy(objects, "reconciler")["ingress"]

    assert admission == {"ports": [{"port": "https", "protocol": "TCP"}], "from": API_SERVER}
    assert scraping == {"ports": [{"port": "health", "protocol": "TCP"}], "from": SCRAPER}
    assert reconciler_rule == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": SCRAPER}
    metrics_port = {p["name"]: p["containerPort"] for p in container(objects, "reconciler")["ports"]}
    assert "metrics" in metrics_port


def test_network_policies_can_be_switched_off() -> None:
    assert not [o for o in render("--set", "networkPolicy.enabled=false") if o["kind"] == "NetworkPolicy"]


def test_a_service_monitor_behind_a_network_policy_needs_the_scrapers_named() -> None:
    with pytest.raises(HelmFailed, match=re.escape("networkPolicy.metricsFrom: Prometheus cannot reach /metrics")):
        render("--set", "serviceMonitor.enabled=true")


# --- ServiceMonitor -------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], CERT_MANAGER, MANUAL], ids=["self-managed", "cert-manager", "manual"])
def test_the_service_monitor_scrapes_both_components_on_their_plain_http_ports(values: list[str]) -> None:
    objects = render(*values, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom",
                     "--set-json", f"networkPolicy.metricsFrom={json.dumps(SCRAPER)}")

    monitor = one(objects, "ServiceMonitor", "troupe")
    metrics_service = one(objects, "Service", "troupe-reconciler-metrics")

    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert metrics_service["spec"]["selector"] == one(objects, "Deployment", "troupe-reconciler")["spec"]["selector"]["matchLabels"]
    by_port = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert set(by_port) == {"metrics", "health"}
    assert all("tlsConfig" not in e for e in by_port.values())
    webhook_ports = {p["name"] for p in one(objects, "Service", "troupe-webhook")["spec"]["ports"]}
    assert webhook_ports == {"https", "health"}
    for service in (metrics_service, one(objects, "Service", "troupe-webhook")):
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


# --- ValidatingAdmissionPolicy --------------------------------------------------------------


@pytest.mark.parametrize(("release", "namespace"), [("troupe", NAMESPACE), ("gangs", "ml-platform")])
def test_the_admission_policy_binds_to_the_reconcilers_own_identity(release: str, namespace: str) -> None:
    objects = render(release=release, namespace=namespace)

    vap = one(objects, "ValidatingAdmissionPolicy", f"{release}-reconciler-pod-writes")
    binding = one(objects, "ValidatingAdmissionPolicyBinding", f"{release}-reconciler-pod-writes")

    [condition] = vap["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{namespace}:{release}-reconciler'"
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods", "pods/status"]}]
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert all(v["reason"] == "Forbidden" and v["message"] for v in vap["spec"]["validations"])


@pytest.mark.parametrize(("release", "namespace"), [("troupe", NAMESPACE), ("gangs", "ml-platform")])
def test_the_node_and_workload_policies_bind_to_the_reconcilers_own_identity(release: str, namespace: str) -> None:
    objects = render(release=release, namespace=namespace)
    identity = f"'system:serviceaccount:{namespace}:{release}-reconciler'"

    for policy in ("reconciler-node-writes", "reconciler-workload-writes"):
        vap = one(objects, "ValidatingAdmissionPolicy", f"{release}-{policy}")
        [condition] = vap["spec"]["matchConditions"]
        assert condition["expression"] == f"request.userInfo.username == {identity}"
        assert all(v["reason"] == "Forbidden" and v["message"] for v in vap["spec"]["validations"])
    records = one(objects, "ValidatingAdmissionPolicy", f"{release}-workload-records")
    assert records["spec"]["matchConditions"][0]["expression"] == f"request.userInfo.username != {identity}"
    for policy in ("reconciler-node-writes", "reconciler-workload-writes", "workload-records", "nominated-toleration"):
        binding = one(objects, "ValidatingAdmissionPolicyBinding", f"{release}-{policy}")
        assert binding["spec"] == {"policyName": f"{release}-{policy}", "validationActions": ["Deny"]}


def test_the_admission_policy_can_be_switched_off() -> None:
    objects = render("--set", "validatingAdmissionPolicy.enabled=false")

    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]


# --- the CRD, lint of every option ---------------------------------------------------


def test_the_shared_device_group_crd_is_the_designs() -> None:
    crd = yaml.safe_load((CHART / "files" / "crds" / "shareddevicegroups.yaml").read_text())

    assert crd["metadata"]["name"] == "shareddevicegroups.deviceshare.io"
    assert (crd["spec"]["scope"], crd["spec"]["names"]["kind"], crd["spec"]["names"]["shortNames"]) == (
        "Cluster", "SharedDeviceGroup", ["sdg"])
    [version] = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Node", "Devices", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["resources"]["additionalProperties"] == {"type": "integer", "format": "int64", "minimum": 1,
                                                         "maximum": 1024}
    [rule] = spec["resources"]["x-kubernetes-validations"]
    assert "kubernetes[.]io/" in rule["rule"], "counted devices only: never cpu, memory or kubernetes.io names"
    assert spec["schedulingStrategy"]["enum"] == ["binpack", "spread"] and spec["schedulingStrategy"]["default"] == "binpack"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Bound"]


OPTIONS = {
    "defaults": [],
    "cert-manager": CERT_MANAGER,
    "manual": [*MANUAL, "--set", "webhook.tls.caBundle=YWJj"],
    "everything-off": ["--set", "networkPolicy.enabled=false", "--set", "validatingAdmissionPolicy.enabled=false"],
    "service-monitor": ["--set", "serviceMonitor.enabled=true",
                        "--set-json", f"networkPolicy.metricsFrom={json.dumps(SCRAPER)}",
                        "--set-json", f"networkPolicy.apiServer={json.dumps(API_SERVER)}"],
    "fail-open": ["--set", "webhook.failurePolicy=Ignore"],
}


@pytest.mark.parametrize("values", OPTIONS.values(), ids=OPTIONS.keys())
def test_helm_lint_strict_passes_with_each_option(values: list[str]) -> None:
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), *values)


def test_the_api_servers_cidrs_become_ip_blocks_after_the_named_peers() -> None:
    objects = render("--set-json", f"networkPolicy.apiServer={json.dumps(API_SERVER)}",
                     "--set-json", 'networkPolicy.apiServerCIDRs=["10.0.0.0/28","fd00::/120"]')

    [admission] = policy(objects, "webhook")["ingress"]

    assert admission["from"] == [*API_SERVER, {"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "fd00::/120"}}]


def test_with_no_cluster_to_look_the_api_server_up_in_the_webhook_port_admits_every_source() -> None:
    """``helm template`` has no cluster: the `kubernetes` Endpoints cannot be looked up, so
    the rule has no ``from`` (every source), with the look-up on or off."""
    for values in ([], ["--set", "networkPolicy.apiServerFromEndpoints=false"]):
        objects = render(*values)
        assert policy(objects, "webhook")["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}]}]


def test_cidrs_that_are_not_cidrs_are_refused_by_the_schema() -> None:
    with pytest.raises(HelmFailed, match="apiServerCIDRs"):
        render("--set-json", 'networkPolicy.apiServerCIDRs=["api.example.com"]')
