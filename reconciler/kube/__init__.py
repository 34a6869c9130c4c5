"""The reconciler's one port to the Kubernetes API: list+watch into plain dicts, and writes.

This is the only module of Troupe that imports the ``kubernetes`` client (enforced by
import-linter). Everything above it sees pods and nodes as plain dicts in the API's JSON
shape (camelCase keys), and writes through the :class:`reconciler.daemon.writer.Writer`
protocol, which :class:`KubeWriter` implements against a real API server and
:class:`reconciler.daemon.writer.FakeWriter` in memory.

Watches follow the API concepts of https://kubernetes.io/docs/reference/using-api/api-concepts/
#efficient-detection-of-changes: list, then watch from the list's ``resourceVersion``,
resume from the last seen version (bookmarks included) when a watch ends, and list again
on ``410 Gone``. A silent connection is noticed within a bounded time: each watch asks the
server to end it after 60 to 90 s (jittered, as client-go's reflector does), the client
gives up reading 15 s after that, and TCP keepalive probes a dead peer out within 60 s
(docs/decisions/016-bounded-failure-detection.md). A watch that ends at once is retried
with backoff, not in a loop.

Writes go through a client of their own whose connections check the leader's fence just
before a request's bytes leave (:func:`api_client` with ``fence``), so a replica frozen
between deciding to write and writing finds the fence closed when it resumes.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import functools
import json
import logging
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson
import token_bucket
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options
from kubernetes.watch.watch import iter_resp_lines
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from reconciler.daemon import certificates, metrics
from reconciler.daemon.election import LeaseConflict, LeaseError
from reconciler.daemon.writer import (
    UNFENCED,
    Conflict,
    Fence,
    Gone,
    LostLeadership,
    PodRef,
    PodWriter,
    Refused,
    WriteError,
)
from reconciler.engine import workloads as wl
from reconciler.objects import snapshot_io
from troupe import contract

log = logging.getLogger(__name__)

#: Server-side duration of one watch request, seconds, the shortest: each watch asks for
#: a duration drawn from ``[WATCH_SECONDS, WATCH_SECONDS * WATCH_JITTER)``, so the
#: informers' watches do not all end together (client-go's reflector draws from
#: ``[5 min, 10 min)``; Troupe is shorter so that a silent connection costs less).
WATCH_SECONDS = 60
WATCH_JITTER = 1.5
#: Client-side read timeout of a watch beyond the duration asked of the server, seconds:
#: only a connection that stayed silent past the server's own end of the watch trips it.
WATCH_READ_MARGIN = 15
#: The longest a silent watch connection lasts, seconds: 105.
WATCH_READ_TIMEOUT = WATCH_SECONDS * WATCH_JITTER + WATCH_READ_MARGIN
#: TCP keepalive of every connection to the API server: probes after 30 s idle, every
#: 10 s, 3 unanswered end it (a dead peer is noticed within 60 s; client-go asks for 30 s
#: idle and Go's 15 s x 9 probes, 165 s).
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3
#: A watch that ends sooner than this, seconds, having delivered nothing, counts as a
#: failure and is retried with backoff (client-go's reflector does the same).
MIN_WATCH_SECONDS = 1.0
#: An informer that has not listed or watched successfully for this long, seconds, makes
#: ``/healthz`` fail (an informer stuck on 403s, say).
UNHEALTHY_AFTER_SECONDS = 60.0
#: Backoff of a failing list or watch: seconds, doubling, capped, with up to 25% jitter.
BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS = 1.0, 30.0
#: Connect and read timeouts of ordinary requests, seconds.
REQUEST_TIMEOUT = (5, 30)
#: Page size of list requests (objects).
LIST_PAGE = 500

SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


#: Methods that change nothing: the fence lets them through.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _Fenced:
    """Mixed into urllib3's connections: the first bytes of a request that changes
    something go out only if ``fence()`` does not raise. The check sits right before the
    send, after the rate limiter, the serialisation and the pool: what stays between it and
    the socket is a few microseconds of Python."""

    fence: Callable[[], None]
    _write = False

    def putrequest(self, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        self._write = method.upper() not in SAFE_METHODS
        super().putrequest(method, url, *args, **kwargs)  # type: ignore[misc]

    def send(self, data: Any) -> None:
        if self._write:
            self._write = False
            type(self).fence()
        super().send(data)  # type: ignore[misc]


def fence_connections(api: client.ApiClient, fence: Callable[[], None]) -> None:
    """Make every request of ``api`` that is not a GET/HEAD/OPTIONS call ``fence()`` just
    before its first byte is sent; what ``fence`` raises (:class:`LostLeadership`)
    reaches the caller and nothing is sent. Call before the first request."""
    conns = {scheme: type(f"Fenced{base.__name__}", (_Fenced, base), {"fence": staticmethod(fence)})
             for scheme, base in (("http", HTTPConnection), ("https", HTTPSConnection))}
    pools = {"http": type("FencedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": conns["http"]}),
             "https": type("FencedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": conns["https"]})}
    manager = api.rest_client.pool_manager
    manager.clear()
    manager.pool_classes_by_scheme = pools


def api_client(kubeconfig: str | None, pool_size: int | None = None, user_agent: str | None = None,
               fence: Callable[[], None] | None = None, retries: int | None = None,
               context: str | None = None) -> client.ApiClient:
    """An API client from ``kubeconfig``, or from the in-cluster service account when None,
    keeping up to ``pool_size`` connections to the API server open (default: the client's,
    5 per CPU): size it to the requests in flight. Every connection has TCP keepalive
    (:data:`KEEPALIVE_IDLE`...). ``user_agent`` names this process in the API server's
    audit log; ``fence`` guards every write (:func:`fence_connections`); ``retries``
    bounds urllib3's own retries of a failed connection (default: urllib3's, 3);
    ``context`` names the kubeconfig context (default: its current one). Every request is
    counted by verb, resource and code (:func:`reconciler.daemon.metrics.instrument`).

    Raises ``kubernetes.config.ConfigException`` when neither works.
    """
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg, context=context)
    else:
        config.load_incluster_config(client_configuration=cfg)
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    cfg.socket_options = tcp_keepalive_socket_options(KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
    if retries is not None:
        cfg.retries = urllib3.Retry(total=retries, read=0, redirect=0, status=0)
    api = client.ApiClient(cfg)
    if user_agent:
        api.user_agent = user_agent
    if fence is not None:
        fence_connections(api, fence)
    metrics.instrument(api)
    return api


def whoami(api: client.ApiClient) -> str:
    """The user name the API server sees for ``api`` (SelfSubjectReview, GA in 1.28)."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        _request_timeout=REQUEST_TIMEOUT,
    )
    return str(review.status.user_info.username)


