"""How Kueue is built, configured and registered on the local cluster, without building."""

from __future__ import annotations

import base64

import pytest
import yaml

from devtools.devcluster import kueue, quota
from devtools.devcluster.toolchain import BuildError

MANIFESTS = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mclusterqueue.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}}
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [clusterqueues]}]
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [jobs]}]
- name: vdeployment.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
"""


def test_only_kueues_own_kinds_and_jobs_are_registered_the_jobs_for_managed_namespaces_only():
    docs = [d for d in yaml.safe_load_all(MANIFESTS) if d]
    mutating, validating = quota.registered_webhooks(docs, "https://127.0.0.1:9443", b"PEM")
    assert [h["name"] for h in mutating["webhooks"]] == ["mclusterqueue.kb.io", "mjob.kb.io"]
    assert [h["name"] for h in validating["webhooks"]] == ["vjob.kb.io"], "no pod, Deployment... webhook"
    job = mutating["webhooks"][1]
    assert job["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job",
                                   "caBundle": base64.b64encode(b"PEM").decode()}
    assert job["namespaceSelector"] == {"matchLabels": {quota.MANAGED_NAMESPACE_LABEL: "true"}}
    assert "namespaceSelector" not in mutating["webhooks"][0], "ClusterQueues are cluster-scoped"
    assert [d["metadata"]["name"] for d in (mutating, validating)] == ["kueue-mutating", "kueue-validating"]


def test_manifests_without_a_job_webhook_stop_the_start_naming_why():
    docs = [d for d in yaml.safe_load_all(MANIFESTS) if d]
    for doc in docs:
        doc["webhooks"] = [h for h in doc["webhooks"] if "job" not in h["name"]]
    with pytest.raises(ValueError, match="no webhook for batch/v1 Jobs"):
        quota.registered_webhooks(docs, "https://127.0.0.1:9443", b"PEM")


def test_the_configuration_is_quota_only_bound_to_loopback_with_waiting_for_pods_ready():
    config = quota.configuration(9443, 8081, "/certs")
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["featureGates"]["TopologyAwareScheduling"] is False, "Troupe places: one placer per pod"
    assert config["featureGates"]["VisibilityOnDemand"] is False, "no fixed port"
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": "/certs"}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:8081"}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["waitForPodsReady"]["timeout"] == quota.PODS_READY_TIMEOUT
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": {quota.MANAGED_NAMESPACE_LABEL: "true"}}


MAIN_GO = """\
func main() {
\tif cfg.InternalCertManagement == nil || !*cfg.InternalCertManagement.Enable {
\t\tmetricsCertPath := "/etc/kueue/metrics/certs"
\t}
}
"""


def test_the_metrics_certificate_directory_is_patched_to_come_from_the_environment(tmp_path):
    (tmp_path / "cmd" / "kueue").mkdir(parents=True)
    main = tmp_path / "cmd" / "kueue" / "main.go"
    main.write_text(MAIN_GO)
    kueue.patch_metrics_cert_dir(tmp_path)
    assert 'if dir := os.Getenv("KUEUE_METRICS_CERT_DIR"); dir != "" { metricsCertPath = dir }' in main.read_text()
    main.write_text(MAIN_GO.replace("/etc/kueue/metrics/certs", "/etc/kueue/certs"))  # a release that moved it
    with pytest.raises(BuildError, match=r"main\.go of sigs\.k8s\.io/kueue@v0\.19\.2 does not hold"):
        kueue.patch_metrics_cert_dir(tmp_path)


def test_kueue_and_its_manifests_are_stamped_artifacts_of_the_cache(tmp_path):
    paths = kueue.kueue_paths(tmp_path)
    assert paths.binary == tmp_path / "kueue-v0.19.2" / "bin" / "kueue"
    assert paths.crds == tmp_path / "kueue-v0.19.2" / "crds.yaml"
    assert dict(kueue.versions(paths))[paths.binary] == "v0.19.2 +KUEUE_METRICS_CERT_DIR", "the patch rebuilds it"
    assert kueue.built_kueue(tmp_path) is None
    for path, version in kueue.versions(paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        path.with_name(path.name + ".stamp").write_text(version + "\n")
    assert kueue.built_kueue(tmp_path) == paths, "warm: found without building"
    assert kueue.ensure_kueue(tmp_path) == paths
