"""The Gang object's health as GitOps tools read it, on the sample Gangs of ``gangs/``:

- Argo CD: the shipped Lua health check run as Argo CD runs one (gopher-lua, Lua 5.1, only
  the package, base and table libraries: ``gangcheck argocd-health``), against the cases of
  ``argocd/health_test.yaml`` (Argo CD's own test form), and installed by the guide as shipped;
- kstatus (Flux, kpt): ``status.Compute`` of sigs.k8s.io/cli-utils (``gangcheck kstatus``);
- Flux's CEL health checks: the guide's ``healthCheckExprs`` evaluated by cel-python in the
  order Flux's RFC 0009 evaluates them (inProgress, failed, current; else InProgress);
- kube-state-metrics: the guide's values for its chart hold the shipped config.

``gangcheck`` (tests/ecosystem/gangcheck) is built once into the cache
(devtools/devcluster/ecosystem.py); the end-to-end run of kube-state-metrics is
tests/e2e/test_gang_metrics.py.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from devtools.devcluster.ecosystem import ensure_gangcheck

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GANGS = HERE / "gangs"
SCRIPT = REPO / "charts" / "troupe" / "files" / "health" / "argocd-gang.lua"
KSM_CONFIG = REPO / "charts" / "troupe" / "files" / "kube-state-metrics-gangs.yaml"
ARGOCD_CASES = HERE / "argocd" / "health_test.yaml"
GUIDE = REPO / "docs" / "guide" / "gitops.md"

SAMPLES = sorted(p.stem for p in GANGS.glob("*.yaml"))
#: What kstatus makes of each sample, as the reconciler writes its conditions today.
KSTATUS = {"waiting": "InProgress", "unschedulable": "InProgress", "preempting": "InProgress",
           "binding": "InProgress", "running": "Current", "min-size-running": "Current",
           "no-status": "Current", "empty-status": "Current", "held": "Failed"}
#: What Flux makes of each sample with the guide's healthCheckExprs.
FLUX_CEL = {"held": "Failed", "running": "Current", "min-size-running": "Current"}
@pytest.fixture(scope="module")
def gangcheck() -> Path:
    return ensure_gangcheck()


def run_gangcheck(binary: Path, *args: str | Path) -> dict[str, dict[str, str]]:
    """gangcheck's verdicts, by the file's stem."""
    result = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    return {Path(v["file"]).stem: v for v in verdicts}


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((GANGS / f"{name}.yaml").read_text())
    return loaded


def guide_documents() -> list[Any]:
    """Every YAML document of the guide's ```yaml blocks."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", GUIDE.read_text(), flags=re.M | re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block)]


