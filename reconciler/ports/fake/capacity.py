"""An in-memory :class:`~reconciler.ports.capacity.CapacityWrites` (:class:`FakeCapacityWrites`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Conflict, Gone
from reconciler.ports.capacity import CapacityWrites
from reconciler.ports.fake.base import FakeStore, RecordedEvent, record_event


@dataclass
class FakeCapacityWrites(FakeStore[tuple[str, str, str]], CapacityWrites):
    """In-memory :class:`CapacityWrites` over objects by ``(kind, namespace, name)``
    (``objects``): a create of a name taken raises :class:`~..base.Conflict`, each object
    made gets a UID (``uid-<n>``); a delete of one absent or of another UID raises
    :class:`~..base.Gone`. ``pods``: the pod objects members are read from (``add_pod``,
    or the pods' fake's objects shared: :class:`~reconciler.ports.fake.FakeCluster`).
    ``fail`` maps a name to the error its next writes raise; Events go to ``events``. Thread-safe."""

    events: list[RecordedEvent] = field(default_factory=list)
    pods: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    deleted: list[tuple[str, str, str]] = field(default_factory=list)

    def add_pod(self, obj: Mapping[str, Any]) -> None:
        """Keep a copy of pod ``obj`` for :meth:`_read_pod`."""
        meta = obj["metadata"]
        self.pods[PodKey(meta.get("namespace", "default"), meta["name"])] = copy.deepcopy(dict(obj))

    def _read_pod(self, pod: PodKey) -> dict[str, Any]:
        with self._lock:
            if pod not in self.pods:
                raise Gone(f"pod {pod} not found")
            return copy.deepcopy(self.pods[pod])

    def _create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._admit()
        name = body["metadata"]["name"]
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            key = (kind, namespace, name)
            if key in self.objects:
                raise Conflict(f"create {kind} {namespace}/{name}: already exists")
            obj = copy.deepcopy(dict(body))
            obj["metadata"]["uid"] = f"uid-{self.versions.next()}"
            return self._store(key, obj)

    def _delete(self, kind: str, namespace: str, name: str, uid: str) -> None:
        self._admit()
        with self._lock:
            obj = self._writable((kind, namespace, name), name, f"{kind} {namespace}/{name} not found")
            if uid and obj["metadata"].get("uid") != uid:
                raise Gone(f"{kind} {namespace}/{name}: another UID")
            del self.objects[(kind, namespace, name)]
            self.deleted.append((kind, namespace, name))

    def emit_event(self, regarding: PodKey, api_version: str, kind: str, event_type: str, reason: str,
                   message: str) -> None:
        """Record the Event in ``events`` unless the fence refuses; never raises."""
        record_event(self.events, self.fence, RecordedEvent(regarding, event_type, reason, message, kind))
