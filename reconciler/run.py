"""``python -m reconciler run``: informers -> cache -> work queue -> gang controller -> writes.

One worker processes gangs one at a time, so two gangs are never planned against the same
free capacity; the engine is fast enough that this is not the bottleneck (see
``benchmarks/placement.py``). Pod and node watches keep the cache current; a change that
may free capacity (a pod deleted or finished, a node changed) re-queues every pending
gang.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from reconciler import kube
from reconciler.cache import TERMINAL_PHASES, ClusterCache
from reconciler.controller import GangController
from reconciler.lifecycle import Phase
from reconciler.queue import ShutDown, WorkQueue
from troupe.config import Config

log = logging.getLogger("reconciler")

RECONCILES = Counter("troupe_reconciles_total", "Gang reconciles, by resulting phase.", ["phase"])
RECONCILE_ERRORS = Counter("troupe_reconcile_errors_total", "Reconciles that raised an unexpected error.")
RECONCILE_SECONDS = Histogram(
    "troupe_reconcile_duration_seconds", "Time to reconcile one gang (plan and writes), seconds.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
GANGS = Gauge("troupe_gangs", "Gangs known to the reconciler, by phase.", ["phase"])
QUEUE_DEPTH = Gauge("troupe_workqueue_depth", "Gang keys waiting in the work queue.")

#: Seconds after an unexpected reconcile error before the gang is tried again.
ERROR_RETRY_SECONDS = 5.0


class Reconciler:
    """The running reconciler: owns the informers, the queue and the worker thread."""

    def __init__(self, api: Any, config: Config) -> None:
        self.config = config
        self.cache = ClusterCache(config)
        self.queue = WorkQueue()
        self.controller = GangController(self.cache, kube.KubeWriter(api), config)
        self.pods = kube.Informer(kube.pods(api), self._pods_listed, self._pod_event)
        self.nodes = kube.Informer(kube.nodes(api), self._nodes_listed, self._node_event)
        self.jobs = kube.Informer(kube.jobs(api), self._jobs_listed, self._job_event)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="gang-worker", daemon=True)

    # --- feeding the queue -----------------------------------------------------------
    def _enqueue(self, keys: set[str] | list[str]) -> None:
        for key in keys:
            self.queue.add(key)

    def _pods_listed(self, items: list[Mapping[str, Any]]) -> None:
        self._enqueue(self.cache.replace_pods(items))

    def _pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        self._enqueue(self.cache.pod_event(kind, pod))
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in TERMINAL_PHASES:
            self._enqueue(self.cache.pending_gangs())  # capacity may have been freed

    def _nodes_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.replace_nodes(items)
        self._enqueue(self.cache.pending_gangs())

    def _node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        self.cache.node_event(kind, node)
        self._enqueue(self.cache.pending_gangs())

    def _jobs_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.replace_jobs(items)
        self._enqueue(self.cache.pending_gangs())

    def _job_event(self, kind: str, job: Mapping[str, Any]) -> None:
        self.cache.job_event(kind, job)
        self._enqueue(self.cache.pending_gangs())  # a GKE auto-gang's size may have changed

    # --- the worker ------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                key = self.queue.get()
            except ShutDown:
                return
            if key is None:
                continue
            start = time.perf_counter()
            try:
                outcome = self.controller.reconcile(key)
            except Exception:
                RECONCILE_ERRORS.inc()
                log.exception("gang %s: reconcile failed; retrying in %.0fs", key, ERROR_RETRY_SECONDS)
                self.queue.add_after(key, ERROR_RETRY_SECONDS)
            else:
                if outcome is not None:
                    RECONCILES.labels(outcome.phase.value).inc()
                    if outcome.requeue_after is not None:
                        self.queue.add_after(key, outcome.requeue_after)
            finally:
                RECONCILE_SECONDS.observe(time.perf_counter() - start)
                self.queue.done(key)
                self._update_gauges()

    def _update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for state in self.controller.states.values():
            if state.phase is not None:
                counts[state.phase.value] = counts.get(state.phase.value, 0) + 1
        for phase in Phase:
            GANGS.labels(phase.value).set(counts.get(phase.value, 0))
        QUEUE_DEPTH.set(len(self.queue))

    # --- lifecycle -------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0) -> None:
        """Start the watches, wait until all have listed, then start the worker.

        Planning before both lists are in would count free capacity that is in use.
        Raises ``TimeoutError`` when the lists do not arrive in ``sync_timeout`` seconds.
        """
        self.nodes.start()
        self.jobs.start()
        self.pods.start()
        for informer in (self.nodes, self.jobs, self.pods):
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"{informer.resource.name} not listed within {sync_timeout:.0f}s")
        log.info("caches synced; reconciling")
        self._worker.start()

    def stop(self) -> None:
        """Stop the worker and the watches."""
        self._stop.set()
        self.queue.shutdown()
        self.pods.stop()
        self.jobs.stop()
        self.nodes.stop()
        if self._worker.is_alive():
            self._worker.join(timeout=5)


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--metrics-bind: expected HOST:PORT, got {value!r}")
    return host, int(port)


def run(
    kubeconfig: str | None,
    config: Config,
    metrics_bind: str | None,
    election: kube.LeaderElection | None = None,
) -> int:
    """Run until SIGINT/SIGTERM; returns the exit code.

    With ``election``, the reconciler acts only while it holds the Lease; a replica that
    loses it stops acting at once and exits with code 1, so that its pod restarts as a
    follower (what kube-controller-manager does).
    """
    try:
        api = kube.api_client(kubeconfig)
    except Exception as e:  # the client raises several types for a bad kubeconfig
        raise ValueError(f"--kubeconfig: cannot build an API client: {e}") from e
    try:
        user = kube.whoami(api)
    except Exception as e:  # noqa: BLE001  an old or locked-down API server: carry on, say so
        log.warning("could not ask the API server who this reconciler is: %s", e)
    else:
        if user != config.reconciler_username:
            log.warning(
                "running as %r but reconcilerUsername is %r: the webhook will refuse this "
                "reconciler's decision annotations", user, config.reconciler_username,
            )
        else:
            log.info("running as %s", user)
    if metrics_bind:
        host, port = _host_port(metrics_bind)
        start_http_server(port, addr=host)
        log.info("metrics on http://%s:%d/metrics", host, port)
    reconciler = Reconciler(api, config)
    done = threading.Event()
    exit_code = 0

    def _signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    if election is None:
        reconciler.start()
    else:
        identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"

        def started() -> None:
            log.info("%s leads (Lease %s/%s): reconciling", identity, election.namespace, election.name)
            reconciler.start()

        def stopped() -> None:
            nonlocal exit_code
            log.error("%s lost the Lease %s/%s: stopping", identity, election.namespace, election.name)
            reconciler.stop()
            exit_code = 1
            done.set()

        log.info("%s campaigns for the Lease %s/%s", identity, election.namespace, election.name)
        kube.lead(api, election, identity, started, stopped)
    done.wait()
    reconciler.stop()
    return exit_code
