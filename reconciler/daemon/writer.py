"""The writer port: every write the reconciler makes to the cluster, at the level of intent.

:class:`PodWriter` holds the intents (release a member, mark a member disrupted and
delete it, evict, remove a plan record, set a pod condition, emit an Event), each building
its own patch and handling conflicts, over five primitive calls. Two classes implement the
primitives: :class:`reconciler.kube.KubeWriter` against a real API server, and
:class:`FakeWriter` in memory for controller tests, with the API server's rules that
matter here (resourceVersion and UID preconditions, strategic merge of annotations,
``nodeSelector`` and ``schedulingGates``, additions only to a gated pod's node selection,
PodDisruptionBudgets refusing evictions).

Every method may be called from several threads at once (a release writes its members in
parallel). Errors: :class:`Conflict` (the object changed in a way that forbids the
write), :class:`Gone` (it no longer exists, or was replaced by a pod of another UID),
:class:`Refused` (an eviction a PodDisruptionBudget forbids), :class:`LostLeadership`
(this replica may no longer write: its :class:`Fence` is closed), :class:`WriteError`
(anything else); ``emit_event`` never raises.

Every write of an intent passes the writer's :attr:`PodWriter.fence` first (the leader's
Lease, docs/decisions/016-bounded-failure-detection.md); :class:`reconciler.kube.KubeWriter`
checks it again just before the request's bytes leave.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from reconciler.engine.decision import MemberRelease
from reconciler.engine.devices import encode_selected, format_ids
from reconciler.engine.records import Nomination, Plan
from troupe import contract


class WriteError(RuntimeError):
    """A write failed for a reason other than a conflict or a missing object."""


class Conflict(WriteError):
    """The object changed since it was read (HTTP 409), in a way the write cannot absorb."""


class Gone(WriteError):
    """The object no longer exists (HTTP 404), was replaced by one of another UID, or a
    watch's resourceVersion expired (410)."""


class Refused(WriteError):
    """An eviction was refused (HTTP 429): a PodDisruptionBudget allows no disruption now."""


class LostLeadership(WriteError):
    """This replica does not hold the Lease, or cannot be sure it still does (its last
    renewal is older than the renew deadline): it must not write."""


class Fence(Protocol):
    """What a write asks before it goes out (:class:`reconciler.daemon.election.Elector`)."""

    def check(self) -> None:
        """Raise :class:`LostLeadership` unless this replica may write now. No I/O."""

    def confirm(self) -> None:
        """:meth:`check`, and ask the API server too (before a batch of writes). Raises
        :class:`LostLeadership`."""


class Unfenced:
    """The fence of a reconciler that runs alone (no leader election): always open."""

    def check(self) -> None:
        """Never raises."""

    def confirm(self) -> None:
        """Never raises."""


