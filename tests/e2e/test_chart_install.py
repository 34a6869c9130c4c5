"""``helm install`` for real on the local control plane, with self-managed certificates.

kwok fakes pods, so the chart's containers never run here. What runs for real instead is
what they would run: the reconciler process, started with the chart's own arguments and the
chart's ServiceAccount token (TokenRequest API), fills the certificate Secrets and the
caBundle; the webhook process serves the Secret's files, laid out and swapped the way the
kubelet updates a Secret volume (an atomic ``..data`` symlink swap). The API server then
calls that webhook by URL (a kube-apiserver outside a cluster network cannot reach a
Service's ClusterIP), so every admission in the rotation test is verified against the
caBundle the reconciler keeps.

The chart is installed with a 60 s serving certificate renewed 30 s before expiry and a
180 s CA, so that ~3 minutes see five serving certificates and a CA rotation.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from devtools.devcluster import Cluster
from devtools.devcluster.cluster import free_port
from devtools.devcluster.pki import write_kubeconfig
from devtools.devcluster.processes import Started, spawn, stop_all, tail
from tests.support.e2e import (
    admission_policies_settled,
    new_namespace,
    service_account_token,
    wait_for,
)
from tests.support.helm import CHART, helm
from troupe import contract

RELEASE = "troupe-install"
VALIDITY, RENEW_BEFORE, CA_VALIDITY = 60, 30, 180
SHORT = ["--set", f"webhook.tls.validitySeconds={VALIDITY}", "--set", f"webhook.tls.renewBeforeSeconds={RENEW_BEFORE}",
         "--set", f"webhook.tls.caValiditySeconds={CA_VALIDITY}"]
#: How long the rotation test keeps creating pods: a CA rotation (at ~120 s) and its settle.
ROTATION_SECONDS = 170


class SecretVolume:
    """A Secret's keys as files under ``directory``, kept up to date from a watch the way
    the kubelet's AtomicWriter does it: each version in a fresh ``..<n>`` directory, the
    ``..data`` symlink swapped to it with one rename, each key a symlink through ``..data``."""

    def __init__(self, core: client.CoreV1Api, namespace: str, name: str, directory: Path) -> None:
        self.core, self.namespace, self.name, self.directory = core, namespace, name, directory
        self.versions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"volume-{name}", daemon=True)

    def start(self) -> SecretVolume:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def write(self, data: dict[str, str]) -> None:
        self.versions += 1
        version = self.directory / f"..{self.versions}"
        version.mkdir()
        for key, value in data.items():
            (version / key).write_bytes(base64.b64decode(value))
        tmp = self.directory / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(version.name)
        os.replace(tmp, self.directory / "..data")
        for key in data:
            link = self.directory / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")

    def _run(self) -> None:
        seen = None
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.core.list_namespaced_secret, self.namespace,
                                           field_selector=f"metadata.name={self.name}", timeout_seconds=5):
                    data = event["object"].data or {}
                    if data and data != seen and {"tls.crt", "tls.key"} <= set(data):
                        self.write(data)
                        seen = data
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001  a dropped watch is resumed, as the kubelet would
                if self._stop.is_set():
                    return
            finally:
                stream.stop()


@dataclass
class Installed:
    """The release, and the processes started for it."""

    cluster: Cluster
    namespace: str
    objects: list[dict[str, Any]]
    config_file: Path
    reconciler_kubeconfig: Path
    workdir: Path
    started: list[Started] = field(default_factory=list)
    volume: SecretVolume | None = None
    webhook_port: int = 0

    def object(self, kind: str, name: str) -> dict[str, Any]:
        [found] = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    @property
    def service_dns(self) -> str:
        return f"{RELEASE}-webhook.{self.namespace}.svc"

    def reconciler_args(self) -> list[str]:
        [c] = self.object("Deployment", f"{RELEASE}-reconciler")["spec"]["template"]["spec"]["containers"]
        return list(c["args"])

    def spawn(self, name: str, argv: list[str]) -> Started:
        started = spawn(name, argv, self.workdir / f"{name}.log", die_with_parent=True)
        self.started.append(started)
        return started


def admin_api(cluster: Cluster) -> Any:
    return cluster.api_client("admin")


@pytest.fixture(scope="module")
def installed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """``helm install`` of the chart (short certificate timings), then the reconciler as the
    chart runs it (its args, its ConfigMap, its ServiceAccount's token) plus
    ``--webhook-cert-san=127.0.0.1`` so the API server can call the local webhook by URL."""
    api = admin_api(cluster)
    core = client.CoreV1Api(api)
    namespace = new_namespace(core, "troupe-chart")
    workdir = tmp_path_factory.mktemp("chart-install")
    admin = str(cluster.kubeconfig("admin"))
    # --take-ownership: the local control plane made the CRD at start, with no Helm owner, as
    # chart 0.1.0 (CRDs in crds/) or `kubectl apply -f charts/troupe/files/crds/` leave it.
    helm("install", RELEASE, str(CHART), "--namespace", namespace, "--kubeconfig", admin, *SHORT,
         "--take-ownership", binary=cluster.binaries.helm)
    try:
        manifest = helm("get", "manifest", RELEASE, "--namespace", namespace, "--kubeconfig", admin,
                        binary=cluster.binaries.helm)
        objects = [o for o in yaml.safe_load_all(manifest) if o]
        config_file = workdir / "config.yaml"
        config_file.write_text(next(o for o in objects if o["kind"] == "ConfigMap")["data"]["config.yaml"])
        token = service_account_token(core, namespace, f"{RELEASE}-reconciler")
        kubeconfig = write_kubeconfig(workdir / "reconciler.kubeconfig", cluster.server, cluster.ca_pem,
                                      f"{RELEASE}-reconciler", token)
        release = Installed(cluster, namespace, objects, config_file, kubeconfig, workdir)
        metrics = free_port()
        # The reservation key the kubelet would mount from the chart's Secret.
        key_dir = workdir / "reservation-key"
        key_dir.mkdir()
        (key_dir / "key").write_bytes(secret_data(core, namespace, f"{RELEASE}-reservation-key")["key"])
        _module, *args = [a.replace("/etc/troupe/reservation-key", str(key_dir)) for a in release.reconciler_args()]
        reconciler = release.spawn("reconciler", [
            sys.executable, "-m", "reconciler", *args, f"--kubeconfig={kubeconfig}", f"--config={config_file}",
            f"--metrics-bind=127.0.0.1:{metrics}", "--webhook-cert-san=127.0.0.1", "--log-format=text"])
        try:
            wait_for("the serving certificate in its Secret", lambda: secret_data(core, namespace, f"{RELEASE}-webhook-tls"),
                     timeout=90)
        except AssertionError as e:
            raise AssertionError(f"{e}\nreconciler log:\n{tail(reconciler.record.log)}") from e
        release.volume = SecretVolume(core, namespace, f"{RELEASE}-webhook-tls", workdir / "tls").start()
        wait_for("the Secret's files", lambda: (workdir / "tls" / "tls.crt").exists())
        release.webhook_port = free_port()
        webhook = release.spawn("webhook", [
            sys.executable, "-m", "webhook", "serve", "--tls-cert", str(workdir / "tls" / "tls.crt"),
            "--tls-key", str(workdir / "tls" / "tls.key"), "--bind", f"127.0.0.1:{release.webhook_port}",
            "--config", str(config_file), "--workers", "1", "--threads", "8"])
        try:
            wait_for("the webhook's /readyz", lambda: readyz(release), timeout=60)
        except AssertionError as e:
            raise AssertionError(f"{e}\nwebhook log:\n{tail(webhook.record.log)}") from e
        yield release
    finally:
        if "release" in locals():
            if release.volume is not None:
                release.volume.stop()
            stop_all([s.record for s in release.started], [s.popen for s in release.started])
            for s in release.started:
                with contextlib.suppress(OSError):
                    s.log_handle.close()
        helm("uninstall", RELEASE, "--namespace", namespace, "--kubeconfig", admin, binary=cluster.binaries.helm)
        core.delete_namespace(namespace, grace_period_seconds=0)
        admission_policies_settled(api)  # the next module on this cluster is judged without them


def secret_data(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, bytes]:
    data = core.read_namespaced_secret(name, namespace).data or {}
    return {k: base64.b64decode(v) for k, v in data.items()}


def ca_bundle(api: Any, name: str = RELEASE) -> bytes:
    config = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(name)
    bundles = {hook.client_config.ca_bundle or "" for hook in config.webhooks}
    assert len(bundles) == 1, "every webhook of the configuration has the same caBundle"
    return base64.b64decode(bundles.pop())


def readyz(release: Installed) -> bool:
    context = ssl.create_default_context(cadata=ca_bundle(admin_api(release.cluster)).decode())
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{release.webhook_port}/readyz", context=context,
                                    timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def served_certificate(port: int, ca_pem: bytes, server_name: str) -> x509.Certificate:
    """Handshake with the webhook as the API server would: trusting only ``ca_pem`` (the
    caBundle) and checking ``server_name``. Raises ``ssl.SSLError`` when it does not verify."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


# --- the install ----------------------------------------------------------------------------


def test_helm_install_makes_the_crd_the_components_and_the_reconciler_fills_the_certificates(
    installed: Installed
) -> None:
    api = admin_api(installed.cluster)
    ns = installed.namespace
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("shareddevicegroups.deviceshare.io")
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    assert {d.metadata.name for d in apps.list_namespaced_deployment(ns).items} == {
        f"{RELEASE}-webhook", f"{RELEASE}-reconciler"}
    assert f"{RELEASE}-webhook" in {s.metadata.name for s in core.list_namespaced_service(ns).items}
    admission = client.AdmissionregistrationV1Api(api)
    assert admission.read_validating_admission_policy(f"{RELEASE}-reconciler-pod-writes")
    assert {p.metadata.name for p in client.NetworkingV1Api(api).list_namespaced_network_policy(ns).items} == {
        f"{RELEASE}-webhook", f"{RELEASE}-reconciler"}

    tls = secret_data(core, ns, f"{RELEASE}-webhook-tls")
    ca = secret_data(core, ns, f"{RELEASE}-webhook-ca")
    bundle = ca_bundle(api)

    assert set(tls) == set(ca) == {"tls.crt", "tls.key", "ca.crt"}
    assert bundle == ca["ca.crt"] == tls["ca.crt"]
    served = served_certificate(installed.webhook_port, bundle, installed.service_dns)
    assert served == x509.load_pem_x509_certificate(tls["tls.crt"])
    stranger = x509.load_pem_x509_certificate(secret_data(core, ns, f"{RELEASE}-webhook-ca")["tls.crt"])
    assert stranger.subject != served.subject
    with pytest.raises(ssl.SSLCertVerificationError):  # the check can fail: another name does not verify
        served_certificate(installed.webhook_port, bundle, f"{RELEASE}-webhook.elsewhere.svc")
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={RELEASE}-webhook-tls").items
    assert any(e.reason == "CertificatesUpdated" for e in events)


def test_an_upgrade_keeps_the_reservation_key(installed: Installed) -> None:
    """The chart looks its reservation key up and renders it again on an upgrade: a new key
    would leave every reservation written under the old one holding nothing
    (docs/decisions/049-hostile-tenants-third-round.md)."""
    core = client.CoreV1Api(admin_api(installed.cluster))
    held = secret_data(core, installed.namespace, f"{RELEASE}-reservation-key")["key"]
    assert len(held) == 64
    manifest = helm("upgrade", RELEASE, str(CHART), "--namespace", installed.namespace, "--kubeconfig",
                    str(installed.cluster.kubeconfig("admin")), *SHORT, "--dry-run=server",
                    binary=installed.cluster.binaries.helm)
    rendered = [o for o in yaml.safe_load_all(manifest.partition("MANIFEST:")[2].partition("NOTES:")[0]) if o]
    secret = next(o for o in rendered if o["kind"] == "Secret" and o["metadata"]["name"] == f"{RELEASE}-reservation-key")
    assert base64.b64decode(secret["data"]["key"]) == held


# --- RBAC: kubectl auth can-i ---------------------------------------------------------------


def can_i_table(installed: Installed) -> list[tuple[str, str, bool]]:
    ns = installed.namespace
    reconciler = f"system:serviceaccount:{ns}:{RELEASE}-reconciler"
    webhook = f"system:serviceaccount:{ns}:{RELEASE}-webhook"
    return [
        # (identity, kubectl auth can-i arguments, wanted answer)
        (reconciler, f"get secrets/{RELEASE}-webhook-ca -n {ns}", True),
        (reconciler, f"patch secrets/{RELEASE}-webhook-tls -n {ns}", True),
        (reconciler, f"watch secrets/{RELEASE}-webhook-tls -n {ns}", True),
        (reconciler, f"patch mutatingwebhookconfigurations/{RELEASE}", True),
        (reconciler, f"create leases -n {ns}", True),
        (reconciler, f"update leases/{RELEASE}-reconciler -n {ns}", True),
        (reconciler, f"get configmaps/{RELEASE}-reconciler-state -n {ns}", True),
        (reconciler, f"patch configmaps/{RELEASE}-reconciler-state -n {ns}", True),
        (reconciler, "patch pods -n default", True),
        (reconciler, "patch pods --subresource=status -n default", True),
        (reconciler, "create pods --subresource=eviction -n default", True),
        (reconciler, "watch nodes", True),
        (reconciler, "list shareddevicegroups.deviceshare.io", True),
        (reconciler, "patch shareddevicegroups.deviceshare.io --subresource=status", True),
        # (kubectl can ask only about resources the server knows: not jobsets and the like here)
        (reconciler, f"get secrets/some-other-secret -n {ns}", False),
        (reconciler, f"get secrets/{RELEASE}-reservation-key -n {ns}", False),  # mounted, never read
        (reconciler, f"create secrets -n {ns}", False),
        (reconciler, f"delete secrets/{RELEASE}-webhook-ca -n {ns}", False),
        (reconciler, "get secrets -n kube-system", False),
        (reconciler, "list secrets -A", False),
        (reconciler, "create pods -n default", False),
        (reconciler, "patch mutatingwebhookconfigurations/some-other-webhook", False),
        (reconciler, "create mutatingwebhookconfigurations", False),
        (reconciler, f"delete mutatingwebhookconfigurations/{RELEASE}", False),
        (reconciler, "patch validatingadmissionpolicies", False),
        (reconciler, "create leases -n kube-system", False),
        (reconciler, f"update leases/some-other-lease -n {ns}", False),
        (reconciler, f"patch configmaps/{RELEASE}-config -n {ns}", False),
        (reconciler, f"get configmaps/{RELEASE}-config -n {ns}", False),
        (reconciler, "patch nodes --subresource=status", False),
        (webhook, f"get secrets/{RELEASE}-webhook-tls -n {ns}", False),
        (webhook, "list pods -A", False),
        (webhook, "create pods -n default", False),
    ]


def test_kubectl_auth_can_i_allows_what_each_service_account_needs_and_nothing_of_the_rest(
    installed: Installed
) -> None:
    rows = []
    for identity, query, want in can_i_table(installed):
        result = installed.cluster.kubectl("auth", "can-i", *query.split(), "--as", identity, check=False)
        got = result.stdout.strip() == "yes"
        verdict = "ok" if got == want else f"WRONG {result.stderr.strip()}"
        rows.append((identity.rsplit(":", 1)[1], query, "yes" if got else "no", verdict))
    width = max(len(q) for _, q, _, _ in rows)
    print("\nkubectl auth can-i --as system:serviceaccount:<ns>:<sa>")
    for sa, query, answer, verdict in rows:
        print(f"  {sa:<24} {query:<{width}}  {answer:<3}  {verdict}")
    assert [r for r in rows if r[3] != "ok"] == []


# --- the ValidatingAdmissionPolicy on the real API server -------------------------------------


def reconciler_core(installed: Installed) -> client.CoreV1Api:
    from kubernetes import config

    return client.CoreV1Api(config.new_client_from_config(config_file=str(installed.reconciler_kubeconfig)))


JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def gated_pod(installed: Installed) -> Iterator[dict[str, Any]]:
    """A pod the admin created with Troupe's gate and another component's, a user
    nodeSelector, a label and an annotation, in kube-system: a namespace no Troupe webhook of
    this session looks at (excludedNamespaces), so that only the admission policy judges the
    writes (the webhooks of other tests' reconcilers, of other identities, would refuse them)."""
    name = f"member-{uuid.uuid4().hex[:6]}"
    body = {
        "metadata": {"name": name, "labels": {"app": "train"}, "annotations": {"team": "vision"}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                 "schedulingGates": [{"name": "troupe.io/placement"}, {"name": "example.com/quota"}],
                 "nodeSelector": {"pool": "gpu"}},
    }
    core = client.CoreV1Api(admin_api(installed.cluster))
    yield dict(core.create_namespaced_pod("kube-system", body).to_dict())
    core.delete_namespaced_pod(name, "kube-system", grace_period_seconds=0)


RELEASE_PATCH = [
    {"op": "add", "path": "/metadata/annotations/reconciler.troupe.io~1node", "value": "gpu-b0-s0-h0"},
    {"op": "add", "path": "/metadata/annotations/reconciler.troupe.io~1released-at", "value": "2026-01-01T00:00:00Z"},
    {"op": "add", "path": "/spec/nodeSelector/kubernetes.io~1hostname", "value": "gpu-b0-s0-h0"},
    {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "example.com/quota"}]},
]


