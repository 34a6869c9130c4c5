"""Load benchmark of Troupe's webhook over HTTPS with keep-alive, against a bare Flask echo.

    .venv/bin/python benchmarks/webhook_load.py [--duration 10] [--connections 8] [--check]

Starts two servers on free 127.0.0.1 ports with the same gunicorn settings
(``webhook/gunicorn_conf.py``: the event-loop worker, keep-alive, TLS 1.2+, same worker and thread
counts): ``python -m webhook serve`` and a Flask app that echoes the request body. After a
short warm-up, ``wrk`` (Debian's ``apt-get install wrk``; HTTPS, keep-alive, a Lua script
POSTing a realistic AdmissionReview of a gang pod) loads them in turn, ``--rounds``
interleaved rounds sharing ``--duration`` seconds per target, so that a slow moment of a
shared machine hits both alike; both are then stopped by their recorded pids. Without
wrk, a Python client in two processes stands in (it competes for the same two cores, so
its numbers are lower). ``KEEP_BENCH=1`` keeps the work directory (certificates, Lua
script, server logs).

Prints requests/s (over all rounds) and p50/p99 latency (of the median round) for both,
the ratio (over all rounds, and the median of the per-round ratios: the one checked, since
a round that another process slows down moves the total but not the median of the paired
ratios), an in-process measure of
``mutate`` against the deep-copy + ``jsonpatch.make_patch`` alternative. Targets (two
cores): Troupe >= 70% of the echo's throughput, >= 2,000 admissions/s, p99 < 10 ms;
``--check`` exits 1 if one is missed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
sys.path.insert(0, str(REPO))

TARGET_RATIO = 0.70
TARGET_RPS = 2000.0
TARGET_P99_MS = 10.0


def _echo_app() -> Any:
    from flask import Flask, Response, request

    app = Flask("echo")

    @app.post("/mutate")
    def echo() -> Response:
        return Response(request.get_data(), mimetype="application/json")

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    return app


#: The bare echo, served by gunicorn as ``webhook_load:echo_app`` with the webhook's settings.
echo_app = _echo_app()


def gang_pod_review(index: int = 3) -> dict[str, Any]:
    """A realistic AdmissionReview: a pod of an indexed Job, member of a gang of 8 with a
    topology preference, GPUs, a sidecar, env, volumes and the defaulted fields the
    apiserver fills in before mutating admission."""
    env = [{"name": f"TRAIN_VAR_{i}", "value": f"value-{i}"} for i in range(8)]
    env.append({"name": "RANK", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}})
    pod = {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "generateName": "llama-train-", "namespace": "ml-team",
            "labels": {"batch.kubernetes.io/controller-uid": "5f2c2a1e-8c1f-4d8e-9a52-6a1f0e2b9c11",
                       "batch.kubernetes.io/job-name": "llama-train", "controller-uid": "5f2c2a1e-8c1f-4d8e-9a52-6a1f0e2b9c11",
                       "job-name": "llama-train", "batch.kubernetes.io/job-completion-index": str(index),
                       "app.kubernetes.io/name": "llama-train"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index),
                            "troupe.io/gang-name": "llama-train", "troupe.io/gang-size": "8",
                            "troupe.io/topology-preferred-level": "cloud.google.com/gce-topology-subblock"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-train",
                                 "uid": "5f2c2a1e-8c1f-4d8e-9a52-6a1f0e2b9c11", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                        {"name": "kube-api-access-x7k2p", "projected": {"sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}],
                            "defaultMode": 420}}],
            "containers": [
                {"name": "trainer", "image": "registry.example.com/ml/llama-train:2.4.1",
                 "command": ["torchrun"], "args": ["--nnodes=8", "--nproc-per-node=8", "train.py"],
                 "env": env,
                 "resources": {"limits": {"cpu": "90", "memory": "900Gi", "nvidia.com/gpu": "8"},
                               "requests": {"cpu": "90", "memory": "900Gi", "nvidia.com/gpu": "8"}},
                 "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                  {"name": "data", "mountPath": "/data", "readOnly": True},
                                  {"name": "kube-api-access-x7k2p", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                 "imagePullPolicy": "IfNotPresent"},
                {"name": "metrics-sidecar", "image": "registry.example.com/ml/dcgm-exporter:3.3",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                 "imagePullPolicy": "IfNotPresent"},
            ],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "hostname": f"llama-train-{index}", "subdomain": "llama-train",
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {},
    }
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0e8f2b5c-6f1a-4c7e-9d3b-2a4c6e8f0a1b",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml-team", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                         "uid": "9a3b1c2d-0000-4000-8000-000000000001",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": pod, "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("%(body)s", "rb")
wrk.body = f:read("*a")
f:close()

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, "max_us": %%d, ' ..
    '"connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


@dataclass
class Result:
    """One load run: throughput, latency percentiles (ms), and failed or non-2xx requests."""

    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    tool: str


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server subprocess started with ``argv``, stopped by its recorded pid."""

    def __init__(self, name: str, argv: Sequence[str], port: int, log_path: Path) -> None:
        self.name, self.port = name, port
        self.log = open(log_path, "wb")  # noqa: SIM115  closed in stop()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.proc = subprocess.Popen(list(argv), cwd=REPO, env=env, stdout=self.log, stderr=self.log)
        self.pid = self.proc.pid

    def wait_ready(self, ctx: ssl.SSLContext, timeout: float = 20.0) -> None:
        import http.client

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become healthy in {timeout}s; see {self.log.name}")

    def stop(self) -> None:
        if self.log.closed:
            return
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def run_wrk(url: str, lua: Path, duration: float, connections: int, threads: int) -> dict[str, int]:
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "5s",
           "-s", str(lua), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
    result: dict[str, int] = json.loads(line[len("RESULT "):])
    return result