#: The open fence.
UNFENCED: Fence = Unfenced()


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

    @classmethod
    def parse(cls, key: str) -> PodRef:
        """The reference of a ``namespace/name`` key."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


#: Writes retried on conflict, each after a fresh read.
CONFLICT_RETRIES = 3


def state_key(gang: str) -> str:
    """The state ConfigMap's data key of a gang (``gang-`` and a hash: a gang key's ``/`` and
    ``:`` may not be in a ConfigMap key)."""
    return "gang-" + hashlib.blake2b(gang.encode(), digest_size=10).hexdigest()


def _troupe_gates(pod: Mapping[str, Any]) -> list[str]:
    return [g for g in contract.pod_gates(pod) if contract.is_troupe_gate(g)]


def release_patch(m: MemberRelease, gates: list[str], resource_version: str, released_at: str,
                  plan: Plan | None) -> dict[str, Any]:
    """The strategic-merge patch that releases one member in one update
    (docs/decisions/007-release-writes.md): the pin (``kubernetes.io/hostname`` added to
    ``spec.nodeSelector``, an addition to a gated pod's node selection as KEP-3838
    allows), the decision's annotations (node, rank, planned-at, released-at, the plan
    record on the first member of a release of several, and for a member of a
    SharedDeviceGroup its devices: ``deviceshare.io/selected-devices`` and one
    ``deviceshare.io/env.<VAR>`` per resource, which its containers read through the
    Downward API), the removal of a preemptor's nomination (its release replaces it), and
    the removal of Troupe's ``gates`` (by name; other components' gates stay).
    ``resource_version`` is the precondition."""
    annotations: dict[str, str | None] = {
        contract.ASSIGNED_NODE: m.node, contract.ASSIGNED_RANK: str(m.rank),
        contract.PLANNED_AT: m.planned_at, contract.RELEASED_AT: released_at,
        contract.NOMINATION: None,  # a preemptor's nomination ends with its release
    }
    if plan is not None:
        annotations[contract.PLAN] = plan.encode()
    if m.devices:
        annotations[contract.SELECTED_DEVICES] = encode_selected(m.devices)
        for resource, ids in m.devices.items():
            annotations[contract.DEVICE_ENV_PREFIX + contract.device_env_var(resource)] = format_ids(ids)
    spec: dict[str, Any] = {"nodeSelector": {contract.HOSTNAME_LABEL: m.hostname}}
    if gates:
        spec["schedulingGates"] = [{"$patch": "delete", "name": g} for g in gates]
    return {"metadata": {"resourceVersion": resource_version, "annotations": annotations}, "spec": spec}


def _pinned_to(pod: Mapping[str, Any]) -> str:
    """The node a pod is pinned to by the reconciler (annotation), or its hostname pin."""
    node = contract.pod_annotations(pod).get(contract.ASSIGNED_NODE)
    if isinstance(node, str) and node:
        return node
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return str(selector.get(contract.HOSTNAME_LABEL) or "")


class PodWriter(abc.ABC):
    """The intents (module docstring) over the primitives a subclass provides:
    ``_get``, ``_patch`` (strategic merge), ``_patch_status``, ``_delete`` (with a UID
    precondition) and ``_evict`` for pods, ``_patch_group`` for SharedDeviceGroups, plus
    :meth:`emit_event`. ``fence`` is checked before every primitive write (:class:`Unfenced`
    unless set)."""

    fence: Fence = UNFENCED

    # --- primitives ---------------------------------------------------------------------
    @abc.abstractmethod
    def _get(self, ref: PodRef) -> dict[str, Any]:
        """The pod as it is now. Raises :class:`Gone`."""

    @abc.abstractmethod
    def _patch(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a strategic-merge patch; returns the pod. Raises :class:`Conflict` on a
        stale ``metadata.resourceVersion``, :class:`Gone`, :class:`WriteError`."""

    @abc.abstractmethod
    def _patch_status(self, ref: PodRef, patch: Mapping[str, Any]) -> None:
        """Apply a strategic-merge patch to ``pods/status``. Raises :class:`Gone`,
        :class:`WriteError`."""

    @abc.abstractmethod
    def _delete(self, ref: PodRef, uid: str) -> None:
        """Delete the pod if its UID is ``uid``. Raises :class:`Gone` (also when the UID
        differs), :class:`WriteError`."""

    @abc.abstractmethod
    def _evict(self, ref: PodRef, uid: str) -> None:
        """Evict the pod through ``pods/eviction`` (policy/v1) if its UID is ``uid``.
        Raises :class:`Refused` (a PodDisruptionBudget forbids it), :class:`Gone`,
        :class:`WriteError`."""

    @abc.abstractmethod
    def _patch_group(self, name: str, patch: Any, status: bool = False) -> dict[str, Any]:
        """Patch the SharedDeviceGroup ``name`` (cluster-scoped): ``patch`` is a JSON merge
        patch (a mapping) or a JSON patch (a list of operations); ``status``: through the
        ``status`` subresource. Returns the group. Raises :class:`Conflict` (a stale
        ``metadata.resourceVersion`` in a merge patch), :class:`Gone`, :class:`WriteError`."""

    @abc.abstractmethod
    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``); best
        effort, never raises."""

    @abc.abstractmethod
    def _read_state(self) -> dict[str, str]:
        """The data of the reconciler's state ConfigMap (``{}`` when it does not exist).
        Raises :class:`WriteError` when it cannot be read."""

    @abc.abstractmethod
    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        """Merge ``changes`` into the state ConfigMap's data (None removes a key), creating
        it when absent. Raises :class:`WriteError`."""

    # --- the reconciler's own state -------------------------------------------------------
    def load_backoffs(self) -> dict[str, tuple[int, float, tuple[str, ...]]]:
        """The rollbacks a reconciler recorded (:meth:`save_backoff`): gang key ->
        ``(consecutive timeouts, not before (seconds since the epoch), releases rolled back)``.
        Unreadable entries are skipped. Raises :class:`WriteError` when the state cannot be read."""
        out = {}
        for raw in self._read_state().values():
            try:
                entry = json.loads(raw)
                releases = tuple(str(r) for r in entry.get("releases", []))
                out[str(entry["gang"])] = (int(entry["timeouts"]), float(entry["notBefore"]), releases)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return out

    def save_backoff(self, gang: str, timeouts: int, not_before: float, releases: tuple[str, ...] = ()) -> None:
        """Record gang ``gang``'s rollback backoff and the releases it rolled back (their
        ``planned-at``, whose members must all go) (``timeouts`` 0: forget it), so that a new
        leader keeps the same deadline and finishes a rollback cut short. Raises
        :class:`WriteError`."""
        self.fence.check()
        key = state_key(gang)
        value = None if timeouts <= 0 else json.dumps(
            {"gang": gang, "timeouts": timeouts, "notBefore": round(not_before, 3), "releases": list(releases)},
            separators=(",", ":"))
        self._write_state({key: value})

    # --- SharedDeviceGroups ----------------------------------------------------------------
    def set_group_status(self, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the group's whole ``status`` (phase, nodeName, selectedDevices,
        conditions) through its status subresource; returns the group. Raises
        :class:`Gone`, :class:`WriteError`."""
        self.fence.check()
        return self._patch_group(name, [{"op": "add", "path": "/status", "value": dict(status)}], status=True)

    def set_group_finalizers(self, name: str, finalizers: list[str], resource_version: str) -> dict[str, Any]:
        """Set the group's ``metadata.finalizers`` to ``finalizers`` if it is still at
        ``resource_version`` (adding or removing Troupe's finalizer; other finalizers are
        kept by the caller); returns the group. Raises :class:`Conflict` when the group
        changed meanwhile, :class:`Gone`, :class:`WriteError`."""
        self.fence.check()
        return self._patch_group(name, {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}})

    # --- intents ------------------------------------------------------------------------
    def release_member(self, m: MemberRelease, gates: list[str], released_at: str,
                       plan: Plan | None = None) -> dict[str, Any]:
        """Release member ``m`` in one update (:func:`release_patch`); returns the pod as
        written. ``gates`` are its Troupe gates as the decision saw them.

        The first attempt uses the decision's resourceVersion, so a release costs one
        request per member. On a conflict the pod is read again and the write decided
        again: done already (released and pinned to ``m.node``) returns the pod as it is;
        a pod of another UID raises :class:`Gone`; a pod pinned to another node, or
        released by someone else, raises :class:`Conflict`, since a member is never
        pinned to two nodes. Raises :class:`Conflict` after :data:`CONFLICT_RETRIES`
        conflicts in a row.
        """
        ref = PodRef.parse(m.pod)
        rv = m.resource_version
        for attempt in range(CONFLICT_RETRIES + 1):
            self.fence.check()
            try:
                return self._patch(ref, release_patch(m, gates, rv, released_at, plan))
            except Conflict:
                if attempt == CONFLICT_RETRIES:
                    raise
            current = self._get(ref)
            meta = contract.pod_meta(current)
            if m.uid and meta.get("uid") != m.uid:
                raise Gone(f"pod {ref}: replaced by a pod with another uid")
            pinned, gates = _pinned_to(current), _troupe_gates(current)
            if pinned and pinned not in (m.node, m.hostname):
                raise Conflict(f"pod {ref} is pinned to {pinned}, not {m.node}: a member is never pinned twice")
            if not gates:
                if pinned:
                    return current
                raise Conflict(f"pod {ref} was ungated by someone else")
            rv = str(meta.get("resourceVersion") or "")
        raise AssertionError("unreachable")  # pragma: no cover

    def set_nomination(self, ref: PodRef, nomination: Nomination, resource_version: str) -> dict[str, Any]:
        """Write a preemptor gang's nomination on its first gated member (if it is still at
        ``resource_version``); returns the pod. From then on the nodes it names hold
        capacity for the gang. Raises :class:`Conflict`, :class:`Gone`, :class:`WriteError`."""
        self.fence.check()
        return self._patch(ref, {"metadata": {"resourceVersion": resource_version,
                                              "annotations": {contract.NOMINATION: nomination.encode()}}})

    def clear_nomination(self, ref: PodRef) -> dict[str, Any]:
        """Remove a nomination that ran out; returns the pod. Raises :class:`Gone`,
        :class:`WriteError`."""
        self.fence.check()
        return self._patch(ref, {"metadata": {"annotations": {contract.NOMINATION: None}}})

    def clear_plan(self, ref: PodRef) -> None:
        """Remove the plan record (``reconciler.troupe.io/plan``) from the pod: its release
        was rolled back and it reserves nothing any more. Raises :class:`Gone`,
        :class:`WriteError`."""
        self.fence.check()
        self._patch(ref, {"metadata": {"annotations": {contract.PLAN: None}}})

    def mark_disrupted_and_delete(self, ref: PodRef, uid: str, reason: str, message: str, at: str) -> None:
        """Set the pod condition ``DisruptionTarget`` (``reason``, ``message``,
        lastTransitionTime ``at``), then delete the pod if its UID is still ``uid``.

        KEP-3329: the condition lets a Job's ``podFailurePolicy`` ignore the deletion
        instead of counting it against ``backoffLimit`` (kube-scheduler marks its
        preemption victims the same way). Raises :class:`Gone` when the pod is gone or
        replaced, :class:`WriteError`.
        """
        self.set_pod_condition(ref, {"type": "DisruptionTarget", "status": "True", "reason": reason,
                                     "message": message, "lastTransitionTime": at})
        self.fence.check()
        self._delete(ref, uid)

    def evict(self, ref: PodRef, uid: str) -> None:
        """Evict the pod through the Eviction API (policy/v1), so PodDisruptionBudgets
        hold and the pod's grace period is respected. Raises :class:`Refused` when a
        budget forbids it now, :class:`Gone`, :class:`WriteError`."""
        self.fence.check()
        self._evict(ref, uid)

    def set_pod_condition(self, ref: PodRef, condition: Mapping[str, Any]) -> None:
        """Set one ``status.conditions`` entry (merged by ``type``) through
        ``pods/status``. Raises :class:`Gone`, :class:`WriteError`."""
        self.fence.check()
        self._patch_status(ref, {"status": {"conditions": [dict(condition)]}})


