"""The chart's policy ``<release>-gang-fits-workload`` as rendered (docs/decisions/058-kueue-for-quota.md);
tests/e2e/test_kueue_quota.py has the real API server judge it."""

from __future__ import annotations

import pytest

from devtools.devcluster.build import built_helm
from tests.support.helm import NOT_BUILT, one, render

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)


def test_it_judges_only_the_creation_of_queued_workloads_and_never_blocks_on_its_own_error() -> None:
    objects = render()
    vap = one(objects, "ValidatingAdmissionPolicy", "troupe-gang-fits-workload")["spec"]
    assert vap["failurePolicy"] == "Ignore", "a guard against a mistake: an evaluation error must not block a workload"
    assert {r["resources"][0]: r["operations"] for r in vap["matchConstraints"]["resourceRules"]} == {
        "jobs": ["CREATE"], "jobsets": ["CREATE"], "pytorchjobs": ["CREATE"], "leaderworkersets": ["CREATE"],
        "mpijobs": ["CREATE"], "rayclusters": ["CREATE"], "rayjobs": ["CREATE"]}
    assert vap["matchConditions"] == [{"name": "queued-in-kueue", "expression":
                                       "'kueue.x-k8s.io/queue-name' in object.metadata.?labels.orValue({})"}]
    assert [v["reason"] for v in vap["validations"]] == ["Invalid", "Invalid"]
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "troupe-gang-fits-workload")
    assert binding["spec"] == {"policyName": "troupe-gang-fits-workload", "validationActions": ["Deny"]}


def test_it_reads_the_gang_keys_of_the_configured_prefix() -> None:
    vap = one(render("--set", "config.gangAnnotationPrefix=gang-scheduling.preferred.jp/gang"),
              "ValidatingAdmissionPolicy", "troupe-gang-fits-workload")["spec"]
    variables = {v["name"]: v["expression"] for v in vap["variables"]}
    assert "'gang-scheduling.preferred.jp/gang-size'" in variables["sizes"]
    assert "'gang-scheduling.preferred.jp/gang-min-size'" in variables["minimums"]
    assert "troupe.io/gang" not in str(vap)
    size, minimum = vap["validations"]
    assert "'gang-scheduling.preferred.jp/gang-size'" in size["messageExpression"]
    assert "'gang-scheduling.preferred.jp/gang-min-size'" in minimum["messageExpression"]


def test_with_volcano_adopted_it_also_judges_a_jobs_volcano_minimum_and_not_otherwise() -> None:
    """docs/decisions/066-queued-minimum-by-every-source.md: the minimum Volcano's controller
    would give the group of a Job's adopted pods is the Job's own annotation, which the policy
    sees; a PodGroup object's minimum it cannot."""
    plain = one(render(), "ValidatingAdmissionPolicy", "troupe-gang-fits-workload")["spec"]
    assert "volcano" not in str(plain) and len(plain["validations"]) == 2
    vap = one(render("--set", "config.adoptSchedulerNames={volcano,kai-scheduler}"),
              "ValidatingAdmissionPolicy", "troupe-gang-fits-workload")["spec"]
    variables = {v["name"]: v["expression"] for v in vap["variables"]}
    assert "object.spec.?template.?spec.?schedulerName.orValue('') == 'volcano'" in variables["volcanoMinimum"]
    assert "object.metadata.?annotations[?'scheduling.volcano.sh/group-min-member']" in variables["volcanoMinimum"]
    volcano = vap["validations"][2]
    assert volcano["expression"] == "variables.pods == 0 || variables.volcanoMinimum <= variables.pods"
    assert volcano["messageExpression"].startswith("'annotation scheduling.volcano.sh/group-min-member of Job '")
