"""Slow-loris against the served webhook (``python -m webhook serve``, 2 workers, HTTPS):
200 connections that each send one byte and then nothing are held open (reopened whenever
the server closes one at its handshake deadline) while 500 real admissions go over 4
keep-alive connections opened after them. Every admission must succeed within the API
server's timeout for a webhook call (5 s, ``timeoutSeconds`` of the registration).

With a thread-per-connection server (gunicorn's gthread, which guards only a connection's
first byte), the one-byte connections take every thread and no admission is answered
(``docs/decisions/012-slow-clients.md``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest

from tests.support.webhook_builders import Server, make_pod, make_review, start_server
from webhook.registration import DEFAULT_TIMEOUT_SECONDS

SLOW = 200
ADMISSIONS = 500
CONNECTIONS = 4


class SlowClients:
    """``count`` connections that sent one byte (a TLS record's first) and then nothing,
    kept at that number by a thread until :meth:`stop`."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.socks: list[socket.socket] = []
        self.opened = 0
        self.fewest_open = count
        self._stop = threading.Event()
        for _ in range(count):
            self.socks.append(self._open())
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _open(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(b"\x16")
        s.setblocking(False)
        self.opened += 1
        return s

    def _closed(self, s: socket.socket) -> bool:
        try:
            return s.recv(1) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _keep(self) -> None:
        while not self._stop.wait(0.1):
            alive = 0
            for i, s in enumerate(self.socks):
                if self._closed(s):
                    s.close()
                    self.socks[i] = self._open()
                else:
                    alive += 1
            self.fewest_open = min(self.fewest_open, alive)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()


def test_slow_clients_do_not_stall_real_admissions(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    server: Server = start_server(tmp_path)
    slow = None
    try:
        slow = SlowClients(server.port, SLOW)
        review = json.dumps(make_review(make_pod().gang("g", "8").container().obj())).encode()
        latencies: list[float] = []
        failures: list[str] = []
        lock = threading.Lock()

        def admit(n: int) -> None:
            try:
                conn = server.connection(timeout=DEFAULT_TIMEOUT_SECONDS)
                for _ in range(n):
                    start = time.monotonic()
                    conn.request("POST", "/mutate", body=review, headers={"Content-Type": "application/json"})
                    r = conn.getresponse()
                    body = r.read()
                    took = time.monotonic() - start
                    ok = r.status == 200 and json.loads(body)["response"]["allowed"] is True
                    with lock:
                        latencies.append(took)
                        if not ok:
                            failures.append(f"{r.status}: {body[:200]!r}")
                conn.close()
            except OSError as e:  # includes the client's 5 s timeout
                with lock:
                    failures.append(f"{type(e).__name__}: {e}")

        start = time.monotonic()
        threads = [threading.Thread(target=admit, args=(ADMISSIONS // CONNECTIONS,)) for _ in range(CONNECTIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        elapsed = time.monotonic() - start
        slow.stop()
        latencies.sort()
        with capsys.disabled():
            print(f"\nslow-loris: {SLOW} one-byte connections held (fewest open at once {slow.fewest_open}, "
                  f"{slow.opened - SLOW} reopened after the server closed them); {len(latencies)} of {ADMISSIONS} "
                  f"admissions answered over {CONNECTIONS} keep-alive connections in {elapsed:.1f} s, "
                  f"{len(failures)} failed; latency p50 {latencies[len(latencies) // 2] * 1000 if latencies else 0:.1f} ms, "
                  f"max {latencies[-1] * 1000 if latencies else 0:.1f} ms")
        assert not failures, failures[:5]
        assert len(latencies) == ADMISSIONS
        assert latencies[-1] < DEFAULT_TIMEOUT_SECONDS
        assert slow.fewest_open >= SLOW * 0.9, "the slow connections were not held open during the admissions"
    finally:
        if slow is not None:
            slow.stop()
        server.stop()
