"""The install guide's security facts, held to the chart they describe: every verb each of
Troupe's identities holds (the reconciler's, the webhook's) is in the guide's RBAC table,
with its scope and the objects it is limited to, and nothing else is, in each certificate
mode; every admission policy the chart ships is named there; and every CRD the chart
installs (and keeps on uninstall) is named wherever the install, the ``crds`` value and the
removal are described."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from devtools.devcluster.build import built_helm
from tests.support.helm import CHART, NAMESPACE, NOT_BUILT, RELEASE, REPO, one, render
from tests.support.markdown import section

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

GUIDE = REPO / "docs" / "guide" / "install.md"
README = REPO / "README.md"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
RECONCILER = f"{RELEASE}-reconciler"
WEBHOOK = f"{RELEASE}-webhook"
#: The guide's marker of a row the chart grants only with self-managed certificates.
SELF_MANAGED = "self-managed certificates"
#: The certificate modes (docs/decisions/010-webhook-certificates.md): their values, and
#: whether the reconciler manages the certificate (the rows marked :data:`SELF_MANAGED`).
MODES = {
    "self-managed": ((), True),
    "cert-manager": (("--set", "certManager.enabled=true"), False),
    "manual": (("--set", "webhook.tls.selfManaged=false"), False),
}


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource: ``group`` (``""`` for the core group), ``resource``
    (``pods``, ``pods/status``), ``verb``, whether it holds in the release namespace only
    (``namespaced``: a RoleBinding's) and the objects it is limited to (``names``, sorted
    resourceNames; ``()`` for every object)."""

    group: str
    resource: str
    verb: str
    namespaced: bool
    names: tuple[str, ...]


def guide_rows(identity: str) -> list[tuple[str, str]]:
    """The ``(resource cell, verbs cell)`` rows of the guide's RBAC table of ``identity``
    (``**The reconciler**``'s table; ``**The webhook**`` has a sentence and no table, so none)."""
    text = GUIDE.read_text()
    section = text[text.index("## RBAC: what each identity may do"):]
    section = section[:section.index("\n## ")]
    marker = f"**The {identity}**"
    assert marker in section, f"the RBAC section has no paragraph {marker}"
    part = section[section.index(marker):]
    following = [part.index(m) for m in ("**The reconciler**", "**The webhook**") if m != marker and m in part]
    part = part[:min(following, default=len(part))]
    rows = []
    for line in part.splitlines():
        if line.startswith("| `"):
            what, verbs, _ = (cell.strip() for cell in line.strip("|").split("|", 2))
            rows.append((what, verbs))
    return rows


def guide_grants(identity: str, self_managed: bool) -> set[Grant]:
    """What the guide says ``identity`` holds. A resource is written ``resource.group``
    (``jobs.batch``, ``shareddevicegroups.deviceshare.io/status``), bare for the core group,
    or bare with its group after it in parentheses; "(release namespace" marks a Role's
    rule, "(... self-managed certificates)" one granted only in that mode. The verbs cell is
    clauses split by ``;``, each ``verb, verb`` or ``verb, verb on `name` [and `name`] only``."""
    grants = set()
    for what, verbs in guide_rows(identity):
        if SELF_MANAGED in what and not self_managed:
            continue
        group = re.search(r"\(`([a-z0-9.-]+)`\)", what)
        namespaced = "(release namespace" in what
        for clause in verbs.split(";"):
            said, on, limited = clause.partition(" on ")
            names = tuple(sorted(re.findall(r"`([^`]+)`", limited)))
            assert not on or (names and limited.strip().endswith("only")), f"{what}: {clause.strip()!r}"
            words = re.findall(r"[a-z]+", said)
            assert words and set(words) <= set(VERBS), f"{what}: not verbs: {said.strip()!r}"
            for token in re.findall(r"`([a-z0-9./-]+)`", what.split("(`")[0]):
                name, _, sub = token.partition("/")
                resource, _, api_group = name.partition(".")
                for verb in words:
                    grants.add(Grant(api_group or (group.group(1) if group else ""),
                                     resource + (f"/{sub}" if sub else ""), verb, namespaced, names))
    return grants


def chart_grants(objects: list[dict[str, Any]], service_account: str) -> set[Grant]:
    """What the rendered chart grants ``service_account`` (in the release namespace): the
    rules of every ClusterRole and Role a binding gives it, a RoleBinding's in its namespace."""
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE}
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    grants = set()
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if subject not in binding.get("subjects", []):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            names = tuple(sorted(rule.get("resourceNames", ())))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants |= {Grant(group, resource, verb, binding["kind"] == "RoleBinding", names)
                               for verb in rule["verbs"]}
    return grants


def table(grants: set[Grant]) -> list[str]:
    """Grants one a line, for a readable difference."""
    return [f"{g.resource}.{g.group or 'core'} {g.verb}" + (" (namespace)" if g.namespaced else "")
            + (f" on {','.join(g.names)}" if g.names else "") for g in sorted(grants)]


@pytest.mark.parametrize("mode", MODES)
def test_the_guide_lists_every_verb_the_chart_grants_the_reconciler_and_no_other(mode: str) -> None:
    values, self_managed = MODES[mode]
    guide, chart = guide_grants("reconciler", self_managed), chart_grants(render(*values), RECONCILER)
    assert {"missing from the guide": table(chart - guide), "not granted by the chart": table(guide - chart)} == {
        "missing from the guide": [], "not granted by the chart": []}
    assert len(chart) > 40


