"""Carrying out a ``Preempt`` and its clean-up (:class:`Preemptions`): write the nomination,
taint its nodes, then evict the victims (docs/decisions/020-preemption-in-the-decision.md,
030-preemption-budgets-and-fences.md, 033-nominated-nodes-are-tainted.md); remove a
nomination that ran out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.handlers.done import Done
from reconciler.daemon.handlers.notices import Notices
from reconciler.daemon.handlers.waves import Waves
from reconciler.daemon.memory import Memory
from reconciler.daemon.taints import NominatedTaints
from reconciler.engine.decision.actions import ClearNominations, Preempt
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs import nominated
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.model.keys import PodKey
from reconciler.engine.preemption import candidates as victim_gangs
from reconciler.ports.base import Conflict, Gone, Refused, WriteError
from reconciler.ports.pods import PodWrites

log = logging.getLogger("reconciler.daemon.controller")


class Preemptions:
    """The handlers of ``Preempt`` and ``ClearNominations``: nominations and evictions
    through ``pods`` (the evictions on ``waves``), each pod written fed back to ``cache``;
    the nominated nodes tainted by ``taints``; the gang told once by ``notices``. ``policy``
    gives the preemption mode and the gang prefix that names victims' gangs."""

    def __init__(self, cache: ClusterCache, pods: PodWrites, taints: NominatedTaints, notices: Notices,
                 waves: Waves, policy: Policy) -> None:
        self.cache, self.pods, self.taints, self.notices, self.waves = cache, pods, taints, notices, waves
        self.policy = policy

    def preempt(self, gang: Gang, decision: Decision, action: Preempt, memory: Memory, now: float) -> Done:
        """Write the nomination (it holds the gang's nodes from then on), taint its nodes
        (``troupe.io/nominated``: kube-scheduler keeps other controllers' pods off them,
        docs/decisions/033-nominated-nodes-are-tainted.md; not when a gated member lacks its
        toleration, admitted before the webhook gave it), then evict the victims through
        the Eviction API, at most ``releaseConcurrency`` at once. An
        eviction a PodDisruptionBudget refuses puts its gang on the nomination's refused
        list: the next decision plans without it, or waits."""
        nominee = next((p for p in gang.members if p.key == action.nominee), None)
        if nominee is None:
            return Done(retry=True)
        if nominee.nomination != action.nomination:
            try:
                self.cache.assume(self.pods.set_nomination(nominee.key, action.nomination,
                                                           nominee.resource_version))
            except (Conflict, WriteError) as e:  # nothing evicted without the nomination written
                return Done(note=f"nomination not written: {e}", retry=True)
        lost = self.taints.add(action.nomination.nodes.values(), self.waves.map) \
            if nominated.tolerated_by(gang.members) else ""
        if lost:  # nothing evicted by a replica that may no longer write
            return Done(note=f"nominated nodes not tainted: {lost}", retry=True)
        notice = decision.rule.notice
        if action.plan is not None and notice is not None:  # one Event for the gang, on its lead (the nominee)
            self.notices.event_once(gang, nominee, notice.kind, notice.reason, decision.reason)
        refused = self._evict(gang, action, decision.reason)
        preempted = action.plan is not None
        if not refused:
            return Done(preempted=preempted, evicted=len(action.evict))
        uids = {uid for pods in refused.values() for uid in pods}
        updated = replace(action.nomination, refused=tuple(sorted({*action.nomination.refused, *uids})))
        current = self.cache.pod_info(nominee.key)
        rv = current.resource_version if current is not None else nominee.resource_version
        try:
            self.cache.assume(self.pods.set_nomination(nominee.key, updated, rv))
        except WriteError as e:
            log.warning("gang %s: refused gangs not recorded: %s", gang.key, e)
        return Done(note=f"eviction refused for {', '.join(sorted(refused))}", retry=True, evicted=len(action.evict))

    def clear_nominations(self, gang: Gang, decision: Decision, action: ClearNominations, memory: Memory,
                          now: float) -> Done:
        """Remove the nomination from the action's members that still carry one (it ran out,
        or the gang is placed without it). A failure is logged (the next decision asks again)."""
        by_key = {p.key: p for p in gang.members}
        for key in action.pods:
            pod = by_key.get(key)
            if pod is None or pod.nomination is None:
                continue
            try:
                self.cache.assume(self.pods.clear_nomination(key))
            except WriteError as e:
                log.warning("gang %s: nomination on %s not removed: %s", gang.key, key, e)
        return Done()

    def _evict(self, gang: Gang, action: Preempt, reason: str) -> dict[str, list[str]]:
        """Evict the action's victims; returns the gangs whose eviction was refused, each
        with the UIDs of its pods refused (what the nomination keeps). In ``atomic`` mode a
        victim gang goes whole or not at all: every pod of it is first asked about by a
        dry-run eviction, and a gang with one refusal is left untouched (the next plan
        chooses another); only then are the others evicted. Each victim's Preempted Event
        names the preemptor only when it is of the victim's namespace; the log names both
        (docs/decisions/064-preemption-names-no-other-tenant.md)."""
        snapshot = self.cache.snapshot()
        gang_of = victim_gangs.gang_of_pod(snapshot, self.policy.gang_prefix)
        why = action.plan.reason if action.plan is not None else reason

        def gang_key(key: PodKey) -> str:
            pod = snapshot.pods[key]
            return gang_of.get(key, f"{pod.namespace}/pod:{pod.name}")

        def attempt(key: PodKey, write: Callable[[PodKey, str], None]) -> str | None:
            """``write`` one victim; returns its key when a budget refused it, ``""`` when it
            was written, None when it failed otherwise or the pod is gone."""
            pod = snapshot.pods.get(key)
            if pod is None:
                return None
            try:
                write(key, pod.uid)
            except Refused as e:
                log.warning("gang %s: eviction of %s refused: %s", gang.key, key, e)
                return key
            except Gone:
                return None
            except WriteError as e:
                log.warning("gang %s: eviction of %s failed: %s", gang.key, key, e)
                return None
            return ""

        def evict(key: PodKey) -> str | None:
            refused = attempt(key, self.pods.evict)
            if refused == "":
                self.cache.assume_deleting(key)  # the next decision waits for it, not evicts it again
                self.pods.emit_event(key, snapshot.pods[key].uid or None, "Warning", "Preempted",
                                     _told_victim(key, gang, self.policy.preemption, snapshot.using(key), why))
            return refused

        victims = [k for k in action.evict if k in snapshot.pods]
        refused: set[str] = set()
        if self.policy.preemption == "atomic":
            refused = {k for k in self.waves.map(lambda k: attempt(k, self.pods.may_evict), victims) if k}
            held = {gang_key(PodKey.parse(k)) for k in refused}
            victims = [k for k in victims if gang_key(k) not in held]
        refused |= {k for k in self.waves.map(evict, victims) if k}
        if action.evict:
            log.info("gang %s: evicting %d pod(s) of %s (%s): %s", gang.key, len(victims),
                     ", ".join(action.plan.gangs) if action.plan else "its victims", ", ".join(victims), reason)
        by_gang: dict[str, list[str]] = {}
        for key in sorted(refused):
            by_gang.setdefault(gang_key(PodKey.parse(key)), []).append(snapshot.pods[PodKey.parse(key)].uid)
        return by_gang


def _told_victim(key: PodKey, gang: Gang, mode: str, node: str | None, why: str) -> str:
    """The message of a victim's Preempted Event: the preemptor and why by name when it is
    of the victim's namespace, else only that a gang of another namespace took the room."""
    if gang.namespace == key.namespace:
        return (f"evicted from node {node or '-'} by Troupe ({mode}) to make room for gang {gang.key} "
                f"(priority {gang.priority}): {why}")
    return (f"evicted from node {node or '-'} by Troupe ({mode}) to make room for a gang of another namespace "
            f"(priority {gang.priority})")
