"""The writer port of pods: release a member, write or clear a nomination, clear a plan
record, mark a member disrupted and delete it, evict (or ask whether it may), set a pod
condition, emit an Event about a pod; each intent builds its own patch and handles conflicts.

:class:`PodWrites` makes them over the pod primitives an implementation provides:
:class:`reconciler.kube.writer.pods.KubePodWrites` against the API server,
:class:`reconciler.ports.fake.pods.FakePodWrites` in memory. Errors: those of
:mod:`reconciler.ports.base`; ``emit_event`` never raises.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from reconciler.engine.decision.decide import MemberRelease
from reconciler.engine.model.devicegroups import encode_selected, format_ids
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.records import Nomination, Plan
from reconciler.ports.base import Conflict, Fenced, Gone
from troupe import contract

#: Writes retried on conflict, each after a fresh read.
CONFLICT_RETRIES = 3


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
    the removal of Troupe's ``gates`` (by name; other components' gates stay), and the
    member's other ``annotations`` (a ProvisioningRequest it consumes).
    ``resource_version`` is the precondition."""
    annotations: dict[str, str | None] = {
        **m.annotations,
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


class PodWrites(Fenced, abc.ABC):
    """The pod intents (module docstring) over the primitives a subclass provides:
    ``_get``, ``_patch`` (strategic merge), ``_patch_status``, ``_delete`` (with a UID
    precondition), ``_evict`` and ``_evict_dry_run``, plus :meth:`emit_event`. ``fence`` is
    checked before every primitive write."""

    # --- primitives ---------------------------------------------------------------------
    @abc.abstractmethod
    def _get(self, ref: PodKey) -> dict[str, Any]:
        """The pod as it is now. Raises :class:`Gone`."""

    @abc.abstractmethod
    def _patch(self, ref: PodKey, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a strategic-merge patch; returns the pod. Raises :class:`Conflict` on a
        stale ``metadata.resourceVersion``, :class:`Gone`, :class:`~.base.WriteError`."""

    @abc.abstractmethod
    def _patch_status(self, ref: PodKey, patch: Mapping[str, Any]) -> None:
        """Apply a strategic-merge patch to ``pods/status``. Raises :class:`Gone`,
        :class:`~.base.WriteError`."""

    @abc.abstractmethod
    def _delete(self, ref: PodKey, uid: str) -> None:
        """Delete the pod if its UID is ``uid``. Raises :class:`Gone` (also when the UID
        differs), :class:`~.base.WriteError`."""

    @abc.abstractmethod
    def _evict(self, ref: PodKey, uid: str) -> None:
        """Evict the pod through ``pods/eviction`` (policy/v1) if its UID is ``uid``.
        Raises :class:`~.base.Refused` (a PodDisruptionBudget forbids it), :class:`Gone`,
        :class:`~.base.WriteError`."""

    @abc.abstractmethod
    def _evict_dry_run(self, ref: PodKey, uid: str) -> None:
        """Ask ``pods/eviction`` with ``dryRun=All`` whether the pod of UID ``uid`` may be
        evicted now, changing nothing. Raises as :meth:`_evict`."""

    @abc.abstractmethod
    def emit_event(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the pod (``kind`` ``Normal`` or ``Warning``); best
        effort, never raises."""

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
        ref = m.pod
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

    def set_nomination(self, ref: PodKey, nomination: Nomination, resource_version: str) -> dict[str, Any]:
        """Write a preemptor gang's nomination on its first gated member (if it is still at
        ``resource_version``); returns the pod. From then on the nodes it names hold
        capacity for the gang. Raises :class:`Conflict`, :class:`Gone`, :class:`~.base.WriteError`."""
        self.fence.check()
        return self._patch(ref, {"metadata": {"resourceVersion": resource_version,
                                              "annotations": {contract.NOMINATION: nomination.encode()}}})

    def clear_nomination(self, ref: PodKey) -> dict[str, Any]:
        """Remove a nomination that ran out; returns the pod. Raises :class:`Gone`,
        :class:`~.base.WriteError`."""
        self.fence.check()
        return self._patch(ref, {"metadata": {"annotations": {contract.NOMINATION: None}}})

    def clear_plan(self, ref: PodKey) -> None:
        """Remove the plan record (``reconciler.troupe.io/plan``) from the pod: its release
        was rolled back and it reserves nothing any more. Raises :class:`Gone`,
        :class:`~.base.WriteError`."""
        self.fence.check()
        self._patch(ref, {"metadata": {"annotations": {contract.PLAN: None}}})

    def mark_disrupted_and_delete(self, ref: PodKey, uid: str, reason: str, message: str, at: str) -> None:
        """Set the pod condition ``DisruptionTarget`` (``reason``, ``message``,
        lastTransitionTime ``at``), then delete the pod if its UID is still ``uid``.

        KEP-3329: the condition lets a Job's ``podFailurePolicy`` ignore the deletion
        instead of counting it against ``backoffLimit`` (kube-scheduler marks its
        preemption victims the same way). Raises :class:`Gone` when the pod is gone or
        replaced, :class:`~.base.WriteError`.
        """
        self.set_pod_condition(ref, {"type": "DisruptionTarget", "status": "True", "reason": reason,
                                     "message": message, "lastTransitionTime": at})
        self.fence.check()
        self._delete(ref, uid)

    def evict(self, ref: PodKey, uid: str) -> None:
        """Evict the pod through the Eviction API (policy/v1), so PodDisruptionBudgets
        hold and the pod's grace period is respected. Raises :class:`~.base.Refused` when a
        budget forbids it now, :class:`Gone`, :class:`~.base.WriteError`."""
        self.fence.check()
        self._evict(ref, uid)

    def may_evict(self, ref: PodKey, uid: str) -> None:
        """Whether the Eviction API would evict the pod now (a dry run: nothing changes), so
        a victim gang of ``atomic`` preemption is evicted whole or not at all. Raises
        :class:`~.base.Refused` when a PodDisruptionBudget forbids it, :class:`Gone`, :class:`~.base.WriteError`."""
        self.fence.check()
        self._evict_dry_run(ref, uid)

    def set_pod_condition(self, ref: PodKey, condition: Mapping[str, Any]) -> None:
        """Set one ``status.conditions`` entry (merged by ``type``) through
        ``pods/status``. Raises :class:`Gone`, :class:`~.base.WriteError`."""
        self.fence.check()
        self._patch_status(ref, {"status": {"conditions": [dict(condition)]}})
