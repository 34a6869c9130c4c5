"""The chart on the real kube-apiserver: every object it renders, with each option, is accepted
(schema of each object with strict field validation, the CEL of the webhook's matchConditions
and of the ValidatingAdmissionPolicy compiled by the API server), and its NOTES follow the options."""

from __future__ import annotations

import base64

import pytest
import yaml
from kubernetes import client

import certs
from devtools.devcluster import Cluster
from tests.support.helm import CHART, helm, template
from tests.support.third_party_crds import third_party_crds

RELEASE = "troupe-chart"
PFN_PREFIX = "gang-scheduling.preferred.jp/gang"


@pytest.fixture(scope="module")
def third_party_kinds(cluster: Cluster) -> list[str]:
    """cert-manager's and prometheus-operator's CRDs (schemas from their generated models), Established."""
    crds = third_party_crds()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds))
    names = [c["metadata"]["name"] for c in crds]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])
    return names


SCRAPER = '[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]'
OPTIONS = {
    "defaults": [],
    "pfn-prefix-nothing-excluded-one-webhook": [
        "--set", f"config.gangAnnotationPrefix={PFN_PREFIX}", "--set", "config.gangPreemptionMode=atomic",
        "--set-json", "config.excludedNamespaces=[]", "--set", "webhook.replicas=1"],
    "cert-manager": ["--set", "certManager.enabled=true"],
    "cert-manager-own-issuer": ["--set", "certManager.enabled=true", "--set", "certManager.issuerRef.name=corp",
                                "--set", "certManager.issuerRef.kind=ClusterIssuer"],
    "manual-certificate": ["--set", "webhook.tls.selfManaged=false"],
    "service-monitor-narrow-policy": [
        "--set", "serviceMonitor.enabled=true", "--set-json", f"networkPolicy.metricsFrom={SCRAPER}",
        "--set-json", 'networkPolicy.apiServer=[{"ipBlock":{"cidr":"10.0.0.0/28"}}]'],
    "fail-open-no-policies": ["--set", "webhook.failurePolicy=Ignore", "--set", "networkPolicy.enabled=false",
                              "--set", "validatingAdmissionPolicy.enabled=false"],
    "install-values-port-443-eks": [
        "--set", "webhook.port=443", "--set", "topology.preset=eks", "--set", "fullnameOverride=gangs",
        "--set", "nameOverride=troupe-gangs", "--set-json", 'imagePullSecrets=[{"name":"regcred"}]',
        "--set", "webhook.podLabels.team=platform", "--set", "reconciler.podAnnotations.example\\.com/owner=platform",
        "--set-json", 'reconciler.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":'
                      '{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["system"]}]}]}}}',
        "--set-json", 'webhook.tolerations=[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]',
        "--set-json", 'reconciler.topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone",'
                      '"whenUnsatisfiable":"ScheduleAnyway"}]'],
    "managed-cluster-values": [
        "--set", "webhook.hostNetwork=true", "--set", "clusterDomain=corp.internal", "--set", "logLevel=warning",
        "--set", "certManager.enabled=true", "--set", "image.digest=sha256:" + "0123456789abcdef" * 4,
        "--set-json", 'extraEnv=[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]',
        "--set-json", 'reconciler.extraEnv=[{"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"p","key":"t"}}}]',
        "--set-json", 'webhook.extraArgs=["--max-connections=500"]',
        "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/troupe",
        "--set", "webhook.service.annotations.example\\.com/owner=platform"],
}


@pytest.mark.parametrize("values", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_object_the_chart_renders_is_accepted_by_the_api_server(
    cluster: Cluster, namespace: str, third_party_kinds: list[str], values: list[str]
) -> None:
    manifest = template(*values, release=RELEASE, namespace=namespace, binary=cluster.binaries.helm)
    objects = [o for o in yaml.safe_load_all(manifest) if o]

    applied = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-o", "yaml", "-f", "-",
                              input=manifest, check=False)

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


def test_the_manual_ca_bundle_reaches_the_api_server(cluster: Cluster, namespace: str) -> None:
    ca = base64.b64encode(certs.create_ca("chart-e2e-ca", days=1).cert_pem).decode()
    manifest = template("--set", "webhook.tls.selfManaged=false", "--set", f"webhook.tls.caBundle={ca}",
                        "--show-only", "templates/mutatingwebhook.yaml", release=RELEASE, namespace=namespace,
                        binary=cluster.binaries.helm)

    applied = cluster.kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", "-", input=manifest)

    hooks = yaml.safe_load(applied.stdout)["webhooks"]
    assert len(hooks) == 2
    assert all(hook["clientConfig"]["caBundle"] == ca for hook in hooks)


