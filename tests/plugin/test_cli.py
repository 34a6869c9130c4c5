"""``kubectl troupe``'s command line: the installed entry point, ``python -m reconciler`` doing
the same, help that explains, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from reconciler.tools import plugin

REPO = Path(__file__).resolve().parents[2]


def test_the_package_installs_kubectl_troupe_as_the_plugins_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-troupe"] == "reconciler.tools.plugin:main"


def test_python_m_reconciler_runs_the_same_commands(tmp_path):
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    done = subprocess.run([sys.executable, "-m", "reconciler", "status", "--snapshot", str(snapshot)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr.endswith("no gangs found\n"), done.stderr  # messages go to stderr, as kubectl's


@pytest.mark.parametrize("command", plugin.COMMANDS)
def test_each_command_explains_itself(capsys, command):
    with pytest.raises(SystemExit) as e:
        plugin.main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--kubeconfig", "--context", "--snapshot", "--config", "--gang-preemption-mode", "--output"):
        assert flag in out


def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "ml"}},
                     {"name": "prod", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["status", "--context", "nope"], "--context: no context 'nope' in the kubeconfig (known: dev, prod)"),
    (["status", "--snapshot", "/nonexistent/s.json"], "/nonexistent/s.json: cannot read snapshot: No such file"),
    (["status", "--snapshot", "-", "--now", "yesterday"], "--now: expected an RFC 3339 time"),
    (["plan", "-f", "/nonexistent/job.yaml"], "/nonexistent/job.yaml: cannot read manifest: No such file"),
])
def test_bad_input_gives_one_line_naming_it_and_exit_code_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.setattr(sys, "stdin", open(tmp_path / "empty", "w+b"))  # noqa: SIM115  closed by pytest's monkeypatch
    code = plugin.main([*argv, "--kubeconfig", str(kubeconfig(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"kubectl-troupe: {message}")


def test_an_unreachable_cluster_is_exit_code_1_naming_what_failed(capsys, tmp_path):
    code = plugin.main(["status", "--kubeconfig", str(kubeconfig(tmp_path))])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("kubectl-troupe: list ")
