"""The reconciler's one port to the Kubernetes API: list+watch into plain dicts, and writes.

This is the only module of Troupe that imports the ``kubernetes`` client (enforced by
import-linter). Everything above it sees pods and nodes as plain dicts in the API's JSON
shape (camelCase keys), and writes through the :class:`reconciler.writer.Writer`
protocol, which :class:`KubeWriter` implements against a real API server and
:class:`reconciler.writer.FakeWriter` in memory.

Watches follow the API concepts of https://kubernetes.io/docs/reference/using-api/api-concepts/
#efficient-detection-of-changes: list, then watch from the list's ``resourceVersion``,
resume from the last seen version (bookmarks included) when a watch ends, and list again
on ``410 Gone``. A read timeout longer than the server-side watch timeout makes a dead
connection noticed instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import random
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from reconciler.writer import Conflict, Gone, PodRef, WriteError

log = logging.getLogger(__name__)

#: Server-side duration of one watch request, seconds. The server ends the watch after it;
#: the informer resumes from the last resourceVersion.
WATCH_SECONDS = 240
#: Client-side read timeout of a watch, seconds: longer than :data:`WATCH_SECONDS`, so only
#: a dead connection trips it.
WATCH_READ_TIMEOUT = WATCH_SECONDS + 30
#: Connect and read timeouts of ordinary requests, seconds.
REQUEST_TIMEOUT = (5, 30)
#: Page size of list requests (objects).
LIST_PAGE = 500

SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def api_client(kubeconfig: str | None) -> client.ApiClient:
    """An API client from ``kubeconfig``, or from the in-cluster service account when None.

    Raises ``kubernetes.config.ConfigException`` when neither works.
    """
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


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
ResyncHandler = Callable[[list[Mapping[str, Any]]], None]
"""Called with every object of a fresh list; objects absent from it were deleted."""


@dataclass
class Resource:
    """A watched collection: its list function (cluster-wide) and a name for logs."""

    name: str
    list_fn: Callable[..., Any]


def pods(api: client.ApiClient) -> Resource:
    """All pods, in every namespace."""
    return Resource("pods", client.CoreV1Api(api).list_pod_for_all_namespaces)


def nodes(api: client.ApiClient) -> Resource:
    """All nodes."""
    return Resource("nodes", client.CoreV1Api(api).list_node)


def jobs(api: client.ApiClient) -> Resource:
    """All batch/v1 Jobs, in every namespace (the size of GKE auto-gangs they own)."""
    return Resource("jobs", client.BatchV1Api(api).list_job_for_all_namespaces)


class Informer:
    """List+watch of one resource in a background thread, delivering plain dicts.

    ``on_list`` receives each complete list (first and after every ``410 Gone``);
    ``on_event`` each watch event. ``synced`` is set after the first list. Errors other
    than ``410`` back off exponentially (1 s doubling to 30 s, with jitter) and resume
    from the last resourceVersion. ``watch_seconds`` is the server-side length of one
    watch; ``read_timeout`` (seconds, longer) is how long a silent connection may last
    before it is taken for dead and replaced. ``relists`` and ``watches`` count the lists
    and watch requests made.
    """

    def __init__(
        self,
        resource: Resource,
        on_list: ResyncHandler,
        on_event: EventHandler,
        watch_seconds: int = WATCH_SECONDS,
        read_timeout: float = WATCH_READ_TIMEOUT,
    ) -> None:
        self.resource = resource
        self.watch_seconds = watch_seconds
        self.read_timeout = read_timeout
        self.on_list = on_list
        self.on_event = on_event
        self.synced = threading.Event()
        self.resource_version: str | None = None
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.name}", daemon=True)
        self.relists = 0
        self.watches = 0

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

    def _list(self) -> None:
        items: list[Mapping[str, Any]] = []
        cont: str | None = None
        while True:
            resp = self.resource.list_fn(
                limit=LIST_PAGE, _continue=cont, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            body = json.loads(resp.data)
            items.extend(body.get("items") or [])
            cont = (body.get("metadata") or {}).get("continue")
            if not cont:
                self.resource_version = body["metadata"]["resourceVersion"]
                break
        self.relists += 1
        log.info("listed %d %s at resourceVersion %s", len(items), self.resource.name, self.resource_version)
        self.on_list(items)
        self.synced.set()

    def _watch(self) -> None:
        resp = self.resource.list_fn(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_seconds,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], self.read_timeout),
        )
        self.watches += 1
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise Gone(obj.get("message", "resourceVersion too old"))
                    raise ApiException(status=code, reason=str(obj.get("message")))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()

    def _run(self) -> None:
        delay = 1.0
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                delay = 1.0
            except Gone as e:
                log.info("watch of %s expired (%s): listing again", self.resource.name, e)
                need_list = True
            except ApiException as e:
                if e.status == 410:
                    need_list = True
                    continue
                log.warning("%s: API error %s %s; retrying in %.0fs", self.resource.name, e.status, e.reason, delay)
                self._stop.wait(delay * (1 + random.random() / 4))
                delay = min(delay * 2, 30.0)
            except Exception as e:  # noqa: BLE001  a watch must survive any network fault
                if self._stop.is_set():
                    return
                log.warning("%s: watch interrupted (%s: %s); retrying in %.0fs",
                            self.resource.name, type(e).__name__, e, delay)
                self._stop.wait(delay * (1 + random.random() / 4))
                delay = min(delay * 2, 30.0)


@dataclass(frozen=True)
class LeaderElection:
    """Where and how replicas elect the one that acts: a ``coordination.k8s.io/v1`` Lease
    ``namespace/name``, held for ``lease_seconds`` and renewed every ``retry_seconds``
    (renewal given up after ``renew_seconds``), as kube-controller-manager does with its
    defaults 15/10/2 s."""

    namespace: str
    name: str = "troupe-reconciler"
    lease_seconds: int = 15
    renew_seconds: int = 10
    retry_seconds: int = 2

    @classmethod
    def scaled(cls, namespace: str, name: str, lease_seconds: int) -> LeaderElection:
        """Renewal and retry scaled from a lease duration (15 s gives 10 s and 2 s)."""
        if lease_seconds < 4:
            raise ValueError(f"--leader-elect-lease-seconds: must be at least 4, got {lease_seconds}")
        renew = max(2, lease_seconds * 2 // 3)
        retry = max(1, min(renew // 5, 2))
        return cls(namespace, name, lease_seconds, renew, retry)


def lead(api: client.ApiClient, election: LeaderElection, identity: str,
         on_started: Callable[[], None], on_stopped: Callable[[], None]) -> threading.Thread:
    """Campaign for the Lease in a background thread (the client's ``leaderelection``
    package, a Lease lock bound to ``api``); ``on_started`` runs once this replica
    leads, ``on_stopped`` once it has lost the Lease (it must stop acting at once)."""
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    lock = LeaseLock(election.name, election.namespace, identity)
    lock.api_instance = client.CoordinationV1Api(api)
    config = electionconfig.Config(
        lock, election.lease_seconds, election.renew_seconds, election.retry_seconds, on_started, on_stopped
    )
    thread = threading.Thread(target=leaderelection.LeaderElection(config).run, name="leader-election", daemon=True)
    thread.start()
    return thread


def _raise_for(e: ApiException, what: str) -> None:
    if e.status == 409:
        raise Conflict(f"{what}: conflict: {e.reason}") from e
    if e.status == 404:
        raise Gone(f"{what}: not found") from e
    body = e.body.decode() if isinstance(e.body, bytes) else e.body
    try:
        message = json.loads(body).get("message", body) if body else e.reason
    except ValueError:
        message = body
    raise WriteError(f"{what}: {e.status} {message}") from e


class KubeWriter:
    """The :class:`reconciler.writer.Writer` protocol against a real API server.

    Every write carries the pod's ``resourceVersion`` as a precondition: a stale write
    fails with :class:`Conflict` and the caller re-reads and decides again (DESIGN.md
    "Every write is idempotent and retried on conflict with a fresh read").
    """

    def __init__(self, api: client.ApiClient, component: str = "troupe-reconciler") -> None:
        self.core = client.CoreV1Api(api)
        self.component = component

    def read_pod(self, ref: PodRef) -> dict[str, Any]:
        """A fresh copy of the pod as a dict. Raises :class:`Gone` if it no longer exists."""
        try:
            resp = self.core.read_namespaced_pod(
                ref.name, ref.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as e:
            _raise_for(e, f"read pod {ref}")
        return dict(json.loads(resp.data))

    def patch_pod(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a strategic-merge ``patch`` to the pod; returns the updated pod.

        Put ``metadata.resourceVersion`` in the patch for a precondition. Raises
        :class:`Conflict` (409), :class:`Gone` (404) or :class:`WriteError`.
        """
        try:
            resp = self.core.patch_namespaced_pod(
                ref.name, ref.namespace, patch, _content_type=SMP,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as e:
            _raise_for(e, f"patch pod {ref}")
        return dict(json.loads(resp.data))

    def json_patch_pod(self, ref: PodRef, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """Apply RFC 6902 ``ops`` to the pod; a failed ``test`` op is a :class:`Conflict`."""
        try:
            resp = self.core.patch_namespaced_pod(
                ref.name, ref.namespace, ops, _content_type=JSON_PATCH,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as e:
            if e.status == 422 and "test" in str(e.body):
                raise Conflict(f"json-patch pod {ref}: precondition failed") from e
            _raise_for(e, f"json-patch pod {ref}")
        return dict(json.loads(resp.data))

    def add_pod_condition(self, ref: PodRef, condition: Mapping[str, Any]) -> None:
        """Set one ``status.conditions`` entry (merged by ``type``) through ``pods/status``.

        Raises :class:`Gone` (404) or :class:`WriteError`.
        """
        try:
            self.core.patch_namespaced_pod_status(
                ref.name, ref.namespace, {"status": {"conditions": [dict(condition)]}}, _content_type=SMP,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as e:
            _raise_for(e, f"patch status of pod {ref}")

    def delete_pod(self, ref: PodRef, uid: str) -> None:
        """Delete the pod if it is still the one with ``uid`` (a UID precondition, so a pod
        recreated under the same name is never hit). Raises :class:`Gone` when it is gone
        or replaced, :class:`WriteError` otherwise (a 409 on the precondition is Gone too).
        """
        try:
            self.core.delete_namespaced_pod(
                ref.name, ref.namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as e:
            if e.status == 409:
                raise Gone(f"delete pod {ref}: replaced by a pod with another uid") from e
            _raise_for(e, f"delete pod {ref}")

    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``).

        Events are best effort: a failure is logged, never raised.
        """
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=ref.namespace),
            involved_object=client.V1ObjectReference(
                kind="Pod", namespace=ref.namespace, name=ref.name, uid=uid, api_version="v1"
            ),
            reason=reason,
            message=message[:1024],
            type=kind,
            source=client.V1EventSource(component=self.component),
            reporting_component=self.component,
            reporting_instance=self.component,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.core.create_namespaced_event(ref.namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            log.warning("event %s on pod %s not recorded: %s %s", reason, ref, e.status, e.reason)
