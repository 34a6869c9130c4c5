"""The reconciler's HTTP server (``/metrics``, ``/healthz``, ``/readyz``, ``/topology/``) on a
free 127.0.0.1 port for a test, over a :class:`~reconciler.run.reconciler.Reconciler` that
starts nothing, and a plain GET of it."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Iterator

from reconciler.run.probes import Health, serve_http
from reconciler.run.reconciler import Reconciler


@contextlib.contextmanager
def serving(reconciler: Reconciler) -> Iterator[tuple[Health, int]]:
    """Serve ``reconciler`` as the leader; yields its :class:`Health` and the port. Stops the
    server and the reconciler's writer ports on exit."""
    health = Health()
    health.role, health.reconciler = "leader", reconciler
    server = serve_http("127.0.0.1", 0, health)
    try:
        yield health, server.server_port
    finally:
        server.shutdown()
        server.server_close()
        reconciler.writes.close()


def get(port: int, path: str) -> tuple[int, str]:
    """``(status, body)`` of a GET of ``path`` on the server at ``port`` (errors included)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