def test_strict_validation_of_the_third_party_kinds_refuses_a_field_they_do_not_have(
    cluster: Cluster, namespace: str, third_party_kinds: list[str]
) -> None:
    """The dry runs above can fail: a misspelt cert-manager field is refused by name."""
    manifest = template("--set", "certManager.enabled=true", "--show-only", "templates/certificates.yaml",
                        release=RELEASE, namespace=namespace, binary=cluster.binaries.helm)
    broken = manifest.replace("dnsNames:", "dnsName:")

    applied = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=broken, check=False)

    assert applied.returncode != 0 and 'unknown field "spec.dnsName"' in applied.stderr, applied.stderr


def notes(cluster: Cluster, namespace: str, *values: str) -> str:
    """``helm install --dry-run=server``'s output. ``--take-ownership``: the local control plane
    made the CRD at start with no Helm owner (as chart 0.1.0's crds/ left it)."""
    return helm("install", RELEASE, str(CHART), "--namespace", namespace, "--dry-run=server", "--take-ownership",
                *values, "--kubeconfig", str(cluster.kubeconfig("admin")), binary=cluster.binaries.helm)


def test_helm_installs_the_chart_on_the_cluster_as_a_server_dry_run_and_prints_its_notes(
    cluster: Cluster, namespace: str
) -> None:
    out = notes(cluster, namespace)

    assert "STATUS: pending-install" in out
    assert "Certificates: self-managed." in out
    assert f"{RELEASE}-webhook-ca" in out and f"{RELEASE}-webhook-tls" in out
    assert "troupe.io/gang-name: train" in out and 'troupe.io/gang-size: "8"' in out
    assert "kubectl troupe status" in out
    # This cluster's API server runs without its endpoint reconciler: there is no
    # `kubernetes` EndpointSlice to look up, so the NOTES say the webhook's port is open.
    assert "`kubernetes` EndpointSlice could not be looked up), so the webhook's port admits every source" in out


@pytest.mark.parametrize("kind", ["EndpointSlice", "Endpoints"])
def test_the_webhooks_network_policy_admits_the_api_servers_endpoints_looked_up_at_install(
    cluster: Cluster, namespace: str, kind: str
) -> None:
    """The API server's addresses from its ``kubernetes`` EndpointSlice, or from the v1
    Endpoints of that name on a cluster without the slice."""
    api = cluster.api_client("admin")
    if kind == "EndpointSlice":
        slices = client.DiscoveryV1Api(api)
        slices.create_namespaced_endpoint_slice("default", {
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["192.0.2.10"]}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]})
        remove = lambda: slices.delete_namespaced_endpoint_slice("kubernetes", "default")  # noqa: E731
    else:
        core = client.CoreV1Api(api)
        core.create_namespaced_endpoints("default", {
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"name": "https", "port": 6443}]}]})
        remove = lambda: core.delete_namespaced_endpoints("kubernetes", "default")  # noqa: E731
    try:
        out = notes(cluster, namespace)
    finally:
        remove()

    manifest = out[out.index("MANIFEST:") + len("MANIFEST:"):out.index("NOTES:")]
    [policy] = [doc for doc in yaml.safe_load_all(manifest)
                if doc and doc["kind"] == "NetworkPolicy" and doc["metadata"]["name"] == f"{RELEASE}-webhook"]
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "192.0.2.10/32"}}]
    assert "admits every source" not in out
    # A static policy does not follow the addresses: the NOTES say so, naming them (decision 050).
    said = " ".join(out[out.index("NOTES:"):].split())
    assert ("WARNING: the webhook's NetworkPolicy admits the API server's addresses as Helm found them now in the "
            "`kubernetes` EndpointSlice: 192.0.2.10/32. It does not follow them") in said


@pytest.mark.parametrize(("values", "said", "unsaid"), [
    (["--set", "certManager.enabled=true", "--set-json", 'networkPolicy.apiServer=[{"ipBlock":{"cidr":"10.0.0.0/28"}}]'],
     "Certificates: cert-manager.", "admits every source"),
    (["--set", "webhook.tls.selfManaged=false"], "WARNING: webhook.tls.caBundle is empty", "Certificates: self-managed"),
    (["--set", "webhook.hostNetwork=true"], "NOTE: webhook.hostNetwork is true: the webhook pods use the nodes' network",
     "admits every source"),
], ids=["cert-manager-narrow-policy", "manual-without-ca-bundle", "host-network"])
def test_the_notes_follow_the_options(cluster: Cluster, namespace: str, values: list[str], said: str,
                                      unsaid: str) -> None:
    out = notes(cluster, namespace, *values)

    assert said in out
    assert unsaid not in out
