"""``python -m reconciler run``: informers -> cache -> work queue -> gang controller -> writes.

One worker decides gangs one at a time, so two gangs are never planned against the same
free capacity; a release then writes its members in parallel (``releaseConcurrency``).
Pod and node watches keep the cache current. An event re-queues only the gangs it can
help (docs/decisions/019-queue-order.md): a gang's own pods, and, for a change that may
make room (a pod deleted or finished, a node whose labels, taints, readiness or capacity
changed), the gangs waiting for room that some gated member could run on that node; a gang
the event cannot help keeps its backoff. The worker takes the highest-priority gang first,
and namespaces of equal priority in turn. On start (and on taking over) every waiting gang
is decided once in queue order before anything is written, so a new leader holds and
blocks as the old one did.

The HTTP server (``--metrics-bind``) serves ``/metrics`` (Prometheus), ``/healthz`` (the
worker and the informers are alive), ``/readyz`` (caches synced and leading, or standing
by as a follower; JSON body ``{"ready", "role", "synced"}``) and ``/debug/gangs`` (every
gang's last phase and reason, JSON).
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import Counter, Gauge, Histogram, make_wsgi_app

from reconciler import certificates, kube
from reconciler.cache import ClusterCache, group_of_key
from reconciler.controller import GangController
from reconciler.engine import workloads as wl
from reconciler.engine.lifecycle import Phase
from reconciler.engine.snapshot import TERMINAL_PHASES
from reconciler.queue import ShutDown, WorkQueue
from troupe import contract
from troupe.config import Config

log = logging.getLogger("reconciler")

RECONCILES = Counter("troupe_reconciles_total", "Gang reconciles, by resulting phase.", ["phase"])
RECONCILE_ERRORS = Counter("troupe_reconcile_errors_total", "Reconciles that raised an unexpected error.")
PREEMPTIONS = Counter("troupe_preemptions_total", "Preemption plans carried out (nominations written), by mode.",
                      ["mode"])
EVICTIONS = Counter("troupe_preemption_victims_total", "Victim pods evicted for preemptors (eviction requested).")
REFUSED_MOVES = Counter("troupe_lifecycle_refused_moves_total",
                        "Phase moves the gang lifecycle refused (nothing was written; should stay 0).")
RECONCILE_SECONDS = Histogram(
    "troupe_reconcile_duration_seconds", "Time to reconcile one gang (decision and writes), seconds.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
GANGS = Gauge("troupe_gangs", "Gangs known to the reconciler, by phase.", ["phase"])
QUEUE_DEPTH = Gauge("troupe_workqueue_depth", "Gang keys waiting in the work queue.")

#: Extra connections in the client's pool besides the release writers: the watches
#: (pods, nodes, jobs, three workload kinds), the Lease, and the Event sender.
POOL_EXTRA = 11


class Reconciler:
    """The running reconciler: owns the informers, the queue, the worker thread and the
    writer. ``synced`` is set once every informer has listed."""

    def __init__(self, api: Any, config: Config) -> None:
        self.config = config
        self.cache = ClusterCache(config)
        self.queue = WorkQueue(order=self._order)
        self.writer = kube.KubeWriter(api, kube.RateLimiter(config.kube_api_qps, config.kube_api_burst))
        self.controller = GangController(self.cache, self.writer, config)
        self.pods = kube.Informer(kube.pods(api), self._pods_listed, self._pod_event)
        self.nodes = kube.Informer(kube.nodes(api), self._nodes_listed, self._node_event)
        self.jobs = kube.Informer(kube.jobs(api), self._jobs_listed, self._job_event)
        self.groups = kube.Informer(kube.shared_device_groups(api), self._groups_listed, self._group_event)
        #: One informer per workload custom resource (JobSet, LeaderWorkerSet, PyTorchJob):
        #: the size of gangs of ``<prefix>-size: auto``. A kind whose CRD is not installed
        #: is skipped, its gangs wait with that reason (docs/decisions/014-workload-gangs.md).
        self.workloads = [self._workload_informer(api, k) for k in wl.CUSTOM_KINDS]
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="gang-worker", daemon=True)

    # --- feeding the queue -----------------------------------------------------------
    #: Priority of SharedDeviceGroup keys in the work queue: before any gang (cheap, and
    #: a group's status is what its waiting pods' owners look at).
    GROUP_PRIORITY = 1 << 40

    def _order(self, key: str) -> tuple[int, str]:
        """Work-queue order of a key: the gang's priority and its namespace (groups first)."""
        if group_of_key(key) is not None:
            return (self.GROUP_PRIORITY, "")
        return (self.controller.priority(key), key.partition("/")[0])

    def _enqueue(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add(key)

    def _pods_listed(self, items: list[Mapping[str, Any]]) -> None:
        self._enqueue(self.cache.replace_pods(items))

    def _pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        self._enqueue(self.cache.pod_event(kind, pod))
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in TERMINAL_PHASES:  # room may have been freed on its node
            spec = pod.get("spec") or {}
            node = spec.get("nodeName") or contract.pod_annotations(pod).get(contract.ASSIGNED_NODE)
            if node:
                self._enqueue(self.controller.helped_by(self.cache.node_info(str(node))))
            elif any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod)):
                self._enqueue(self.controller.helped_by(None))  # a gated member's reservation, if any

    def _nodes_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.replace_nodes(items)
        self._enqueue(self.cache.pending_gangs())

    def _node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        if not self.cache.node_event(kind, node):
            return  # a heartbeat
        name = str((node.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            # Releases reserved on it are rolled back; a group bound to it goes back to Pending.
            self._enqueue(self.cache.pending_gangs())
            self._enqueue(self.cache.group_keys())
        else:
            self._enqueue(self.controller.helped_by(self.cache.node_info(name)))

    def _jobs_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.replace_jobs(items)
        self._enqueue(self.cache.pending_gangs())

    def _job_event(self, kind: str, job: Mapping[str, Any]) -> None:
        self.cache.job_event(kind, job)
        namespace = str((job.get("metadata") or {}).get("namespace") or "default")
        # A GKE auto-gang's size is its Job's parallelism: the Job's namespace only.
        self._enqueue(k for k in self.cache.pending_gangs() if k.startswith(namespace + "/"))

    def _groups_listed(self, items: list[Mapping[str, Any]]) -> None:
        self._enqueue(self.cache.replace_groups(items))
        self._enqueue(self.cache.pending_gangs())

    def _group_event(self, kind: str, group: Mapping[str, Any]) -> None:
        keys = self.cache.group_event(kind, group)
        self._enqueue(keys)
        name = str((group.get("metadata") or {}).get("name") or "")
        # Its own gangs (a new group lets its members through); and when its devices are
        # freed, every gang waiting for room.
        self._enqueue(self.cache.group_gangs(name))
        if kind == "DELETED":
            self._enqueue(self.controller.helped_by(None))

    def _workload_informer(self, api: Any, k: wl.Kind) -> kube.Informer:
        def listed(items: list[Mapping[str, Any]]) -> None:
            self.cache.replace_workloads(k.kind, items)
            self._enqueue(self.cache.pending_gangs())

        def event(kind: str, obj: Mapping[str, Any]) -> None:
            self.cache.workload_event(k.kind, kind, obj)
            self._enqueue(self.cache.pending_gangs())  # a workload gang's size may have changed

        def absent(why: str) -> None:
            self.cache.workload_unavailable(k.kind, why)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(kube.custom_objects(api, k.group, k.version, k.plural, absent), listed, event)

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
            group = group_of_key(key)
            try:
                if group is not None:
                    if self.controller.reconcile_group(group):
                        self.queue.add_rate_limited(key)
                    else:
                        self.queue.forget(key)
                    continue
                outcome = self.controller.reconcile(key)
            except Exception:
                RECONCILE_ERRORS.inc()
                delay = self.queue.add_rate_limited(key)
                log.exception("gang %s: reconcile failed; retrying in %.0fs", key, delay)
            else:
                if outcome is None:
                    self.queue.forget(key)
                else:
                    RECONCILES.labels(outcome.phase.value).inc()
                    if outcome.decision is not None and outcome.decision.rule == "Preempting" and not outcome.retry:
                        PREEMPTIONS.labels(self.config.gang_preemption_mode).inc()
                    if outcome.decision is not None and outcome.phase is Phase.PREEMPTING:
                        EVICTIONS.inc(len(outcome.decision.victims))
                    if outcome.reason.startswith("refused: "):
                        REFUSED_MOVES.inc()
                    if outcome.retry:
                        self.queue.add_rate_limited(key)
                    else:
                        self.queue.forget(key)
                    if outcome.requeue_after is not None:
                        self.queue.add_after(key, outcome.requeue_after)
                    if outcome.others:  # it started or stopped holding or blocking the gangs behind it
                        self._enqueue(k for k in self.controller.helped_by(None) if k != key)
            finally:
                RECONCILE_SECONDS.observe(time.perf_counter() - start)
                self.queue.done(key)
                self._update_gauges()

    def _update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for phase in self.controller.phases().values():
            counts[phase.value] = counts.get(phase.value, 0) + 1
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
        self.groups.start()
        for informer in self.workloads:
            informer.start()
        self.pods.start()
        for informer in (self.nodes, self.jobs, self.groups, *self.workloads, self.pods):
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"{informer.resource.name} not listed within {sync_timeout:.0f}s")
        decided = self.controller.warm_queue()
        log.info("caches synced; %d waiting gang(s) decided in queue order; reconciling", decided)
        self.synced.set()
        self._worker.start()

    def alive(self) -> str:
        """``""`` when the worker and the informers run as they should, else what is dead."""
        if self._worker.ident is not None and not self._worker.is_alive() and not self._stop.is_set():
            return "the gang worker thread has died"
        return ""

    def stop(self) -> None:
        """Stop the worker, the watches and the writer."""
        self._stop.set()
        self.queue.shutdown()
        self.pods.stop()
        self.groups.stop()
        self.jobs.stop()
        for informer in self.workloads:
            informer.stop()
        self.nodes.stop()
        if self._worker.is_alive():
            self._worker.join(timeout=5)
        self.controller.close()
        self.writer.close()


class Health:
    """What ``/healthz`` and ``/readyz`` report: the ``role`` (``starting``, ``standby``
    while campaigning for the Lease, ``leader``, or ``single`` without leader election)
    and the running :class:`Reconciler` once it acts."""

    def __init__(self) -> None:
        self.role = "starting"
        self.reconciler: Reconciler | None = None

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """``(ready, body)``: a follower is ready (it stands by); a leader once synced."""
        synced = self.reconciler is not None and self.reconciler.synced.is_set()
        ready = self.role == "standby" or (self.role in ("leader", "single") and synced)
        return ready, {"ready": ready, "role": self.role, "synced": synced}

    def healthy(self) -> tuple[bool, str]:
        """``(healthy, why)``."""
        dead = self.reconciler.alive() if self.reconciler is not None else ""
        return (not dead, dead or "ok")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve_http(host: str, port: int, health: Health) -> WSGIServer:
    """Serve ``/metrics``, ``/healthz``, ``/readyz`` and ``/debug/gangs`` on
    ``host:port`` from a daemon thread; returns the server (``shutdown()`` stops it)."""
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
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
            gangs = health.reconciler.controller.status() if health.reconciler is not None else {}
            body = json.dumps([{"gang": k, "phase": p.value, "reason": r} for k, (p, r) in sorted(gangs.items())]).encode()
            status, ctype = "200 OK", "application/json"
        else:
            body, status, ctype = b"not found\n", "404 Not Found", "text/plain"
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]

    server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


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
    webhook_certificates: certificates.Settings | None = None,
) -> int:
    """Run until SIGINT/SIGTERM; returns the exit code.

    With ``election``, the reconciler acts only while it holds the Lease; a replica that
    loses it stops acting at once and exits with code 1, so that its pod restarts as a
    follower (what kube-controller-manager does). With ``webhook_certificates``, the acting
    replica also keeps the webhook's certificates (``reconciler/certificates.py``).
    """
    try:
        api = kube.api_client(kubeconfig, pool_size=config.release_concurrency + POOL_EXTRA)
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
    health = Health()
    if metrics_bind:
        host, port = _host_port(metrics_bind)
        serve_http(host, port, health)
        log.info("metrics and probes on http://%s:%d (/metrics, /healthz, /readyz, /debug/gangs)", host, port)
    reconciler = Reconciler(api, config)
    certs = kube.webhook_certificates(api, webhook_certificates) if webhook_certificates else None
    done = threading.Event()
    exit_code = 0

    def _signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    if election is None:
        health.role, health.reconciler = "single", reconciler
        if certs is not None:
            certs.start()
        reconciler.start()
    else:
        identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"

        def started() -> None:
            log.info("%s leads (Lease %s/%s): reconciling", identity, election.namespace, election.name)
            health.role, health.reconciler = "leader", reconciler
            if certs is not None:
                certs.start()
            reconciler.start()

        def stopped() -> None:
            nonlocal exit_code
            log.error("%s lost the Lease %s/%s: stopping", identity, election.namespace, election.name)
            reconciler.stop()
            exit_code = 1
            done.set()

        log.info("%s campaigns for the Lease %s/%s", identity, election.namespace, election.name)
        health.role = "standby"
        kube.lead(api, election, identity, started, stopped)
    done.wait()
    if certs is not None:
        certs.stop()
    reconciler.stop()
    return exit_code