EventHandler = Callable[[str, Mapping[str, Any]], None]
"""Called with ``(type, object)``: type ``ADDED``, ``MODIFIED``, ``DELETED`` or ``SYNC``
(the object came from a re-list); the object is a plain dict."""
ResyncHandler = Callable[[Any], None]
"""Called with every object of a fresh list (a list, or an iterator of them for an
informer with ``stream``); objects absent from it were deleted."""


@dataclass
class Resource:
    """A watched collection: its list function (cluster-wide) and a name for logs.

    ``optional``: the collection may not exist (a custom resource whose CRD is not
    installed). Its list then answers 404: the informer delivers an empty list, calls
    ``on_absent`` with the reason, counts as synced, and lists again every
    :data:`ABSENT_RETRY_SECONDS` until the CRD appears."""

    name: str
    list_fn: Callable[..., Any]
    optional: bool = False
    on_absent: Callable[[str], None] | None = None


#: How often an informer of an absent custom resource looks for its CRD again, seconds.
ABSENT_RETRY_SECONDS = 60.0


def pods(api: client.ApiClient) -> Resource:
    """All pods, in every namespace."""
    return Resource("pods", client.CoreV1Api(api).list_pod_for_all_namespaces)


def nodes(api: client.ApiClient) -> Resource:
    """All nodes."""
    return Resource("nodes", client.CoreV1Api(api).list_node)


def jobs(api: client.ApiClient) -> Resource:
    """All batch/v1 Jobs, in every namespace (the size of GKE auto-gangs they own)."""
    return Resource("jobs", client.BatchV1Api(api).list_job_for_all_namespaces)


def shared_device_groups(api: client.ApiClient) -> Resource:
    """All SharedDeviceGroups (``deviceshare.io/v1alpha1``, cluster-scoped): optional, as
    every custom resource (a cluster without the CRD has no groups)."""
    return custom_objects(api, *contract.DEVICE_GROUP_API)


def custom_objects(api: client.ApiClient, group: str, version: str, plural: str,
                   on_absent: Callable[[str], None] | None = None) -> Resource:
    """All objects of a custom resource (``jobsets`` of ``jobset.x-k8s.io/v1alpha2``...),
    in every namespace (or cluster-scoped); optional (see :class:`Resource`): ``on_absent``
    hears why when its CRD is not installed."""
    objects = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return objects.list_cluster_custom_object(group, version, plural, **kwargs)

    return Resource(f"{plural}.{group}", list_fn, optional=True, on_absent=on_absent)




