"""The pods' writer port against the API server (:class:`KubePodWrites`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from reconciler.engine.model.keys import PodKey
from reconciler.kube.client import SMP
from reconciler.kube.writer.calls import Calls
from reconciler.kube.writer.events import EventSink
from reconciler.ports.base import Conflict, Gone
from reconciler.ports.pods import PodWrites


class KubePodWrites(PodWrites):
    """The :class:`~reconciler.ports.pods.PodWrites` primitives against a real API
    server, through ``calls`` (their rate limit, fence and retries; ``fence`` is its fence):
    reads and writes of ``pods``, strategic-merge patches of a pod and of ``pods/status``,
    deletions and evictions (policy/v1) under a UID precondition. Events go out on
    ``events``'s thread, so a release never waits for them."""

    def __init__(self, api: client.ApiClient, calls: Calls, events: EventSink) -> None:
        self.core, self.calls, self.fence, self.events = client.CoreV1Api(api), calls, calls.fence, events

    def _get(self, ref: PodKey) -> dict[str, Any]:
        resp = self.calls.call(f"read pod {ref}", self.core.read_namespaced_pod, ref.name, ref.namespace,
                               _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch(self, ref: PodKey, patch: Mapping[str, Any]) -> dict[str, Any]:
        resp = self.calls.call(f"patch pod {ref}", self.core.patch_namespaced_pod, ref.name, ref.namespace, patch,
                               _content_type=SMP, _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_status(self, ref: PodKey, patch: Mapping[str, Any]) -> None:
        self.calls.call(f"patch status of pod {ref}", self.core.patch_namespaced_pod_status, ref.name, ref.namespace,
                        patch, _content_type=SMP, _preload_content=False)

    def _delete(self, ref: PodKey, uid: str) -> None:
        try:
            self.calls.call(f"delete pod {ref}", self.core.delete_namespaced_pod, ref.name, ref.namespace,
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
        as ``dry_run``). Raises :class:`~reconciler.ports.base.Refused`,
        :class:`~reconciler.ports.base.Gone` (also for another UID)."""
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=ref.name, namespace=ref.namespace),
            delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
        try:
            self.calls.call_eviction(f"{what} pod {ref}", self.core.create_namespaced_pod_eviction, ref.name,
                                     ref.namespace, body, _preload_content=False, **options)
        except Conflict as e:
            raise Gone(f"{what} pod {ref}: replaced by a pod with another uid") from e

    def emit_event(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``); best
        effort: never raises, never blocks."""
        self.events.emit(ref, uid, kind, reason, message)