@pytest.mark.parametrize(("what", "patch", "refused_with"), [
    ("an allowed release: pin, reserved annotations, Troupe's gate removed", RELEASE_PATCH, None),
    ("a changed container image",
     [{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.k8s.io/pause:3.9"}],
     "may not change a pod's containers"),
    ("a new label", [{"op": "add", "path": "/metadata/labels/owned", "value": "yes"}],
     "may not change a pod's labels"),
    ("another component's gate removed", [{"op": "replace", "path": "/spec/schedulingGates",
                                            "value": [{"name": "troupe.io/placement"}]}],
     "may only remove Troupe's scheduling gates"),
    ("a user annotation changed", [{"op": "replace", "path": "/metadata/annotations/team", "value": "nlp"}],
     "may change only Troupe's reserved annotations"),
    ("a node selection other than the hostname", [{"op": "add", "path": "/spec/nodeSelector/zone", "value": "a"}],
     "may only add kubernetes.io/hostname"),
])
def test_the_admission_policy_lets_the_reconciler_release_and_refuses_anything_else(
    installed: Installed, gated_pod: dict[str, Any], what: str, patch: list[dict[str, Any]],
    refused_with: str | None,
) -> None:
    as_reconciler = reconciler_core(installed)
    namespace, member = gated_pod["metadata"]["namespace"], gated_pod["metadata"]["name"]

    try:
        as_reconciler.patch_namespaced_pod(member, namespace, patch, _content_type=JSON_PATCH)
    except ApiException as e:
        assert refused_with is not None, f"{what}: refused: {e.body}"
        assert e.status in (403, 422) and refused_with in json.loads(e.body)["message"], e.body
        return
    assert refused_with is None, f"{what}: was allowed"
    pod = client.CoreV1Api(admin_api(installed.cluster)).read_namespaced_pod(member, namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == ["example.com/quota"]


@pytest.mark.parametrize(("condition", "allowed"), [("troupe.io/Gang", True), ("DisruptionTarget", True),
                                                    ("Ready", False)])
def test_the_reconciler_may_set_only_its_own_pod_conditions(
    installed: Installed, gated_pod: dict[str, Any], condition: str, allowed: bool
) -> None:
    namespace, member = gated_pod["metadata"]["namespace"], gated_pod["metadata"]["name"]
    patch = {"status": {"conditions": [{"type": condition, "status": "True", "reason": "Test"}]}}

    try:
        reconciler_core(installed).patch_namespaced_pod_status(member, namespace, patch,
                                                               _content_type="application/strategic-merge-patch+json")
    except ApiException as e:
        assert not allowed and "may change only its own pod conditions" in e.body, e.body
        return
    assert allowed


def test_the_admission_policy_leaves_other_identities_alone(installed: Installed, gated_pod: dict[str, Any]) -> None:
    core = client.CoreV1Api(admin_api(installed.cluster))
    namespace, member = gated_pod["metadata"]["namespace"], gated_pod["metadata"]["name"]

    core.patch_namespaced_pod(member, namespace, [{"op": "add", "path": "/metadata/labels/owned", "value": "yes"}],
                              _content_type=JSON_PATCH)

    assert core.read_namespaced_pod(member, namespace).metadata.labels["owned"] == "yes"


def test_only_the_reconciler_writes_gang_objects(installed: Installed) -> None:
    from kubernetes import config

    group, version, plural = contract.GANG_API
    body = {"apiVersion": f"{group}/{version}", "kind": "Gang", "metadata": {"name": f"g-{uuid.uuid4().hex[:6]}"},
            "spec": {"gangName": "train"}}
    admin = client.CustomObjectsApi(admin_api(installed.cluster))
    with pytest.raises(ApiException) as refused:
        admin.create_namespaced_custom_object(group, version, installed.namespace, plural, body)
    assert refused.value.status in (403, 422), refused.value.body
    assert "written only by Troupe's reconciler" in json.loads(refused.value.body)["message"], refused.value.body

    reconciler = client.CustomObjectsApi(config.new_client_from_config(config_file=str(installed.reconciler_kubeconfig)))
    made = reconciler.create_namespaced_custom_object(group, version, installed.namespace, plural, body)
    name = made["metadata"]["name"]
    try:
        with pytest.raises(ApiException) as changed:
            admin.patch_namespaced_custom_object_status(group, version, installed.namespace, plural, name,
                                                        {"status": {"phase": "Released"}})
        assert changed.value.status in (403, 422), changed.value.body
        reconciler.patch_namespaced_custom_object_status(group, version, installed.namespace, plural, name,
                                                         {"status": {"phase": "Waiting"}})
    finally:
        admin.delete_namespaced_custom_object(group, version, installed.namespace, plural, name)


# --- rotation under load --------------------------------------------------------------------


def test_certificates_rotate_while_every_pod_creation_through_the_webhook_succeeds(
    installed: Installed, namespace: str
) -> None:
    api = admin_api(installed.cluster)
    admission = client.AdmissionregistrationV1Api(api)
    url = f"https://127.0.0.1:{installed.webhook_port}/mutate"
    admission.patch_mutating_webhook_configuration(RELEASE, [
        {"op": "replace", "path": "/webhooks/0/clientConfig", "value": {"url": url, "caBundle": base64.b64encode(
            ca_bundle(api)).decode()}}], _content_type=JSON_PATCH)
    core = client.CoreV1Api(api)
    pod = {"metadata": {"generateName": "rotation-", "annotations": {"troupe.io/gang-name": "rotation",
                                                                      "troupe.io/gang-size": "1"}},
           "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}

    def webhook_in_effect() -> bool:
        # Until the patched configuration reaches the API server's cache it still calls the
        # Service, which nothing routes to here: that refusal means "not yet", not a failure.
        try:
            created = core.create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException as e:
            if e.status == 500 and "failed calling webhook" in (e.body or ""):
                return False
            raise
        return any(g.name == "troupe.io/placement" for g in created.spec.scheduling_gates or [])

    wait_for("the API server calling the webhook by URL", webhook_in_effect, timeout=30)

    admissions = failures = probes = probe_failures = 0
    serving: set[int] = set()
    cas: set[bytes] = set()
    errors: list[str] = []
    end = time.monotonic() + ROTATION_SECONDS
    while time.monotonic() < end:
        # Through the API server: a dry-run create runs the whole admission chain, webhook included.
        try:
            created = core.create_namespaced_pod(namespace, pod, dry_run="All", _request_timeout=15)
            if not any(g.name == "troupe.io/placement" for g in created.spec.scheduling_gates or []):
                raise AssertionError("admitted without Troupe's gate")
            admissions += 1
        except (ApiException, AssertionError) as e:
            failures += 1
            errors.append(str(e)[:300])
        # A fresh handshake, as a new API server connection makes it, against the caBundle now.
        bundle = ca_bundle(api)
        cas.update(c.fingerprint(hashes.SHA256()) for c in x509.load_pem_x509_certificates(bundle))
        try:
            serving.add(served_certificate(installed.webhook_port, bundle, "127.0.0.1").serial_number)
            probes += 1
        except (ssl.SSLError, OSError) as e:
            probe_failures += 1
            errors.append(f"handshake: {e}")

    print(f"\nrotation: {admissions} admissions, {failures} failed; {probes} handshakes against the caBundle, "
          f"{probe_failures} failed; {len(serving)} serving certificates served, {len(cas)} CAs seen in the caBundle; "
          f"{installed.volume.versions if installed.volume else 0} Secret volume updates")
    assert failures == 0 and probe_failures == 0, errors[:5]
    assert len(serving) >= 4, "the serving certificate was not renewed as often as its validity requires"
    assert len(cas) >= 2, "the CA was not rotated"
