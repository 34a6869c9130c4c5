"""gunicorn settings for Troupe's webhook (read by ``python -m webhook serve``; usable as
``gunicorn -c python:webhook.gunicorn_conf``). Why these: ``docs/decisions/002-webhook.md``
and ``docs/decisions/012-slow-clients.md``.

- Workers of :class:`webhook.worker.GuardedWorker`, one per CPU, with keep-alive: each
  reads its connections with an event loop (a deadline on every TLS handshake and on every
  whole request, ``worker_connections`` as the cap on its connections), so slow or silent
  clients hold no thread; kube-apiserver keeps its connections to a webhook open, so after
  the first TLS handshake each review costs one request.
- ``keepalive`` above Go's ``IdleConnTimeout`` (90 s, which the apiserver's webhook client
  uses): the client, not the server, closes an idle connection, so the apiserver never
  sends a review on a connection the server is closing at that moment.
- TLS 1.2 minimum, and certificate files re-read when they change: the worker asks
  :meth:`webhook.tls.CertReloader.context` for every new connection.
- JSON logs (:class:`webhook.logs.GunicornJSONLogger`); no access log, since the app logs
  one line per admission.
- prometheus-client multiprocess mode: a dead worker's live gauges are dropped
  (``child_exit``); the directory the serve command created is removed at exit.
"""

from __future__ import annotations

import os
import shutil
from typing import Any


def _cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup v2 CPU quota.

    In a container, the affinity mask is the node's (dozens of CPUs on a GPU node) while
    the pod's ``limits.cpu`` is a quota (``cpu.max`` = ``"200000 100000"`` for 2 CPUs);
    sizing workers by the node would start far more than the limit and memory allow.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        with open(cpu_max, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):  # no cgroup v2 here, or no quota: the mask stands
        pass
    return cpus


workers = _cpus()
worker_class = "webhook.worker.GuardedWorker"
# The application runs in the worker's event loop: it is CPU-bound and answers in
# microseconds, so threads would only contend for the GIL (measured in decision 012).
threads = 1
keepalive = 120
# Open connections per worker (idle, handshaking, reading or being answered); at the cap the
# oldest connection without a complete request makes room (webhook.server).
worker_connections = 1000
# Each worker listens on its own SO_REUSEPORT socket, so the kernel spreads connections
# over the workers by their address hash. With one shared socket, whichever worker wakes
# first accepts a burst of new connections, and kept-alive connections stay where they
# landed: the apiserver's few long-lived connections could all end up on one worker (one
# core) while the other idles. Measured: half of the benchmark rounds ran at half speed.
reuse_port = True
timeout = 30
graceful_timeout = 10
accesslog = None
errorlog = "-"
loglevel = "info"
logger_class = "webhook.logs.GunicornJSONLogger"
# No runtime control socket: the webhook is managed by its Deployment, and a shared default
# path ($HOME/.gunicorn/gunicorn.ctl) would collide between instances on one machine.
control_socket_disable = True
# Request limits stay at gunicorn's defaults (line 4094 bytes, 100 headers); bodies are
# bounded by the server and the app (webhook.server.Limits, webhook.app.MAX_BODY_BYTES).


def child_exit(server: Any, worker: Any) -> None:
    """Tell prometheus-client that a worker died (multiprocess mode only)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]  # unannotated upstream


def on_exit(server: Any) -> None:
    """Remove the metrics directory that ``python -m webhook serve`` created for this run."""
    path = os.environ.get("TROUPE_OWNED_METRICS_DIR")
    if path and path == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(path, ignore_errors=True)
