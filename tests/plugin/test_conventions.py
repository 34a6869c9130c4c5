"""``kubectl troupe`` follows kubectl's conventions: ``-o table|wide|json|yaml|name``, ``-w``,
``-l``, ``--request-timeout``, ``status NAME``, ``why`` of a gang, lines cut to the terminal's
width with everything in ``-o wide``, and a krew manifest (docs/decisions/037-operating.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from devtools import krew
from reconciler.objects import kinds
from reconciler.tools import plugin
from tests.support.signals import started
from tests.support.snapshots import snapshot

REPO = Path(__file__).resolve().parents[2]
NOW = "2026-03-01T10:00:00Z"


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    objects = snapshot()
    for obj in objects["items"]:  # the members of ml/wide carry a label to select them by
        if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith("wide-"):
            obj["metadata"].setdefault("labels", {})["app"] = "wide"
    path = tmp_path_factory.mktemp("conventions") / "snapshot.json"
    path.write_text(json.dumps(objects))
    return path


def run(capsys, snapshot_file, *argv, code=0) -> str:
    """stdout, or (for a non-zero ``code``) stderr without the note that the snapshot has no ConfigMap."""
    got = plugin.main([*argv, "--snapshot", str(snapshot_file), "--now", NOW])
    out, err = capsys.readouterr()
    assert got == code, err
    return out if code == 0 else "".join(line for line in err.splitlines(True) if not line.startswith("note: "))


@pytest.mark.parametrize("argv", [["status"], ["why", "ml/wide-3"], ["topology"]])
def test_yaml_is_the_json_object(capsys, snapshot_file, argv):
    as_json = json.loads(run(capsys, snapshot_file, *argv, "-o", "json"))
    assert yaml.safe_load(run(capsys, snapshot_file, *argv, "-o", "yaml")) == as_json


def test_name_prints_kind_slash_name_as_kubectl_does(capsys, snapshot_file):
    assert run(capsys, snapshot_file, "status", "-n", "ml", "-o", "name").splitlines() == [
        "gang.troupe.io/wide", "gang.troupe.io/partial", "gang.troupe.io/batch", "gang.troupe.io/running"]
    assert run(capsys, snapshot_file, "why", "ml/wide-3", "-o", "name") == "gang.troupe.io/wide\n"
    nodes = run(capsys, snapshot_file, "topology", "-o", "name").splitlines()
    assert len(nodes) == 16 and all(re.fullmatch(r"node/gpu-b\d-s\d-h\d", n) for n in nodes)


def test_the_table_is_cut_to_the_terminal_and_wide_shows_everything(capsys, snapshot_file, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # capsys's stdout, taken for a terminal
    monkeypatch.setenv("COLUMNS", "72")  # its width (shutil.get_terminal_size reads it first)
    table = run(capsys, snapshot_file, "status").splitlines()
    assert all(len(line) <= 72 for line in table)
    assert table[1].endswith("...")
    wide = run(capsys, snapshot_file, "status", "-o", "wide").splitlines()
    assert wide[0].split() == ["NAMESPACE", "GANG", "PHASE", "MEMBERS", "RELEASED", "BOUND", "RUNNING", "WAITING",
                               "QUEUE", "PRIORITY", "RULE", "DOMAIN", "REASON"]
    assert wide[1].endswith("node unschedulable: 1, insufficient nvidia.com/gpu: 9")
    assert "cloud.google.com/gce-topology-subblock=gpu-b0/gpu-b0-s1" in "\n".join(wide)  # team/small's domain


def test_a_pipe_gets_whole_lines_as_kubectl_prints_them(snapshot_file):
    done = subprocess.run([sys.executable, "-m", "reconciler", "status", "--snapshot", str(snapshot_file),
                           "--now", NOW], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "COLUMNS": "40"}, cwd=REPO)
    assert done.returncode == 0
    assert "insufficient nvidia.com/gpu: 9" in done.stdout


def test_status_name_shows_one_gang_and_a_missing_one_exits_1(capsys, snapshot_file):
    one = run(capsys, snapshot_file, "status", "wide", "-n", "ml").splitlines()
    assert len(one) == 2 and one[1].split()[:3] == ["ml", "wide", "Unschedulable"]
    assert run(capsys, snapshot_file, "status", "team/held").splitlines()[1].split()[:2] == ["team", "held"]
    err = run(capsys, snapshot_file, "status", "nope", "-n", "ml", code=1)
    assert err == f"kubectl-troupe: gang ml/nope not found in snapshot {snapshot_file}\n"


def test_why_takes_a_gang_as_well_as_a_pod(capsys, snapshot_file):
    by_pod = run(capsys, snapshot_file, "why", "ml/wide-0")
    assert run(capsys, snapshot_file, "why", "gang/wide", "-n", "ml") == by_pod
    assert run(capsys, snapshot_file, "why", "wide", "-n", "ml") == by_pod  # no pod "wide": the gang
    assert run(capsys, snapshot_file, "why", "pod/wide-0", "-n", "ml") == by_pod
    err = run(capsys, snapshot_file, "why", "gang/nope", "-n", "ml", code=1)
    assert err.startswith("kubectl-troupe: gang ml/nope not found")


@pytest.mark.parametrize(("selector", "gangs"), [
    ("app=wide", ["wide"]), ("app in (wide,other)", ["wide"]), ("app", ["wide"]),
    ("app!=wide", ["partial", "held", "small", "batch", "running"]), ("!app", ["partial", "held", "small", "batch",
                                                                            "running"]),
    ("app=wide,app notin (wide)", []),
])
def test_selector_keeps_gangs_with_a_matching_member(capsys, snapshot_file, selector, gangs):
    got = run(capsys, snapshot_file, "status", "-A", "-l", selector, "-o", "name").splitlines()
    assert got == [f"gang.troupe.io/{g}" for g in gangs]


def test_a_selector_it_cannot_read_is_bad_input(capsys, snapshot_file):
    err = run(capsys, snapshot_file, "status", "-l", "app in wide", code=2)
    assert err.startswith("kubectl-troupe: --selector 'app in wide': cannot read")


@pytest.mark.parametrize(("raw", "seconds"), [("0", None), ("5", 5.0), ("1.5", 1.5), ("30s", 30.0), ("2m", 120.0),
                                              ("1h2m3s", 3723.0), ("500ms", 0.5)])
def test_request_timeout_reads_kubectls_durations(raw, seconds):
    assert plugin.request_timeout(raw) == seconds


@pytest.mark.parametrize("raw", ["soon", "-1", "5x", ""])
def test_a_request_timeout_it_cannot_read_names_the_flag(raw):
    with pytest.raises(ValueError, match=r"^--request-timeout"):
        plugin.request_timeout(raw)


@pytest.mark.parametrize("ignored", [False, True], ids=["started-as-is", "started-with-sigint-ignored"])
def test_watch_prints_again_when_the_answer_changes_until_interrupted(snapshot_file, tmp_path, ignored):
    """Ctrl-C ends the watch however the process was started: also with SIGINT ignored, as a
    non-interactive shell starts ``kubectl troupe status -w &`` (kubectl's own ``-w`` stops
    either way)."""
    path = tmp_path / "snapshot.json"
    path.write_bytes(snapshot_file.read_bytes())
    argv = [sys.executable, "-m", "reconciler", "status", "-n", "ml", "-o", "name", "-w", "--watch-interval", "0.2",
            "--snapshot", str(path), "--now", NOW]
    proc = subprocess.Popen(started(argv, ignored), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(4)]
        assert first == ["gang.troupe.io/wide\n", "gang.troupe.io/partial\n", "gang.troupe.io/batch\n",
                         "gang.troupe.io/running\n"]
        objects = json.loads(path.read_text())
        objects["items"] = [o for o in objects["items"]
                            if not (o["kind"] == "Pod" and o["metadata"]["name"].startswith("partial-"))]
        path.write_text(json.dumps(objects))
        second = [proc.stdout.readline() for _ in range(3)]
        assert second == ["gang.troupe.io/wide\n", "gang.troupe.io/batch\n", "gang.troupe.io/running\n"]
        time.sleep(0.5)  # unchanged answers are not printed again
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert rest == ""
    assert proc.returncode == 130 and "Traceback" not in err, err


def test_the_krew_manifest_is_valid_as_krew_checks_it():
    """krew's own checks of a plugin manifest (sigs.k8s.io/krew internal/index/validation):
    the name is the file's, the version a ``v``-prefixed semantic version (the package's),
    every platform has a selector, an https URI, a 64-hex sha256, a ``bin`` among the
    ``files`` it installs; kind and apiVersion are krew's."""
    path = REPO / "plugins" / "troupe.yaml"
    manifest = yaml.safe_load(path.read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (manifest["apiVersion"], manifest["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    assert manifest["metadata"]["name"] == path.stem == "troupe"
    assert manifest["spec"]["version"] == f"v{version}"
    assert re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", manifest["spec"]["version"])
    assert 0 < len(manifest["spec"]["shortDescription"]) <= 50
    assert manifest["spec"]["homepage"].startswith("https://")
    assert manifest["spec"]["platforms"]
    for platform in manifest["spec"]["platforms"]:
        assert platform["selector"]["matchLabels"]["os"] in ("linux", "darwin")
        assert platform["uri"].startswith("https://") and f"v{version}" in platform["uri"]
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] in {f.get("to", ".").rstrip("/") + "/" + Path(f["from"]).name
                                   if f.get("to", ".") != "." else Path(f["from"]).name for f in platform["files"]}


def test_the_readme_installs_the_plugin_with_krew():
    """From the release's manifest, or from the one ``make plugin`` writes next to this
    platform's archive (devtools/krew.py); plugins/troupe.yaml, whose sha256s are zeros, is
    only their template."""
    readme = (REPO / "README.md").read_text()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    release = f"https://github.com/troupe-dev/troupe/releases/download/v{version}/{krew.MANIFEST.name}"
    assert f"kubectl krew install --manifest-url={release}" in readme
    archive = krew.archive_name("linux", "amd64")
    assert f"make plugin && kubectl krew install --manifest=dist/{krew.MANIFEST.name} --archive=dist/{archive}" in readme
    assert "--manifest=plugins/troupe.yaml" not in readme


def test_one_snapshot_command_everywhere_reads_every_kind(capsys):
    assert set(kinds.SNAPSHOT_RESOURCES) == {*kinds.KINDS, *kinds.SKIPPED_KINDS}
    readme = (REPO / "README.md").read_text()
    assert kinds.SNAPSHOT_COMMAND in readme
    with pytest.raises(SystemExit):
        plugin.main(["--help"])
    assert kinds.SNAPSHOT_COMMAND in capsys.readouterr().out
    done = subprocess.run([sys.executable, "-m", "reconciler", "simulate", "--help"], capture_output=True, text=True,
                          timeout=60, check=True, cwd=REPO)
    assert kinds.SNAPSHOT_COMMAND in done.stdout
    old = re.compile(r"kubectl get nodes,pods[a-z,]* -A")
    stale = [m.group(0) for m in old.finditer(readme) if m.group(0) != kinds.SNAPSHOT_COMMAND.split(" -o")[0]]
    assert stale == []


def test_topology_marks_a_node_avoided_after_repeated_member_failures(capsys, tmp_path):
    objects = snapshot()
    node = next(o for o in objects["items"] if o["kind"] == "Node")
    recent = [{"uid": f"u{i}", "pod": f"team-{i}/p{i}", "at": at, "why": "Failed"}  # two tenants (decision 049)
              for i, at in enumerate(("2026-03-01T09:40:00Z", "2026-03-01T09:50:00Z"))]
    node["metadata"].setdefault("annotations", {})["reconciler.troupe.io/failures"] = json.dumps(recent)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(objects))
    text = run(capsys, path, "topology")
    line = next(x for x in text.splitlines() if node["metadata"]["name"] in x)
    assert "avoided" in line and "avoided until 2026-03-01T10:20:00" in line, line
    tree = json.loads(run(capsys, path, "topology", "-o", "json"))

    def nodes(d):
        return d.get("nodes", []) + [n for c in d.get("children", []) for n in nodes(c)]

    avoided = {n["name"]: n["avoided"] for n in nodes(tree) if n["avoided"]}
    assert list(avoided) == [node["metadata"]["name"]]
