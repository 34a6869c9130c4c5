"""``kubectl troupe``'s kubeconfig flags (``--server``, ``--token``, ``--as``, ``--as-group``,
``--certificate-authority``, ``--insecure-skip-tls-verify``), the configuration of a snapshot,
``completion bash|zsh`` and ``-w`` by watch (docs/decisions/052-kubectl-conventions.md)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from kubernetes.client.exceptions import ApiException

from reconciler import kube
from reconciler.kube import watching as kube_watching
from reconciler.tools import plugin, watching

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "snapshot.json"
NOW = "2026-11-23T12:08:44Z"


# --- the kubeconfig flags, against a server that records what it is sent ----------------------
class Recorder(BaseHTTPRequestHandler):
    """An API server that answers every GET with an empty List and keeps each request's headers."""

    seen: ClassVar[list[list[tuple[str, str]]]] = []

    def do_GET(self) -> None:
        Recorder.seen.append([(k.lower(), v) for k, v in self.headers.items()])  # names are case-insensitive
        body = json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"},
                           "items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def test_server_token_and_impersonation_need_no_kubeconfig_and_reach_the_server(server, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    overrides = kube.Overrides(server=server, token="s3cret", as_user="jane", as_groups=("ml", "ops"))
    api, namespace = kube.plugin_client(None, None, overrides)
    assert (api.configuration.host, namespace) == (server, "default")
    assert kube.read_config_map(api, "troupe-system", "troupe-config", "config.yaml") is None  # an empty List
    [headers] = Recorder.seen
    assert ("authorization", "Bearer s3cret") in headers
    assert ("impersonate-user", "jane") in headers
    assert [v for k, v in headers if k == "impersonate-group"] == ["ml", "ops"]  # one header each, as kubectl's


def test_the_flags_override_the_kubeconfigs_server_and_credentials(server, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "from-kubeconfig"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}]}))
    args = plugin.parser().parse_args(["status", "--kubeconfig", str(config), "--server", server, "--token", "t2",
                                       "--as", "bob", "--as-group", "ml"])
    api, namespace = plugin._client(args)
    assert (api.configuration.host, namespace) == (server, "ml")
    kube.read_config_map(api, "troupe-system", "troupe-config", "config.yaml")
    [headers] = Recorder.seen
    assert ("authorization", "Bearer t2") in headers and ("impersonate-group", "ml") in headers


def test_tls_flags_set_the_clients_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    api, _ = kube.plugin_client(None, None, kube.Overrides(server="https://h:6443", certificate_authority=str(ca)))
    assert (api.configuration.ssl_ca_cert, api.configuration.verify_ssl) == (str(ca), True)
    api, _ = kube.plugin_client(None, None, kube.Overrides(server="https://h:6443", insecure=True))
    assert api.configuration.verify_ssl is False


@pytest.mark.parametrize(("argv", "says"), [
    (["--as-group", "ml"], "--as-group: needs --as USER"),
    (["--insecure-skip-tls-verify", "--certificate-authority", "{ca}"], "give one of them"),
    (["--certificate-authority", "/nonexistent/ca.crt"], "--certificate-authority /nonexistent/ca.crt: no such file"),
    ([], "give --kubeconfig FILE, --server URL, or --snapshot FILE"),
])
def test_flags_kubectl_refuses_are_one_line_and_exit_1(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    (tmp_path / "ca.crt").write_text("")
    assert plugin.main(["status", *(a.format(ca=tmp_path / "ca.crt") for a in argv)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err


# --- the configuration of a snapshot -----------------------------------------------------------
def config_map(text: str, namespace: str = "troupe-system", name: str = "troupe-config") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": {"app.kubernetes.io/name": "troupe"}},
            "data": {"config.yaml": text}}


def status(capsys, snapshot: Path, *argv: str, code: int = 0) -> tuple[str, str]:
    got = plugin.main(["status", "-A", "--snapshot", str(snapshot), "--now", NOW, *argv])
    out, err = capsys.readouterr()
    assert got == code, err
    return out, err


def test_a_snapshot_with_troupes_configmap_appended_decides_with_it(capsys, tmp_path):
    appended = tmp_path / "snapshot.json"  # what the --help's command makes: the ConfigMap's JSON after the List
    appended.write_text(EXAMPLE.read_text() + json.dumps(config_map('gangPreemptionMode: "atomic"\n')))
    assert status(capsys, appended, "-o", "name")[1] == ""  # the snapshot's own configuration: nothing to say
    with_it = json.loads(status(capsys, appended, "-o", "json")[0])["items"]
    assert with_it[0]["status"]["phase"] == "Preempting"
    (tmp_path / "config.yaml").write_text('gangPreemptionMode: "atomic"\n')
    given = json.loads(status(capsys, EXAMPLE, "-o", "json", "--config", str(tmp_path / "config.yaml"))[0])["items"]
    assert with_it == given


def test_a_snapshot_without_it_says_which_configuration_it_used(capsys, tmp_path):
    err = status(capsys, EXAMPLE, "-o", "name")[1]
    assert err == ("note: ConfigMap troupe-system/troupe-config is not in the snapshot: deciding with the built-in "
                   "configuration (levels block, subblock, host; see --config)\n")
    empty = tmp_path / "empty.json"
    empty.write_text(EXAMPLE.read_text() + json.dumps({**config_map(""), "data": {}}))
    assert "ConfigMap troupe-system/troupe-config has no config.yaml: deciding with the built-in" in status(
        capsys, empty, "-o", "name")[1]
    other = tmp_path / "snapshot.json"  # another release's name: the one ConfigMap of the chart's
    other.write_text(EXAMPLE.read_text() + json.dumps(config_map("{}\n", "gangs", "sched-config")))
    assert status(capsys, other, "-o", "name")[1] == (
        "note: deciding with the configuration of ConfigMap gangs/sched-config in the snapshot "
        "(troupe-system/troupe-config is not there)\n")
    err = status(capsys, EXAMPLE, "--config-map", "a/b", code=2)[1]
    assert err.startswith("kubectl-troupe: --config-map: ConfigMap a/b with a config.yaml is not in the snapshot")
    bad = tmp_path / "bad.json"
    bad.write_text(EXAMPLE.read_text() + json.dumps(config_map("gangPreemptionMode: sometimes\n")))
    err = status(capsys, bad, code=2)[1]
    assert "(ConfigMap troupe-system/troupe-config) config.yaml: gangPreemptionMode" in err, err


# --- completion ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("shell", "registers"), [
    ("bash", "complete -o bashdefault -F _shtab_kubectl_troupe kubectl-troupe"), ("zsh", "#compdef kubectl-troupe")])
