"""``python -m webhook serve`` for real: gunicorn over HTTPS on 127.0.0.1, started as a
subprocess with certificates from ``certs`` and stopped by its pid."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from cryptography import x509

from certs import create_serving_cert
from devtools.devcluster.cluster import free_ports
from tests.support.webhook_builders import (
    REPO,
    Server,
    exchange,
    free_port,
    make_pod,
    make_review,
    make_tls,
    review_over_https,
    start_server,
)
from webhook.admission import patch_of


def served_serial(conn: Any) -> int:
    der = conn.sock.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def test_a_review_over_https_echoes_the_uid_and_its_patch_applies(server: Server) -> None:
    pod = make_pod("w-1").gang("g", "2", timeout="900").annotate("deviceshare.io/group", "team-a").container().obj()
    answer = review_over_https(server, make_review(pod, uid="https-1"))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "https-1" and answer["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(pod, patch_of(answer))
    assert patched["spec"]["schedulingGates"] == [{"name": "troupe.io/placement"}]
    assert patched["metadata"]["annotations"]["troupe.io/gang-schedule-timeout-seconds"] == "100"
    assert patched["spec"]["containers"][0]["env"][0]["name"] == "NVIDIA_VISIBLE_DEVICES"
    again = review_over_https(server, make_review(patched, uid="https-2"))
    assert again["response"] == {"uid": "https-2", "allowed": True}


def test_a_gang_member_gets_the_nominated_node_toleration_once_even_when_reinvoked(server: Server) -> None:
    """Every pod Troupe gates tolerates Troupe's nominated-node taint, so only pods Troupe
    pins land on a node a preemptor's nomination holds (docs/decisions/033). The API server
    may call the webhook again on the pod it patched (``reinvocationPolicy``): no second
    toleration then."""
    wanted = {"key": "troupe.io/nominated", "operator": "Exists", "effect": "NoSchedule"}
    own = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    pod = make_pod("w-2").gang("g", "2").container().obj()
    pod["spec"]["tolerations"] = [own]
    answer = review_over_https(server, make_review(pod, uid="https-2"))
    assert answer["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(pod, patch_of(answer))
    assert patched["spec"]["tolerations"] == [own, wanted]
    again = review_over_https(server, make_review(patched, uid="https-3"))
    assert again["response"]["allowed"] is True and "patch" not in again["response"]


def test_a_denial_over_https_names_the_key_and_value(server: Server) -> None:
    answer = review_over_https(server, make_review(make_pod().gang(size="zero").obj(), uid="https-3"))
    resp = answer["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "troupe.io/gang-size" in resp["status"]["message"] and "'zero'" in resp["status"]["message"]


def test_one_connection_carries_many_reviews(server: Server) -> None:
    conn = server.connection()
    assert exchange(conn, "GET", "/healthz")[0] == 200
    sock = conn.sock
    for i in range(20):
        answer = review_over_https(server, make_review(make_pod().gang().obj(), uid=f"ka-{i}"), conn)
        assert answer["response"]["uid"] == f"ka-{i}"
    assert conn.sock is sock, "the server closed a keep-alive connection"
    conn.close()


def test_health_readiness_and_metrics_answer(server: Server) -> None:
    conn = server.connection()
    assert exchange(conn, "GET", "/healthz") == (200, b"ok\n")
    assert exchange(conn, "GET", "/readyz")[0] == 200
    status, body = exchange(conn, "GET", "/metrics")
    assert status == 200 and b"troupe_webhook_admissions_total" in body
    conn.close()


def _metric(server: Server, name: str) -> float:
    conn = server.connection()
    _, body = exchange(conn, "GET", "/metrics")
    conn.close()
    return sum(float(line.split()[-1]) for line in body.decode().splitlines() if line.startswith(name + " "))


def test_metrics_sum_every_worker(server: Server) -> None:
    series = 'troupe_webhook_admissions_total{operation="UPDATE",outcome="allowed"}'
    before = _metric(server, series)
    pod = make_pod().obj()
    for i in range(12):  # new connections, spread over both workers
        review_over_https(server, make_review(pod, operation="UPDATE", old=pod, uid=f"m-{i}"))
    deadline = time.monotonic() + 5
    while _metric(server, series) < before + 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _metric(server, series) == before + 12


def test_each_review_is_logged_as_one_json_line(server: Server) -> None:
    review_over_https(server, make_review(make_pod("logged", "team").gang().obj(), uid="log-1"))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [ln for ln in server.log_lines() if ln.get("uid") == "log-1"]
        if lines:
            break
        time.sleep(0.05)
    [line] = lines
    assert line["logger"] == "troupe.webhook.admission" and line["level"] == "info" and line["ts"].endswith("Z")
    assert line["namespace"] == "team" and line["name"] == "logged" and line["operation"] == "CREATE"
    assert line["outcome"] == "patched" and line["duration_ms"] >= 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls_older_than_1_2_is_refused(server: Server) -> None:
    import http.client

    def client(max_version: ssl.TLSVersion) -> Any:
        ctx = server.tls.client_context()
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = max_version
        return http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=5)

    ok = client(ssl.TLSVersion.TLSv1_2)
    assert exchange(ok, "GET", "/healthz")[0] == 200
    assert ok.sock.version() == "TLSv1.2"
    ok.close()
    old = client(ssl.TLSVersion.TLSv1_1)
    with pytest.raises(ssl.SSLError):
        exchange(old, "GET", "/healthz")


def test_a_rotated_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    s = start_server(tmp_path)
    try:
        old = s.connection()
        assert exchange(old, "GET", "/healthz")[0] == 200
        old_serial = served_serial(old)
        new_pair = s.tls.rotate()
        for _ in range(4):  # whichever worker takes the connection
            conn = s.connection()
            assert exchange(conn, "GET", "/healthz")[0] == 200
            assert served_serial(conn) == new_pair.cert.serial_number != old_serial
            conn.close()
        assert exchange(old, "GET", "/healthz")[0] == 200, "an open connection keeps working"
        assert served_serial(old) == old_serial
        old.close()
    finally:
        s.stop()


def test_ctrl_c_stops_the_server_even_when_it_was_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A non-interactive shell starts ``python -m webhook serve &`` with SIGINT ignored;
    gunicorn's arbiter sets its own SIGINT handler (a quick shutdown of the workers) and each
    worker its own, so Ctrl-C stops it all the same, and SIGTERM (:meth:`Server.stop`) is a
    graceful stop as before."""
    s = start_server(tmp_path, sigint_ignored=True)
    try:
        s.proc.send_signal(signal.SIGINT)
        assert s.proc.wait(20) == 0
    finally:
        s.stop()


