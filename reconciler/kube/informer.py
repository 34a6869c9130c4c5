"""List+watch of one collection into plain dicts, in a background thread.

Watches follow the API concepts of https://kubernetes.io/docs/reference/using-api/api-concepts/
#efficient-detection-of-changes: list, then watch from the list's ``resourceVersion``,
resume from the last seen version (bookmarks included) when a watch ends, and list again
on ``410 Gone``. A silent connection is noticed within a bounded time: each watch asks the
server to end it after 60 to 90 s (jittered, as client-go's reflector does), the client
gives up reading 15 s after that, and TCP keepalive probes a dead peer out within 60 s
(docs/decisions/016-bounded-failure-detection.md). A watch that ends at once is retried
with backoff, not in a loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from reconciler.daemon import metrics
from reconciler.kube.client import REQUEST_TIMEOUT, list_pages
from reconciler.ports import Gone
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
#: A watch that ends sooner than this, seconds, having delivered nothing, counts as a
#: failure and is retried with backoff (client-go's reflector does the same).
MIN_WATCH_SECONDS = 1.0
#: An informer that has not listed or watched successfully for this long, seconds, makes
#: ``/healthz`` fail (an informer stuck on 403s, say).
UNHEALTHY_AFTER_SECONDS = 60.0
#: Backoff of a failing list or watch: seconds, doubling, capped, with up to 25% jitter.
BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS = 1.0, 30.0

EventHandler = Callable[[str, Mapping[str, Any]], None]
"""Called with ``(type, object)``: type ``ADDED``, ``MODIFIED``, ``DELETED`` or ``SYNC``
(the object came from a re-list); the object is a plain dict."""
ResyncHandler = Callable[[Any], None]
"""Called with every object of a fresh list (a list, or an iterator of them from a
:class:`StreamingInformer`); objects absent from it were deleted."""


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


def apps_owners(api: client.ApiClient, kind: str) -> Resource:
    """All ``apps/v1`` objects of ``kind`` (``ReplicaSet``, ``StatefulSet``, ``DaemonSet``), in
    every namespace: what Volcano reads its groups' minimum from
    (docs/decisions/065-adopted-pods-join-their-peers-groups.md)."""
    apps = client.AppsV1Api(api)
    plural = {"ReplicaSet": "replica_set", "StatefulSet": "stateful_set", "DaemonSet": "daemon_set"}[kind]
    return Resource(f"{kind.lower()}s", getattr(apps, f"list_{plural}_for_all_namespaces"))


def pod_disruption_budgets(api: client.ApiClient) -> Resource:
    """All policy/v1 PodDisruptionBudgets, in every namespace (atomic preemption counts
    them, docs/decisions/030-preemption-budgets-and-fences.md)."""
    return Resource("poddisruptionbudgets", client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces)


#: What the volume filters and pod affinity's namespace selectors read: resource name, API
#: class of the client and its cluster-wide list method. PersistentVolumeClaims (in every
#: namespace), PersistentVolumes (bound volumes' node affinity and zones), CSINodes
#: (``storage.k8s.io/v1``: CSI attach limits) and namespaces (their labels).
VOLUME_COLLECTIONS = (
    ("persistentvolumeclaims", "CoreV1Api", "list_persistent_volume_claim_for_all_namespaces"),
    ("persistentvolumes", "CoreV1Api", "list_persistent_volume"),
    ("csinodes", "StorageV1Api", "list_csi_node"),
    ("namespaces", "CoreV1Api", "list_namespace"),
)


def volume_resources(api: client.ApiClient) -> list[Resource]:
    """The collections of :data:`VOLUME_COLLECTIONS`, in that order."""
    return [Resource(name, getattr(getattr(client, cls)(api), method)) for name, cls, method in VOLUME_COLLECTIONS]


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
    whole objects held at once. ``on_list`` gets a list (a :class:`StreamingInformer`
    hands it an iterator instead). ``synced`` is set after the first list.

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
    ) -> None:
        self.resource = resource
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

    def _objects(self, counted: list[int]) -> Iterator[Mapping[str, Any]]:
        """Every object of a paged list (:func:`~reconciler.kube.client.list_pages`),
        transformed, fetched a page at a time; sets :attr:`resource_version` after the last
        page and counts the objects. Raises ``InterruptedError`` when stopped before a
        page is fetched: a stream is never ended early, or its consumer would take it for
        the whole list."""
        version: str | None = None
        self._raise_if_stopped()
        for items, meta in list_pages(self.resource.list_fn, _whole_page):
            if not meta.get("continue"):
                version = str(meta["resourceVersion"])
            counted[0] += len(items)
            for item in items:
                yield self.transform(item) if self.transform is not None else item
            if version is None:
                self._raise_if_stopped()
        self.resource_version = version

    def _raise_if_stopped(self) -> None:
        if self._stop.is_set():
            raise InterruptedError(f"{self.resource.name}: stopped while listing")

    def _deliver(self, objects: Iterator[Mapping[str, Any]]) -> None:
        """Hand a fresh list to ``on_list``: here as a list of every object."""
        items = list(objects)
        self.on_list(items)
        del items

    def _list(self) -> None:
        counted = [0]
        self._deliver(self._objects(counted))
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
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]  # the client's own line splitter
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


class StreamingInformer(Informer):
    """An :class:`Informer` whose ``on_list`` gets an iterator that fetches the pages as it
    is consumed, not a list: it must consume it all, and may apply each object as it comes,
    so no list of the whole collection is ever built (with ``transform``, the most held at
    once is one page of whole objects: docs/decisions/017-cache-memory.md)."""

    def _deliver(self, objects: Iterator[Mapping[str, Any]]) -> None:
        """Hand a fresh list to ``on_list`` as an iterator; complete the list (fetch the
        pages left) when the handler stopped early."""
        self.on_list(objects)
        for _ in objects:
            pass


def _whole_page(data: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A page of a list, read whole: its items and its List's ``metadata``."""
    body = json.loads(data)
    return body.pop("items", None) or [], body.get("metadata") or {}