def test_the_samples_are_gangs_of_the_crd() -> None:
    crd = yaml.safe_load((REPO / "charts" / "troupe" / "files" / "crds" / "gangs.yaml").read_text())
    [version] = crd["spec"]["versions"]
    phases = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"]

    assert len(SAMPLES) >= 8
    for name in SAMPLES:
        gang = sample(name)
        assert gang["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
        assert gang["kind"] == crd["spec"]["names"]["kind"]
        if gang.get("status"):
            assert gang["status"]["phase"] in phases
            assert [c["type"] for c in gang["status"]["conditions"]] == [
                "Waiting", "Released", "Bound", "Reconciling", "Stalled"]


# --- Argo CD ------------------------------------------------------------------------------


def argocd_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = yaml.safe_load(ARGOCD_CASES.read_text())["tests"]
    return cases


def test_the_argocd_cases_cover_every_sample_and_every_health() -> None:
    cases = argocd_cases()

    assert sorted(Path(c["inputPath"]).stem for c in cases) == SAMPLES
    assert {c["healthStatus"]["status"] for c in cases} == {"Healthy", "Progressing", "Degraded"}


@pytest.mark.parametrize("case", argocd_cases(), ids=lambda c: Path(c["inputPath"]).stem)
def test_argocd_health_of_each_sample_gang(gangcheck: Path, case: dict[str, Any]) -> None:
    path = (ARGOCD_CASES.parent / case["inputPath"]).resolve()

    [verdict] = run_gangcheck(gangcheck, "argocd-health", SCRIPT, path).values()

    assert {"status": verdict["status"], "message": verdict["message"]} == case["healthStatus"]


def test_the_check_runs_without_the_libraries_argo_cd_leaves_out(gangcheck: Path, tmp_path: Path) -> None:
    using_string = tmp_path / "health.lua"
    using_string.write_text('return {status = string.upper("healthy")}\n')

    result = subprocess.run([str(gangcheck), "argocd-health", str(using_string), str(GANGS / "running.yaml")],
                            capture_output=True, text=True, timeout=60, check=False)

    assert result.returncode != 0 and "string" in result.stderr
    assert "string." not in SCRIPT.read_text().replace("-- ", "")


def test_the_guide_installs_the_script_as_shipped() -> None:
    [argocd_cm] = [d for d in guide_documents() if isinstance(d, dict) and d.get("kind") == "ConfigMap"]

    assert argocd_cm["metadata"]["name"] == "argocd-cm"
    assert argocd_cm["data"] == {"resource.customizations.health.troupe.io_Gang": SCRIPT.read_text()}


# --- kstatus ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_kstatus_reads_each_sample_gang(gangcheck: Path, name: str) -> None:
    verdicts = run_gangcheck(gangcheck, "kstatus", GANGS / f"{name}.yaml")

    assert verdicts[name]["status"] == KSTATUS[name]


def test_kstatus_fails_a_held_gang_once_stalled_comes_first_or_reconciling_is_false(
        gangcheck: Path, tmp_path: Path) -> None:
    held = sample("held")
    stalled_first, reconciling_false = copy.deepcopy(held), copy.deepcopy(held)
    conditions = stalled_first["status"]["conditions"]
    conditions.insert(0, conditions.pop())
    for c in reconciling_false["status"]["conditions"]:
        if c["type"] == "Reconciling":
            c["status"] = "False"
    for name, gang in (("stalled-first", stalled_first), ("reconciling-false", reconciling_false)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(gang))

    verdicts = run_gangcheck(gangcheck, "kstatus", tmp_path / "stalled-first.yaml", tmp_path / "reconciling-false.yaml")

    assert {n: v["status"] for n, v in verdicts.items()} == {"stalled-first": "Failed", "reconciling-false": "Failed"}
    assert verdicts["stalled-first"]["message"] == held["status"]["message"]


# --- Flux's CEL health checks -------------------------------------------------------------


def flux_expressions() -> dict[str, str]:
    [kustomization] = [d for d in guide_documents() if isinstance(d, dict) and d.get("kind") == "Kustomization"]
    [gang_check] = kustomization["spec"]["healthChecks"]
    [exprs] = kustomization["spec"]["healthCheckExprs"]
    assert (gang_check["apiVersion"], gang_check["kind"]) == (exprs["apiVersion"], exprs["kind"]) == (
        "troupe.io/v1alpha1", "Gang")
    assert "wait" not in kustomization["spec"]
    return {k: v for k, v in exprs.items() if k in ("inProgress", "failed", "current")}


def flux_status(expressions: dict[str, str], obj: dict[str, Any]) -> str:
    """The status Flux's CEL status reader gives ``obj``: its top-level fields are the
    variables; inProgress, failed, current in that order, the first that holds; else InProgress."""
    env = celpy.Environment()
    activation = {k: celpy.json_to_cel(v) for k, v in obj.items()}
    for field, status in (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current")):
        if field in expressions and env.program(env.compile(expressions[field])).evaluate(activation):
            return status
    return "InProgress"


@pytest.mark.parametrize("name", SAMPLES)
def test_flux_cel_health_of_each_sample_gang(name: str) -> None:
    assert flux_status(flux_expressions(), sample(name)) == FLUX_CEL.get(name, "InProgress")


def test_flux_cel_fails_a_held_gang_whatever_the_order_of_its_conditions() -> None:
    held = sample("held")
    held["status"]["conditions"].reverse()

    assert flux_status(flux_expressions(), held) == "Failed"


# --- kube-state-metrics -------------------------------------------------------------------


def test_the_guides_kube_state_metrics_values_hold_the_shipped_config() -> None:
    [values] = [d for d in guide_documents() if isinstance(d, dict) and "customResourceState" in d]

    assert values["customResourceState"] == {"enabled": True, "config": yaml.safe_load(KSM_CONFIG.read_text())}
    assert {"apiGroups": ["troupe.io"], "resources": ["gangs"], "verbs": ["list", "watch"]} in values["rbac"][
        "extraRules"]
