"""Every command of every command line Troupe ships, given a user's mistake, answers with one
line on stderr naming it and a non-zero exit code, never a traceback; a reader that goes away
(``| head``) ends a command quietly (docs/decisions/037-operating.md).

The command lines: ``kubectl troupe`` (``python -m reconciler.tools.plugin``), ``python -m
reconciler`` (``simulate``, ``run``), ``python -m webhook``, ``python -m certs``, ``python -m
devtools.devcluster`` and ``python -m devtools.demo``. Each case runs the real process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs import create_ca, write_pair

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT = str(REPO / "examples" / "snapshot.json")
UNREACHABLE = "https://127.0.0.1:1"
PLUGIN = ["-m", "reconciler.tools.plugin"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Inputs with mistakes in them, and a few good ones to pair them with."""
    root = tmp_path_factory.mktemp("bad-input")
    out = {}

    def put(key: str, name: str, text: str) -> None:
        (root / name).write_text(text)
        out[key] = str(root / name)

    put("bad_yaml", "bad.yaml", "gangPreemptionMode: off\nreleaseConcurrency: [1,\n")
    put("not_pem", "not-pem.crt", "hello\n")
    put("kubeconfig", "kubeconfig", json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": UNREACHABLE}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    put("bad_nodes", "bad-nodes.yaml", "kind: FakeNodes\ngroups: [\n")
    put("config", "config.yaml", "{}\n")  # the defaults, said: no note that the snapshot has no ConfigMap
    put("short_key", "short.key", "short\n")
    pki = root / "pki"
    pki.mkdir()
    write_pair(create_ca("test-ca", 1), pki / "ca.crt", pki / "ca.key")
    out["ca_crt"], out["ca_key"], out["pki"] = str(pki / "ca.crt"), str(pki / "ca.key"), str(pki)
    bad_pki = root / "bad-pki"
    bad_pki.mkdir()
    (bad_pki / "ca.crt").write_text("hello\n")
    (bad_pki / "ca.key").write_bytes((pki / "ca.key").read_bytes())
    out["bad_pki"] = str(bad_pki)
    out["home"] = str(root / "home")
    out["cache"] = str(root / "cache")
    return out


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def environment(files: dict[str, str]) -> dict[str, str]:
    """This process's environment without a kubeconfig, cluster or terminal width of its own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "COLUMNS", "PROMETHEUS_MULTIPROC_DIR")}
    return {**env, "HOME": files["home"], "TROUPE_CACHE_DIR": files["cache"], "PYTHONPATH": str(REPO)}


#: ``(command line, arguments, what the line on stderr says)``; ``{name}`` is a file of
#: :func:`files`, ``{busy}`` the busy port.
CASES = [
    ("kubectl troupe status", [*PLUGIN, "status", "--snapshot", SNAPSHOT, "--now", "yesterday"],
     "--now: expected an RFC 3339 time"),
    ("kubectl troupe status", [*PLUGIN, "status", "--kubeconfig", "{kubeconfig}"],
     f"cannot reach the API server {UNREACHABLE}"),
    ("kubectl troupe status", [*PLUGIN, "status", "-o", "tabel"],
     "argument -o/--output: --output 'tabel': expected one of table, wide, json, yaml, name, jsonpath=TEMPLATE"),
    ("kubectl troupe status", [*PLUGIN, "status", "--kubeconfig", "{kubeconfig}", "--request-timeout", "soon"],
     "--request-timeout 'soon'"),
    ("kubectl troupe why", [*PLUGIN, "why", "p", "--snapshot", SNAPSHOT, "--config", "{bad_yaml}"],
     "bad.yaml: not valid YAML at line 3, column 1"),
    ("kubectl troupe topology", [*PLUGIN, "topology"], "no kubeconfig: looked in $KUBECONFIG (unset) and "),
    ("kubectl troupe topology", [*PLUGIN, "topology", "--kubeconfig", "/nonexistent/kubeconfig"],
     "no kubeconfig: looked in --kubeconfig /nonexistent/kubeconfig"),
    ("kubectl troupe plan", [*PLUGIN, "plan", "-f", "{bad_yaml}", "--snapshot", SNAPSHOT],
     "bad.yaml: not valid YAML at line 3, column 1"),
    ("reconciler simulate", ["-m", "reconciler", "simulate", SNAPSHOT, "--now", "2026-13-01T00:00:00Z"],
     "--now: expected an RFC 3339 time"),
    ("reconciler simulate", ["-m", "reconciler", "simulate", "{bad_yaml}"], "not valid YAML at line 3, column 1"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--metrics-bind", "127.0.0.1:70000"],
     "--metrics-bind '127.0.0.1:70000': port 70000 is out of range"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--metrics-bind", "127.0.0.1:{busy}"],
     "--metrics-bind 127.0.0.1:{busy}: cannot listen"),
    ("reconciler run", ["-m", "reconciler", "run"], "no --kubeconfig, and not in a cluster"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{bad_yaml}"],
     "--kubeconfig {bad_yaml}: not valid YAML at line 3, column 1"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--webhook-cert-san", "not a name"],
     "--webhook-cert-san 'not a name': not a DNS name"),
    ("reconciler run", ["-m", "reconciler", "run", "--config", "{bad_yaml}"], "not valid YAML at line 3, column 1"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--reservation-key-file",
                        "{short_key}"], "--reservation-key-file {short_key}: the key is 5 bytes, fewer than the 32"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--reservation-key-file",
                        "/nonexistent/key"], "--reservation-key-file /nonexistent/key: cannot read it: No such file"),
    ("webhook serve", ["-m", "webhook", "serve", "--tls-cert", "{ca_crt}", "--tls-key", "{ca_key}", "--bind",
                       "127.0.0.1:70000"], "--bind '127.0.0.1:70000'"),
    ("webhook serve", ["-m", "webhook", "serve", "--tls-cert", "{ca_crt}", "--tls-key", "{ca_key}", "--bind",
                       "127.0.0.1:{busy}"], "--bind 127.0.0.1:{busy}: cannot listen"),
    ("reconciler run", ["-m", "reconciler", "run", "--kubeconfig", "{kubeconfig}", "--cluster-domain", "10.0.0.1"],
     "--cluster-domain '10.0.0.1': not a DNS name"),
    ("reconciler run", ["-m", "reconciler", "run", "--log-level", "verbose"],
     "argument --log-level: invalid choice: 'verbose'"),
    ("webhook serve", ["-m", "webhook", "serve", "--tls-cert", "{ca_crt}", "--tls-key", "{ca_key}", "--log-level",
                       "trace"], "argument --log-level: invalid choice: 'trace'"),
    ("webhook serve", ["-m", "webhook", "serve", "--tls-cert", "{not_pem}", "--tls-key", "{ca_key}"],
     "--tls-cert {not_pem}: not a PEM certificate"),
    ("webhook serve", ["-m", "webhook", "serve", "--tls-cert", "{ca_crt}", "--tls-key", "{ca_key}", "--config",
                       "{bad_yaml}"], "not valid YAML at line 3, column 1"),
    ("webhook configuration", ["-m", "webhook", "configuration", "--url", "https://x/mutate", "--ca-bundle",
                               "{not_pem}"], "--ca-bundle {not_pem}: not PEM certificates"),
    ("certs ca", ["-m", "certs", "ca", "--out", "/dev/null/pki"], "/dev/null/pki: Not a directory"),
    ("certs serving", ["-m", "certs", "serving", "--ca-dir", "{pki}", "--san", "not a name", "--out", "{pki}/w"],
     "--san 'not a name': not a DNS name"),
    ("certs serving", ["-m", "certs", "serving", "--ca-dir", "{bad_pki}", "--san", "a.example", "--out", "{pki}/w"],
     "{bad_pki}/ca.crt: not a PEM certificate"),
    ("certs expiry", ["-m", "certs", "expiry", "{not_pem}"], "{not_pem}: not a PEM certificate"),
    ("devcluster build", ["-m", "devtools.devcluster", "build", "--fast"], "unrecognized arguments: --fast"),
    ("devcluster up", ["-m", "devtools.devcluster", "up", "--nodes", "{bad_nodes}"],
     "not valid YAML at line 3, column 1"),
    ("devcluster down", ["-m", "devtools.devcluster", "down"], "no devcluster is running"),
    ("devcluster status", ["-m", "devtools.devcluster", "status", "--run-dir", "/nonexistent"],
     "/nonexistent is not a devcluster run dir"),
    ("demo", ["-m", "devtools.demo", "--only", "nope"], "unknown scenario(s) nope"),
    ("demo", ["-m", "devtools.demo", "--kubeconfig", "{kubeconfig}"], f"cannot reach the API server {UNREACHABLE}"),
]


def test_every_command_has_a_case():
    covered = {case[0] for case in CASES}
    commands = {f"kubectl troupe {c}" for c in ("status", "why", "topology", "plan")}
    commands |= {"reconciler simulate", "reconciler run", "webhook serve", "webhook configuration", "certs ca",
                 "certs serving", "certs expiry", "devcluster build", "devcluster up", "devcluster down",
                 "devcluster status", "demo"}
    assert commands <= covered, commands - covered


@pytest.mark.parametrize(("command", "argv", "says"), CASES, ids=[f"{c[0]}: {c[2][:40]}" for c in CASES])
def test_a_mistake_is_one_line_on_stderr_and_a_non_zero_exit(files, busy_port, command, argv, says):
    fill = {**files, "busy": busy_port}
    argv = [a.format(**fill) for a in argv]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, check=False,
                          cwd=REPO, env=environment(files), stdin=subprocess.DEVNULL)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says.format(**fill) in done.stderr


@pytest.mark.parametrize("argv", [
    [*PLUGIN, "topology", "--snapshot", SNAPSHOT, "--config", "{config}"],
    ["-m", "reconciler", "status", "-A", "--snapshot", SNAPSHOT, "--config", "{config}"],
    ["-m", "reconciler", "simulate", SNAPSHOT],
    ["-m", "webhook", "configuration", "--url", "https://x/mutate"],
    ["-m", "certs", "expiry", "{ca_crt}"],
], ids=lambda argv: " ".join(a for a in argv[1:3] if not a.startswith("/")))
def test_a_closed_pipe_ends_the_command_quietly(files, argv):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails
    try:
        done = subprocess.run([sys.executable, *(a.format(**files) for a in argv)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False, cwd=REPO,
                              env=environment(files))
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141
