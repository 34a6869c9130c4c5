"""The chart's alerting rules (templates/prometheusrule.yaml): rendered only when asked and
when the cluster serves PrometheusRule (or ``force``), valid for Prometheus (``promtool check
rules``), firing when they should (``promtool test rules`` with tests/chart/alerts/
rules-test.yaml), on metrics the reconciler and the webhook export, each with a runbook in
the troubleshooting guide (docs/decisions/037-operating.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import reconciler.daemon.certificates
import reconciler.daemon.metrics
import reconciler.run.reconciler  # noqa: F401
import webhook.metrics  # noqa: F401
from devtools.devcluster.build import built_helm
from devtools.devcluster.promtool import PROMTOOL_VERSION, built_promtool
from tests.support.helm import NOT_BUILT, one, render

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide" / "troubleshooting.md"
ALERTS = ("TroupeGangWaitingTooLong", "TroupeGangRollbacksRepeating", "TroupeNoLeader", "TroupeWebhookErrors",
          "TroupeWebhookSlow", "TroupeWebhookCertificateExpiring", "TroupeAPIServerCannotCallWebhook",
          "TroupeWebhookRejectingPods")
PROMTOOL_MISSING = (f"promtool {PROMTOOL_VERSION} is not built; build it with `python -m devtools.devcluster build` "
                    "(make cluster-build)")
ON = ("--set", "prometheusRule.enabled=true")

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)


def rule_objects(*values: str) -> list[dict]:
    return [o for o in render(*values) if o.get("kind") == "PrometheusRule"]


@pytest.fixture(scope="module")
def rules() -> dict:
    (rule,) = rule_objects(*ON, "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    return {"groups": rule["spec"]["groups"]}


def alerts(rules: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"]}


def test_the_rules_are_off_by_default_and_need_the_api_or_force():
    assert rule_objects() == []
    assert rule_objects(*ON) == []  # helm template: the API server serves no PrometheusRule
    assert len(rule_objects(*ON, "--set", "prometheusRule.force=true")) == 1


def test_the_guide_names_every_alert_and_each_links_its_runbook(rules):
    assert set(alerts(rules)) == set(ALERTS)
    headings = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", GUIDE.read_text(), re.M)}
    for name, rule in alerts(rules).items():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://github.com/troupe-dev/troupe/blob/main/docs/guide/troubleshooting.md#")
        assert url.partition("#")[2] in headings, f"{name}: no heading #{url.partition('#')[2]} in {GUIDE.name}"


def test_every_metric_the_rules_read_is_exported():
    rendered = yaml.safe_dump(rule_objects(*ON, "--set", "prometheusRule.force=true"))
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\btroupe_[a-z_]+", rendered)}
    exported = {m.name for m in REGISTRY.collect()} | {f"{m.name}_total" for m in REGISTRY.collect()}
    assert used and used <= exported, used - exported


def promtool() -> Path:
    path = built_promtool()
    if path is None:
        pytest.skip(PROMTOOL_MISSING)
    return path


def test_promtool_checks_the_rules(rules, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    done = subprocess.run([str(promtool()), "check", "rules", str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts(rules))} rules found" in done.stdout + done.stderr


def test_the_alerts_fire_when_they_should(rules, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(Path(__file__).parent / "alerts" / "rules-test.yaml", tmp_path / "rules-test.yaml")
    done = subprocess.run([str(promtool()), "test", "rules", "rules-test.yaml"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_api_server_alerts_select_exactly_the_webhook_configurations_names_and_the_selector_given():
    hooks = {h["name"] for h in one(render(), "MutatingWebhookConfiguration")["webhooks"]}
    (rule,) = rule_objects(*ON, "--set", "prometheusRule.force=true", "--set",
                           'prometheusRule.apiServerSelector=job="apiserver"')
    (group,) = [g for g in rule["spec"]["groups"] if g["name"] == "troupe.apiserver"]

    for r in group["rules"]:
        selectors = re.findall(r'name=~"((?:[^"\\]|\\.)+)"', r["expr"])
        assert selectors and r["expr"].count('job="apiserver"') == len(selectors), r["expr"]
        for selector in selectors:
            pattern = selector.replace("\\\\", "\\")  # a PromQL string's escapes
            assert {h for h in hooks if re.fullmatch(pattern, h)} == hooks, (r["alert"], pattern)
            assert not re.fullmatch(pattern, "podsXtroupe.io")
