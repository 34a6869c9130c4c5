"""The writer port: every write the reconciler makes to the cluster, as one small protocol.

:class:`reconciler.kube.KubeWriter` implements it against a real API server;
:class:`FakeWriter` keeps pods in memory for unit tests of the controller, with the API
server's rules that matter here (resourceVersion preconditions, strategic-merge of
annotations, nodeSelector and schedulingGates).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class WriteError(RuntimeError):
    """A write failed for a reason other than a conflict or a missing object."""


class Conflict(WriteError):
    """The object changed since it was read (HTTP 409): read it again and decide again."""


class Gone(WriteError):
    """The object no longer exists (HTTP 404), or a watch's resourceVersion expired (410)."""


@dataclass(frozen=True, order=True)
class PodRef:
    """A pod's ``namespace/name``."""

    namespace: str
    name: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodRef:
        """The reference of a pod dict."""
        m = pod.get("metadata") or {}
        return cls(str(m.get("namespace") or "default"), str(m.get("name") or ""))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Writer(Protocol):
    """What the controller may do to the cluster. Every method raises :class:`Conflict`,
    :class:`Gone` or :class:`WriteError`; ``emit_event`` never raises."""

    def read_pod(self, ref: PodRef) -> dict[str, Any]: ...

    def patch_pod(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]: ...

    def delete_pod(self, ref: PodRef, uid: str) -> None: ...

    def add_pod_condition(self, ref: PodRef, condition: Mapping[str, Any]) -> None: ...

    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None: ...


@dataclass
class RecordedEvent:
    """An Event :class:`FakeWriter` recorded."""

    pod: PodRef
    kind: str
    reason: str
    message: str


@dataclass
class FakeWriter:
    """In-memory :class:`Writer` over a dict of pods, for tests without an API server.

    Applies strategic-merge patches the way kube-apiserver does for the fields Troupe
    writes: ``metadata.annotations`` (merge, ``None`` deletes), ``spec.nodeSelector``
    (merge; changing an existing key of a gated pod is refused as the API server refuses
    it), ``spec.schedulingGates`` (``$patch: delete`` by name). A ``metadata.resourceVersion``
    in the patch that differs from the stored one raises :class:`Conflict`; a delete whose
    UID precondition fails raises :class:`Gone`.
    """

    pods: dict[PodRef, dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[PodRef, dict[str, Any]]] = field(default_factory=list)
    deleted: list[PodRef] = field(default_factory=list)
    conditions: list[tuple[PodRef, dict[str, Any]]] = field(default_factory=list)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def add(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``pod`` (given a fresh resourceVersion) and return it."""
        stored = copy.deepcopy(dict(pod))
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        self.pods[PodRef.of(stored)] = stored
        return copy.deepcopy(stored)

    def read_pod(self, ref: PodRef) -> dict[str, Any]:
        if ref not in self.pods:
            raise Gone(f"pod {ref}: not found")
        return copy.deepcopy(self.pods[ref])

    def patch_pod(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        if ref not in self.pods:
            raise Gone(f"pod {ref}: not found")
        pod = copy.deepcopy(self.pods[ref])
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
            if not gated or (k in sel and sel[k] != v):
                raise WriteError(f"patch pod {ref}: spec.nodeSelector: only additions are allowed on a gated pod")
            sel[k] = v
        for gate in pspec.get("schedulingGates") or []:
            if gate.get("$patch") == "delete":
                spec["schedulingGates"] = [g for g in spec.get("schedulingGates", []) if g["name"] != gate["name"]]
        meta["resourceVersion"] = str(next(self._rv))
        self.pods[ref] = pod
        self.patches.append((ref, copy.deepcopy(dict(patch))))
        return copy.deepcopy(pod)

    def add_pod_condition(self, ref: PodRef, condition: Mapping[str, Any]) -> None:
        if ref not in self.pods:
            raise Gone(f"pod {ref}: not found")
        status = self.pods[ref].setdefault("status", {})
        others = [c for c in status.get("conditions", []) if c.get("type") != condition["type"]]
        status["conditions"] = [*others, dict(condition)]
        self.conditions.append((ref, dict(condition)))

    def delete_pod(self, ref: PodRef, uid: str) -> None:
        pod = self.pods.get(ref)
        if pod is None or pod["metadata"].get("uid") != uid:
            raise Gone(f"pod {ref} with uid {uid}: not found")
        del self.pods[ref]
        self.deleted.append(ref)

    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        self.events.append(RecordedEvent(ref, kind, reason, message))
