"""Measure HTTP servers for the webhook against the hostile-client targets of decision 028.

    .venv/bin/python benchmarks/webhook_servers.py [--servers troupe,uvicorn,hypercorn]
                                                   [--targets slow,amplify,pipeline,idle,load]

Each server runs in a subprocess on a free 127.0.0.1 port with TLS, one worker process,
serving the same WSGI application (``webhook.app.create_app``; for the throughput target
also a bare Flask echo, ``webhook_load:echo_app``), configured with its own limits:

- ``troupe``: ``python -m webhook serve --workers 1`` (the event-loop worker of decision 012).
- ``uvicorn``: ``--interface wsgi --http h11 --limit-concurrency 1000 --timeout-keep-alive 120
  --h11-max-incomplete-event-size 16384 --backlog 2048`` (uvicorn has no TLS handshake or
  request-read deadline of its own: asyncio's 60 s handshake timeout applies).
- ``hypercorn``: ``keep_alive_timeout 120, read_timeout 10, ssl_handshake_timeout 5,
  h11_max_incomplete_size 16384, wsgi_max_body_size 8 MiB, backlog 2048`` (its asyncio worker).

Targets (the numbers are printed one line each, for ``docs/decisions/028``):

- ``slow``: 200 connections that each send one byte and then nothing (reopened when
  closed), then 500 admissions over 4 keep-alive connections: answered, slowest.
- ``amplify``: three ~0.9 MB CREATE reviews of a ``deviceshare.io/group`` pod whose
  containers are ``{}``, sent on connections that never read, while a fourth client keeps
  sending small admissions for ``--amplify-seconds``: that client's slowest admission and
  failures, and the server's peak RSS (all its processes) against its RSS before.
- ``pipeline``: 2,000 requests written at once on one connection: answers read.
- ``unread``: 2,000 admissions of a 100-container device-group pod (an answer of about
  33 KB each) written at once on a connection that never reads, while a concurrent client
  admits: that client's slowest admission and the server's peak RSS (backpressure).
- ``idle``: 1,000 TLS connections handshaken and left idle: RSS per connection.
- ``load``: ``wrk`` (8 keep-alive connections) on the admission app and on the bare echo,
  interleaved rounds: admissions/s, and the ratio to the echo on the same server.

Servers are stopped by their recorded pids. `make bench-servers` installs uvicorn and hypercorn (they are
not dependencies of Troupe) and ``wrk`` for ``load``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import webhook_load as wl

from tests.support.hostile_webhook import process_tree_rss_kib

REPO = wl.REPO
PYTHON = wl.PYTHON

#: ``python -m uvicorn ...`` / ``hypercorn`` serve this module's ``troupe_app``.
HYPERCORN_CONFIG = """
keep_alive_timeout = 120
read_timeout = 10
ssl_handshake_timeout = 5
h11_max_incomplete_size = 16384
wsgi_max_body_size = 8 * 1024 * 1024
backlog = 2048
workers = 1
worker_class = "asyncio"
accesslog = None
"""


def troupe_app_factory() -> Any:
    """The webhook's Flask app with the default configuration (what ``serve`` loads)."""
    from troupe.config import Config
    from webhook.app import create_app

    return create_app(Config())