def _py_client(args: tuple[str, int, bytes, str, float, int]) -> tuple[int, int, list[float]]:
    import http.client

    host, port, body, cafile, duration, conns = args
    import threading

    ctx = ssl.create_default_context(cafile=cafile)
    lat: list[float] = []
    counts = [0, 0]
    lock = threading.Lock()
    stop_at = time.monotonic() + duration

    def loop() -> None:
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=5)
        mine: list[float] = []
        ok = bad = 0
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                ok, bad = (ok + 1, bad) if r.status == 200 else (ok, bad + 1)
            except OSError:
                bad += 1
                conn.close()
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)
            counts[0] += ok
            counts[1] += bad

    ts = [threading.Thread(target=loop) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts[0], counts[1], lat


def run_python_client(port: int, body: bytes, cafile: str, duration: float, connections: int) -> dict[str, int]:
    from multiprocessing import Pool

    procs = 2
    with Pool(procs) as pool:
        parts = pool.map(_py_client, [("127.0.0.1", port, body, cafile, duration, connections // procs)] * procs)
    lat = sorted(x for p in parts for x in p[2])
    ok, bad = sum(p[0] for p in parts), sum(p[1] for p in parts)
    pct = lambda q: int(lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6) if lat else 0  # noqa: E731
    return {"requests": ok + bad, "duration_us": int(duration * 1e6), "p50_us": pct(0.50),
            "p99_us": pct(0.99), "max_us": pct(1.0), "connect": 0, "read": 0, "write": 0,
            "status": bad, "timeout": 0}


def measure(servers: Sequence[tuple[str, Server]], lua: Path, body: bytes, cafile: str,
            args: argparse.Namespace) -> list[Result]:
    """Load each server in turn, ``args.rounds`` times interleaved (so that a slow moment of a
    shared machine hits both alike); throughput over all rounds, latency of the median round."""
    use_wrk = shutil.which("wrk") is not None and not args.python_client
    per_round = max(1.0, args.duration / args.rounds)

    def once(server: Server, seconds: float) -> dict[str, int]:
        if use_wrk:
            url = f"https://127.0.0.1:{server.port}/mutate"
            return run_wrk(url, lua, seconds, args.connections, args.wrk_threads)
        return run_python_client(server.port, body, cafile, seconds, args.connections)

    for _, server in servers:
        once(server, args.warmup)
    rounds: dict[str, list[dict[str, int]]] = {name: [] for name, _ in servers}
    for _ in range(args.rounds):
        for name, server in servers:
            rounds[name].append(once(server, per_round))
            if args.verbose:
                r = rounds[name][-1]
                print(f"  round {len(rounds[name])}: {name}: {r['requests'] / (r['duration_us'] / 1e6):.0f} req/s, "
                      f"p99 {r['p99_us'] / 1000:.2f} ms", file=sys.stderr)
    results = []
    names = [name for name, _ in servers]
    paired = sorted(t["requests"] / e["requests"] for e, t in zip(rounds[names[0]], rounds[names[1]], strict=True)
                    if e["requests"])
    args.paired_ratio = paired[len(paired) // 2] if paired else 0.0
    for name, rs in rounds.items():
        requests = sum(r["requests"] for r in rs)
        seconds = sum(r["duration_us"] for r in rs) / 1e6
        errors = sum(r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"] for r in rs)
        median = sorted(rs, key=lambda r: r["p99_us"])[len(rs) // 2]
        results.append(Result(name, requests / seconds, median["p50_us"] / 1000, median["p99_us"] / 1000,
                              errors, "wrk" if use_wrk else "python"))
    return results


def in_process(review: dict[str, Any], n: int = 20000) -> tuple[float, float]:
    """(mutate µs per call, deep copy + jsonpatch.make_patch µs per call) on ``review``."""
    import jsonpatch

    from troupe.config import Config
    from webhook.admission import mutate, patch_of

    config = Config()
    t0 = time.perf_counter()
    for _ in range(n):
        out = mutate(review, config)
    direct = (time.perf_counter() - t0) / n * 1e6
    ops = patch_of(out)
    pod = review["request"]["object"]
    m = n // 10
    t0 = time.perf_counter()
    for _ in range(m):
        new = copy.deepcopy(pod)
        new = jsonpatch.apply_patch(new, ops)  # stands in for mutating the copy in place
        jsonpatch.make_patch(pod, new).to_string()
    diffed = (time.perf_counter() - t0) / m * 1e6
    return direct, diffed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per target (default 10)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds per target (default 5)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per target (default 2)")
    p.add_argument("--connections", type=int, default=8, help="keep-alive connections (default 8)")
    p.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers for both servers (default 2)")
    p.add_argument("--threads", type=int, default=None, help="threads per worker (default: gunicorn_conf)")
    p.add_argument("--python-client", action="store_true", help="use the Python client even if wrk exists")
    p.add_argument("--verbose", action="store_true", help="print every round")
    p.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = p.parse_args(argv)

    from certs import create_ca, create_serving_cert

    work = Path(tempfile.mkdtemp(prefix="troupe-bench-"))
    servers: list[Server] = []
    try:
        ca = create_ca()
        pair = create_serving_cert(ca, ["127.0.0.1", "localhost"])
        (work / "ca.crt").write_bytes(ca.cert_pem)
        (work / "tls.crt").write_bytes(pair.cert_pem)
        (work / "tls.key").write_bytes(pair.key_pem)
        review = gang_pod_review()
        body = json.dumps(review).encode()
        (work / "review.json").write_bytes(body)
        lua = work / "post.lua"
        lua.write_text(_LUA % {"body": work / "review.json"})
        cafile = str(work / "ca.crt")
        ctx = ssl.create_default_context(cafile=cafile)
        cert, key = str(work / "tls.crt"), str(work / "tls.key")
        threads = ["--threads", str(args.threads)] if args.threads else []

        echo_port, troupe_port = free_port(), free_port()
        echo = Server("bare echo", [
            PYTHON, "-m", "gunicorn", "-c", "python:webhook.gunicorn_conf", "--certfile", cert, "--keyfile", key,
            "--bind", f"127.0.0.1:{echo_port}", "--workers", str(args.workers), *threads,
            "--pythonpath", str(REPO / "benchmarks"), "webhook_load:echo_app"], echo_port, work / "echo.log")
        servers.append(echo)
        troupe = Server("troupe", [
            PYTHON, "-m", "webhook", "serve", "--tls-cert", cert, "--tls-key", key,
            "--bind", f"127.0.0.1:{troupe_port}", "--workers", str(args.workers), *threads],
            troupe_port, work / "troupe.log")
        servers.append(troupe)
        for s in servers:
            s.wait_ready(ctx)

        import http.client

        conn = http.client.HTTPSConnection("127.0.0.1", troupe_port, context=ctx)
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        conn.close()
        assert answer["response"]["uid"] == review["request"]["uid"] and "patch" in answer["response"], answer

        results = measure([("bare flask echo", echo), ("troupe webhook", troupe)], lua, body, cafile, args)
        for s in servers:
            s.stop()
        direct_us, diffed_us = in_process(review)
    finally:
        for s in servers:
            s.stop()
        if os.environ.get("KEEP_BENCH"):
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)

    cpus = len(os.sched_getaffinity(0))
    tool = results[0].tool
    print(f"webhook load: {tool}, {args.connections} keep-alive HTTPS connections, {args.duration:.0f}s per "
          f"target in {args.rounds} interleaved rounds, {args.workers} workers, {cpus} CPUs, body {len(body)} bytes")
    print(f"{'target':<18}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>9}")
    for r in results:
        print(f"{r.name:<18}{r.rps:>10.0f}{r.p50_ms:>10.2f}{r.p99_ms:>10.2f}{r.errors:>9}")
    echo_r, troupe_r = results
    ratio = troupe_r.rps / echo_r.rps if echo_r.rps else 0.0
    print(f"ratio troupe/echo: {ratio:.2f} over all rounds; median of the per-round ratios {args.paired_ratio:.2f}")
    print(f"in-process: mutate {direct_us:.1f} us/review; deep copy + jsonpatch.make_patch "
          f"{diffed_us:.1f} us/review ({diffed_us / direct_us:.0f}x)")
    checks = [
        (f"throughput ratio >= {TARGET_RATIO:.0%} (median of the paired rounds)",
         args.paired_ratio >= TARGET_RATIO),
        (f"troupe >= {TARGET_RPS:,.0f} admissions/s", troupe_r.rps >= TARGET_RPS),
        (f"troupe p99 < {TARGET_P99_MS:.0f} ms", troupe_r.p99_ms < TARGET_P99_MS),
        ("no errors", troupe_r.errors == 0 and echo_r.errors == 0),
    ]
    for label, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {label}")
    return 0 if all(ok for _, ok in checks) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
