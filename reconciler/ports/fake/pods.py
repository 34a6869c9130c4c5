"""An in-memory :class:`~reconciler.ports.pods.PodWrites` (:class:`FakePodWrites`),
with the API server's rules for pods that matter here."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Conflict, Gone, Refused, WriteError
from reconciler.ports.fake.base import FakeStore, RecordedEvent, record_event
from reconciler.ports.pods import PodWrites

#: What kube-apiserver says to an eviction a PodDisruptionBudget forbids.
BUDGET_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget"


@dataclass
class FakePodWrites(FakeStore[PodKey], PodWrites):
    """In-memory :class:`PodWrites` over a dict of pods (``objects``), for tests without an
    API server.

    Applies strategic-merge patches the way kube-apiserver does for the fields Troupe
    writes: ``metadata.annotations`` (merge, ``None`` deletes), ``spec.nodeSelector``
    (merge; only additions, and only to a gated pod: the rule KEP-3838 gives, checked on
    the pod before the update, so a pin and the removal of the gate go in one update),
    ``spec.schedulingGates`` (``$patch: delete`` by name); ``pods/status`` merges
    ``status.conditions`` by ``type``. A ``metadata.resourceVersion`` in the patch that
    differs from the stored one raises :class:`~..base.Conflict`; a delete or an eviction whose UID
    precondition fails raises :class:`~..base.Gone`; an eviction of a pod named in ``protected``
    raises :class:`~..base.Refused`. ``fail`` maps a pod name to an error its next writes raise (a
    refused write, for fault tests). Every write is recorded (``patches``, ``conditions``,
    ``deleted``, ``evicted``, ``dry_runs``), the Events in ``events``. Thread-safe.
    """

    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[PodKey, dict[str, Any]]] = field(default_factory=list)
    deleted: list[PodKey] = field(default_factory=list)
    evicted: list[PodKey] = field(default_factory=list)
    #: Pods asked about by a dry-run eviction (nothing changed).
    dry_runs: list[PodKey] = field(default_factory=list)
    conditions: list[tuple[PodKey, dict[str, Any]]] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)

    def add(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``pod`` (given a fresh resourceVersion) and return it."""
        return self._store(PodKey.of(pod), pod)

    def read(self, ref: PodKey) -> dict[str, Any]:
        """A copy of the stored pod. Raises :class:`~..base.Gone`."""
        return self._get(ref)

    def touch(self, ref: PodKey, **labels: str) -> dict[str, Any]:
        """Someone else's update (labels merged, a new resourceVersion): what makes the
        reconciler's cached version stale."""
        with self._lock:
            pod = self.objects[ref]
            pod["metadata"].setdefault("labels", {}).update(labels)
            pod["metadata"]["resourceVersion"] = self.versions.next()
            return copy.deepcopy(pod)

    def _get(self, ref: PodKey) -> dict[str, Any]:
        return self._read(ref, f"pod {ref}: not found")

    def _patch(self, ref: PodKey, patch: Mapping[str, Any]) -> dict[str, Any]:
        self._admit()
        with self._lock:
            pod = copy.deepcopy(self._writable(ref, ref.name, f"pod {ref}: not found"))
            meta, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
            pmeta, pspec = patch.get("metadata") or {}, patch.get("spec") or {}
            want_rv = pmeta.get("resourceVersion")
            if want_rv is not None and want_rv != meta.get("resourceVersion"):
                raise Conflict(f"patch pod {ref}: resourceVersion {want_rv} is stale")
            for k, v in (pmeta.get("annotations") or {}).items():
                ann = meta.setdefault("annotations", {})
                if v is None:
                    ann.pop(k, None)
                else:
                    ann[k] = v
            gated = bool(spec.get("schedulingGates"))
            for k, v in (pspec.get("nodeSelector") or {}).items():
                sel = spec.setdefault("nodeSelector", {})
                if sel.get(k) == v:
                    continue
                if not gated or k in sel:
                    raise WriteError(f"patch pod {ref}: spec.nodeSelector: only additions are allowed on a gated pod")
                sel[k] = v
            for gate in pspec.get("schedulingGates") or []:
                if gate.get("$patch") == "delete":
                    spec["schedulingGates"] = [g for g in spec.get("schedulingGates", []) if g["name"] != gate["name"]]
            meta["resourceVersion"] = self.versions.next()
            self.objects[ref] = pod
            self.patches.append((ref, copy.deepcopy(dict(patch))))
            return copy.deepcopy(pod)

    def _patch_status(self, ref: PodKey, patch: Mapping[str, Any]) -> None:
        self._admit()
        with self._lock:
            status = self._writable(ref, ref.name, f"pod {ref}: not found").setdefault("status", {})
            for condition in patch["status"]["conditions"]:
                old: dict[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == condition["type"]), {})
                others = [c for c in status.get("conditions", []) if c.get("type") != condition["type"]]
                status["conditions"] = [*others, {**old, **condition}]  # merged by type, as the API server does
                self.conditions.append((ref, dict(condition)))
            self.objects[ref]["metadata"]["resourceVersion"] = self.versions.next()

    def _delete(self, ref: PodKey, uid: str) -> None:
        self._admit()
        with self._lock:
            if ref.name in self.fail:
                raise self.fail[ref.name]
            pod = self.objects.get(ref)
            if pod is None or pod["metadata"].get("uid") != uid:
                raise Gone(f"pod {ref} with uid {uid}: not found")
            del self.objects[ref]
            self.deleted.append(ref)

    def _evict(self, ref: PodKey, uid: str) -> None:
        self._admit()
        with self._lock:
            if ref.name in self.protected:
                raise Refused(f"evict pod {ref}: {BUDGET_REFUSAL}")
            self._delete(ref, uid)
            self.deleted.remove(ref)
            self.evicted.append(ref)

    def _evict_dry_run(self, ref: PodKey, uid: str) -> None:
        with self._lock:
            self.dry_runs.append(ref)
            if ref.name in self.protected:
                raise Refused(f"evict pod {ref}: {BUDGET_REFUSAL}")
            current = self.objects.get(ref)
            if current is None or (uid and current["metadata"].get("uid") != uid):
                raise Gone(f"pod {ref} not found")

    def emit_event(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Record the Event in ``events`` unless the fence refuses; never raises."""
        record_event(self.events, self.fence, RecordedEvent(ref, kind, reason, message))
