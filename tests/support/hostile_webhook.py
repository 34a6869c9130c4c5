"""Hostile clients of the served webhook (``docs/decisions/028-webhook-bounds-and-server.md``):
reviews that are well-formed but costly (many empty containers, deep nesting, huge strings),
connections that send and never read, a concurrent client timing its admissions, and the
server's resident memory (all its processes, from /proc).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import threading
import time
from typing import Any

from tests.support.webhook_builders import Server, make_pod, make_review

#: The chart's memory limit for a webhook pod (charts/troupe/values.yaml), KiB.
POD_MEMORY_LIMIT_KIB = 256 * 1024
#: A concurrent admission must be answered well within the API server's 5 s, seconds.
LATENCY_BOUND_S = 2.0


def process_tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (gunicorn and its workers), KiB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        try:
            with open(f"/proc/{current}/status", encoding="ascii") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def review_bytes(annotations: dict[str, str], spec_json: bytes, uid: str = "hostile") -> bytes:
    """A CREATE review of a pod with ``annotations`` whose ``spec`` is the raw JSON
    ``spec_json`` (built as bytes, so that megabytes of it cost no Python objects here)."""
    review = make_review({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "hostile", "namespace": "ml", "annotations": annotations}, "spec": "SPEC"}, uid=uid)
    return json.dumps(review).encode().replace(b'"SPEC"', spec_json)


def empty_containers_spec(count: int, field: str = "containers") -> bytes:
    """``{"<field>": [{}, {}, ...]}`` with ``count`` empty containers (3 bytes each)."""
    return b'{"' + field.encode() + b'":[' + b",".join([b"{}"] * count) + b"]}"


def post(body: bytes, path: str = "/mutate") -> bytes:
    """An HTTP/1.1 POST of ``body`` as JSON."""
    return (f"POST {path} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def send_never_read(server: Server, body: bytes) -> ssl.SSLSocket:
    """Open a TLS connection with a 4 KiB receive buffer, send ``body`` as a POST from a
    thread, and never read; the caller closes the socket."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock = server.tls.client_context().wrap_socket(raw, server_hostname="127.0.0.1")

    def send() -> None:
        with contextlib.suppress(OSError):  # the server may refuse and close before it is all sent
            sock.sendall(post(body))

    threading.Thread(target=send, daemon=True).start()
    return sock


class Watch:
    """While running: a client sending small gang-pod admissions one after another on a
    keep-alive connection (``latencies`` in seconds, ``failures``), and the server's peak
    resident memory (``peak_kib``, sampled every 50 ms)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.review = json.dumps(make_review(make_pod().gang("g", "8").container().obj())).encode()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.base_kib = self.peak_kib = process_tree_rss_kib(server.proc.pid)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._admit, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]
        for t in self._threads:
            t.start()

    def _admit(self) -> None:
        conn: Any = None
        while not self._stop.wait(0.02):
            start = time.monotonic()
            try:
                conn = conn or self.server.connection(timeout=30)
                conn.request("POST", "/mutate", body=self.review, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                if r.status != 200 or json.loads(body)["response"]["allowed"] is not True:
                    self.failures.append(f"{r.status}: {body[:200]!r}")
            except OSError as e:
                self.failures.append(f"{type(e).__name__}: {e}")
                conn = None
            self.latencies.append(time.monotonic() - start)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_kib = max(self.peak_kib, process_tree_rss_kib(self.server.proc.pid))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def summary(self) -> str:
        slowest = max(self.latencies, default=0.0)
        return (f"RSS {self.base_kib // 1024} MiB before, peak {self.peak_kib // 1024} MiB; concurrent client "
                f"{len(self.latencies)} admissions, slowest {slowest:.2f} s, {len(self.failures)} failed")
