"""The chart values a platform engineer sets on a real cluster (imagePullSecrets, name
overrides, pod annotations and labels, affinity, nodeSelector, tolerations and
topologySpreadConstraints per component, a webhook port below 1024, a topology preset):
accepted by the schema and by ``helm lint --strict``, and rendered where Kubernetes reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, HelmFailed, helm, one, render
from troupe.config import load_config
from webhook.cli import parser as webhook_parser

PLATFORMS = Path(__file__).resolve().parents[2] / "docs" / "guide" / "platforms.md"

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

COMPONENTS = ("webhook", "reconciler")
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "node-role.example.com/system", "operator": "Exists"}]}]}}}
TOLERATIONS = [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}]
SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "troupe"}}}]


def component_values(component: str) -> dict[str, Any]:
    """Every pod-placement value of one component, each distinct from the others'."""
    return {
        "podAnnotations": {"example.com/owner": f"{component}-team"},
        "podLabels": {"team": f"{component}-team"},
        "affinity": AFFINITY,
        "nodeSelector": {"pool": f"{component}-pool"},
        "tolerations": TOLERATIONS,
        "topologySpreadConstraints": SPREAD,
    }


def every_value(tmp_path: Path) -> Path:
    values = {"imagePullSecrets": [{"name": "regcred"}], "fullnameOverride": "gangs", "nameOverride": "troupe-gangs",
              **{c: component_values(c) for c in COMPONENTS}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def pod(objects: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    return dict(one(objects, "Deployment", deployment)["spec"]["template"])


def test_helm_lint_strict_passes_with_every_install_value(tmp_path: Path) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", str(every_value(tmp_path)), "--set", "webhook.port=443",
               "--set", "topology.preset=eks")

    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_components_pod_values_reach_its_pod_spec(tmp_path: Path, component: str) -> None:
    objects = render("-f", str(every_value(tmp_path)))

    template = pod(objects, f"gangs-{component}")

    want = component_values(component)
    spec, metadata = template["spec"], template["metadata"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert (spec["affinity"], spec["nodeSelector"], spec["tolerations"]) == (
        want["affinity"], want["nodeSelector"], want["tolerations"])
    assert spec["topologySpreadConstraints"] == SPREAD
    assert metadata["labels"]["team"] == f"{component}-team"
    assert metadata["annotations"]["example.com/owner"] == f"{component}-team"
    assert "checksum/config" in metadata["annotations"], "the chart's own annotation stays"


def test_name_overrides_rename_every_object_and_keep_selectors_matching(tmp_path: Path) -> None:
    objects = render("-f", str(every_value(tmp_path)))

    named = [o for o in objects if o["kind"] != "CustomResourceDefinition"]  # its name is its group's
    assert all(o["metadata"]["name"].startswith("gangs") for o in named), [o["metadata"]["name"] for o in named]
    for o in objects:
        assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "troupe-gangs", o["kind"]
    service = one(objects, "Service", "gangs-webhook")
    webhook = one(objects, "Deployment", "gangs-webhook")
    assert service["spec"]["selector"] == webhook["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= webhook["spec"]["template"]["metadata"]["labels"].items()
    hooks = one(objects, "MutatingWebhookConfiguration", "gangs")["webhooks"]
    assert {h["clientConfig"]["service"]["name"] for h in hooks} == {"gangs-webhook"}
    config = yaml.safe_load(one(objects, "ConfigMap", "gangs-config")["data"]["config.yaml"])
    assert config["reconcilerUsername"] == f"system:serviceaccount:{NAMESPACE}:gangs-reconciler"
    [reconciler] = pod(objects, "gangs-reconciler")["spec"]["containers"]
    assert "--webhook-configuration=gangs" in reconciler["args"]


def test_a_pod_label_may_not_replace_a_selector_label() -> None:
    with pytest.raises(HelmFailed, match=r"webhook.podLabels: app.kubernetes.io/component is a selector label"):
        render("--set", "webhook.podLabels.app\\.kubernetes\\.io/component=other")


# --- the webhook on port 443 ------------------------------------------------------------------


def test_the_webhook_port_may_be_443_and_the_pod_lets_its_non_root_user_bind_it() -> None:
    objects = render("--set", "webhook.port=443")
    template = pod(objects, "troupe-webhook")
    [container] = template["spec"]["containers"]
    _module, *args = container["args"]

    parsed = webhook_parser().parse_args(args)

    assert parsed.bind == "0.0.0.0:443"
    assert [p["containerPort"] for p in container["ports"] if p["name"] == "https"] == [443]
    context = template["spec"]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
    assert context["sysctls"] == [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "443"}]
    assert "sysctls" not in pod(objects, "troupe-reconciler")["spec"]["securityContext"]
    assert "sysctls" not in pod(render(), "troupe-webhook")["spec"]["securityContext"], "only below 1024"


# --- topology presets -----------------------------------------------------------------------

PRESETS = {
    "gke": (("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
             "cloud.google.com/gce-topology-host"),
            ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host")),
    "eks": (("topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
             "topology.k8s.aws/network-node-layer-3"), ()),
    "nvlink": (("nvidia.com/gpu.clique",), ()),
    "zone": (("topology.kubernetes.io/zone",), ()),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_topology_preset_renders_a_configuration_the_loader_accepts(tmp_path: Path, preset: str) -> None:
    objects = render("--set", f"topology.preset={preset}")
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", "troupe-config")["data"]["config.yaml"])

    config = load_config(str(path))

    assert (config.topology_levels, config.topology_fallback_levels) == PRESETS[preset]


def test_the_custom_preset_keeps_the_configurations_own_levels(tmp_path: Path) -> None:
    objects = render("--set", "topology.preset=custom", "--set-json", 'config.topologyLevels=["example.com/pod"]',
                     "--set-json", "config.topologyFallbackLevels=[]")
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", "troupe-config")["data"]["config.yaml"])

    assert load_config(str(path)).topology_levels == ("example.com/pod",)


def test_a_preset_with_levels_of_ones_own_is_refused_naming_custom() -> None:
    with pytest.raises(HelmFailed, match=r"set topology\.preset=custom to give your own"):
        render("--set", "topology.preset=eks", "--set-json", 'config.topologyLevels=["example.com/pod"]')


def test_the_platform_guide_lists_every_preset_and_each_platforms_values_render_a_valid_configuration(
    tmp_path: Path
) -> None:
    guide = PLATFORMS.read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    blocks = re.findall(r"```yaml\n# (values-[a-z]+\.yaml)\n(.*?)```", guide, flags=re.S)

    presets = schema["properties"]["topology"]["properties"]["preset"]["enum"]
    assert re.findall(r"^\| `([a-z]+)` \|", guide, flags=re.M) == [*presets[1:], presets[0]]
    assert [name for name, _ in blocks] == ["values-gke.yaml", "values-eks.yaml", "values-aks.yaml",
                                            "values-kubeadm.yaml"]
    for name, text in blocks:
        values = tmp_path / name
        values.write_text(text)
        assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), "-f", str(values))
        path = tmp_path / "config.yaml"
        path.write_text(one(render("-f", str(values)), "ConfigMap", "troupe-config")["data"]["config.yaml"])
        preset = yaml.safe_load(text)["topology"]["preset"]
        assert load_config(str(path)).topology_levels == (
            PRESETS[preset][0] if preset != "custom" else tuple(yaml.safe_load(text)["config"]["topologyLevels"]))


# --- the CRD is a template, so that an upgrade carries it -------------------------------------


def test_the_chart_renders_each_crd_of_files_crds_kept_on_uninstall_and_ships_no_crds_directory() -> None:
    files = sorted((CHART / "files" / "crds").glob("*.yaml"))

    rendered = [o for o in render() if o["kind"] == "CustomResourceDefinition"]

    assert not (CHART / "crds").exists(), "Helm installs crds/ once and never upgrades it"
    assert [o["metadata"]["name"] for o in rendered] == [yaml.safe_load(f.read_text())["metadata"]["name"] for f in files]
    for crd, path in zip(rendered, files, strict=True):
        assert crd["spec"] == yaml.safe_load(path.read_text())["spec"]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert not [o for o in render("--set", "crds.install=false") if o["kind"] == "CustomResourceDefinition"]


def test_the_values_file_lists_every_install_value_with_its_default_which_sets_nothing() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    objects = render()
    schema = json.loads((CHART / "values.schema.json").read_text())

    assert (values["imagePullSecrets"], values["fullnameOverride"], values["nameOverride"]) == ([], "", "")
    assert values["topology"] == {"preset": "custom"}
    for component in COMPONENTS:
        listed = {k: values[component][k] for k in component_values(component)}
        assert listed == {"podAnnotations": {}, "podLabels": {}, "affinity": {}, "nodeSelector": {},
                          "tolerations": [], "topologySpreadConstraints": []}
        assert set(listed) <= set(schema["properties"][component]["properties"])
    webhook, reconciler = (pod(objects, f"troupe-{c}")["spec"] for c in COMPONENTS)
    for spec in (webhook, reconciler):
        assert not {"imagePullSecrets", "affinity", "nodeSelector", "tolerations"} & set(spec)
    assert [c["topologyKey"] for c in webhook["topologySpreadConstraints"]] == ["kubernetes.io/hostname"]
    assert "topologySpreadConstraints" not in reconciler
