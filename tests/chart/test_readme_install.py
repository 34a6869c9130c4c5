"""The README's "Install on a cluster", rendered by the real helm: its GKE values file and
every ``--set`` of the section are accepted by the chart's schema (``helm lint --strict``)
and reach the objects Kubernetes reads (the preset's topology levels in the configuration,
the webhook port in the pod, the control plane's range and the konnectivity agents in the
webhook's NetworkPolicy), its firewall rule opens that port, and its install commands name
the chart the release workflow publishes, at the chart's version, in the namespace the later
steps use."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, RELEASE, helm, one, render
from troupe.config import load_config

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
RELEASE_WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
VALUES_NAME = "values-gke.yaml"

#: The levels of the chart's `gke` preset, and the older set (docs/guide/platforms.md).
GKE_LEVELS = (("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
               "cloud.google.com/gce-topology-host"),
              ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host"))

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)


def section() -> str:
    """The text of "## Install on a cluster", up to the next section."""
    match = re.search(r"^## Install on a cluster\n(.*?)(?=^## )", README.read_text(), flags=re.M | re.S)
    assert match, "README.md has no section '## Install on a cluster'"
    return match.group(1)


def gke_values_text() -> str:
    """The fenced yaml block whose first line is ``# values-gke.yaml``, its list-item indent removed."""
    match = re.search(r"^( *)```yaml\n\1# values-gke\.yaml\n(.*?)^\1```", section(), flags=re.M | re.S)
    assert match, "the install section has no ```yaml block starting with '# values-gke.yaml'"
    indent = match.group(1)
    return "".join(line.removeprefix(indent) + "\n" for line in match.group(2).splitlines())


def gke_values() -> dict[str, Any]:
    values = yaml.safe_load(gke_values_text())
    assert isinstance(values, dict)
    return values


def write_values(tmp_path: Path) -> Path:
    path = tmp_path / VALUES_NAME
    path.write_text(gke_values_text())
    return path


