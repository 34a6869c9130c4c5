"""An in-memory :class:`~reconciler.ports.workloads.WorkloadWrites`
(:class:`FakeWorkloadWrites`), with the API server's rules for the patches Troupe sends."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.keys import PodKey, WorkloadKey
from reconciler.ports.base import Conflict
from reconciler.ports.fake.base import FakeStore, RecordedEvent, record_event
from reconciler.ports.workloads import WorkloadWrites
from troupe import contract


@dataclass
class FakeWorkloadWrites(FakeStore[WorkloadKey], WorkloadWrites):
    """In-memory :class:`WorkloadWrites` over workload objects by ``(kind, namespace, name)``
    (``objects``, filled by :meth:`add`). A JSON merge patch merges
    ``metadata.annotations`` (``None`` deletes) and, like kube-apiserver, refuses with
    :class:`~..base.Conflict` one whose ``metadata.uid`` is not the object's; a JSON patch is the reservation's removal:
    its ``test`` of the annotation's value fails with :class:`~..base.Conflict` when the object
    carries another, as kube-apiserver answers a failed ``test``. An object that does not
    exist raises :class:`~..base.Gone`; ``fail`` maps a workload's name to an error its next writes
    raise. Every patch applied is recorded in ``patches``, the Events in ``events``.
    Thread-safe."""

    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[WorkloadKey, Any]] = field(default_factory=list)

    def add(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a workload object of ``kind`` (a fresh resourceVersion) and return it."""
        meta = obj["metadata"]
        return self._store((kind, meta.get("namespace", "default"), meta["name"]), obj)

    def _patch_workload(self, workload: WorkloadKey,
                        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        self._admit()
        with self._lock:
            obj = copy.deepcopy(self._writable(workload, workload[2], f"{workload[0]} {workload[1]}/{workload[2]} not found"))
            annotations = obj["metadata"].setdefault("annotations", {})
            if isinstance(patch, Mapping):
                uid = patch["metadata"].get("uid")
                if uid is not None and uid != obj["metadata"].get("uid"):
                    raise Conflict(f"patch {workload}: Precondition failed: UID in precondition: {uid}, "
                                   f"UID in object meta: {obj['metadata'].get('uid')}")
                for key, value in patch["metadata"]["annotations"].items():
                    if value is None:
                        annotations.pop(key, None)
                    else:
                        annotations[key] = value
            else:  # a test of one annotation, then its removal
                key = contract.RESERVATION
                if annotations.get(key) != patch[0]["value"]:
                    raise Conflict(f"patch {workload}: test of {key} failed")
                annotations.pop(key, None)
            obj["metadata"]["resourceVersion"] = self.versions.next()
            self.objects[workload] = obj
            self.patches.append((workload, copy.deepcopy(patch)))
            return copy.deepcopy(obj)

    def emit_event(self, workload: WorkloadKey, kind: str, reason: str, message: str) -> None:
        """Record the Event in ``events`` unless the fence refuses; never raises."""
        record_event(self.events, self.fence,
                     RecordedEvent(PodKey(workload[1], workload[2]), kind, reason, message, workload[0]))
