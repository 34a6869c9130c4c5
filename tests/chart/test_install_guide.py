"""The install guide's security facts, held to the chart they describe: every verb the
reconciler's identity holds is in the guide's RBAC table and nothing else is, and every
admission policy the chart ships is named there."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest

from devtools.devcluster.build import built_helm
from tests.support.helm import NOT_BUILT, REPO, render

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

GUIDE = REPO / "docs" / "guide" / "install.md"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
RECONCILER = {"kind": "ServiceAccount", "name": "troupe-reconciler", "namespace": "troupe-system"}

Grants = dict[tuple[str, str], set[str]]


def guide_table() -> Grants:
    """``(apiGroup, resource) -> verbs`` of the guide's RBAC table: a resource is written
    ``resource.group`` (``jobs.batch``, ``shareddevicegroups.deviceshare.io/status``), bare
    for the core group, or bare with its group after it in parentheses."""
    text = GUIDE.read_text()
    section = text[text.index("## RBAC: what each identity may do"):]
    grants: Grants = defaultdict(set)
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        what, verbs, _ = (cell.strip() for cell in line.strip("|").split("|", 2))
        group = re.search(r"\(`([a-z0-9.-]+)`\)", what)
        said = {word for word in re.findall(r"[a-z]+", verbs) if word in VERBS}
        for token in re.findall(r"`([a-z0-9./-]+)`", what.split("(`")[0]):
            name, _, sub = token.partition("/")
            resource, _, api_group = name.partition(".")
            grants[(api_group or (group.group(1) if group else ""), resource + (f"/{sub}" if sub else ""))] |= said
    return dict(grants)


def chart_grants(objects: list[dict[str, Any]]) -> Grants:
    """What the rendered chart grants the reconciler: the rules of every ClusterRole and Role
    a binding gives its ServiceAccount."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    grants: Grants = defaultdict(set)
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if RECONCILER not in binding.get("subjects", []):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants[(group, resource)] |= set(rule["verbs"])
    return dict(grants)


def test_the_guide_lists_every_verb_the_chart_grants_the_reconciler_and_no_other() -> None:
    guide, chart = guide_table(), chart_grants(render())
    assert guide == chart


def test_the_guide_names_every_admission_policy_the_chart_ships() -> None:
    policies = {o["metadata"]["name"] for o in render() if o["kind"] == "ValidatingAdmissionPolicy"}
    text = GUIDE.read_text()
    assert len(policies) >= 6
    assert [name for name in sorted(policies) if f"`{name}`" not in text] == []


def test_the_reconciler_reads_and_writes_only_its_own_lease_and_state_configmap() -> None:
    chart = chart_grants(render())
    role = next(o for o in render() if o["kind"] == "Role" and o["metadata"]["name"] == "troupe-reconciler-leader-election")
    named = {(rule["resources"][0], tuple(rule["verbs"])): rule.get("resourceNames") for rule in role["rules"]}
    assert named == {("leases", ("create",)): None, ("leases", ("get", "update")): ["troupe-reconciler"],
                     ("configmaps", ("create",)): None, ("configmaps", ("get", "patch")): ["troupe-reconciler-state"]}
    assert chart[("", "configmaps")] == {"create", "get", "patch"}
