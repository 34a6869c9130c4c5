"""How the JobSet and LeaderWorkerSet controllers are built and registered, without building."""

from __future__ import annotations

import base64
import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.devcluster import build, controllers, workloads

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
    mutating, validating = controllers.patched_webhooks(MANIFESTS, {"MutatingWebhookConfiguration": POD_SELECTOR_PATCH})
    assert mutating["webhooks"][1]["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
    assert "objectSelector" not in mutating["webhooks"][0]
    assert "objectSelector" not in validating["webhooks"][0]


def test_registered_locally_each_webhook_calls_the_controllers_port_with_its_path_and_ca():
    docs = controllers.patched_webhooks(MANIFESTS, {})
    local = workloads.local_webhooks(docs, "jobset", "https://127.0.0.1:9443", b"PEM")
    assert [d["metadata"]["name"] for d in local] == ["jobset-mutating", "jobset-validating"]
    assert local[0]["webhooks"][1]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod",
                                                       "caBundle": base64.b64encode(b"PEM").decode()}
    assert docs[0]["webhooks"][1]["clientConfig"]["service"]["path"] == "/mutate--v1-pod", "the input is not changed"


KUBERNETES_GO_MOD = """\
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


def test_the_controllers_module_is_the_kubernetes_graph_with_controller_runtime_and_the_ported_copies():
    lines = [line.strip() for line in controllers.controllers_go_mod(KUBERNETES_GO_MOD).splitlines()]
    assert lines[0] == "module troupe.local/workload-controllers"
    # The kube-* build's module graph, so the packages it compiled are reused from Go's cache.
    assert "require k8s.io/kubernetes v1.37.2" in lines
    assert "k8s.io/client-go => k8s.io/client-go v0.37.2" in lines
    assert "godebug default=go1.26" in lines
    assert "sigs.k8s.io/controller-runtime v0.24.1" in lines
    assert "sigs.k8s.io/jobset v0.10.1" in lines and "sigs.k8s.io/lws v0.7.0" in lines
    assert "replace sigs.k8s.io/jobset => ./modules/jobset" in lines
    assert "replace sigs.k8s.io/lws => ./modules/lws" in lines


SETUP_IN_THE_OLD_FORM = """\
package webhooks

func (p *podWebhook) SetupWebhookWithManager(mgr ctrl.Manager) error {
\treturn ctrl.NewWebhookManagedBy(mgr).
\t\tFor(&corev1.Pod{}).
\t\tWithDefaulter(p).
\t\tWithValidator(p).
\t\tComplete()
}
"""
VALIDATOR_ONLY = SETUP_IN_THE_OLD_FORM.replace("\t\tWithDefaulter(p).\n", "")


@pytest.fixture(scope="module")
def gofmt() -> str:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the Go toolchain is not on PATH")
    goroot = subprocess.run([go, "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    return str(Path(goroot) / "bin" / "gofmt")


def _module_with(tmp_path: Path, source: str) -> tuple[Path, controllers.Controller]:
    (tmp_path / "pkg" / "webhooks").mkdir(parents=True)
    (tmp_path / "pkg" / "webhooks" / "pod.go").write_text(source)
    return tmp_path, dataclasses.replace(controllers.JOBSET, webhook_setup_files=("pkg/webhooks/pod.go",))


def test_the_webhook_builder_chain_is_ported_to_the_typed_builder_of_controller_runtime_0_24(tmp_path, gofmt):
    module, controller = _module_with(tmp_path, SETUP_IN_THE_OLD_FORM)
    controllers.port_module(gofmt, module, controller)
    ported = "".join((module / "pkg" / "webhooks" / "pod.go").read_text().split())
    assert "ctrl.NewWebhookManagedBy(mgr,&corev1.Pod{}).WithCustomDefaulter(p).WithCustomValidator(p).Complete()" in ported


@pytest.mark.parametrize(
    ("case", "source", "listed", "error"),
    [
        ("a setup the rule does not match is named, not built half-ported", VALIDATOR_ONLY,
         "pkg/webhooks/pod.go", r"pkg/webhooks/pod\.go of sigs\.k8s\.io/jobset@v0\.10\.1 still calls NewWebhookManagedBy"),
        ("a listed file the module no longer has", SETUP_IN_THE_OLD_FORM,
         "pkg/webhooks/gone.go", r"sigs\.k8s\.io/jobset@v0\.10\.1 has no .*gone\.go to port"),
        ("a file that is not Go", "package webhooks\nfunc {", "pkg/webhooks/pod.go", r"gofmt -r could not port"),
    ],
)
def test_a_port_that_cannot_be_made_stops_the_build_naming_the_file(tmp_path, gofmt, case, source, listed, error):
    module, controller = _module_with(tmp_path, source)
    controller = dataclasses.replace(controller, webhook_setup_files=(listed,))
    with pytest.raises(build.BuildError, match=error):
        controllers.port_module(gofmt, module, controller)


def test_the_controllers_and_their_manifests_are_stamped_artifacts_of_the_cache(tmp_path):
    layout = build._layout(tmp_path)
    assert layout.jobset == tmp_path / "jobset-v0.10.1" / "bin" / "jobset"
    assert layout.lws_webhooks == tmp_path / "lws-v0.7.0" / "webhooks.yaml"
    assert layout.kubeflow_crds == tmp_path / "training-operator-v1.9.0" / "crds.yaml"
    stamped = dict(build._versions(layout))
    assert stamped[layout.jobset_crds] == "v0.10.1"
    assert stamped[layout.lws] == "v0.7.0 k8s.io/v0.37.2 controller-runtime/v0.24.1"
