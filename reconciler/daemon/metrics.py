"""Metrics that answer an operator's questions about gangs and about the reconciler's API traffic.

Names follow Prometheus' conventions (https://prometheus.io/docs/practices/naming/): the
``troupe_`` prefix, the unit in the name (``_seconds``), ``_total`` on counters, and
timestamps rather than ages (https://prometheus.io/docs/practices/instrumentation/
#timestamps-not-time-since; the dashboard shows ``time() - ...``). Every metric is listed in
``docs/contract.md`` ("Metrics"); why these and how they are measured:
``docs/decisions/022-metrics.md``.

Gang timings are derived from what the controller returns (:class:`GangMetrics`, fed by
``reconciler/run/worker.py`` with each reconcile's ``Outcome`` and ``Decision``), never from extra
API calls:

- *complete to released*: from the gang's completion (its newest member's creation,
  :func:`reconciler.engine.gangs.queueing.complete_since`, a time every replica reads alike) to the
  moment a ``Placed`` (or a finished ``Releasing``) decision's writes are all done;
- *released to bound*: from the release (the newest ``reconciler.troupe.io/released-at`` of
  its members, read from the pods, so a new leader measures a release its predecessor made)
  to the first decision that sees every released member bound.

API requests are counted where they leave: the client's connection pool
(:func:`instrument`), by Kubernetes verb, resource and HTTP status code.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import Counter, Gauge, Histogram

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.queueing import complete_since
from reconciler.engine.model.timestamps import epoch

#: Seconds a gang waits from complete to released: fractions of a second when it fits at
#: once, up to hours when it waits for room.
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
#: Seconds from release to every member bound (kube-scheduler binding pinned pods).
BIND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

RELEASES = Counter("troupe_gang_releases_total",
                   "Gang releases completed: every member of a Placed (or finished Releasing) decision written.")
ROLLBACKS = Counter("troupe_gang_rollbacks_total",
                    "Gang releases rolled back after their timeout (members deleted for their owners to recreate).")
COMPLETE_TO_RELEASED = Histogram(
    "troupe_gang_complete_to_released_seconds",
    "Seconds from a gang's completion (its newest member's creation) to its release's writes done.",
    buckets=WAIT_BUCKETS,
)
RELEASED_TO_BOUND = Histogram(
    "troupe_gang_released_to_bound_seconds",
    "Seconds from a gang's release (its newest released-at) to every released member bound to its node.",
    buckets=BIND_BUCKETS,
)
API_REQUESTS = Counter(
    "troupe_kube_api_requests_total",
    "Requests the reconciler sent to the Kubernetes API, by verb, resource and HTTP status code "
    "(error: no response; fenced: a write the leader's fence stopped).",
    ["verb", "resource", "code"],
)
API_SECONDS = Histogram(
    "troupe_kube_api_request_duration_seconds",
    "Seconds from sending a Kubernetes API request to its response's headers, by verb (watches excluded).",
    ["verb"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
WATCH_RESTARTS = Counter(
    "troupe_informer_watch_restarts_total",
    "Watches an informer started again, by resource and why the last one ended: timeout (its own duration ran "
    "out, the normal case), expired (410 Gone: listed again), error (an API error or a broken or silent "
    "connection), empty (it ended at once having delivered nothing).",
    ["resource", "reason"],
)
LISTS = Counter("troupe_informer_lists_total", "Complete lists an informer made (at start and after 410 Gone).",
                ["resource"])
LAST_LIST = Gauge("troupe_informer_last_list_timestamp_seconds",
                  "Unix time of an informer's last successful complete list.", ["resource"])

UNREADABLE = Counter(
    "troupe_unreadable_objects_total",
    "Objects the reconciler's cache could not read and left out, by kind (pod, node, SharedDeviceGroup, Job...): "
    "counted once per object and reason, each with a log line.",
    ["kind"],
)

#: Distinct ``namespace`` label values a metric sliced by tenant takes; gangs of namespaces
#: seen after the first :data:`NAMESPACE_LIMIT` are counted under ``other`` (a bounded label
#: set whatever the cluster's number of namespaces: docs/decisions/037-operating.md).
NAMESPACE_LIMIT = 100
OTHER_NAMESPACES = "other"
WAITING_SINCE = Gauge(
    "troupe_gang_waiting_since_timestamp_seconds",
    "Unix time since which the longest-waiting gang of a namespace has waited: the creation of its oldest gated "
    "member, for every gang with a gated member not being released (none: no series). Namespaces beyond the "
    f"first {NAMESPACE_LIMIT} are one, '{OTHER_NAMESPACES}'.",
    ["namespace"],
)
ROLLBACKS_BY_NAMESPACE = Counter(
    "troupe_gang_rollbacks_by_namespace_total",
    f"Gang releases rolled back, by the gang's namespace (beyond the first {NAMESPACE_LIMIT}: '{OTHER_NAMESPACES}').",
    ["namespace"],
)

GANG_RESTARTS = Counter(
    "troupe_gang_restarts_total",
    "RestartGang gangs restarted whole after a running member failed (its pod Failed, its node deleted, "
    f"NotReady past the grace or tainted NoExecute), by namespace (beyond the first {NAMESPACE_LIMIT}: "
    f"'{OTHER_NAMESPACES}'; docs/decisions/040-failure-policy.md).",
    ["namespace"],
)

NODE_FAILURES_RECORDED = Counter(
    "troupe_node_member_failures_total",
    "Gang members recorded as failed on their node, or lost with it (docs/decisions/041-failing-nodes.md).")
NODE_AVOIDANCES = Counter(
    "troupe_node_avoidances_total",
    "Times a node became avoided by new placements after repeated member failures (nodeFailureThreshold "
    "within nodeFailureWindowSeconds).")

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_verb(method: str, url: str) -> tuple[str, str]:
    """The Kubernetes verb and resource of a request (as the API server's audit log names
    them): ``("list", "pods")`` for ``GET /api/v1/pods``, ``("watch", "nodes")`` with
    ``watch=true``, ``("get", "leases")`` for a named object, ``("create", "pods/eviction")``
    for a subresource, ``("delete", ...)`` / ``("deletecollection", ...)``. Paths outside
    ``/api`` and ``/apis`` give ``(method, "other")``."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"] and len(segments) >= 2:
        rest = segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        rest = segments[3:]
    else:
        return method.lower(), "other"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), "other"
    named = len(rest) >= 2
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    method = method.upper()
    if method == "GET":
        watch = parse_qs(parts.query).get("watch", [""])[0].lower() in ("true", "1")
        return ("watch" if watch else "get" if named else "list"), resource
    if method == "DELETE":
        return ("delete" if named else "deletecollection"), resource
    return _VERBS.get(method, method.lower()), resource