@pytest.mark.parametrize("mode", MODES)
def test_the_webhook_holds_no_permission_and_no_token_as_the_guide_says(mode: str) -> None:
    values, _ = MODES[mode]
    objects = render(*values)
    assert chart_grants(objects, WEBHOOK) == set() == guide_grants("webhook", True)
    assert "**The webhook** has no RBAC at all: its ServiceAccount has no token" in GUIDE.read_text()
    assert one(objects, "ServiceAccount", WEBHOOK)["automountServiceAccountToken"] is False
    pod = one(objects, "Deployment", WEBHOOK)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == WEBHOOK and pod.get("automountServiceAccountToken") is not True


def test_the_guide_names_every_admission_policy_the_chart_ships() -> None:
    policies = {o["metadata"]["name"] for o in render() if o["kind"] == "ValidatingAdmissionPolicy"}
    text = GUIDE.read_text()
    assert len(policies) >= 6
    assert [name for name in sorted(policies) if f"`{name}`" not in text] == []


def test_the_reconciler_reads_and_writes_only_its_own_lease_and_state_configmap() -> None:
    objects = render()
    role = one(objects, "Role", f"{RELEASE}-reconciler-leader-election")
    named = {(rule["resources"][0], tuple(rule["verbs"])): rule.get("resourceNames") for rule in role["rules"]}
    assert named == {("leases", ("create",)): None, ("leases", ("get", "update")): ["troupe-reconciler"],
                     ("configmaps", ("create",)): None, ("configmaps", ("get", "patch")): ["troupe-reconciler-state"]}
    assert {(g.verb, g.names) for g in chart_grants(objects, RECONCILER) if g.resource == "configmaps"} == {
        ("create", ()), ("get", ("troupe-reconciler-state",)), ("patch", ("troupe-reconciler-state",))}


# --- the CRDs -----------------------------------------------------------------------------------


def crd_files() -> set[str]:
    """The ``metadata.name`` (``<plural>.<group>``) of every CRD in ``files/crds/``."""
    return {yaml.safe_load(path.read_text())["metadata"]["name"] for path in (CHART / "files" / "crds").glob("*.yaml")}


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


def values_comment(key: str) -> str:
    """The comment block right above the top-level ``key:`` of values.yaml (what ``helm show
    values`` prints of it)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    at = lines.index(f"{key}:")
    start = at
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    assert start < at, f"values.yaml: no comment above {key}:"
    return "\n".join(lines[start:at])


def test_the_crds_value_names_every_crd_it_installs() -> None:
    assert unnamed(values_comment("crds")) == []


def test_the_validating_admission_policy_value_names_every_policy_it_installs() -> None:
    policies = {o["metadata"]["name"] for o in render() if o["kind"] == "ValidatingAdmissionPolicy"}
    assert len(policies) >= 6
    assert sorted(p for p in policies if p not in values_comment("validatingAdmissionPolicy")) == []


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


# --- what an install makes -----------------------------------------------------------------------

#: How the install table writes a kind it abbreviates.
ABBREVIATED = {"CustomResourceDefinition": "CRD"}


def install_table() -> list[tuple[set[str], set[str]]]:
    """The first cell of each row of the guide's "With no values this installs" table: the
    kinds it names (a word of the cell, singular or plural; ``CRD``) and the object names it
    gives in code marks (none: any object of its kinds)."""
    text = section(GUIDE.read_text(), "## Install")
    rows = []
    for line in text[text.index("With no values this installs"):].splitlines()[1:]:
        if line.startswith("| ") and not line.startswith("| object |"):
            cell = line.strip("|").split("|")[0]
            names = set(re.findall(r"`([^`]+)`", cell))
            rows.append((set(re.findall(r"[A-Za-z]+", re.sub(r"`[^`]*`", "", cell))), names))
        elif rows:
            break
    return rows


def named_by(kind: str, words: set[str]) -> bool:
    """Whether a row's ``words`` name ``kind``: ``Secret`` or ``Secrets``, ``Policy`` or
    ``Policies``; a ``...Binding`` by its role's or policy's kind and the word ``bindings``."""
    if kind.endswith("Binding") and kind != "Binding":
        return "bindings" in words and named_by(kind.removesuffix("Binding"), words)
    word = ABBREVIATED.get(kind, kind)
    return bool({word, word + "s", word.removesuffix("y") + "ies"} & words)


def test_the_install_table_names_every_object_an_install_without_values_makes() -> None:
    rows = install_table()
    assert len(rows) >= 8
    unlisted = [f"{o['kind']} {o['metadata']['name']}" for o in render()
                if not any(named_by(o["kind"], words) and (not names or o["metadata"]["name"] in names)
                           for words, names in rows)]
    assert unlisted == []


def test_the_readme_names_every_cluster_wide_kind_an_install_makes() -> None:
    """Step 1 of the README's install: who installs needs to create these, not only the
    namespace's objects. Cluster-wide objects are the rendered ones without a namespace."""
    install = " ".join(section(README.read_text(), "## Install on a cluster").split())
    match = re.search(r"allowed to create cluster-wide objects \(the chart installs ([^)]*)\)", install)
    assert match, "README's install names no cluster-wide objects"
    words = set(re.findall(r"[A-Za-z]+", match.group(1)))
    kinds = {o["kind"] for o in render() if "namespace" not in o["metadata"]}
    assert {"CustomResourceDefinition", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds
    assert sorted(kind for kind in kinds if not named_by(kind, words)) == []
