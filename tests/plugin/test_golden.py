"""Golden outputs of ``kubectl troupe status``, ``why``, ``topology`` and ``plan`` on one snapshot.

The snapshot (``snapshot()`` below) is the demo cluster's topology with gangs in every state
an operator asks about. Each test runs the plugin's ``main`` with ``--snapshot`` and a fixed
``--now`` and compares what it prints with ``tests/plugin/golden/<name>``.

To regenerate the golden files after an intended change of the output, run

    TROUPE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/plugin/test_golden.py

and review the diff (``git diff tests/plugin/golden``) before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.tools import plugin
from tests.support.snapshots import snapshot

GOLDEN = Path(__file__).resolve().parent / "golden"
NOW = "2026-03-01T10:00:00Z"
UPDATE = os.environ.get("TROUPE_UPDATE_GOLDEN") == "1"


MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: urgent-train
  namespace: ml
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    metadata:
      annotations:
        troupe.io/gang-name: urgent-train
        troupe.io/gang-size: "4"
        troupe.io/topology-required-level: cloud.google.com/gce-topology-subblock
    spec:
      priorityClassName: urgent
      restartPolicy: Never
      containers:
        - name: worker
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1", nvidia.com/gpu: "8"}
            limits: {nvidia.com/gpu: "8"}
"""


@pytest.fixture(autouse=True)
def _whole_lines(monkeypatch):
    """The golden tables are whole: no $COLUMNS of the shell running the tests cuts them."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("golden") / "snapshot.json"
    path.write_text(json.dumps(snapshot(), indent=1))
    return path


@pytest.fixture(scope="module")
def manifest_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "urgent-train.yaml"
    path.write_text(MANIFEST)
    return path


def run(capsys, snapshot_file, *argv) -> str:
    code = plugin.main([*argv, "--snapshot", str(snapshot_file), "--now", NOW])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.replace(str(snapshot_file.parent), "<tmp>")


def golden(name: str, got: str) -> str:
    """The golden file ``name``'s text (rewritten with ``got`` first when regenerating)."""
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    return path.read_text()


CHANGED = "changed; see the module docstring to regenerate it"


@pytest.mark.parametrize(("name", "argv"), [
    ("status.txt", ["status"]),
    ("status-team.txt", ["status", "-n", "team"]),
    ("status.json", ["status", "-o", "json"]),
    ("why-unschedulable.txt", ["why", "ml/wide-3"]),
    ("why-waiting-for-members.txt", ["why", "partial-0", "-n", "ml"]),
    ("why-held.txt", ["why", "team/held-1"]),
    ("why-placed.txt", ["why", "team/small-0"]),
    ("why-released.txt", ["why", "ml/running-2"]),
    ("why-unschedulable.json", ["why", "ml/wide-3", "-o", "json"]),
    ("topology.txt", ["topology"]),
    ("topology.json", ["topology", "-o", "json"]),
])
def test_output_matches_its_golden_file(capsys, snapshot_file, name, argv):
    got = run(capsys, snapshot_file, *argv)
    assert got == golden(name, got), f"{name} {CHANGED}"


@pytest.mark.parametrize(("name", "mode"), [("plan.txt", "off"), ("plan-atomic.txt", "atomic"),
                                            ("plan-atomic.json", "atomic")])
def test_plan_matches_its_golden_file(capsys, snapshot_file, manifest_file, name, mode):
    argv = ["plan", "-f", str(manifest_file), "--gang-preemption-mode", mode]
    if name.endswith(".json"):
        argv += ["-o", "json"]
    got = run(capsys, snapshot_file, *argv).replace(str(manifest_file.parent), "<tmp>")
    assert got == golden(name, got), f"{name} {CHANGED}"


def errors(capsys) -> str:
    """stderr without the note that the snapshot has no ConfigMap."""
    return "".join(line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("note: "))


def test_why_of_a_pod_troupe_does_not_manage_says_so_and_exits_1(capsys, snapshot_file):
    code = plugin.main(["why", "lab/notebook", "--snapshot", str(snapshot_file), "--now", NOW])
    err = errors(capsys)
    assert code == 1
    assert err.strip() == ("kubectl-troupe: pod lab/notebook is not managed by Troupe: it carries no gang "
                           "annotation, no troupe.io/gang-size and no Troupe scheduling gate")


def test_why_of_a_missing_pod_names_it(capsys, snapshot_file):
    code = plugin.main(["why", "ml/nope", "--snapshot", str(snapshot_file), "--now", NOW])
    err = errors(capsys)
    assert code == 1
    assert err.strip() == f"kubectl-troupe: pod ml/nope not found in snapshot {snapshot_file}"


def test_a_manifest_the_webhook_would_deny_is_refused_with_its_message(capsys, snapshot_file, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(MANIFEST.replace('troupe.io/gang-size: "4"', 'troupe.io/gang-size: "four"'))
    code = plugin.main(["plan", "-f", str(bad), "--snapshot", str(snapshot_file), "--now", NOW])
    _, err = capsys.readouterr()
    assert code == 2
    assert "denied by Troupe's webhook: annotation troupe.io/gang-size: must be an integer >= 1, got 'four'" in err


def test_status_gives_every_waiting_gang_the_simulators_decision(capsys, snapshot_file, tmp_path):
    from reconciler.tools import simulate

    plain = snapshot()  # the simulator reads no PriorityClass
    plain["items"] = [o for o in plain["items"] if o["kind"] != "PriorityClass"]
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    assert simulate.main([str(tmp_path / "plain.json"), "--now", NOW, "--output", "json"]) == 0
    simulated = json.loads(capsys.readouterr().out)["gangs"]
    status = json.loads(run(capsys, snapshot_file, "status", "-o", "json"))["items"]
    waiting = [g for g in status if g["status"]["queuePosition"]]
    assert [(g["metadata"]["namespace"], g["spec"]["gangName"], g["status"]["phase"], g["status"]["reason"])
            for g in waiting] == [
        (g["namespace"], g["name"], g["phase"], g["reason"]) for g in simulated]
