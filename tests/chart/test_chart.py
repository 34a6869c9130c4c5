"""The Helm chart, rendered by the real helm: it lints, its schema refuses bad values, and
what it renders agrees with the code it deploys (the webhook registration, the
configuration loader, the entry points' argument parsers, the reconciler's RBAC file)."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import certs
from devtools.devcluster.build import built_helm
from reconciler.__main__ import _parser as reconciler_parser
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, RELEASE, HelmFailed, helm, one, render
from troupe.config import Config, from_mapping, load_config
from webhook.cli import parser as webhook_parser
from webhook.registration import webhook_configuration

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

PFN_PREFIX = "gang-scheduling.preferred.jp/gang"


def reconciler_username(release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    return f"system:serviceaccount:{namespace}:{release}-reconciler"


def without_labels_and_ca_bundle(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"].pop("labels", None)
    for webhook in obj["webhooks"]:
        webhook["clientConfig"].pop("caBundle", None)
    return obj


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return only


def port_named(c: dict[str, Any], name: str) -> int:
    [port] = [p["containerPort"] for p in c["ports"] if p["name"] == name]
    return int(port)


def config_file(objects: list[dict[str, Any]], tmp_path: Path, release: str = RELEASE) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", f"{release}-config")["data"]["config.yaml"])
    return path


# --- lint and render ----------------------------------------------------------------------


@pytest.mark.parametrize("values", [
    [],
    ["--set", f"config.gangAnnotationPrefix={PFN_PREFIX}", "--set", "config.gangPreemptionMode=atomic"],
    ["--set", "webhook.replicas=1", "--set", "reconciler.replicas=0", "--set-json", "config.excludedNamespaces=[]"],
    ["--set", "config.adoptSchedulerNames={volcano,kai-scheduler}"],
], ids=["defaults", "pfn-prefix-atomic", "one-webhook-no-reconciler-nothing-excluded", "adopted-scheduler-names"])
def test_helm_lint_strict_passes(values: list[str]) -> None:
    out = helm("lint", "--strict", str(CHART), *values)

    assert "0 chart(s) failed" in out


def test_the_chart_renders_the_webhook_the_reconciler_and_their_wiring() -> None:
    objects = render()

    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == sorted([
        ("ClusterRole", "troupe-reconciler"),
        ("ClusterRoleBinding", "troupe-reconciler"),
        ("ClusterRole", "troupe-reconciler-webhook-certificates"),
        ("ClusterRoleBinding", "troupe-reconciler-webhook-certificates"),
        ("Role", "troupe-reconciler-webhook-certificates"),
        ("RoleBinding", "troupe-reconciler-webhook-certificates"),
        ("Secret", "troupe-webhook-ca"),
        ("Secret", "troupe-webhook-tls"),
        ("Secret", "troupe-reservation-key"),
        ("NetworkPolicy", "troupe-webhook"),
        ("NetworkPolicy", "troupe-reconciler"),
        ("ValidatingAdmissionPolicy", "troupe-reconciler-pod-writes"),
        ("ValidatingAdmissionPolicyBinding", "troupe-reconciler-pod-writes"),
        ("ValidatingAdmissionPolicy", "troupe-gang-writes"),
        ("ValidatingAdmissionPolicyBinding", "troupe-gang-writes"),
        *[(kind, f"troupe-{policy}") for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
          for policy in ("reconciler-node-writes", "reconciler-workload-writes", "workload-records",
                         "nominated-toleration", "gang-fits-workload")],
        ("ConfigMap", "troupe-config"),
        ("Deployment", "troupe-reconciler"),
        ("Deployment", "troupe-webhook"),
        ("MutatingWebhookConfiguration", "troupe"),
        ("PodDisruptionBudget", "troupe-webhook"),
        ("Role", "troupe-reconciler-leader-election"),
        ("RoleBinding", "troupe-reconciler-leader-election"),
        ("Service", "troupe-webhook"),
        ("ServiceAccount", "troupe-reconciler"),
        ("ServiceAccount", "troupe-webhook"),
        ("CustomResourceDefinition", "shareddevicegroups.deviceshare.io"),
        ("CustomResourceDefinition", "gangs.troupe.io"),
    ])
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "CustomResourceDefinition",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for o in objects:
        assert o["metadata"].get("namespace") == (None if o["kind"] in cluster_scoped else NAMESPACE), o["kind"]


def test_the_reconciler_reads_its_reservation_key_from_the_charts_secret_or_the_users() -> None:
    """The key reservations are signed with (docs/decisions/049-hostile-tenants-third-round.md):
    a Secret of 64 random characters the chart makes, mounted read-only where
    ``--reservation-key-file`` reads it; given ``reconciler.reservationKeySecret``, the user's
    Secret instead and none of the chart's."""
    objects = render()
    key = base64.b64decode(one(objects, "Secret", "troupe-reservation-key")["data"]["key"])
    assert len(key) == 64 and key.isalnum()
    assert key != base64.b64decode(one(render(), "Secret", "troupe-reservation-key")["data"]["key"]), "random"
    deployment = one(objects, "Deployment", "troupe-reconciler")
    c = container(deployment)
    assert "--reservation-key-file=/etc/troupe/reservation-key/key" in c["args"]
    assert {"name": "reservation-key", "mountPath": "/etc/troupe/reservation-key", "readOnly": True} in c["volumeMounts"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["reservation-key"]["secret"]["secretName"] == "troupe-reservation-key"

    own = render("--set", "reconciler.reservationKeySecret=platform-keys")
    assert not [o for o in own if o["kind"] == "Secret" and o["metadata"]["name"] == "troupe-reservation-key"]
    volumes = {v["name"]: v for v in one(own, "Deployment", "troupe-reconciler")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["reservation-key"]["secret"]["secretName"] == "platform-keys"
    with pytest.raises(HelmFailed, match="reservationKeySecret"):
        render("--set", "reconciler.reservationKeySecret=Not_A_Name")


def test_the_cluster_role_grants_exactly_the_rules_file() -> None:
    rules = yaml.safe_load((CHART / "files" / "reconciler-rules.yaml").read_text())

    role = one(render(), "ClusterRole", "troupe-reconciler")

    assert role["rules"] == rules
    binding = one(render(), "ClusterRoleBinding", "troupe-reconciler")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    provisioning = yaml.safe_load((CHART / "files" / "reconciler-provisioning-rules.yaml").read_text())
    on = one(render("--set", "config.provisioning.className=queued-provisioning.gke.io"), "ClusterRole",
             "troupe-reconciler")
    assert on["rules"] == rules + provisioning  # ProvisioningRequests and PodTemplates only when on
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "troupe-reconciler", "namespace": NAMESPACE}]