def server_argv(kind: str, app: str, port: int, cert: str, key: str, work: Path) -> list[str]:
    """The command line of server ``kind`` serving ``app`` (``troupe`` or ``echo``)."""
    if kind == "troupe":
        if app == "troupe":
            return [PYTHON, "-m", "webhook", "serve", "--tls-cert", cert, "--tls-key", key,
                    "--bind", f"127.0.0.1:{port}", "--workers", "1"]
        return [PYTHON, "-m", "gunicorn", "-c", "python:webhook.gunicorn_conf", "--certfile", cert,
                "--keyfile", key, "--bind", f"127.0.0.1:{port}", "--workers", "1",
                "--pythonpath", str(REPO / "benchmarks"), "webhook_load:echo_app"]
    target = "benchmarks.webhook_servers:troupe_app_factory()" if app == "troupe" else "benchmarks.webhook_load:echo_app"
    if kind == "uvicorn":
        factory = ["--factory", "webhook_servers:troupe_app_factory"] if app == "troupe" else ["webhook_load:echo_app"]
        return [PYTHON, "-m", "uvicorn", "--app-dir", str(REPO / "benchmarks"), "--interface", "wsgi",
                "--http", "h11", "--loop", "asyncio", "--host", "127.0.0.1", "--port", str(port),
                "--ssl-certfile", cert, "--ssl-keyfile", key, "--limit-concurrency", "1000",
                "--timeout-keep-alive", "120", "--h11-max-incomplete-event-size", "16384",
                "--backlog", "2048", "--no-access-log", "--log-level", "warning", *factory]
    conf = work / "hypercorn_conf.py"
    conf.write_text(HYPERCORN_CONFIG)
    return [PYTHON, "-m", "hypercorn", "--config", f"file:{conf}", "--certfile", cert, "--keyfile", key,
            "--bind", f"127.0.0.1:{port}", target]