class Informer:
    """List+watch of one resource in a background thread, delivering plain dicts.

    ``on_list`` receives each complete list (first and after every ``410 Gone``);
    ``on_event`` each watch event. ``transform``, when given, is applied to every object
    as it arrives, before either sees it, page by page during a list (what a cache keeps
    of an object: :mod:`reconciler.objects.retain`), so a full page is the most of the API's
    whole objects held at once. With ``stream``, ``on_list`` gets an iterator that fetches
    the pages as it is consumed (it must consume it all, and may apply each object as it
    comes: no list of the whole collection is ever built); else a list. ``synced`` is set
    after the first list.

    Errors other than ``410`` back off exponentially (1 s doubling to 30 s, with jitter)
    and resume from the last resourceVersion; so does a watch that ends within
    :data:`MIN_WATCH_SECONDS` having delivered nothing. ``watch_seconds`` is the shortest
    server-side length of one watch (each draws up to :data:`WATCH_JITTER` times it);
    ``read_timeout`` (seconds) is how long a silent connection may last before it is taken
    for dead and replaced (default: the watch's length plus :data:`WATCH_READ_MARGIN`).
    ``relists`` and ``watches`` count the lists and watch requests made.

    :meth:`problem` says what is wrong for the liveness probe: the thread died, or no
    list or watch has succeeded for :data:`UNHEALTHY_AFTER_SECONDS` (with the last
    error). ``clock`` is monotonic seconds (injected by tests).
    """

    def __init__(
        self,
        resource: Resource,
        on_list: ResyncHandler,
        on_event: EventHandler,
        watch_seconds: int = WATCH_SECONDS,
        read_timeout: float | None = None,
        transform: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream: bool = False,
    ) -> None:
        self.resource = resource
        self.stream = stream
        self.watch_seconds = watch_seconds
        self.read_timeout = read_timeout
        self.on_list = on_list
        self.on_event = on_event
        self.transform = transform
        self.clock = clock
        self.synced = threading.Event()
        self.resource_version: str | None = None
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.name}", daemon=True)
        self.relists = 0
        self.watches = 0
        #: Watches that ended at once with nothing delivered (each one backed off).
        self.short_watches = 0
        #: Since when (monotonic seconds) every list or watch has failed, and the last error.
        self.failing_since: float | None = None
        self.last_error = ""

    def start(self) -> Informer:
        """Start the background thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, cutting a watch in flight.

        The watch thread is blocked in a read; closing the response from this thread does
        not wake it (urllib3 waits on its own lock), so the socket is shut down instead:
        the read returns at once and the thread sees the stop flag.
        """
        self._stop.set()
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the server: fine
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _absent(self) -> None:
        """The optional resource does not exist: no objects, synced, look again later."""
        why = f"the resource {self.resource.name} is not served (its CustomResourceDefinition is not installed)"
        if not self.synced.is_set() or self.resource_version is not None:
            log.info("%s; looking again every %.0fs", why, ABSENT_RETRY_SECONDS)
        self.resource_version = None
        self.on_list([])
        if self.resource.on_absent is not None:
            self.resource.on_absent(why)
        self.synced.set()
        self._stop.wait(ABSENT_RETRY_SECONDS)

    def problem(self) -> str:
        """``""`` while the informer works, else what is wrong, for ``/healthz``."""
        if self._thread.ident is not None and not self._thread.is_alive() and not self._stop.is_set():
            return f"the {self.resource.name} informer thread has died"
        since = self.failing_since
        if since is not None and self.clock() - since >= UNHEALTHY_AFTER_SECONDS:
            return (f"{self.resource.name}: no list or watch has succeeded for {self.clock() - since:.0f}s; "
                    f"last error: {self.last_error}")
        return ""

    def _ok(self) -> None:
        self.failing_since, self.last_error = None, ""

    def _failed(self, why: str) -> None:
        if self.failing_since is None:
            self.failing_since = self.clock()
        self.last_error = why

    def _pages(self, counted: list[int]) -> Iterator[Mapping[str, Any]]:
        """Every object of a paged list, transformed, fetched a page at a time; sets
        :attr:`resource_version` after the last page and counts the objects."""
        cont: str | None = None
        version: str | None = None
        while version is None:
            if self._stop.is_set():  # never end a stream early: its consumer would take it for the whole list
                raise InterruptedError(f"{self.resource.name}: stopped while listing")
            resp = self.resource.list_fn(
                limit=LIST_PAGE, _continue=cont, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            body = json.loads(resp.data)
            del resp
            meta = body.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                version = str(meta["resourceVersion"])
            items = body.pop("items", None) or []
            del body  # one page of whole objects at a time
            counted[0] += len(items)
            for item in items:
                yield self.transform(item) if self.transform is not None else item
        self.resource_version = version

    def _list(self) -> None:
        counted = [0]
        pages = self._pages(counted)
        if self.stream:
            self.on_list(pages)
            for _ in pages:  # a handler that stopped early: the list still completes
                pass
        else:
            items = list(pages)
            self.on_list(items)
            del items
        self.relists += 1
        metrics.listed(self.resource.name)
        self._ok()
        log.info("listed %d %s at resourceVersion %s", counted[0], self.resource.name, self.resource_version)
        self.synced.set()

    def _watch(self) -> bool:
        """One watch request, until the server ends it; returns whether it delivered
        anything (an event or a bookmark)."""
        seconds = int(self.watch_seconds * (1 + random.random() * (WATCH_JITTER - 1)))
        read_timeout = self.read_timeout if self.read_timeout is not None else seconds + WATCH_READ_MARGIN
        resp = self.resource.list_fn(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=seconds,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], read_timeout),
        )
        self.watches += 1
        self._resp = resp
        delivered = False
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return delivered
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise Gone(obj.get("message", "resourceVersion too old"))
                    raise ApiException(status=code, reason=str(obj.get("message")))
                if not delivered:
                    delivered = True
                    self._ok()
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind != "BOOKMARK":
                    self.on_event(kind, self.transform(obj) if self.transform is not None else obj)
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()
        return delivered

    def _backoff(self, delay: float) -> float:
        self._stop.wait(delay * (1 + random.random() / 4))
        return min(delay * 2, BACKOFF_MAX_SECONDS)

    def _run(self) -> None:
        delay = BACKOFF_BASE_SECONDS
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                began = self.clock()
                delivered = self._watch()
                if self._stop.is_set():
                    return
                if not delivered and self.clock() - began < MIN_WATCH_SECONDS:
                    self.short_watches += 1
                    metrics.watch_restarted(self.resource.name, "empty")
                    self._failed("the watch ended at once, having delivered nothing")
                    log.warning("%s: the watch ended at once; retrying in %.0fs", self.resource.name, delay)
                    delay = self._backoff(delay)
                    continue
                self._ok()
                metrics.watch_restarted(self.resource.name, "timeout")
                delay = BACKOFF_BASE_SECONDS
            except Gone as e:
                log.info("watch of %s expired (%s): listing again", self.resource.name, e)
                metrics.watch_restarted(self.resource.name, "expired")
                need_list = True
            except ApiException as e:
                if e.status == 410:
                    metrics.watch_restarted(self.resource.name, "expired")
                    need_list = True
                    continue
                if e.status == 404 and self.resource.optional:
                    if need_list:
                        self._absent()
                    need_list = True  # a CRD removed under a watch: list again
                    continue
                self._failed(f"API error {e.status} {e.reason}")
                if not need_list:
                    metrics.watch_restarted(self.resource.name, "error")
                log.warning("%s: API error %s %s; retrying in %.0fs", self.resource.name, e.status, e.reason, delay)
                delay = self._backoff(delay)
            except Exception as e:  # noqa: BLE001  a watch must survive any network fault
                if self._stop.is_set():
                    return
                self._failed(f"{type(e).__name__}: {e}")
                if not need_list:
                    metrics.watch_restarted(self.resource.name, "error")
                log.warning("%s: watch interrupted (%s: %s); retrying in %.0fs",
                            self.resource.name, type(e).__name__, e, delay)
                delay = self._backoff(delay)


