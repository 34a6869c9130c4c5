"""The writer's primitives against a real API server (:class:`KubeWriter`) and the Events
it sends from a background thread (:class:`EventSink`), built by the one Event builder
(:func:`event_body`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.daemon.writer import (
    UNFENCED,
    Conflict,
    Fence,
    Gone,
    LostLeadership,
    PodWriter,
    Refused,
    WriteError,
)
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.keys import PodKey
from reconciler.kube.client import (
    JSON_PATCH,
    MERGE_PATCH,
    REQUEST_TIMEOUT,
    SMP,
    RateLimiter,
    error_message,
)
from troupe import contract

log = logging.getLogger(__name__)

#: Attempts of a request that API Priority and Fairness rejects (429), each after the
#: ``Retry-After`` it gives (at most :data:`APF_MAX_WAIT` seconds).
APF_RETRIES = 5
APF_MAX_WAIT = 5.0


class KubeWriter(PodWriter):
    """The :class:`~reconciler.daemon.writer.PodWriter` primitives against a real API server.

    Every request first takes a token from ``limiter`` (the configuration's
    ``kubeAPIQPS``/``kubeAPIBurst``), then passes ``fence`` (checked again at the socket
    when ``api`` was made with :func:`~reconciler.kube.client.api_client`'s ``fence``). A
    request that API Priority and Fairness turns away (429 with ``Retry-After``) is retried
    after the wait it asks for, up to :data:`APF_RETRIES` times (:meth:`_call`); an
    eviction's 429 is a PodDisruptionBudget's refusal and is not retried
    (:meth:`_call_eviction`, :class:`~reconciler.daemon.writer.Refused`). Events go out on a background
    thread (:class:`EventSink`), so a release never waits for them. ``state`` is the
    ``(namespace, name)`` of the ConfigMap that keeps the reconciler's own state (rollback
    backoffs), so a new leader continues where the last one stopped; None keeps it in
    memory only.
    """

    def __init__(self, api: client.ApiClient, limiter: RateLimiter, component: str = "troupe-reconciler",
                 fence: Fence = UNFENCED, state: tuple[str, str] | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.limiter = limiter
        self.component = component
        self.fence = fence
        self.state = state
        self.events = EventSink(self.core, limiter, component, fence=fence)

    def close(self) -> None:
        """Send the Events still queued (for a few seconds at most), then stop."""
        self.events.close()

    def _send(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One request: a token of the rate limit, the fence, then ``fn``. Raises
        ``ApiException`` and what the fence raises."""
        self.limiter.wait()
        self.fence.check()
        return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` through :meth:`_send`, retried after the wait a 429 of
        API Priority and Fairness asks for (``Retry-After``, at most :data:`APF_MAX_WAIT`
        seconds, up to :data:`APF_RETRIES` times). Raises :class:`Conflict`,
        :class:`Gone`, :class:`WriteError` naming ``what``."""
        for attempt in range(APF_RETRIES + 1):
            try:
                return self._send(fn, *args, **kwargs)
            except ApiException as e:
                if e.status == 429 and attempt < APF_RETRIES:
                    time.sleep(_retry_after(e) * (1 + random.random() / 4))
                    continue
                _raise_for(e, what)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_eviction(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An eviction through :meth:`_send`, not retried: its 429 is a
        PodDisruptionBudget's refusal (:class:`Refused`). Raises as :meth:`_call` too."""
        try:
            return self._send(fn, *args, **kwargs)
        except ApiException as e:
            if e.status == 429:
                raise Refused(f"{what}: {error_message(e)}") from e
            _raise_for(e, what)

    def _get(self, ref: PodKey) -> dict[str, Any]:
        resp = self._call(f"read pod {ref}", self.core.read_namespaced_pod, ref.name, ref.namespace,
                          _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch(self, ref: PodKey, patch: Mapping[str, Any]) -> dict[str, Any]:
        resp = self._call(f"patch pod {ref}", self.core.patch_namespaced_pod, ref.name, ref.namespace, patch,
                          _content_type=SMP, _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_status(self, ref: PodKey, patch: Mapping[str, Any]) -> None:
        self._call(f"patch status of pod {ref}", self.core.patch_namespaced_pod_status, ref.name, ref.namespace,
                   patch, _content_type=SMP, _preload_content=False)

    def _delete(self, ref: PodKey, uid: str) -> None:
        try:
            self._call(f"delete pod {ref}", self.core.delete_namespaced_pod, ref.name, ref.namespace,
                       body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
                       _preload_content=False)
        except Conflict as e:  # the UID precondition failed: the pod was replaced
            raise Gone(f"delete pod {ref}: replaced by a pod with another uid") from e

    def _evict(self, ref: PodKey, uid: str) -> None:
        self._send_eviction(ref, uid, "evict")

    def _evict_dry_run(self, ref: PodKey, uid: str) -> None:
        self._send_eviction(ref, uid, "dry-run evict", dry_run="All")

    def _send_eviction(self, ref: PodKey, uid: str, what: str, **options: str) -> None:
        """POST ``pods/eviction`` for the pod of UID ``uid`` (``options``: query options such
        as ``dry_run``). Raises :class:`Refused`, :class:`Gone` (also for another UID)."""
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=ref.name, namespace=ref.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            self._call_eviction(f"{what} pod {ref}", self.core.create_namespaced_pod_eviction, ref.name,
                                ref.namespace, body, _preload_content=False, **options)
        except Conflict as e:
            raise Gone(f"{what} pod {ref}: replaced by a pod with another uid") from e

    def _get_node(self, name: str) -> dict[str, Any]:
        resp = self._call(f"read node {name}", self.core.read_node, name, _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        resp = self._call(f"patch node {name}", self.core.patch_node, name, patch, _content_type=MERGE_PATCH,
                          _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_workload(self, workload: tuple[str, str, str],
                        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        kind, namespace, name = workload
        content = MERGE_PATCH if isinstance(patch, Mapping) else JSON_PATCH
        what = f"patch {kind} {namespace}/{name}"
        if kind == wl.JOB.kind:
            resp = self._call(what, self.batch.patch_namespaced_job, name, namespace, patch, _content_type=content,
                              _preload_content=False)
        else:
            k = wl.KIND_OF[kind]
            resp = self._call(what, self.custom.patch_namespaced_custom_object, k.group, k.version, namespace, k.plural,
                              name, patch, _content_type=content, _preload_content=False)
        return dict(json.loads(resp.data))

    def emit_workload_event(self, workload: tuple[str, str, str], kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on a workload object (best effort, as :meth:`emit_event`)."""
        api_version = wl.KIND_OF[workload[0]].api_version if workload[0] in wl.KIND_OF else "v1"
        self.events.emit(PodKey(workload[1], workload[2]), None, kind, reason, message, (api_version, workload[0]))

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

    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        return self._send_group_patch(f"patch shareddevicegroup {name}", self.custom.patch_cluster_custom_object,
                                      name, patch)

    def _patch_group_status(self, name: str, patch: Any) -> dict[str, Any]:
        return self._send_group_patch(f"patch shareddevicegroup {name}/status",
                                      self.custom.patch_cluster_custom_object_status, name, patch)

    def _send_group_patch(self, what: str, fn: Callable[..., Any], name: str, patch: Any) -> dict[str, Any]:
        """``patch`` (a JSON patch when a list of operations, else a JSON merge patch) of
        the SharedDeviceGroup ``name`` through the client's patch function ``fn``."""
        group, version, plural = contract.DEVICE_GROUP_API
        resp = self._call(what, fn, group, version, plural, name, patch,
                          _content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH, _preload_content=False)
        return dict(json.loads(resp.data))

    def _list_gang_objects(self) -> list[dict[str, Any]]:
        group, version, plural = contract.GANG_API
        items: list[dict[str, Any]] = []
        token = None
        while True:
            resp = self._call("list gangs", self.custom.list_cluster_custom_object, group, version, plural,
                              limit=500, _continue=token, _preload_content=False)
            page = json.loads(resp.data)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        group, version, plural = contract.GANG_API
        name = body["metadata"]["name"]
        resp = self._call(f"create gang {namespace}/{name}", self.custom.create_namespaced_custom_object, group,
                          version, namespace, plural, {"apiVersion": f"{group}/{version}", "kind": "Gang", **body},
                          _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        group, version, plural = contract.GANG_API
        resp = self._call(f"patch gang {namespace}/{name}/status", self.custom.patch_namespaced_custom_object_status,
                          group, version, namespace, plural, name, [{"op": "add", "path": "/status", "value": dict(status)}],
                          _content_type=JSON_PATCH, _preload_content=False)
        return dict(json.loads(resp.data))

    def _delete_gang_object(self, namespace: str, name: str, uid: str) -> None:
        group, version, plural = contract.GANG_API
        options = {"preconditions": {"uid": uid}} if uid else {}
        try:
            self._call(f"delete gang {namespace}/{name}", self.custom.delete_namespaced_custom_object, group, version,
                       namespace, plural, name, body=options, _preload_content=False)
        except Conflict as e:  # another object of that name now: not ours to delete
            raise Gone(str(e)) from e

    def emit_event(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``); best
        effort: never raises, never blocks."""
        self.events.emit(ref, uid, kind, reason, message)

    def emit_node_event(self, name: str, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on node ``name`` (in namespace ``default``, where Events of
        cluster-scoped objects go); best effort, as :meth:`emit_event`."""
        self.events.emit(PodKey("", name), None, kind, reason, message, ("v1", "Node"))


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
        self._queue: queue.Queue[tuple[PodKey, str | None, str, str, str, tuple[str, str]] | None] = \
            queue.Queue(capacity)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def emit(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str,
             regarding: tuple[str, str] = ("v1", "Pod")) -> None:
        """Queue one Event about ``ref``, an object of ``regarding`` (``(apiVersion, kind)``,
        a pod unless said)."""
        try:
            self._queue.put_nowait((ref, uid, kind, reason, message, regarding))
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
            ref, uid, kind, reason, message, (api_version, object_kind) = item
            body = event_body(client.V1ObjectReference(kind=object_kind, namespace=ref.namespace or None,
                                                       name=ref.name, uid=uid, api_version=api_version),
                              kind, reason, message, self.component, dt.datetime.now(dt.UTC))
            self.limiter.wait()
            try:
                self.fence.check()
                self.core.create_namespaced_event(ref.namespace or "default", body, _request_timeout=REQUEST_TIMEOUT,
                                                  _preload_content=False)
            except LostLeadership:
                self.fenced += 1
            except ApiException as e:
                log.warning("event %s on pod %s not recorded: %s %s", reason, ref, e.status, error_message(e))
            except Exception as e:  # noqa: BLE001  best effort: an Event must never stop the sink
                log.warning("event %s on pod %s not recorded: %s", reason, ref, e)



def event_body(regarding: client.V1ObjectReference, kind: str, reason: str, message: str, component: str,
               now: dt.datetime) -> client.CoreV1Event:
    """A core/v1 Event about the object ``regarding`` (in its namespace, named after it with
    a generated suffix): ``kind`` ``Normal`` or ``Warning``, ``reason`` in CamelCase, the
    ``message`` cut to the API server's 1024 characters, reported by ``component`` (also
    its instance), first and last seen ``now`` (aware), counted once."""
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{regarding.name}.", namespace=regarding.namespace or "default"),
        involved_object=regarding,
        reason=reason, message=message[:1024], type=kind,
        source=client.V1EventSource(component=component),
        reporting_component=component, reporting_instance=component,
        first_timestamp=now, last_timestamp=now, count=1,
    )


def _raise_for(e: ApiException, what: str) -> NoReturn:
    """The writer's error for an API error of the request ``what``: :class:`Conflict` (409),
    :class:`Gone` (404), else :class:`WriteError`."""
    if e.status == 409:
        raise Conflict(f"{what}: conflict: {error_message(e)}") from e
    if e.status == 404:
        raise Gone(f"{what}: not found") from e
    raise WriteError(f"{what}: {e.status} {error_message(e)}") from e


def _retry_after(e: ApiException) -> float:
    """The wait, seconds, a 429 asks for (its ``Retry-After``; 1 when absent or unreadable),
    kept within 0.1 and :data:`APF_MAX_WAIT`."""
    headers = e.headers or {}
    try:
        wait = float(headers.get("Retry-After", 1))
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.1), APF_MAX_WAIT)