class Target:
    """One running server: its port, process, TLS client context."""

    def __init__(self, server: wl.Server, ctx: ssl.SSLContext) -> None:
        self.server, self.ctx, self.port = server, ctx, server.port

    def https(self, timeout: float = 5.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)

    def tls_socket(self, rcvbuf: int | None = None) -> ssl.SSLSocket:
        raw = socket.socket()
        if rcvbuf is not None:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        raw.settimeout(10)
        raw.connect(("127.0.0.1", self.port))
        return self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def _admissions(target: Target, body: bytes, count: int, connections: int, deadline_s: float) -> tuple[int, list[str], float]:
    """``count`` admissions over ``connections`` keep-alive connections: (answered 200,
    failures, slowest seconds)."""
    lock = threading.Lock()
    answered, failures, slowest = [0], [], [0.0]

    def run(n: int) -> None:
        try:
            conn = target.https(timeout=deadline_s)
            for _ in range(n):
                start = time.monotonic()
                conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                with lock:
                    slowest[0] = max(slowest[0], time.monotonic() - start)
                    if r.status == 200:
                        answered[0] += 1
                    else:
                        failures.append(str(r.status))
        except OSError as e:
            with lock:
                failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(count // connections,)) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return answered[0], failures, slowest[0]


def slow(target: Target, review: bytes) -> str:
    """200 one-byte connections held open while 500 admissions are answered."""
    socks: list[socket.socket] = []
    stop = threading.Event()
    reopened = [0]

    def one() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", target.port), timeout=5)
        s.sendall(b"\x16")
        s.setblocking(False)
        return s

    def keep() -> None:
        while not stop.wait(0.1):
            for i, s in enumerate(socks):
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    socks[i] = one()
                    reopened[0] += 1

    socks.extend(one() for _ in range(200))
    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()
    start = time.monotonic()
    answered, failures, slowest = _admissions(target, review, 500, 4, 5.0)
    took = time.monotonic() - start
    stop.set()
    keeper.join(5)
    for s in socks:
        s.close()
    return (f"slow: {answered}/500 answered in {took:.1f} s, slowest {slowest * 1000:.0f} ms, "
            f"{len(failures)} failed {failures[:2]}, slow connections reopened {reopened[0]}")


def amplification_review(size: int = 900_000) -> bytes:
    """A CREATE review of a device-group pod whose containers are ``{}``, about ``size`` bytes."""
    head = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "amp", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml", "operation": "CREATE",
        "userInfo": {"username": "mallory"}, "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "amp", "namespace": "ml", "annotations": {"deviceshare.io/group": "g"}},
            "spec": {"containers": "HOLE"}}}}).encode()
    containers = b"[" + b",".join([b"{}"] * (size // 3)) + b"]"
    return head.replace(b'"HOLE"', containers)


def _post(body: bytes, path: str = "/mutate") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class PeakRss:
    """The server's resident memory before, at its peak while sampled (every 50 ms) and at
    the end, KiB: ``with PeakRss(pid) as rss: ...``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.base = self.peak = self.end = process_tree_rss_kib(pid)
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, process_tree_rss_kib(self.pid))

    def __enter__(self) -> PeakRss:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join(2)
        self.end = process_tree_rss_kib(self.pid)


def concurrent_client(target: Target, review: bytes, seconds: float) -> tuple[list[float], list[str]]:
    """Admissions of ``review`` one after another (20 ms apart) for ``seconds``, on a
    connection opened again after an error: each one's latency (seconds) and what failed."""
    latencies: list[float] = []
    failures: list[str] = []
    end = time.monotonic() + seconds
    conn = target.https(timeout=30)
    while time.monotonic() < end:
        start = time.monotonic()
        try:
            conn.request("POST", "/mutate", body=review, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failures.append(str(r.status))
        except OSError as e:
            failures.append(type(e).__name__)
            conn.close()
            conn = target.https(timeout=30)
        latencies.append(time.monotonic() - start)
        time.sleep(0.02)
    conn.close()
    return latencies, failures


def amplify(target: Target, review: bytes, seconds: float) -> str:
    """Three ~0.9 MB amplifying reviews never read, and a concurrent client."""
    with PeakRss(target.server.pid) as rss:
        hostile = []
        big = _post(amplification_review())
        for _ in range(3):
            s = target.tls_socket(rcvbuf=4096)
            threading.Thread(target=s.sendall, args=(big,), daemon=True).start()
            hostile.append(s)
        latencies, failures = concurrent_client(target, review, seconds)
    for s in hostile:
        s.close()
    over_5s = sum(1 for x in latencies if x >= 5)
    return (f"amplify: RSS {rss.base / 1024:.0f} MiB before, peak {rss.peak / 1024:.0f} MiB, {rss.end / 1024:.0f} MiB "
            f"at the end; concurrent client: {len(latencies)} admissions, slowest {max(latencies):.2f} s, "
            f"{over_5s} over 5 s, {len(failures)} failed {failures[:2]}")


def unread(target: Target, review: bytes, seconds: float, count: int = 2000) -> str:
    """``count`` pipelined admissions with large answers on a connection that never reads."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wide", "namespace": "ml", "annotations": {
        "deviceshare.io/group": "g"}}, "spec": {"containers": [{"name": f"c{i}"} for i in range(100)]}}
    wide = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "wide", "operation": "CREATE", "namespace": "ml", "userInfo": {"username": "mallory"},
        "object": pod}}).encode()
    with PeakRss(target.server.pid) as rss:
        hostile = target.tls_socket(rcvbuf=4096)
        threading.Thread(target=lambda: _quiet_send(hostile, _post(wide) * count), daemon=True).start()
        latencies, failures = concurrent_client(target, review, seconds)
    hostile.close()
    return (f"unread: RSS {rss.base / 1024:.0f} MiB before, peak {rss.peak / 1024:.0f} MiB; concurrent client "
            f"{len(latencies) - len(failures)} answered, {len(failures)} failed, slowest {max(latencies):.2f} s")


def _quiet_send(sock: ssl.SSLSocket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the server may close it
        sock.sendall(data)


def pipeline(target: Target, count: int = 2000) -> str:
    """``count`` GET /healthz written at once on one connection: answers read."""
    s = target.tls_socket()
    s.settimeout(30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * count)
    data = b""
    start = time.monotonic()
    try:
        while data.count(b"HTTP/1.1 200") < count and time.monotonic() - start < 30:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (OSError, ssl.SSLError) as e:
        data += f" ({type(e).__name__})".encode()
    s.close()
    return f"pipeline: {data.count(b'HTTP/1.1 200')}/{count} answered in {time.monotonic() - start:.1f} s"


def idle(target: Target, count: int = 1000) -> str:
    """``count`` handshaken TLS connections left idle: RSS per connection."""
    time.sleep(0.5)
    base = process_tree_rss_kib(target.server.pid)
    socks = []
    try:
        for _ in range(count):
            socks.append(target.tls_socket())
    except OSError as e:
        pass_note = f" (stopped at {len(socks)}: {type(e).__name__})"
    else:
        pass_note = ""
    time.sleep(1.0)
    grown = process_tree_rss_kib(target.server.pid) - base
    answered = "yes"
    try:
        conn = target.https(timeout=5)
        conn.request("GET", "/healthz")
        answered = str(conn.getresponse().status)
        conn.close()
    except OSError as e:
        answered = type(e).__name__
    for s in socks:
        s.close()
    return (f"idle: {len(socks)} idle TLS connections{pass_note}: +{grown / 1024:.0f} MiB "
            f"({grown / max(1, len(socks)):.0f} KiB each); a new client then got {answered}")


def load(kind: str, targets: dict[str, Target], lua: Path, rounds: int, seconds: float) -> str:
    """wrk on the admission app and on the echo, interleaved: admissions/s and ratio."""
    counts: dict[str, list[float]] = {"troupe": [], "echo": []}
    for name in counts:  # warm-up
        wl.run_wrk(f"https://127.0.0.1:{targets[name].port}/mutate", lua, 1, 8, 2)
    for _ in range(rounds):
        for name in counts:
            r = wl.run_wrk(f"https://127.0.0.1:{targets[name].port}/mutate", lua, seconds, 8, 2)
            counts[name].append(r["requests"] / (r["duration_us"] / 1e6))
    ratios = sorted(t / e for t, e in zip(counts["troupe"], counts["echo"], strict=True) if e)
    mean = {name: sum(v) / len(v) for name, v in counts.items()}
    return (f"load ({kind}, 1 worker): admissions {mean['troupe']:.0f}/s, echo {mean['echo']:.0f}/s, "
            f"median paired ratio {ratios[len(ratios) // 2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="troupe,uvicorn,hypercorn")
    p.add_argument("--targets", default="slow,amplify,pipeline,unread,idle,load")
    p.add_argument("--amplify-seconds", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--round-seconds", type=float, default=3.0)
    args = p.parse_args(argv)
    from certs import create_ca, create_serving_cert

    work = Path(tempfile.mkdtemp(prefix="troupe-servers-"))
    ca = create_ca()
    pair = create_serving_cert(ca, ["127.0.0.1", "localhost"])
    (work / "ca.crt").write_bytes(ca.cert_pem)
    (work / "tls.crt").write_bytes(pair.cert_pem)
    (work / "tls.key").write_bytes(pair.key_pem)
    cert, key = str(work / "tls.crt"), str(work / "tls.key")
    ctx = ssl.create_default_context(cafile=str(work / "ca.crt"))
    review = json.dumps(wl.gang_pod_review()).encode()
    (work / "review.json").write_bytes(review)
    lua = work / "post.lua"
    lua.write_text(wl._LUA % {"body": work / "review.json"})
    wanted = args.targets.split(",")
    steps: dict[str, Callable[[Target], str]] = {
        "slow": lambda t: slow(t, review),
        "amplify": lambda t: amplify(t, review, args.amplify_seconds),
        "pipeline": pipeline,
        "unread": lambda t: unread(t, review, args.amplify_seconds),
        "idle": idle,
    }
    try:
        for kind in args.servers.split(","):
            for step in [s for s in wanted if s in steps]:
                port = wl.free_port()
                server = wl.Server(kind, server_argv(kind, "troupe", port, cert, key, work), port, work / f"{kind}.log")
                try:
                    server.wait_ready(ctx)
                    print(f"{kind}: {steps[step](Target(server, ctx))}", flush=True)
                except Exception as e:  # noqa: BLE001  a measurement that broke is a result too
                    print(f"{kind}: {step}: failed: {type(e).__name__}: {e}", flush=True)
                finally:
                    server.stop()
            if "load" in wanted and shutil.which("wrk"):
                targets: dict[str, Target] = {}
                servers = []
                try:
                    for app in ("troupe", "echo"):
                        port = wl.free_port()
                        server = wl.Server(f"{kind}-{app}", server_argv(kind, app, port, cert, key, work), port,
                                           work / f"{kind}-{app}.log")
                        servers.append(server)
                        server.wait_ready(ctx)
                        targets[app] = Target(server, ctx)
                    print(f"{kind}: {load(kind, targets, lua, args.rounds, args.round_seconds)}", flush=True)
                finally:
                    for server in servers:
                        server.stop()
    finally:
        if os.environ.get("KEEP_BENCH"):
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
