"""The Events the writer ports send, from a background thread (:class:`EventSink`), built by
the one Event builder (:func:`event_body`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import queue
import threading

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.engine.model.keys import PodKey
from reconciler.kube.client import REQUEST_TIMEOUT, RateLimiter, error_message, read_whole
from reconciler.ports.base import UNFENCED, Fence, LostLeadership

log = logging.getLogger("reconciler.kube.writer")


class EventSink:
    """Events posted by a background thread, as client-go's event broadcaster does: the
    caller never waits, requests share the writers' rate limit, and when more than
    ``capacity`` are waiting the newest are dropped with one log line per 100 (Events are
    best effort; the state they tell of is on the objects). An Event is a write: one
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
                read_whole(self.core.create_namespaced_event(ref.namespace or "default", body,
                                                             _request_timeout=REQUEST_TIMEOUT, _preload_content=False))
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
