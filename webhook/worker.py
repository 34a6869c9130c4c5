"""The gunicorn worker of ``python -m webhook serve``: gunicorn keeps the processes (one
per CPU, restarted when they die, heartbeats), and each worker serves its connections with
:class:`webhook.server.ConnectionServer`, an event loop with per-connection deadlines and a
connection cap (``docs/decisions/012-slow-clients.md``), instead of a thread per connection.

Configured as ``worker_class = "webhook.worker.GuardedWorker"`` (``webhook/gunicorn_conf.py``).
What ``serve`` knows beyond gunicorn's settings (the certificate files, which may not exist
yet; the plain-HTTP health address; the deadlines) reaches the worker as the application's
:attr:`Serving` attribute ``troupe_serving``. Run by plain ``gunicorn`` without it, the
worker serves TLS from gunicorn's ``certfile``/``keyfile`` (plain HTTP without them) with
the default deadlines.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace

from gunicorn import util
from gunicorn.workers.base import Worker

from webhook.server import CLOSE_REASONS, DEFAULT_LIMITS, ConnectionServer, Limits, Listener

#: What the plain-HTTP health port answers: no admission without TLS.
HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


@dataclass(frozen=True)
class Serving:
    """How ``python -m webhook serve`` wants its workers to serve: the TLS pair (paths,
    possibly not there yet), the plain-HTTP health address (``HOST:PORT`` as gunicorn binds
    it, or None) and the per-connection :class:`~webhook.server.Limits`."""

    cert_file: str | None
    key_file: str | None
    health_bind: str | None = None
    limits: Limits = DEFAULT_LIMITS


class GuardedWorker(Worker):  # type: ignore[misc]
    """A gunicorn worker whose connections are read by an event loop, so no client holds
    a thread (see :mod:`webhook.server`). ``threads`` > 1 runs the application in that many
    threads; ``keepalive`` is the idle keep-alive timeout, ``worker_connections`` the cap on
    this worker's connections."""

    def run(self) -> None:
        asyncio.run(self._serve())

    def _serving(self) -> Serving:
        serving = getattr(self.app, "troupe_serving", None)
        if not isinstance(serving, Serving):
            serving = Serving(self.cfg.certfile or None, self.cfg.keyfile or None)
        return replace(serving, limits=replace(
            serving.limits, keepalive_timeout=float(self.cfg.keepalive),
            max_connections=int(self.cfg.worker_connections)))

    async def _serve(self) -> None:
        from webhook import metrics
        from webhook.tls import reloader_for

        serving = self._serving()
        health = util.parse_address(serving.health_bind) if serving.health_bind else None
        tls = None
        if serving.cert_file and serving.key_file:
            tls = reloader_for(serving.cert_file, serving.key_file).context
        listeners = [
            Listener(s.sock, None, HEALTH_PATHS) if health is not None and s.cfg_addr == health
            else Listener(s.sock, tls)
            for s in self.sockets
        ]
        metrics.declare_close_reasons(CLOSE_REASONS)
        server = ConnectionServer(self.wsgi, listeners, serving.limits, threads=int(self.cfg.threads),
                                  closed=metrics.connection_closed, backlog=int(self.cfg.backlog))
        await server.start()
        try:
            while self.alive:
                self.notify()
                if self.ppid != os.getppid():
                    self.log.info("Parent changed, shutting down: %s", self)
                    break
                await asyncio.sleep(1.0)
        finally:
            await server.stop(float(self.cfg.graceful_timeout))