def instrument(api: Any) -> None:
    """Count every request of the Kubernetes ``ApiClient`` ``api`` in
    ``troupe_kube_api_requests_total`` and time it in ``troupe_kube_api_request_duration_seconds``,
    by wrapping its connection pool manager's ``request`` (every call of the client ends
    there). A request that raises counts with code ``error`` (``fenced`` when the leader's
    fence refused it: nothing was sent)."""
    manager = api.rest_client.pool_manager
    inner = manager.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb, resource = request_verb(method, url)
        start = time.perf_counter()
        try:
            resp = inner(method, url, *args, **kwargs)
        except Exception as e:
            code = "fenced" if type(e).__name__ == "LostLeadership" else "error"
            API_REQUESTS.labels(verb, resource, code).inc()
            raise
        API_REQUESTS.labels(verb, resource, str(getattr(resp, "status", "error"))).inc()
        if verb != "watch":
            API_SECONDS.labels(verb).observe(time.perf_counter() - start)
        return resp

    manager.request = request


def watch_restarted(resource: str, reason: str) -> None:
    """Count one watch started again for ``resource`` (reasons: :data:`WATCH_RESTARTS`)."""
    WATCH_RESTARTS.labels(resource, reason).inc()


def unreadable_object(kind: str) -> None:
    """Count one object of ``kind`` the cache could not read (the cache's ``on_unreadable``)."""
    UNREADABLE.labels(kind).inc()


def listed(resource: str) -> None:
    """Record a complete list of ``resource``: counted, and its time as the last success."""
    LISTS.labels(resource).inc()
    LAST_LIST.labels(resource).set_to_current_time()


