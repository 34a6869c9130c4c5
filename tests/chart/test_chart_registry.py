"""The chart's per-kind and per-pod-group parts are the registries' rendering
(devtools/chartkinds.py; docs/decisions/071-the-chart-is-rendered-from-the-registries.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from devtools import chartkinds
from devtools.devcluster.build import built_helm
from tests.support.helm import NOT_BUILT, one, render
from troupe.workloadkinds import KINDS, PYTORCH_JOB


def test_the_generated_parts_are_current() -> None:
    assert chartkinds.check() == "", "run `make chart-kinds` after changing troupe/workloadkinds.py or troupe/podgroups.py"


def test_check_names_a_stale_part(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "_registry.tpl"
    stale.write_text(chartkinds.render_tpl(KINDS[:1]))
    rules = tmp_path / "reconciler-rules.yaml"
    rules.write_text(chartkinds.RULES_FILE.read_text())
    monkeypatch.setattr(chartkinds, "TPL_FILE", stale)
    monkeypatch.setattr(chartkinds, "RULES_FILE", rules)
    monkeypatch.setattr(chartkinds, "REPO", tmp_path)
    diff = chartkinds.check()
    assert "_registry.tpl (as rendered)" in diff and "jobsets" in diff
    assert chartkinds.main(["--check"]) == 1


def test_a_new_kind_reaches_every_part_from_its_row() -> None:
    """A Kubeflow-style kind added as one row: its RBAC rule, the write policies' rules, the
    gang-fits policy's size and the webhook's owner CEL all name it."""
    xgb = replace(PYTORCH_JOB, kind="XGBoostJob", plural="xgboostjobs",
                  templates_cel="object.spec.?xgbReplicaSpecs.orValue({}).map(t, object.spec.xgbReplicaSpecs[t].?template.orValue({}))",
                  pods_cel="object.spec.?xgbReplicaSpecs.orValue({}).map(t, object.spec.xgbReplicaSpecs[t].?replicas.orValue(1)).sum()",
                  pods_words="the sum of spec.xgbReplicaSpecs[*].replicas")
    kinds = (*KINDS, xgb)
    rules = yaml.safe_load(chartkinds.render_rules(kinds))
    assert {"apiGroups": ["kubeflow.org"], "resources": ["xgboostjobs"], "verbs": ["list", "watch", "patch"]} in rules
    tpl = chartkinds.render_tpl(kinds)
    assert tpl.count("resources: [xgboostjobs]") == 3  # gang fits, records, written
    assert "variables.resource == 'pytorchjobs' ?" in tpl and ": object.spec.?xgbReplicaSpecs" in tpl
    assert "o.kind == 'XGBoostJob'" in tpl
    with pytest.raises(ValueError, match="no workload kinds"):
        chartkinds.render_tpl(())


@pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)
def test_the_rendered_chart_names_each_kind_where_it_should() -> None:
    objects = render("--set", "validatingAdmissionPolicy.enabled=true")
    written = one(objects, "ValidatingAdmissionPolicy", "troupe-reconciler-workload-writes")["spec"]
    records = one(objects, "ValidatingAdmissionPolicy", "troupe-workload-records")["spec"]
    patched = {k.plural for k in KINDS if "patch" in k.verbs}
    assert {r["resources"][0] for r in written["matchConstraints"]["resourceRules"]} == patched
    assert {r["resources"][0] for r in records["matchConstraints"]["resourceRules"]} == {k.plural for k in KINDS}
    role = one(objects, "ClusterRole", "troupe-reconciler")
    for k in KINDS:
        assert {"apiGroups": [k.group], "resources": [k.plural], "verbs": list(k.verbs)} in role["rules"]
    hook = one(objects, "MutatingWebhookConfiguration", "troupe")
    assert "o.kind == 'PyTorchJob'" in str(hook) and "'leaderworkerset.sigs.k8s.io/name' in object.metadata.labels" in str(hook)