# --- The command line ------------------------------------------------------------------

def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "webhook", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_help_explains_serve() -> None:
    r = run_cli("serve", "--help")
    assert r.returncode == 0
    for flag in ("--tls-cert", "--tls-key", "--bind", "--health-bind", "--config", "--workers", "--max-connections",
                 "--tls-handshake-timeout", "--request-timeout"):
        assert flag in r.stdout


@pytest.mark.parametrize(("name", "make_args", "want"), [
    ("a key that does not match",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(_other_key(t, tls))], "--tls-key"),
    ("a certificate file that is not PEM",
     lambda t, tls: ["--tls-cert", str(_write(t / "x.crt", "hello")), "--tls-key", str(tls.key)], "not a PEM"),
    ("a configuration with a bad value",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--config",
                     str(_write(t / "c.yaml", "gangScheduleTimeoutSecondsLimit: 0\n"))],
     "gangScheduleTimeoutSecondsLimit"),
    ("a missing configuration file",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--config", str(t / "no.yaml")],
     "no.yaml"),
    ("a malformed address",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--bind", "localhost"], "--bind"),
    ("zero workers",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--workers", "0"], "--workers"),
    ("a handshake timeout of zero",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-handshake-timeout", "0"],
     "--tls-handshake-timeout"),
    ("a malformed health address",
     lambda t, tls: ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--health-bind", "8081"],
     "--health-bind"),
])
def test_serve_refuses_bad_input_with_one_line_naming_it(tmp_path: Path, name: str, make_args: Any,
                                                         want: str) -> None:
    tls = make_tls(tmp_path / "tls")
    args = make_args(tmp_path, tls)
    if "--bind" not in args:
        args += ["--bind", f"127.0.0.1:{free_port()}"]
    r = run_cli("serve", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and want in lines[0], r.stderr


def test_serve_refuses_an_address_in_use(server: Server) -> None:
    r = run_cli("serve", "--tls-cert", str(server.tls.cert), "--tls-key", str(server.tls.key),
                "--bind", f"127.0.0.1:{server.port}")
    assert r.returncode == 2 and "cannot listen" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_configuration_prints_the_registration_as_yaml(tmp_path: Path) -> None:
    import yaml

    tls = make_tls(tmp_path)
    r = run_cli("configuration", "--service", "troupe-system/troupe-webhook:8443", "--ca-bundle", str(tls.ca_file))
    assert r.returncode == 0, r.stderr
    obj = yaml.safe_load(r.stdout)
    assert obj["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "troupe-system", "name": "troupe-webhook", "path": "/mutate", "port": 8443}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _other_key(tmp: Path, tls: Any) -> Path:
    path = tmp / "other.key"
    path.write_bytes(create_serving_cert(tls.ca, ["127.0.0.1"]).key_pem)
    return path


# --- Starting before the certificate exists, and the plain-HTTP health port -------------------

def _plain_get(port: int, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        return exchange(conn, method, path, body)
    finally:
        conn.close()


def _wait_for(what: str, probe: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = probe()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_without_certificate_files_it_starts_not_ready_and_serves_tls_once_they_appear(tmp_path: Path) -> None:
    later = tmp_path / "later"
    cert, key = later / "tls.crt", later / "tls.key"
    port, health = free_ports(2)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log_path = tmp_path / "webhook.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--tls-cert", str(cert), "--tls-key",
                                 str(key), "--bind", f"127.0.0.1:{port}", "--health-bind", f"127.0.0.1:{health}",
                                 "--workers", "2"], cwd=REPO, env=env, stdout=log, stderr=log)
    server = Server(proc, port, None, log_path)  # type: ignore[arg-type]
    try:
        _wait_for("/healthz on the health port", lambda: _plain_get(health, "/healthz")[0] == 200)
        assert _plain_get(health, "/readyz") == (503, f"waiting for certificate files {cert} and {key}\n".encode())
        with pytest.raises((ssl.SSLError, ConnectionError)):
            ssl.create_default_context().wrap_socket(
                __import__("socket").create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1")

        tls = make_tls(later)  # the certificate arrives (in-cluster: the Secret mount is updated)
        server.tls = tls
        _wait_for("/readyz 200 on the health port", lambda: _plain_get(health, "/readyz")[0] == 200)
        answer = review_over_https(server, make_review(make_pod().gang().container().obj(), uid="after"))
        assert answer["response"]["uid"] == "after" and "patch" in answer["response"]
        conn = server.connection()
        assert exchange(conn, "GET", "/readyz")[0] == 200, "the TLS port serves the probes too"
        conn.close()

        status, body = _plain_get(health, "/mutate", "POST", json.dumps(make_review(make_pod().obj())).encode())
        assert status == 404, "no admission without TLS"
        status, body = _plain_get(health, "/metrics")
        assert status == 200 and b'troupe_webhook_connections_closed_total{reason="not_ready"}' in body
        [waiting] = [line for line in server.log_lines() if line.get("msg", "").startswith("waiting for certificate")]
        assert (waiting["level"], waiting["cert_file"], waiting["key_file"]) == ("warning", str(cert), str(key))
    finally:
        server.stop()


def test_health_bind_must_differ_from_bind(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "tls")
    port = free_port()
    r = run_cli("serve", "--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--bind", f"127.0.0.1:{port}",
                "--health-bind", f"127.0.0.1:{port}")
    assert r.returncode == 2 and "--health-bind" in r.stderr and len(r.stderr.strip().splitlines()) == 1
