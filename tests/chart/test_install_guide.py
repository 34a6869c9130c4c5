"""The install guide's security facts, held to the chart they describe: every verb the
reconciler's identity holds is in the guide's RBAC table and nothing else is, every
admission policy the chart ships is named there, and every CRD the chart installs (and
keeps on uninstall) is named wherever the install, the ``crds`` value and the removal are
described."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from tests.support.helm import CHART, NOT_BUILT, REPO, render

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

GUIDE = REPO / "docs" / "guide" / "install.md"
README = REPO / "README.md"
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


# --- the CRDs -----------------------------------------------------------------------------------


def crd_files() -> set[str]:
    """The ``metadata.name`` (``<plural>.<group>``) of every CRD in ``files/crds/``."""
    return {yaml.safe_load(path.read_text())["metadata"]["name"] for path in (CHART / "files" / "crds").glob("*.yaml")}


def section(text: str, heading: str) -> str:
    """The text under the Markdown ``heading`` (its whole line) up to the next heading of any
    level; a ``#`` line inside a fenced code block is a shell comment, not a heading."""
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    body: list[str] = []
    fenced = False
    for line in lines[lines.index(heading) + 1:]:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif line.startswith("#") and not fenced:
            break
        body.append(line)
    return "\n".join(body)


def unnamed(text: str) -> list[str]:
    """The chart's CRDs that ``text`` does not name in full (``gangs.troupe.io``)."""
    return sorted(name for name in crd_files() if name not in text)


def rendered_crds(*values: str) -> dict[str, dict[str, Any]]:
    """The CRDs the chart renders with ``values``, by name."""
    return {o["metadata"]["name"]: o for o in render(*values) if o["kind"] == "CustomResourceDefinition"}


def test_the_install_table_names_every_crd_the_chart_installs() -> None:
    assert set(rendered_crds()) == crd_files() and len(crd_files()) >= 2
    assert rendered_crds("--set", "crds.install=false") == {}   # the row's "crds.install=false leaves both out"
    table = section(GUIDE.read_text(), "## Install")
    [row] = [line for line in table.splitlines() if line.startswith("| CRD")]
    assert unnamed(row) == []


def test_the_crds_value_names_every_crd_it_installs() -> None:
    """The comment block right above ``crds:`` in values.yaml (what ``helm show values`` prints)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    at = lines.index("crds:")
    start = at
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    assert start < at, "values.yaml: no comment above crds:"
    assert unnamed("\n".join(lines[start:at])) == []


def test_the_guides_uninstall_step_names_every_crd_it_keeps() -> None:
    removing = section(GUIDE.read_text(), "## Upgrading and removing")
    [step] = [item for item in re.split(r"^- ", removing, flags=re.M) if item.startswith("`helm uninstall`")]
    assert unnamed(step) == []
    assert {name: o["metadata"]["annotations"].get("helm.sh/resource-policy")
            for name, o in rendered_crds().items()} == dict.fromkeys(crd_files(), "keep")
    assert "kubectl delete crd " + " ".join(sorted(crd_files())) in " ".join(step.split())


def test_the_readmes_remove_step_names_every_crd_it_keeps() -> None:
    install = section(README.read_text(), "## Install on a cluster")
    [line] = [line for line in install.splitlines() if line.strip().startswith("helm uninstall")]
    assert unnamed(line) == []
