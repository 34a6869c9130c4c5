"""The reconciler's HTTP server (``--metrics-bind``): ``/metrics`` (Prometheus),
``/healthz``, ``/readyz`` and ``/debug/gangs``, answered from a :class:`Health`, and the
topology map, read-only, under ``/topology/`` (:mod:`reconciler.tools.web.server`; its data
from :mod:`reconciler.run.topology`).

``/debug/gangs`` and ``/topology/data.json`` name every namespace's gangs: they answer only
a caller whose bearer token the API server authenticates, with the namespaces whose pods it
may list (:class:`~reconciler.daemon.access.Access`,
docs/decisions/049-hostile-tenants-third-round.md). A connection idle for
:data:`IDLE_SECONDS` is closed.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from reconciler.daemon.access import Access, Denied
from reconciler.run import topology
from reconciler.run.reconciler import Reconciler
from reconciler.tools.web import server as web


class Health:
    """What ``/healthz`` and ``/readyz`` report: the ``role`` (``starting``, ``standby``
    while campaigning for the Lease, ``leader``, or ``single`` without leader election)
    and the running :class:`Reconciler` once it acts."""

    def __init__(self) -> None:
        self.role = "starting"
        self.reconciler: Reconciler | None = None

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, body)``: a follower is ready (it stands by); a leader once synced.
        ``waiting_for`` names the informers that have not listed yet."""
        synced = self.reconciler is not None and self.reconciler.synced.is_set()
        ready = self.role == "standby" or (self.role in ("leader", "single") and synced)
        waiting = self.reconciler.waiting_for() if self.reconciler is not None and self.role != "standby" else []
        return ready, {"ready": ready, "role": self.role, "synced": synced, "waiting_for": waiting}

    def healthy(self) -> tuple[bool, str]:
        """``(healthy, why)``."""
        dead = self.reconciler.alive() if self.reconciler is not None else ""
        return (not dead, dead or "ok")


#: Seconds a connection may send nothing before it is closed (a client that opens
#: connections and sends nothing holds no thread for long).
IDLE_SECONDS = 30.0


class _Quiet(WSGIRequestHandler):
    timeout = IDLE_SECONDS  # the socket's timeout: a read that waits longer ends the connection

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve_http(host: str, port: int, health: Health, access: Access) -> WSGIServer:
    """Serve ``/metrics``, ``/healthz``, ``/readyz``, ``/debug/gangs`` and the topology map
    (``/topology/``) on ``host:port`` from a daemon thread; returns the server (``shutdown()``
    stops it). ``access`` decides who reads the gangs' pages (module docstring)."""
    metrics = make_wsgi_app()

    def scope(environ: Mapping[str, Any]) -> Callable[[str], bool] | None:
        found = access.scope(environ.get("HTTP_AUTHORIZATION"))
        return None if found.everything else found.sees

    def map_data() -> dict[str, Any]:
        if health.reconciler is None or health.role == "standby":
            raise RuntimeError(f"this reconciler is {health.role}: the leader's serves the map")
        return topology.page(health.reconciler)

    def probes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, why = health.healthy()
            body, status = why.encode(), "200 OK" if ok else "503 Service Unavailable"
            ctype = "text/plain"
        elif path == "/readyz":
            ok, info = health.ready()
            body, status, ctype = json.dumps(info).encode(), "200 OK" if ok else "503 Service Unavailable", "application/json"
        elif path == "/debug/gangs":
            try:
                sees = scope(environ)
            except Denied as e:
                status, ctype, body = web.denied(e)
                headers = [("Content-Type", ctype), ("Content-Length", str(len(body)))]
                if status.startswith("401"):
                    headers.append(("WWW-Authenticate", 'Bearer realm="troupe"'))
                start_response(status, headers)
                return [body]
            gangs = health.reconciler.controllers.gangs.status() if health.reconciler is not None else {}
            body = json.dumps([{"gang": k, "phase": p.value, "reason": r} for k, (p, r) in sorted(gangs.items())
                               if sees is None or sees(k.partition("/")[0])]).encode()
            status, ctype = "200 OK", "application/json"
        else:
            body, status, ctype = b"not found\n", "404 Not Found", "text/plain"
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    app = web.wsgi(web.CachedData(map_data), fallback=probes, scope=scope)
    server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