# --- the MutatingWebhookConfiguration is registration.py's ---------------------------------


@pytest.mark.parametrize(("values", "changes", "timeout"), [
    ([], {}, 5),
    (["--set", f"config.gangAnnotationPrefix={PFN_PREFIX}"], {"gang_annotation_prefix": PFN_PREFIX}, 5),
    (["--set-json", "config.excludedNamespaces=[]"], {"excluded_namespaces": ()}, 5),
    (["--set", "config.excludedNamespaces={kube-system,kube-public,batch-infra}", "--set", "webhook.timeoutSeconds=12"],
     {"excluded_namespaces": ("kube-system", "kube-public", "batch-infra")}, 12),
    (["--set", "config.adoptSchedulerNames={volcano,kai-scheduler,second.example.com}"],
     {"adopt_scheduler_names": ("volcano", "kai-scheduler", "second.example.com")}, 5),
], ids=["defaults", "pfn-prefix", "nothing-excluded", "three-excluded-timeout-12", "adopted-scheduler-names"])
@pytest.mark.parametrize(("release", "namespace"), [(RELEASE, NAMESPACE), ("gangs", "ml-platform")])
def test_the_webhook_configuration_is_the_one_registration_builds(
    values: list[str], changes: dict[str, Any], timeout: int, release: str, namespace: str
) -> None:
    config = dataclasses.replace(Config(), reconciler_username=reconciler_username(release, namespace), **changes)
    expected = webhook_configuration(
        config,
        service={"name": f"{release}-webhook", "namespace": namespace, "path": "/mutate", "port": 443},
        name=release,
        timeout_seconds=timeout,
    )

    rendered = one(render(*values, release=release, namespace=namespace), "MutatingWebhookConfiguration")

    assert without_labels_and_ca_bundle(rendered) == without_labels_and_ca_bundle(expected)


def test_the_ca_bundle_value_is_the_client_configs_ca_bundle() -> None:
    pem = certs.create_ca("chart-test-ca", days=1).cert_pem
    expected = webhook_configuration(Config(), service={"name": "x", "namespace": "y"}, ca_bundle_pem=pem)
    expected_hooks = expected["webhooks"]

    objects = render("--set", "webhook.tls.selfManaged=false",
                     "--set", f"webhook.tls.caBundle={base64.b64encode(pem).decode()}")

    hooks = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert [h["clientConfig"]["caBundle"] for h in hooks] == [h["clientConfig"]["caBundle"] for h in expected_hooks]
    for no_bundle in one(render(), "MutatingWebhookConfiguration")["webhooks"]:
        assert "caBundle" not in no_bundle["clientConfig"]