class NamespaceLabels:
    """The ``namespace`` label value of a tenant's metric: the namespace itself for the first
    ``limit`` distinct ones seen (kept for the process's life, so a series never changes
    its label), :data:`OTHER_NAMESPACES` for any later one."""

    def __init__(self, limit: int = NAMESPACE_LIMIT) -> None:
        self.limit = limit
        self._known: set[str] = set()

    def label(self, namespace: str) -> str:
        """``namespace``, or ``other`` once ``limit`` others were seen first."""
        if namespace in self._known:
            return namespace
        if len(self._known) < self.limit:
            self._known.add(namespace)
            return namespace
        return OTHER_NAMESPACES


class GangMetrics:
    """The gang counters and histograms, derived from each reconcile's outcome (module
    docstring). ``observe`` is called by the one worker thread, after each reconcile;
    it keeps, per gang, whether a release of it is waiting to be all bound and, while it
    waits (a gated member, no release), since when: its namespace's
    ``troupe_gang_waiting_since_timestamp_seconds`` is the oldest of those."""

    def __init__(self, namespaces: NamespaceLabels | None = None) -> None:
        self._unbound: set[str] = set()
        self.namespaces = namespaces or NamespaceLabels()
        #: namespace label -> gang key -> since when it waits (seconds since the epoch).
        self._waiting: dict[str, dict[str, float]] = {}

    def forget(self, key: str) -> None:
        """Gang ``key`` is gone."""
        self._unbound.discard(key)
        self._stop_waiting(key)

    def _stop_waiting(self, key: str) -> None:
        label = self.namespaces.label(key.partition("/")[0])
        waiting = self._waiting.get(label, {})
        if waiting.pop(key, None) is not None:
            self._publish(label)

    def _publish(self, label: str) -> None:
        waiting = self._waiting.get(label)
        if waiting:
            WAITING_SINCE.labels(label).set(min(waiting.values()))
            return
        self._waiting.pop(label, None)
        with contextlib.suppress(KeyError):  # nothing waits: no stale timestamp for an alert to read
            WAITING_SINCE.remove(label)

    def _track_waiting(self, key: str, outcome: Any, gang: Callable[[], Gang | None]) -> None:
        """Note since when gang ``key`` waits (a gated member, not released by this
        reconcile), or that it no longer does."""
        seen = outcome.decision.observation
        if not seen.gated or outcome.released:
            self._stop_waiting(key)
            return
        label = self.namespaces.label(key.partition("/")[0])
        if key in self._waiting.get(label, {}):
            return
        found = gang()
        stamps = [t for p in (found.members if found is not None else ()) if p.gated
                  and (t := epoch(p.creation_timestamp)) is not None]
        if stamps:
            self._waiting.setdefault(label, {})[key] = min(stamps)
            self._publish(label)

    def observe(self, key: str, outcome: Any, gang: Callable[[], Gang | None], now: float) -> None:
        """Account for one reconcile of gang ``key``: ``outcome`` is the controller's
        ``Outcome`` (``phase``, ``retry``, ``decision``), ``gang`` gives the gang as the
        cache holds it after the reconcile (called only when needed), ``now`` is the wall
        clock (seconds since the epoch)."""
        decision = outcome.decision
        if decision is None:
            return
        self._track_waiting(key, outcome, gang)
        if outcome.released and not outcome.retry:
            RELEASES.inc()
            found = gang()
            since = complete_since(found.members) if found is not None else None
            if since is not None:
                COMPLETE_TO_RELEASED.observe(max(0.0, now - since))
            self._unbound.add(key)
            return
        if outcome.rolled_back:
            if not outcome.retry:
                ROLLBACKS.inc()
                namespace = self.namespaces.label(key.partition("/")[0])
                ROLLBACKS_BY_NAMESPACE.labels(namespace).inc()
                if decision.rule.name == "MemberFailed":
                    GANG_RESTARTS.labels(namespace).inc()
            self._unbound.discard(key)
            return
        seen = decision.observation
        if seen.released > seen.bound:
            self._unbound.add(key)  # released, not all bound (also what a new leader finds)
        elif key in self._unbound and seen.released and seen.gated == 0:
            self._unbound.discard(key)
            found = gang()
            stamps = [t for p in (found.members if found is not None else ()) if p.released_at
                      and (t := epoch(p.released_at)) is not None]
            if stamps:
                RELEASED_TO_BOUND.observe(max(0.0, now - max(stamps)))