@dataclass
class RecordedEvent:
    """An Event :class:`FakeWriter` recorded."""

    pod: PodRef
    kind: str
    reason: str
    message: str


@dataclass
class FakeWriter(PodWriter):
    """In-memory :class:`PodWriter` over a dict of pods, for tests without an API server.

    Applies strategic-merge patches the way kube-apiserver does for the fields Troupe
    writes: ``metadata.annotations`` (merge, ``None`` deletes), ``spec.nodeSelector``
    (merge; only additions, and only to a gated pod: the rule KEP-3838 gives, checked on
    the pod before the update, so a pin and the removal of the gate go in one update),
    ``spec.schedulingGates`` (``$patch: delete`` by name). A ``metadata.resourceVersion``
    in the patch that differs from the stored one raises :class:`Conflict`; a delete or
    an eviction whose UID precondition fails raises :class:`Gone`; an eviction of a pod
    named in ``protected`` raises :class:`Refused`. ``fail`` maps a pod name to an error
    its next writes raise (a refused write, for fault tests). Thread-safe.
    """

    pods: dict[PodRef, dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[PodRef, dict[str, Any]]] = field(default_factory=list)
    deleted: list[PodRef] = field(default_factory=list)
    evicted: list[PodRef] = field(default_factory=list)
    conditions: list[tuple[PodRef, dict[str, Any]]] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)
    fail: dict[str, WriteError] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def add(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``pod`` (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(pod))
            stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
            self.pods[PodRef.of(stored)] = stored
            return copy.deepcopy(stored)

    def read_pod(self, ref: PodRef) -> dict[str, Any]:
        """A copy of the stored pod. Raises :class:`Gone`."""
        return self._get(ref)

    def touch(self, ref: PodRef, **labels: str) -> dict[str, Any]:
        """Someone else's update (labels merged, a new resourceVersion): what makes the
        reconciler's cached version stale."""
        with self._lock:
            pod = self.pods[ref]
            pod["metadata"].setdefault("labels", {}).update(labels)
            pod["metadata"]["resourceVersion"] = str(next(self._rv))
            return copy.deepcopy(pod)

    def _check_fail(self, ref: PodRef) -> None:
        error = self.fail.get(ref.name)
        if error is not None:
            raise error

    def _get(self, ref: PodRef) -> dict[str, Any]:
        with self._lock:
            if ref not in self.pods:
                raise Gone(f"pod {ref}: not found")
            return copy.deepcopy(self.pods[ref])

    def _patch(self, ref: PodRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._check_fail(ref)
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
                if sel.get(k) == v:
                    continue
                if not gated or k in sel:
                    raise WriteError(f"patch pod {ref}: spec.nodeSelector: only additions are allowed on a gated pod")
                sel[k] = v
            for gate in pspec.get("schedulingGates") or []:
                if gate.get("$patch") == "delete":
                    spec["schedulingGates"] = [g for g in spec.get("schedulingGates", []) if g["name"] != gate["name"]]
            meta["resourceVersion"] = str(next(self._rv))
            self.pods[ref] = pod
            self.patches.append((ref, copy.deepcopy(dict(patch))))
            return copy.deepcopy(pod)

    def _patch_status(self, ref: PodRef, patch: Mapping[str, Any]) -> None:
        with self._lock:
            self._check_fail(ref)
            if ref not in self.pods:
                raise Gone(f"pod {ref}: not found")
            status = self.pods[ref].setdefault("status", {})
            for condition in patch["status"]["conditions"]:
                old: dict[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == condition["type"]), {})
                others = [c for c in status.get("conditions", []) if c.get("type") != condition["type"]]
                status["conditions"] = [*others, {**old, **condition}]  # merged by type, as the API server does
                self.conditions.append((ref, dict(condition)))
            self.pods[ref]["metadata"]["resourceVersion"] = str(next(self._rv))

    def _delete(self, ref: PodRef, uid: str) -> None:
        with self._lock:
            self._check_fail(ref)
            pod = self.pods.get(ref)
            if pod is None or pod["metadata"].get("uid") != uid:
                raise Gone(f"pod {ref} with uid {uid}: not found")
            del self.pods[ref]
            self.deleted.append(ref)

    def _evict(self, ref: PodRef, uid: str) -> None:
        with self._lock:
            if ref.name in self.protected:
                raise Refused(f"evict pod {ref}: Cannot evict pod as it would violate the pod's disruption budget")
            self._delete(ref, uid)
            self.deleted.remove(ref)
            self.evicted.append(ref)

    def add_group(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a SharedDeviceGroup (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(group))
            stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
            self.groups[stored["metadata"]["name"]] = stored
            return copy.deepcopy(stored)

    def _patch_group(self, name: str, patch: Any, status: bool = False) -> dict[str, Any]:
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            group = self.groups.get(name)
            if group is None:
                raise Gone(f"shareddevicegroup {name}: not found")
            group = copy.deepcopy(group)
            if isinstance(patch, list):
                for op in patch:
                    if op["op"] != "add" or op["path"] != "/status":
                        raise WriteError(f"patch shareddevicegroup {name}: unsupported operation {op}")
                    group["status"] = copy.deepcopy(op["value"])
            else:
                meta = patch.get("metadata") or {}
                want_rv = meta.get("resourceVersion")
                if want_rv is not None and want_rv != group["metadata"].get("resourceVersion"):
                    raise Conflict(f"patch shareddevicegroup {name}: resourceVersion {want_rv} is stale")
                if "finalizers" in meta:
                    group["metadata"]["finalizers"] = list(meta["finalizers"])
            if group["metadata"].get("deletionTimestamp") and not group["metadata"].get("finalizers"):
                del self.groups[name]
                return group
            group["metadata"]["resourceVersion"] = str(next(self._rv))
            self.groups[name] = group
            return copy.deepcopy(group)

    def emit_event(self, ref: PodRef, uid: str | None, kind: str, reason: str, message: str) -> None:
        try:
            self.fence.check()
        except LostLeadership:
            return  # not the leader: an Event is a write too
        with self._lock:
            self.events.append(RecordedEvent(ref, kind, reason, message))

    def _read_state(self) -> dict[str, str]:
        with self._lock:
            return dict(self.state)

    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        with self._lock:
            for k, v in changes.items():
                if v is None:
                    self.state.pop(k, None)
                else:
                    self.state[k] = v