def shell_commands() -> list[list[str]]:
    """Every command of the section's ```sh blocks, continuation lines joined, split as the shell does."""
    commands = []
    for block in re.findall(r"^ *```sh\n(.*?)^ *```", section(), flags=re.M | re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def install_commands() -> list[list[str]]:
    """The section's ``helm upgrade --install`` and ``helm install`` commands."""
    return [words for words in shell_commands() if words[:2] in (["helm", "install"], ["helm", "upgrade"])]


def chart_of(words: list[str]) -> str:
    """The chart argument of a ``helm upgrade --install RELEASE CHART`` command."""
    return words[words.index("--install") + 2] if "--install" in words else words[3]


def set_flags() -> list[tuple[str, str]]:
    """Every ``--set KEY=VALUE`` of the section, in its commands and in its prose."""
    return re.findall(r"--set[ =]([A-Za-z0-9_.]+)=([^\s`'\"]+)", section())


def flag_values(words: list[str], *names: str) -> list[str]:
    """The argument of every ``NAME ARG`` (or ``NAME=ARG``) among ``words``, for any of ``names``."""
    found = []
    for i, word in enumerate(words):
        for name in names:
            if word == name:
                found.append(words[i + 1])
            elif word.startswith(name + "="):
                found.append(word.split("=", 1)[1])
    return found


def chart_metadata() -> dict[str, Any]:
    metadata = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert isinstance(metadata, dict)
    return metadata


def pod_spec(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return dict(one(objects, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"])


def webhook_port(objects: list[dict[str, Any]]) -> int:
    [container] = pod_spec(objects, "webhook")["containers"]
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == "https"]
    return int(port)


def topology_levels(objects: list[dict[str, Any]], tmp_path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The levels of the rendered configuration, as the loader both components use reads them."""
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    config = load_config(str(path))
    return config.topology_levels, config.topology_fallback_levels


# --- the values file ----------------------------------------------------------------------------


def test_the_gke_values_file_passes_helm_lint_strict(tmp_path: Path) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", str(write_values(tmp_path)))

    assert "0 chart(s) failed" in out


def test_the_gke_values_reach_the_configuration_the_webhook_and_its_network_policy(tmp_path: Path) -> None:
    values = gke_values()

    objects = render("-f", str(write_values(tmp_path)))

    assert values["topology"] == {"preset": "gke"}
    assert topology_levels(objects, tmp_path) == GKE_LEVELS
    port = values["webhook"]["port"]
    [container] = pod_spec(objects, "webhook")["containers"]
    assert webhook_port(objects) == port
    assert f"--bind=0.0.0.0:{port}" in container["args"]
    [admission] = [rule for rule in one(objects, "NetworkPolicy", f"{RELEASE}-webhook")["spec"]["ingress"]
                   if rule["ports"] == [{"port": "https", "protocol": "TCP"}]]
    policy = values["networkPolicy"]
    assert policy["apiServerCIDRs"], "the worked example names the control plane's range"
    assert admission["from"] == [*policy["apiServer"], *({"ipBlock": {"cidr": c}} for c in policy["apiServerCIDRs"])]


def test_the_firewall_rule_admits_the_webhook_port_of_the_values_file() -> None:
    port = gke_values()["webhook"]["port"]

    rules = [words for words in shell_commands() if words[:4] == ["gcloud", "compute", "firewall-rules", "create"]]

    assert rules, "the install section creates no firewall rule"
    for words in rules:
        assert flag_values(words, "--rules") == [f"tcp:{port}"], words
        assert flag_values(words, "--direction") == ["INGRESS"], words


# --- every --set of the section -------------------------------------------------------------------


def test_every_set_of_the_section_is_accepted_with_the_values_file_and_reaches_the_objects(tmp_path: Path) -> None:
    values = write_values(tmp_path)
    sets = set_flags()

    assert ("webhook.port", "443") in sets, "the section offers port 443 instead of a firewall rule"
    for key, value in sets:
        flags = ["-f", str(values), "--set", f"{key}={value}"]
        assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), *flags), key

        objects = render(*flags)

        if key == "webhook.port":
            assert webhook_port(objects) == int(value)
            sysctls = pod_spec(objects, "webhook")["securityContext"].get("sysctls", [])
            lowered = {"name": "net.ipv4.ip_unprivileged_port_start", "value": value} in sysctls
            assert lowered == (int(value) < 1024), sysctls
        elif key == "image.repository":
            for component in ("webhook", "reconciler"):
                [container] = pod_spec(objects, component)["containers"]
                assert container["image"] == f"{value}:{chart_metadata()['appVersion']}"
        else:
            assert value in yaml.safe_dump_all(objects), f"--set {key}={value} shows nowhere in the rendered objects"


# --- the install commands -------------------------------------------------------------------------


def test_the_install_commands_name_the_published_chart_and_the_checkouts_at_the_chart_version() -> None:
    default_image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    owner = re.fullmatch(r"ghcr\.io/([a-z0-9-]+)/troupe", default_image)
    workflow = RELEASE_WORKFLOW.read_text()

    commands = install_commands()

    assert owner, f"the chart's default image is not ghcr.io/<owner>/troupe: {default_image}"
    assert "images: ghcr.io/${{ github.repository_owner }}/troupe" in workflow
    assert '"oci://ghcr.io/${OWNER,,}/charts"' in workflow
    assert sorted(chart_of(words) for words in commands) == sorted(
        [f"oci://ghcr.io/{owner.group(1)}/charts/troupe", "charts/troupe"])
    for words in commands:
        assert words[words.index(chart_of(words)) - 1] == RELEASE, words
        assert flag_values(words, "-n", "--namespace") == [NAMESPACE], words
        assert "--create-namespace" in words, words
        assert flag_values(words, "-f", "--values") == [VALUES_NAME], words
        if chart_of(words).startswith("oci://"):
            assert flag_values(words, "--version") == [chart_metadata()["version"]], words
    text = section()
    assert f"ghcr.io/{owner.group(1)}/troupe" in text
    assert f"kubectl -n {NAMESPACE} get pods" in text
    assert f"helm uninstall {RELEASE} -n {NAMESPACE}" in text


def test_each_install_command_renders_with_its_own_values_and_sets(tmp_path: Path) -> None:
    write_values(tmp_path)

    for words in install_commands():
        flags = [f for name in flag_values(words, "-f", "--values") for f in ("-f", str(tmp_path / name))]
        flags += [f for assignment in flag_values(words, "--set") for f in ("--set", assignment)]
        assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), *flags), words

        objects = render(*flags)

        assert topology_levels(objects, tmp_path) == GKE_LEVELS, words