def test_completion_prints_a_script_of_every_command_and_flag(capsys, shell, registers):
    assert plugin.main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert registers in script.splitlines()
    for word in ("status", "why", "topology", "plan", "--no-headers", "--as-group", "--snapshot"):
        assert word in script, word


# --- -w by watch ---------------------------------------------------------------------------------
def test_a_burst_of_changes_is_one_answer_at_most_once_per_interval():
    notices: queue.Queue[str] = queue.Queue()
    clock = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    batches = watching.debounced(notices, 2.0, clock=lambda: clock[0], sleep=sleep)
    for _ in range(256):  # a gang of 256 pods created
        notices.put("pods")
    next(batches)
    assert notices.empty() and slept == [2.0]  # one answer for the burst, 2 s after the last
    clock[0] += 5
    notices.put("nodes")
    next(batches)
    assert slept == [2.0, 0.0]  # a change long after: answered at once


class FakeResponse:
    """A watch's streamed response: its lines, then the end."""

    status = 200

    def __init__(self, events: list[dict]) -> None:
        self.lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, *args: object, **kwargs: object) -> Iterator[bytes]:
        yield self.lines

    def close(self) -> None:
        """Nothing to close."""

    def release_conn(self) -> None:
        """Nothing to release."""


class Listed:
    data = json.dumps({"metadata": {"resourceVersion": "7"}}).encode()


def test_a_watch_notifies_each_change_resumes_and_lists_again_when_too_old():
    stop = threading.Event()
    notified: list[str] = []
    calls: list[dict] = []
    answers = [
        FakeResponse([{"type": "ADDED", "object": {"metadata": {"resourceVersion": "8"}}},
                      {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}]),
        ApiException(status=410),
        FakeResponse([{"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "12"}}}]),
    ]

    def list_fn(**kwargs: object) -> object:
        if not kwargs.get("watch"):
            return Listed()
        calls.append(kwargs)
        answer = answers.pop(0) if answers else None
        if answer is None:
            stop.set()
            return FakeResponse([])
        if isinstance(answer, Exception):
            raise answer
        return answer

    kube_watching._follow("pods", list_fn, notified.append, stop)
    assert [c["resource_version"] for c in calls] == ["7", "9", "7", "12"]  # resumed from the bookmark's version
    assert notified == ["pods", "pods", "pods"]  # ADDED, the 410 (changes may be missed), MODIFIED; no BOOKMARK


def test_a_collection_it_may_not_watch_everywhere_is_watched_in_the_namespace():
    stop = threading.Event()
    watched: list[str] = []

    def everywhere(**kwargs: object) -> object:
        raise ApiException(status=403)

    def namespaced(**kwargs: object) -> object:
        if not kwargs.get("watch"):
            return Listed()
        watched.append("ml")
        stop.set()
        return FakeResponse([{"type": "ADDED", "object": {"metadata": {"resourceVersion": "8"}}}])

    notified: list[str] = []
    kube_watching._follow("pods", everywhere, notified.append, stop, fallback=namespaced)
    assert (watched, notified) == (["ml"], ["pods"])