class KubeLeases:
    """The elector's Lease calls (:class:`reconciler.daemon.election.LeaseApi`) against a real API
    server: ``coordination.k8s.io/v1`` Lease ``namespace/name``, each request bounded by
    the timeout it is given (total, connection included). Give it a client of its own
    with no retries (``api_client(..., retries=0)``), so a timeout is the whole bound."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float) -> dict[str, Any] | None:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=timeout)
            return dict(json.loads(resp.data))
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name}: conflict: {_message(e)}") from e
            raise LeaseError(f"Lease {self.namespace}/{self.name}: {e.status} {_message(e)}") from e
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise LeaseError(f"Lease {self.namespace}/{self.name}: {type(e).__name__}: {e}") from e

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The Lease, or None when it does not exist."""
        return self._call(self.coordination.read_namespaced_lease, self.name, self.namespace, timeout=timeout)

    def create(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Create the Lease; returns it as stored."""
        out = self._call(self.coordination.create_namespaced_lease, self.namespace, dict(lease), timeout=timeout)
        if out is None:
            raise LeaseError(f"Lease {self.namespace}/{self.name}: namespace not found")
        return out

    def update(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Replace the Lease (its resourceVersion is the precondition); returns it as stored."""
        out = self._call(self.coordination.replace_namespaced_lease, self.name, self.namespace, dict(lease),
                         timeout=timeout)
        if out is None:
            raise LeaseConflict(f"Lease {self.namespace}/{self.name}: deleted meanwhile")
        return out


def _message(e: ApiException) -> str:
    body = e.body.decode() if isinstance(e.body, bytes) else e.body
    try:
        return str(json.loads(body).get("message", body)) if body else str(e.reason)
    except (ValueError, AttributeError):
        return str(body)


def _raise_for(e: ApiException, what: str) -> NoReturn:
    if e.status == 409:
        raise Conflict(f"{what}: conflict: {_message(e)}") from e
    if e.status == 404:
        raise Gone(f"{what}: not found") from e
    raise WriteError(f"{what}: {e.status} {_message(e)}") from e


class RateLimiter:
    """Client-side rate limit on API requests, as client-go's token bucket: ``qps``
    tokens a second, at most ``burst`` at once (the ``token_bucket`` library's bucket).
    :meth:`wait` blocks until a token is free. Thread-safe."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self._limiter = token_bucket.Limiter(qps, burst, token_bucket.MemoryStorage())
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Take one token, sleeping while the bucket is empty."""
        while True:
            with self._lock:
                if self._limiter.consume(b"api"):
                    return
            time.sleep(1.0 / self.qps)


#: Attempts of a request that API Priority and Fairness rejects (429), each after the
#: ``Retry-After`` it gives (at most :data:`APF_MAX_WAIT` seconds).
APF_RETRIES = 5
APF_MAX_WAIT = 5.0


class KubeWriter(PodWriter):
    """The :class:`~reconciler.daemon.writer.PodWriter` primitives against a real API server.

    Every request first takes a token from ``limiter`` (the configuration's
    ``kubeAPIQPS``/``kubeAPIBurst``), then passes ``fence`` (checked again at the socket
    when ``api`` was made with :func:`api_client`'s ``fence``). A request that API Priority and Fairness turns away
    (429 with ``Retry-After``) is retried after the wait it asks for, up to
    :data:`APF_RETRIES` times; an eviction's 429 is a PodDisruptionBudget's refusal and
    is not retried (:class:`~reconciler.daemon.writer.Refused`). Events go out on a background
    thread (:class:`EventSink`), so a release never waits for them. ``state`` is the
    ``(namespace, name)`` of the ConfigMap that keeps the reconciler's own state (rollback
    backoffs), so a new leader continues where the last one stopped; None keeps it in
    memory only.
    """

    def __init__(self, api: client.ApiClient, limiter: RateLimiter, component: str = "troupe-reconciler",
                 fence: Fence = UNFENCED, state: tuple[str, str] | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.limiter = limiter
        self.component = component
        self.fence = fence
        self.state = state
        self.events = EventSink(self.core, limiter, component, fence=fence)

    def close(self) -> None:
        """Send the Events still queued (for a few seconds at most), then stop."""
        self.events.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, eviction: bool = False, **kwargs: Any) -> Any:
        for attempt in range(APF_RETRIES + 1):
            self.limiter.wait()
            self.fence.check()
            try:
                return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
            except ApiException as e:
                if e.status == 429 and eviction:
                    raise Refused(f"{what}: {_message(e)}") from e
                if e.status == 429 and attempt < APF_RETRIES:
                    headers = e.headers or {}
                    try:
                        wait = float(headers.get("Retry-After", 1))
                    except ValueError:
                        wait = 1.0
                    time.sleep(min(max(wait, 0.1), APF_MAX_WAIT) * (1 + random.random() / 4))
                    continue
                _raise_for(e, what)
        raise AssertionError("unreachable")  # pragma: no cover

    def _get(self, ref: PodRef) -> dict[str, Any]:
        resp = self._call(f"read pod {ref}", self.core.read_namespaced_pod, ref.name, ref.namespace,
                          _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        resp = self._call(f"patch pod {ref}", self.core.patch_namespaced_pod, ref.name, ref.namespace, patch,
                          _content_type=SMP, _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_status(self, ref: PodRef, patch: Mapping[str, Any]) -> None:
        self._call(f"patch status of pod {ref}", self.core.patch_namespaced_pod_status, ref.name, ref.namespace,
                   patch, _content_type=SMP, _preload_content=False)

    def _delete(self, ref: PodRef, uid: str) -> None:
        try:
            self._call(f"delete pod {ref}", self.core.delete_namespaced_pod, ref.name, ref.namespace,
                       body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                       _preload_content=False)
        except Conflict as e:  # the UID precondition failed: the pod was replaced
            raise Gone(f"delete pod {ref}: replaced by a pod with another uid") from e

    def _evict(self, ref: PodRef, uid: str) -> None:
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=ref.name, namespace=ref.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            self._call(f"evict pod {ref}", self.core.create_namespaced_pod_eviction, ref.name, ref.namespace, body,
                       eviction=True, _preload_content=False)
        except Conflict as e:
            raise Gone(f"evict pod {ref}: replaced by a pod with another uid") from e

    def _read_state(self) -> dict[str, str]:
        if self.state is None:
            return {}
        namespace, name = self.state
        try:
            resp = self._call(f"read configmap {namespace}/{name}", self.core.read_namespaced_config_map, name,
                              namespace, _preload_content=False)
        except Gone:
            return {}
        return dict(json.loads(resp.data).get("data") or {})

    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        if self.state is None:
            return
        namespace, name = self.state
        try:
            self._call(f"patch configmap {namespace}/{name}", self.core.patch_namespaced_config_map, name, namespace,
                       {"data": dict(changes)}, _content_type=MERGE_PATCH, _preload_content=False)
        except Gone:  # not made yet (the chart makes it empty): make it
            self._call(f"create configmap {namespace}/{name}", self.core.create_namespaced_config_map, namespace,
                       {"metadata": {"name": name, "labels": {"app.kubernetes.io/name": "troupe"}},
                        "data": {k: v for k, v in changes.items() if v is not None}}, _preload_content=False)

    def _patch_group(self, name: str, patch: Any, status: bool = False) -> dict[str, Any]:
        group, version, plural = contract.DEVICE_GROUP_API
        fn = self.custom.patch_cluster_custom_object_status if status else self.custom.patch_cluster_custom_object
        resp = self._call(f"patch shareddevicegroup {name}{'/status' if status else ''}", fn, group, version, plural,
                          name, patch, _content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH,
                          _preload_content=False)
        return dict(json.loads(resp.data))

    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``); best
        effort: never raises, never blocks."""
        self.events.emit(ref, uid, kind, reason, message)


class EventSink:
    """Events posted by a background thread, as client-go's event broadcaster does: the
    caller never waits, requests share the writer's rate limit, and when more than
    ``capacity`` are waiting the newest are dropped with one log line per 100 (Events are
    best effort; the state they tell of is on the pods). An Event is a write: one
    ``fence`` refuses is dropped (counted in ``fenced``)."""

    def __init__(self, core: client.CoreV1Api, limiter: RateLimiter, component: str, capacity: int = 10_000,
                 fence: Fence = UNFENCED) -> None:
        self.core, self.limiter, self.component, self.fence = core, limiter, component, fence
        self.fenced = 0
        self._queue: queue.Queue[tuple[PodRef, str | None, str, str, str] | None] = queue.Queue(capacity)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def emit(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Queue one Event."""
        try:
            self._queue.put_nowait((ref, uid, kind, reason, message))
        except queue.Full:
            self.dropped += 1
            if self.dropped % 100 == 1:
                log.warning("event queue full: %d Event(s) dropped so far", self.dropped)

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the queued Events, waiting at most ``timeout`` seconds."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            ref, uid, kind, reason, message = item
            now = dt.datetime.now(dt.UTC)
            body = client.CoreV1Event(
                metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=ref.namespace),
                involved_object=client.V1ObjectReference(
                    kind="Pod", namespace=ref.namespace, name=ref.name, uid=uid, api_version="v1"
                ),
                reason=reason, message=message[:1024], type=kind,
                source=client.V1EventSource(component=self.component),
                reporting_component=self.component, reporting_instance=self.component,
                first_timestamp=now, last_timestamp=now, count=1,
            )
            self.limiter.wait()
            try:
                self.fence.check()
                self.core.create_namespaced_event(ref.namespace, body, _request_timeout=REQUEST_TIMEOUT,
                                                  _preload_content=False)
            except LostLeadership:
                self.fenced += 1
            except ApiException as e:
                log.warning("event %s on pod %s not recorded: %s %s", reason, ref, e.status, _message(e))
            except Exception as e:  # noqa: BLE001  best effort: an Event must never stop the sink
                log.warning("event %s on pod %s not recorded: %s", reason, ref, e)


MERGE_PATCH = "application/merge-patch+json"


class KubeCertificateStore:
    """:class:`reconciler.daemon.certificates.CertificateStore` against the API server: the two
    Secrets of ``settings.namespace`` (read with ``get``, written with a merge patch that
    carries the resourceVersion read, so a concurrent writer makes it fail with 409) and the
    MutatingWebhookConfiguration (a strategic merge patch of each webhook's
    ``clientConfig.caBundle``, by webhook name, also under the resourceVersion read).
    RBAC: ``get``/``list``/``watch``/``patch`` of those objects by name
    (``charts/troupe/templates/certificates.yaml``)."""

    def __init__(self, api: client.ApiClient, settings: certificates.Settings) -> None:
        self.core = client.CoreV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)
        self.settings = settings

    @staticmethod
    def _read(what: str, read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        """The object as a dict, None when it does not exist; other errors name ``what``."""
        try:
            resp = read(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise certificates.CertificateError(f"read {what}: {e.status} {_message(e)}") from e
        return dict(json.loads(resp.data))

    def read_secret(self, name: str) -> certificates.SecretState | None:
        ns = self.settings.namespace
        body = self._read(f"Secret {ns}/{name}", self.core.read_namespaced_secret, name, ns)
        if body is None:
            return None
        data = {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}
        return certificates.SecretState(data, body["metadata"]["resourceVersion"])

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: certificates.SecretState) -> None:
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": previous.resource_version},
            "data": {**{k: None for k in previous.data if k not in data},
                     **{k: base64.b64encode(v).decode() for k, v in data.items()}},
        }
        try:
            self.core.patch_namespaced_secret(name, self.settings.namespace, patch, _content_type=MERGE_PATCH,
                                              _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            raise certificates.CertificateError(f"write Secret {self.settings.namespace}/{name}: {e.status} {_message(e)}") from e

    def read_config(self) -> certificates.ConfigState | None:
        name = self.settings.webhook_configuration
        body = self._read(f"MutatingWebhookConfiguration {name}", self.admission.read_mutating_webhook_configuration, name)
        if body is None:
            return None
        names = tuple(w["name"] for w in body.get("webhooks") or [])
        bundles = tuple(base64.b64decode((w.get("clientConfig") or {}).get("caBundle") or "")
                        for w in body.get("webhooks") or [])
        stamp = ((body["metadata"].get("annotations") or {}).get(certificates.BUNDLE_UPDATED_AT))
        try:
            at = dt.datetime.fromisoformat(stamp) if stamp else None
        except ValueError:
            at = None
        return certificates.ConfigState(bundles, at, body["metadata"]["resourceVersion"], names)

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: certificates.ConfigState) -> None:
        name = self.settings.webhook_configuration
        encoded = base64.b64encode(bundle).decode()
        patch = {
            "metadata": {"resourceVersion": previous.resource_version,
                         "annotations": {certificates.BUNDLE_UPDATED_AT: at.isoformat()}},
            "webhooks": [{"name": w, "clientConfig": {"caBundle": encoded}} for w in previous.webhook_names],
        }
        try:
            self.admission.patch_mutating_webhook_configuration(name, patch, _content_type=SMP, _preload_content=False,
                                                                _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            raise certificates.CertificateError(f"write caBundle of MutatingWebhookConfiguration {name}: {e.status} {_message(e)}") from e

    def emit(self, kind: str, reason: str, message: str) -> None:
        s = self.settings
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{s.tls_secret}.", namespace=s.namespace),
            involved_object=client.V1ObjectReference(kind="Secret", namespace=s.namespace, name=s.tls_secret,
                                                     api_version="v1"),
            reason=reason, message=message[:1024], type=kind,
            source=client.V1EventSource(component="troupe-reconciler"),
            reporting_component="troupe-reconciler", reporting_instance="troupe-reconciler",
            first_timestamp=now, last_timestamp=now, count=1,
        )
        try:
            self.core.create_namespaced_event(s.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False)
        except Exception as e:  # noqa: BLE001  best effort: the log has it too
            log.warning("event %s on Secret %s/%s not recorded: %s", reason, s.namespace, s.tls_secret, e)