def test_the_webhook_configuration_points_at_the_webhook_service_port_and_pods() -> None:
    objects = render()
    hook, auto = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    target = hook["clientConfig"]["service"]
    assert auto["clientConfig"]["service"] == dict(target, path="/mutate-auto"), "the opt-in entry: same service"
    service = one(objects, "Service", target["name"])
    webhook = one(objects, "Deployment", "troupe-webhook")

    [port] = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    assert port["targetPort"] == "https"
    assert port_named(container(webhook), "https") == 8443
    pod_labels = webhook["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert webhook["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


# --- the configuration file ---------------------------------------------------------------


def test_the_default_config_values_are_the_configurations_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    assert from_mapping(values["config"]) == Config()


@pytest.mark.parametrize(("release", "namespace"), [(RELEASE, NAMESPACE), ("gangs", "ml-platform")])
def test_the_config_map_loads_as_the_configuration_with_the_reconcilers_identity(
    tmp_path: Path, release: str, namespace: str
) -> None:
    objects = render(release=release, namespace=namespace)

    config = load_config(str(config_file(objects, tmp_path, release)))

    assert config.reconciler_username == reconciler_username(release, namespace)
    assert config == dataclasses.replace(Config(), reconciler_username=config.reconciler_username)


def test_values_set_on_the_command_line_reach_the_config_file(tmp_path: Path) -> None:
    objects = render(
        "--set", f"config.gangAnnotationPrefix={PFN_PREFIX}",
        "--set", "config.gangPreemptionMode=minimal",
        "--set", "config.gangScheduleTimeoutSecondsLimit=600",
        "--set-json", "config.topologyFallbackLevels=[]",
        "--set", "config.sharedDeviceResources={nvidia.com/gpu,amd.com/gpu}",
        "--set-json", 'config.topologySpreadDefaultConstraints=[{"topologyKey":"topology.kubernetes.io/zone","maxSkew":1}]',
        "--set", "config.adoptSchedulerNames={volcano,kai-scheduler}",
    )

    config = load_config(str(config_file(objects, tmp_path)))

    assert config.gang_annotation_prefix == PFN_PREFIX
    assert config.gang_preemption_mode == "minimal"
    assert config.gang_schedule_timeout_seconds_limit == 600
    assert config.topology_fallback_levels == ()
    assert config.shared_device_resources == ("nvidia.com/gpu", "amd.com/gpu")
    assert [(c.topology_key, c.max_skew) for c in config.topology_spread_default_constraints] == [
        ("topology.kubernetes.io/zone", 1)]
    assert config.adopt_scheduler_names == ("volcano", "kai-scheduler")


def test_both_deployments_roll_when_the_configuration_changes() -> None:
    def checksums(*values: str) -> list[str]:
        objects = render(*values)
        return [one(objects, "Deployment", f"troupe-{c}")["spec"]["template"]["metadata"]["annotations"]
                ["checksum/config"] for c in ("webhook", "reconciler")]

    before = checksums()
    after = checksums("--set", "config.gangPreemptionMode=atomic")

    assert before == checksums()
    assert all(b != a for b, a in zip(before, after, strict=True))


# --- containers start the real entry points -----------------------------------------------


def mounted_file(deployment: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume that provides the file at ``path`` in the only container, and its key."""
    mounts = container(deployment)["volumeMounts"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    for m in mounts:
        if m.get("subPath") and m["mountPath"] == path:
            return volumes[m["name"]], m["subPath"]
        if not m.get("subPath") and str(Path(path).parent) == m["mountPath"].rstrip("/"):
            return volumes[m["name"]], Path(path).name
    raise AssertionError(f"no volume mount provides {path} (mounts: {mounts})")


def test_the_webhook_container_args_parse_as_python_m_webhook_serve() -> None:
    objects = render("--set", "webhook.port=9443", "--set", "webhook.workers=3")
    webhook = one(objects, "Deployment", "troupe-webhook")
    module, *args = container(webhook)["args"]

    parsed = webhook_parser().parse_args(args)

    assert module == "webhook"
    assert parsed.command == "serve"
    assert parsed.bind == f"0.0.0.0:{port_named(container(webhook), 'https')}" == "0.0.0.0:9443"
    assert (parsed.workers, parsed.threads) == (3, 1)
    tls, cert_key = mounted_file(webhook, parsed.tls_cert)
    assert (tls["secret"]["secretName"], cert_key) == ("troupe-webhook-tls", "tls.crt")
    assert mounted_file(webhook, parsed.tls_key) == (tls, "tls.key")
    config, key = mounted_file(webhook, parsed.config)
    assert config["configMap"]["name"] == "troupe-config"
    assert key in one(objects, "ConfigMap", "troupe-config")["data"]


def test_the_reconciler_container_args_parse_as_python_m_reconciler_run() -> None:
    objects = render("--set", "reconciler.metricsPort=9090")
    reconciler = one(objects, "Deployment", "troupe-reconciler")
    module, *args = container(reconciler)["args"]

    parsed = reconciler_parser().parse_args(args)

    assert module == "reconciler"
    assert parsed.command == "run"
    assert parsed.kubeconfig is None  # in-cluster credentials
    assert parsed.metrics_bind == f"0.0.0.0:{port_named(container(reconciler), 'metrics')}" == "0.0.0.0:9090"
    config, key = mounted_file(reconciler, parsed.config)
    assert config["configMap"]["name"] == "troupe-config"
    assert key in one(objects, "ConfigMap", "troupe-config")["data"]
    spec = reconciler["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "troupe-reconciler"


def test_an_unknown_flag_in_the_args_would_be_refused_by_the_parser() -> None:
    """The two tests above can fail: the parsers reject what the entry points do not take."""
    with pytest.raises(SystemExit):
        webhook_parser().parse_args(["serve", "--tls-cert=a", "--tls-key=b", "--port=8443"])
    with pytest.raises(SystemExit):
        reconciler_parser().parse_args(["run", "--metrics-port=8080"])


# --- replicas, disruption budget, strategy --------------------------------------------------


@pytest.mark.parametrize(("replicas", "budget"), [(1, False), (2, True), (3, True)])
def test_the_webhook_gets_a_disruption_budget_of_one_only_with_more_than_one_replica(
    replicas: int, budget: bool
) -> None:
    objects = render("--set", f"webhook.replicas={replicas}")

    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]

    assert one(objects, "Deployment", "troupe-webhook")["spec"]["replicas"] == replicas
    assert bool(budgets) == budget
    if budget:
        [pdb] = budgets
        assert pdb["spec"]["minAvailable"] == 1
        webhook = one(objects, "Deployment", "troupe-webhook")
        assert pdb["spec"]["selector"] == webhook["spec"]["selector"]


def test_reconciler_replicas_elect_a_leader_with_a_lease_in_the_release_namespace() -> None:
    objects = render()
    reconciler = one(objects, "Deployment", "troupe-reconciler")
    args = reconciler["spec"]["template"]["spec"]["containers"][0]["args"]

    assert reconciler["spec"]["replicas"] == 2
    assert "--leader-elect" in args
    assert "--leader-elect-namespace=troupe-system" in args
    assert "--leader-elect-lease-seconds=15" in args
    role = one(objects, "Role", "troupe-reconciler-leader-election")
    assert role["metadata"]["namespace"] == "troupe-system"
    rules = (CHART / "files" / "reconciler-leader-election-rules.yaml").read_text()
    assert role["rules"] == yaml.safe_load(rules.replace("{lease}", "troupe-reconciler")
                                           .replace("{state}", "troupe-reconciler-state"))
    assert "--leader-elect-name=troupe-reconciler" in args
    assert "--state-configmap=troupe-reconciler-state" in args
    named = {rule["resources"][0]: rule["resourceNames"] for rule in role["rules"] if "resourceNames" in rule}
    assert named == {"leases": ["troupe-reconciler"], "configmaps": ["troupe-reconciler-state"]}
    binding = one(objects, "RoleBinding", "troupe-reconciler-leader-election")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "troupe-reconciler", "namespace": "troupe-system"}]


def test_the_webhook_pod_gets_no_service_account_token() -> None:
    spec = one(render(), "Deployment", "troupe-webhook")["spec"]["template"]["spec"]

    assert spec["automountServiceAccountToken"] is False


# --- bad values are refused before anything reaches a cluster ------------------------------


@pytest.mark.parametrize(("values", "named"), [
    (["--set", "config.gangPreemptionMode=sometimes"], "/config/gangPreemptionMode"),
    (["--set", "config.gangAnnotationPrefix=troupe.io/"], "/config/gangAnnotationPrefix"),
    (["--set", "config.gangScheduleTimeoutSecondsLimit=0"], "/config/gangScheduleTimeoutSecondsLimit"),
    (["--set", "config.excludedNamespaces={Kube_System}"], "/config/excludedNamespaces/0"),
    (["--set-json", "config.topologyLevels=[]"], "/config/topologyLevels"),
    (["--set", "config.excludedNamespaces=null"], "missing property 'excludedNamespaces'"),
    (["--set", "config.gangTimeout=30"], "gangTimeout"),
    (["--set", "config.reconcilerUsername=someone"], "reconcilerUsername"),
    (["--set", "reconciler.replicas=-1"], "/reconciler/replicas"),
    (["--set", "reconciler.leaseSeconds=2"], "/reconciler/leaseSeconds"),
    (["--set", "webhook.timeoutSeconds=31"], "/webhook/timeoutSeconds"),
    (["--set", "webhook.failurePolicy=Sometimes"], "/webhook/failurePolicy"),
    (["--set", "webhook.tls.validitySeconds=30"], "/webhook/tls/validitySeconds"),
    (["--set", "certManager.duration=90d"], "/certManager/duration"),
    (["--set", "certManager.issuerRef.kind=Vault"], "/certManager/issuerRef/kind"),
    (["--set-json", 'networkPolicy.apiServer=[{"cidr":"10.0.0.0/8"}]'], "/networkPolicy/apiServer/0"),
    (["--set", "webhook.port=70000"], "/webhook/port"),
    (["--set", "webhook.tls.caBundle=-----BEGIN CERTIFICATE-----"], "/webhook/tls/caBundle"),
    # the install values (decision 036)
    (["--set-json", 'imagePullSecrets=["regcred"]'], "/imagePullSecrets/0"),
    (["--set", "fullnameOverride=Gangs_1"], "/fullnameOverride"),
    (["--set", "nameOverride=-troupe"], "/nameOverride"),
    (["--set-json", 'webhook.podAnnotations={"a":1}'], "/webhook/podAnnotations/a"),
    (["--set", "reconciler.podLabels.team=a b"], "/reconciler/podLabels/team"),
    (["--set-json", 'reconciler.affinity={"nodeAffinty":{}}'], "/reconciler/affinity"),
    (["--set-json", 'webhook.tolerations=[{"operator":"Maybe"}]'], "/webhook/tolerations/0/operator"),
    (["--set-json", 'webhook.topologySpreadConstraints=[{"maxSkew":1}]'], "/webhook/topologySpreadConstraints/0"),
    (["--set", "topology.preset=aks"], "/topology/preset"),
    # adopted scheduler names (decision 057)
    (["--set", "config.adoptSchedulerNames={Volcano}"], "/config/adoptSchedulerNames/0"),
    (["--set", "config.adoptSchedulerNames={default-scheduler}"], "/config/adoptSchedulerNames/0"),
    (["--set", "config.adoptSchedulerNames={volcano,volcano}"], "/config/adoptSchedulerNames"),
])
def test_a_value_the_schema_refuses_fails_lint_and_template_naming_it(values: list[str], named: str) -> None:
    with pytest.raises(HelmFailed, match="schema") as templated:
        render(*values)
    with pytest.raises(HelmFailed) as linted:
        helm("lint", "--strict", str(CHART), *values)

    assert named in str(templated.value)
    assert named in str(linted.value)


def test_a_bare_off_in_a_values_file_is_refused_as_a_boolean(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("config:\n  gangPreemptionMode: off\n")

    with pytest.raises(HelmFailed, match="gangPreemptionMode': got boolean, want string"):
        render("-f", str(values))


@pytest.mark.parametrize(("values", "named"), [
    (["--set", "config.gangScheduleDefaultTimeoutSeconds=200"],
     "gangScheduleDefaultTimeoutSeconds: 200 exceeds gangScheduleTimeoutSecondsLimit (100)"),
    (["--set", "config.topologyFallbackLevels={topology.gke.io/rack}"],
     "topologyFallbackLevels: must have as many levels as topologyLevels (3)"),
    (["--set", "config.topologyFallbackLevels={a,b,cloud.google.com/gce-topology-host}"],
     "topologyFallbackLevels: must not repeat a key of topologyLevels"),
])
def test_values_that_break_a_rule_between_keys_fail_as_the_loader_would(values: list[str], named: str) -> None:
    with pytest.raises(HelmFailed, match=re.escape(named)):
        render(*values)
