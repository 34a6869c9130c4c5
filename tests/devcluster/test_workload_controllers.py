"""How the JobSet and LeaderWorkerSet controllers are built and registered, without building."""

from __future__ import annotations

import base64

from devtools.devcluster import build, workloads

MANIFESTS = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset}}
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-jobset}}
"""
POD_SELECTOR_PATCH = """\
- op: add
  path: /webhooks/1/objectSelector
  value: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
"""


def test_the_kustomize_patches_apply_to_the_configuration_of_their_kind():
    mutating, validating = workloads.patched_webhooks(MANIFESTS, {"MutatingWebhookConfiguration": POD_SELECTOR_PATCH})
    assert mutating["webhooks"][1]["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
    assert "objectSelector" not in mutating["webhooks"][0]
    assert "objectSelector" not in validating["webhooks"][0]


def test_registered_locally_each_webhook_calls_the_controllers_port_with_its_path_and_ca():
    docs = workloads.patched_webhooks(MANIFESTS, {})
    local = workloads.local_webhooks(docs, "jobset", "https://127.0.0.1:9443", b"PEM")
    assert [d["metadata"]["name"] for d in local] == ["jobset-mutating", "jobset-validating"]
    assert local[0]["webhooks"][1]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod",
                                                       "caBundle": base64.b64encode(b"PEM").decode()}
    assert docs[0]["webhooks"][1]["clientConfig"]["service"]["path"] == "/mutate--v1-pod", "the input is not changed"


def test_the_wrapper_module_requires_the_controller_at_its_pinned_version():
    assert workloads.wrapper_go_mod(workloads.JOBSET).splitlines()[-1] == "require sigs.k8s.io/jobset v0.10.1"
    assert workloads.wrapper_go_mod(workloads.LWS).splitlines()[-1] == "require sigs.k8s.io/lws v0.7.0"


def test_the_controllers_and_their_manifests_are_stamped_artifacts_of_the_cache(tmp_path):
    layout = build._layout(tmp_path)
    assert layout.jobset == tmp_path / "jobset-v0.10.1" / "bin" / "jobset"
    assert layout.lws_webhooks == tmp_path / "lws-v0.7.0" / "webhooks.yaml"
    assert layout.kubeflow_crds == tmp_path / "training-operator-v1.9.0" / "crds.yaml"
    stamped = dict(build._versions(layout))
    assert stamped[layout.jobset_crds] == "v0.10.1" and stamped[layout.lws] == "v0.7.0"