def webhook_certificates(api: client.ApiClient, settings: certificates.Settings) -> certificates.CertificateManager:
    """The :class:`~reconciler.daemon.certificates.CertificateManager` for ``settings`` on ``api``, with
    watches of the two Secrets and the webhook configuration (each by a ``metadata.name``
    field selector, which RBAC authorizes against ``resourceNames``) that wake it on any change."""
    manager = certificates.CertificateManager(KubeCertificateStore(api, settings), settings)
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)

    def watch(resource: Resource) -> Informer:
        return Informer(resource, lambda _items: manager.wake(), lambda _kind, _obj: manager.wake())

    for secret in (settings.ca_secret, settings.tls_secret):
        manager.watchers.append(watch(Resource(f"secret {secret}", functools.partial(
            core.list_namespaced_secret, settings.namespace, field_selector=f"metadata.name={secret}"))))
    manager.watchers.append(watch(Resource(f"mutatingwebhookconfiguration {settings.webhook_configuration}",
                                           functools.partial(admission.list_mutating_webhook_configuration,
                                                             field_selector=f"metadata.name={settings.webhook_configuration}"))))
    return manager


# --- read once: the cluster for ``kubectl troupe`` ------------------------------------------
#: The pods that use nothing and count for nothing are not listed: a gang's members are its
#: active pods, and a finished pod frees its node (a field selector the API server serves).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def plugin_client(kubeconfig: str | None, context: str | None) -> tuple[client.ApiClient, str]:
    """A read-only caller's API client and its default namespace, from ``kubeconfig``
    (default: ``$KUBECONFIG``, else ``~/.kube/config``, as kubectl) and ``context``
    (default: the current one): the context's namespace, else ``default``. Raises
    ``ValueError`` naming the file or context when neither works."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        if chosen is None:
            raise ValueError(f"--context: no context {context!r} in the kubeconfig "
                             f"(known: {', '.join(sorted(str(c.get('name')) for c in contexts))})")
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        cfg.retries = urllib3.Retry(total=2, read=0, redirect=0, status=0)  # a command line fails fast
    except config.ConfigException as e:
        raise ValueError(f"kubeconfig {kubeconfig or '(default)'}: {e}") from e
    api = client.ApiClient(cfg)
    api.user_agent = "kubectl-troupe"
    namespace = str((chosen.get("context") or {}).get("namespace") or "default")
    return api, namespace


def _list_all(list_fn: Callable[..., Any], what: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Every object of a list, page by page (:data:`LIST_PAGE`), from the API server's
    watch cache (``resourceVersion=0``: no quorum read of etcd; a page token keeps the
    pages of one list consistent). Raises ``OSError`` naming ``what`` on an API error
    (``PermissionError`` for 401/403)."""
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        try:
            resp = list_fn(limit=LIST_PAGE, _continue=cont, resource_version=None if cont else "0",
                           _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as e:
            error = PermissionError if e.status in (401, 403) else OSError
            raise error(f"list {what}: {e.status} {_message(e)}") from e
        except urllib3.exceptions.HTTPError as e:
            raise OSError(f"list {what}: {type(e).__name__}: {e}") from e
        page = snapshot_io.decode_retained(resp.data)  # what the cache keeps of each object, read fast
        if page is None:
            body = orjson.loads(resp.data)
            page = (body.get("items") or [], body.get("metadata") or {})
        items.extend(page[0])
        cont = page[1].get("continue")
        if not cont:
            return items


def read_cluster(api: client.ApiClient, extra: tuple[str, ...] = ()) -> list[tuple[str, str, Mapping[str, Any]]]:
    """The objects a decision reads, listed once, read-only: Nodes, active Pods, Jobs,
    SharedDeviceGroups and the workload kinds of :mod:`reconciler.engine.workloads` (a
    custom resource whose CRD is not installed, or that this user may not list, is left
    out: its gangs wait with that reason), and ``extra`` kinds (``Namespace``,
    ``PriorityClass``). Lists run in parallel. Returns ``(where, kind, object)`` triples
    in the order :func:`reconciler.tools.simulate.build` takes. Raises ``OSError`` (a
    ``PermissionError`` for a core list this user may not make)."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)

    def crd(group: str, version: str, plural: str) -> Callable[..., Any]:
        return functools.partial(custom.list_cluster_custom_object, group, version, plural)

    lists: list[tuple[str, str, Callable[..., Any], dict[str, Any], bool]] = [
        ("Pod", "pods", core.list_pod_for_all_namespaces, {"field_selector": ACTIVE_PODS}, False),
        ("Node", "nodes", core.list_node, {}, False),
        ("Job", "jobs", batch.list_job_for_all_namespaces, {}, False),
        *[(k.kind, k.crd, crd(k.group, k.version, k.plural), {}, True) for k in wl.CUSTOM_KINDS],
        ("SharedDeviceGroup", "shareddevicegroups", crd(*contract.DEVICE_GROUP_API), {}, True),
    ]
    if "Namespace" in extra:
        lists.append(("Namespace", "namespaces", core.list_namespace, {}, True))
    if "PriorityClass" in extra:
        lists.append(("PriorityClass", "priorityclasses",
                      client.SchedulingV1Api(api).list_priority_class, {}, True))

    def one(entry: tuple[str, str, Callable[..., Any], dict[str, Any], bool]) -> list[dict[str, Any]]:
        _, what, fn, kwargs, optional = entry
        try:
            return _list_all(fn, what, **kwargs)
        except OSError as e:
            cause = e.__cause__
            if optional and isinstance(cause, ApiException) and cause.status in (403, 404):
                return []
            raise

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, lists))
    order = {"Node": 0, "Pod": 2, "SharedDeviceGroup": 3}
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for (kind, what, *_), items in sorted(zip(lists, results, strict=True), key=lambda t: order.get(t[0][0], 1)):
        out += [(f"{what} item {i}", kind, obj) for i, obj in enumerate(items)]
    return out


def read_config_map(api: client.ApiClient, namespace: str, name: str, key: str) -> str | None:
    """``data[key]`` of ConfigMap ``namespace/name``, or None when it, or the key, does not
    exist or this user may not read it. Raises ``OSError`` for other failures."""
    try:
        resp = client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _preload_content=False,
                                                                _request_timeout=REQUEST_TIMEOUT)
    except ApiException as e:
        if e.status in (401, 403, 404):
            return None
        raise OSError(f"read ConfigMap {namespace}/{name}: {e.status} {_message(e)}") from e
    except urllib3.exceptions.HTTPError as e:
        raise OSError(f"read ConfigMap {namespace}/{name}: {type(e).__name__}: {e}") from e
    value = (orjson.loads(resp.data).get("data") or {}).get(key)
    return value if isinstance(value, str) else None
