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
worker thread is alive and not stuck on one gang, and every informer lists and watches;
else 503 with the reason), ``/readyz`` (caches synced and leading, or standing by as a
follower; JSON body ``{"ready", "role", "synced", "waiting_for"}``, the last naming the
informers that have not listed yet) and ``/debug/gangs`` (every gang's last phase and
reason, JSON).

With leader election, every write passes the elector's fence, and a clean shutdown
closes it, drains the writes in flight and releases the Lease
(docs/decisions/016-bounded-failure-detection.md).
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

from reconciler import kube
from reconciler.daemon import certificates, metrics
from reconciler.daemon.cache import ClusterCache, group_of_key
from reconciler.daemon.controller import GangController
from reconciler.daemon.election import Elector, LeaderElection
from reconciler.daemon.queue import ShutDown, WorkQueue
from reconciler.daemon.writer import UNFENCED, Fence
from reconciler.engine import workloads as wl
from reconciler.engine.cluster import TERMINAL_PHASES
from reconciler.engine.lifecycle import Phase
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
LEADER = Gauge("troupe_leader", "1 while this replica may write: it holds the Lease and its fence is open "
               "(1 without leader election once started).")
INFORMER_FAILING = Gauge("troupe_informer_failing_seconds",
                         "Seconds since an informer's lists and watches started failing; 0 while they work.",
                         ["resource"])

#: Connections of the informers' client: a watch or a list per informer (pods, nodes,
#: Jobs, SharedDeviceGroups, three workload kinds), with room for more. The writer's client
#: has ``releaseConcurrency`` + 2 (the Event sender and a spare), the Lease's 2.
POOL_EXTRA = 11
#: A reconcile of one gang that has run this long, seconds, makes ``/healthz`` fail: the
#: worker is stuck (a release of 512 members takes seconds).
WORKER_STUCK_SECONDS = 300.0


