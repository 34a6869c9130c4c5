"""Every file of ``examples/``, used as it is meant to be, on the local control plane with Troupe.

- Manifests (Jobs, Pods, custom resources) are applied with ``kubectl apply`` in a fresh
  namespace; every pod they make must be Running on a kwok node. A file with a kind whose
  API (a CRD) the local cluster does not serve is skipped, naming the kinds.
- Fake-node files (``kind: FakeNodes``, what ``python -m devtools.devcluster up --nodes``
  reads) have their Nodes created where missing; every node they define must be Ready and
  kwok's. Those created are deleted afterwards, so no other test meets them.
- A snapshot (``snapshot.json``, the input of the offline tools, not objects to create) is
  read by ``kubectl troupe status`` and the simulator, which must answer with its gangs.

A file of none of these kinds fails the test that classifies them, so a new example is never
left untested (docs/decisions/037-operating.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.devcluster import nodes as fake_nodes
from tests.support.e2e import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FILES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_file())
#: When the snapshot was taken (examples/snapshot.json), for a decision as the README shows it.
SNAPSHOT_NOW = "2026-11-23T12:08:44Z"


def documents(name: str) -> list[dict[str, Any]]:
    """The objects of an example file (JSON or YAML), empty documents dropped."""
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def role(name: str) -> str:
    """What an example is: ``nodes``, ``snapshot`` or ``manifest``."""
    docs = documents(name)
    if docs and all(d.get("kind") == "FakeNodes" for d in docs):
        return "nodes"
    if len(docs) == 1 and docs[0].get("kind") == "List":
        return "snapshot"
    return "manifest"


def test_every_example_is_one_this_module_runs():
    assert FILES, "examples/ is empty"
    for name in FILES:
        docs = documents(name)
        assert docs and all(isinstance(d, dict) and d.get("kind") for d in docs), f"{name}: not Kubernetes objects"


def served_kinds(cluster: Any) -> set[str]:
    """Every kind the API server serves (discovery, as ``kubectl api-resources`` lists it)."""
    out = cluster.kubectl("api-resources", "--no-headers", "-o", "wide").stdout
    kinds = set()
    for line in out.splitlines():
        fields = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS [CATEGORIES]: KIND follows true/false
        at = next(i for i, f in enumerate(fields) if f in ("true", "false"))
        kinds.add(fields[at + 1])
    return kinds


def expected_pods(docs: list[dict[str, Any]]) -> int:
    """Pods the objects make: a Job's parallelism, a Pod itself."""
    count = 0
    for d in docs:
        if d["kind"] == "Job":
            count += int(d["spec"].get("parallelism", 1))
        elif d["kind"] == "Pod":
            count += 1
    return count


@pytest.mark.parametrize("name", [n for n in FILES if role(n) == "manifest"])
def test_a_manifest_runs(cluster, troupe, admin_core, namespace, name):
    docs = documents(name)
    missing = sorted({d["kind"] for d in docs} - served_kinds(cluster))
    if missing:
        pytest.skip(f"examples/{name}: the local cluster has no CRD for {', '.join(missing)}")
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / name))
    kwok = {n.metadata.name for n in admin_core.list_node().items
            if (n.metadata.annotations or {}).get(fake_nodes.KWOK_ANNOTATION) == "fake"}
    want = expected_pods(docs)
    assert want > 0, f"examples/{name} makes no pods"

    def running() -> list[Any] | None:
        pods = admin_core.list_namespaced_pod(namespace).items
        ok = [p for p in pods if p.status.phase == "Running" and p.spec.node_name in kwok]
        return ok if len(ok) == want == len(pods) else None

    pods = wait_for(f"{want} pods of examples/{name} Running on kwok nodes", running, timeout=120)
    assert all(not p.spec.scheduling_gates for p in pods)  # released by Troupe, not left gated


def test_the_job_example_ignores_disruptions_as_the_docs_say():
    (job,) = [d for d in documents("gang-job.yaml") if d["kind"] == "Job"]
    assert "backoffLimit" not in job["spec"] or job["spec"]["backoffLimit"] > 0
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules


@pytest.mark.parametrize("name", [n for n in FILES if role(n) == "nodes"])
def test_a_nodes_file_makes_ready_kwok_nodes(cluster, admin_core, name):
    wanted = fake_nodes.load(EXAMPLES / name)
    have = {n.metadata.name for n in admin_core.list_node().items}
    made = [n for n in wanted if n["metadata"]["name"] not in have]
    try:
        for node in made:
            admin_core.create_node(node)

        def ready() -> bool | None:
            nodes = {n.metadata.name: n for n in admin_core.list_node().items}
            for want in wanted:
                got = nodes.get(want["metadata"]["name"])
                if got is None or (got.metadata.annotations or {}).get(fake_nodes.KWOK_ANNOTATION) != "fake":
                    return None
                if not any(c.type == "Ready" and c.status == "True" for c in got.status.conditions or []):
                    return None
            return True

        assert wait_for(f"the {len(wanted)} nodes of examples/{name} Ready", ready, timeout=60) is True
    finally:
        for node in made:
            try:
                admin_core.delete_node(node["metadata"]["name"])
            except client.ApiException as e:
                if e.status != 404:
                    raise


@pytest.mark.parametrize("name", [n for n in FILES if role(n) == "snapshot"])
def test_a_snapshot_is_answered_by_the_offline_tools(name):
    path = str(EXAMPLES / name)
    status = subprocess.run([sys.executable, "-m", "reconciler", "status", "-A", "--snapshot", path, "--now",
                             SNAPSHOT_NOW, "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["items"]
    simulated = subprocess.run([sys.executable, "-m", "reconciler", "simulate", path, "--now", SNAPSHOT_NOW,
                                "--output", "json"], capture_output=True, text=True, timeout=120, check=False)
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads(simulated.stdout)["gangs"]