class Reconciler:
    """The running reconciler: owns the informers, the queue, the worker thread and the
    writer. ``synced`` is set once every informer has listed. Writes go through
    ``writer_api`` (default ``api``) and pass ``fence`` (the leader's Lease); ``state`` is
    the ``(namespace, name)`` of the ConfigMap keeping what a new leader must know (rollback
    backoffs; None: memory only)."""

    def __init__(self, api: Any, config: Config, writer_api: Any = None, fence: Fence = UNFENCED,
                 clock: Callable[[], float] = time.monotonic, state: tuple[str, str] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.cache = ClusterCache(config)
        self.queue = WorkQueue(order=self._order)
        self.writer = kube.KubeWriter(writer_api if writer_api is not None else api,
                                      kube.RateLimiter(config.kube_api_qps, config.kube_api_burst), fence=fence,
                                      state=state)
        self.controller = GangController(self.cache, self.writer, config)
        self.pods = kube.Informer(kube.pods(api), self._pods_listed, self._pod_event,
                                  transform=self.cache.retain_pod, stream=True)
        self.nodes = kube.Informer(kube.nodes(api), self._nodes_listed, self._node_event,
                                   transform=self.cache.retain_node, stream=True)
        self.jobs = kube.Informer(kube.jobs(api), self._jobs_listed, self._job_event,
                                  transform=self.cache.retain_job)
        self.groups = kube.Informer(kube.shared_device_groups(api), self._groups_listed, self._group_event,
                                    transform=self.cache.retain_group)
        #: One informer per workload custom resource (JobSet, LeaderWorkerSet, PyTorchJob):
        #: the size of gangs of ``<prefix>-size: auto``. A kind whose CRD is not installed
        #: is skipped, its gangs wait with that reason (docs/decisions/014-workload-gangs.md).
        self.workloads = [self._workload_informer(api, k) for k in wl.CUSTOM_KINDS]
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="gang-worker", daemon=True)
        self._conditions = threading.Thread(target=self.controller.conditions.run, args=(self._stop,),
                                            name="conditions", daemon=True)
        self._busy: tuple[str, float] | None = None
        #: Gang timings and counts derived from each outcome (reconciler/daemon/metrics.py).
        self.gang_metrics = metrics.GangMetrics()

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

    def _pods_listed(self, items: Iterable[Mapping[str, Any]]) -> None:
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

    def _nodes_listed(self, items: Iterable[Mapping[str, Any]]) -> None:
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
            self._busy = (key, self.clock())
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
                    self.gang_metrics.forget(key)
                    self.queue.forget(key)
                else:
                    self.gang_metrics.observe(key, outcome, lambda k=key: self.cache.gang(k), time.time())
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
                self._busy = None
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
        self.export_metrics()
        self.nodes.start()
        self.jobs.start()
        self.groups.start()
        for informer in self.workloads:
            informer.start()
        self.pods.start()
        for informer in (self.nodes, self.jobs, self.groups, *self.workloads, self.pods):
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"{informer.resource.name} not listed within {sync_timeout:.0f}s")
        backoffs = self.controller.load_state()
        decided = self.controller.warm_queue()
        log.info("caches synced; %d recorded backoff(s) read; %d waiting gang(s) decided in queue order; reconciling",
                 backoffs, decided)
        self.synced.set()
        self._worker.start()
        self._conditions.start()

    def export_metrics(self) -> None:
        """Report every informer's failing time as ``troupe_informer_failing_seconds``."""
        for informer in self.informers():
            INFORMER_FAILING.labels(informer.resource.name).set_function(
                lambda i=informer: 0.0 if i.failing_since is None else i.clock() - i.failing_since)

    def informers(self) -> list[kube.Informer]:
        """Every informer this reconciler owns (any attribute that is one, or a list of them)."""
        out: list[kube.Informer] = []
        for v in vars(self).values():
            out.extend(i for i in (v if isinstance(v, list) else [v]) if isinstance(i, kube.Informer))
        return out

    def waiting_for(self) -> list[str]:
        """The informers that have not listed yet, by resource name, sorted."""
        return sorted(i.resource.name for i in self.informers() if not i.synced.is_set())

    def alive(self) -> str:
        """``""`` when the worker and the informers run as they should, else what is wrong
        (``; ``-separated): the worker thread died or has been on one gang for
        :data:`WORKER_STUCK_SECONDS`, an informer's thread died or it has not listed or
        watched successfully for a minute (:meth:`kube.Informer.problem`)."""
        problems = []
        if self._worker.ident is not None and not self._worker.is_alive() and not self._stop.is_set():
            problems.append("the gang worker thread has died")
        busy = self._busy
        if busy is not None and self.clock() - busy[1] >= WORKER_STUCK_SECONDS:
            problems.append(f"the gang worker has been on gang {busy[0]} for {self.clock() - busy[1]:.0f}s")
        problems += [p for p in (i.problem() for i in self.informers()) if p]
        return "; ".join(problems)

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
    election: LeaderElection | None = None,
    webhook_certificates: certificates.Settings | None = None,
    state: tuple[str, str] | None = None,
) -> int:
    """Run until SIGINT/SIGTERM; returns the exit code.

    With ``election``, the reconciler acts only while it holds the Lease, and every write
    passes the elector's fence. A replica that loses the Lease stops acting at once (its
    fence is closed) and exits with code 1, so that its pod restarts as a follower (what
    kube-controller-manager does). On SIGTERM it closes its fence, lets the writes in
    flight finish, stops, and releases the Lease, so the next leader need not wait for it
    to expire. The user agent of its requests names this replica
    (``troupe-reconciler (<host>_<id>)``), as the API server's audit log shows it. With
    ``webhook_certificates``, the acting replica also keeps the webhook's certificates
    (``reconciler/daemon/certificates.py``). ``state``: the ConfigMap of the reconciler's own
    state (rollback backoffs), so that a failover or restart continues where it stopped.
    """
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    agent = f"troupe-reconciler ({identity})"
    try:
        api = kube.api_client(kubeconfig, pool_size=POOL_EXTRA, user_agent=agent)
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
    certs = kube.webhook_certificates(api, webhook_certificates) if webhook_certificates else None
    done = threading.Event()
    exit_code = 0
    elector: Elector | None = None
    reconciler: Reconciler | None = None

    def started() -> None:
        assert election is not None and reconciler is not None
        log.info("%s leads (Lease %s/%s): reconciling", identity, election.namespace, election.name)
        health.role, health.reconciler = "leader", reconciler
        if certs is not None:
            certs.start()
        reconciler.start()

    def stopped() -> None:
        nonlocal exit_code
        assert election is not None
        log.error("%s lost the Lease %s/%s: stopping", identity, election.namespace, election.name)
        exit_code = 1
        done.set()

    fence: Fence = UNFENCED
    if election is not None:
        leases = kube.KubeLeases(kube.api_client(kubeconfig, pool_size=2, user_agent=agent, retries=0),
                                 election.namespace, election.name)
        elector = Elector(leases, election, identity, started, stopped)
        fence = elector
    writer_api = kube.api_client(kubeconfig, pool_size=config.release_concurrency + 2, user_agent=agent,
                                 fence=fence.check if elector is not None else None)
    reconciler = Reconciler(api, config, writer_api=writer_api, fence=fence, state=state)

    def _signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    LEADER.set_function(lambda: 1.0 if elector is None or elector.leading else 0.0)
    if elector is None:
        health.role, health.reconciler = "single", reconciler
        if certs is not None:
            certs.start()
        reconciler.start()
    else:
        assert election is not None
        log.info("%s campaigns for the Lease %s/%s", identity, election.namespace, election.name)
        health.role = "standby"
        elector.start()
    done.wait()
    if certs is not None:
        certs.stop()
    if elector is not None:
        elector.stop()  # the fence closes: no write starts from here on
    reconciler.stop()  # the writes in flight finish (or fail) here
    if elector is not None and exit_code == 0:
        elector.release()
    return exit_code
