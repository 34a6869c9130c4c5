"""Carrying out a ``RollBack`` and its clean-ups (:class:`Rollbacks`): mark the owned members
of the timed-out (or refused) release ``DisruptionTarget`` and delete them (their controller
recreates them, gated again); tell the ownerless ones with an Event; remember a backoff (10 s
doubling to 5 min) for the next release (docs/decisions/005-gang-timeout.md), or the nodes
kube-scheduler refused (docs/decisions/032-scheduler-refusals.md). The backoffs are kept in
the state ConfigMap, so a new leader reads them back (:meth:`Rollbacks.restore`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.handlers.done import Done
from reconciler.daemon.handlers.notices import Notices
from reconciler.daemon.handlers.waves import Waves
from reconciler.daemon.memory import Memories, Memory
from reconciler.engine.decision.actions import ClearPlans, ForgetBackoff, RollBack
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.backoff import backoff as backoff_seconds
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.refusals import AVOID_SECONDS
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.timestamps import rfc3339
from reconciler.ports.base import Gone, WriteError
from reconciler.ports.pods import PodWrites
from reconciler.ports.state import StateStore

log = logging.getLogger("reconciler.daemon.controller")

#: ``reason`` of the DisruptionTarget condition set on a member before a rollback deletes it.
DISRUPTION_REASON = "TroupeGangTimeout"


class Rollbacks:
    """The handlers of ``RollBack``, ``ClearPlans`` and ``ForgetBackoff``: members deleted
    and plan records cleared through ``pods`` (the deletions on ``waves``), backoffs
    recorded through ``state`` and kept in ``memories``, Events told once by ``notices``.
    ``cache`` tells which gangs still have pods (:meth:`restore`); ``wall_clock`` gives
    seconds since the epoch."""

    def __init__(self, cache: ClusterCache, pods: PodWrites, state: StateStore, memories: Memories,
                 notices: Notices, waves: Waves, wall_clock: Callable[[], float]) -> None:
        self.cache, self.pods, self.state, self.memories = cache, pods, state, memories
        self.notices, self.waves, self.wall_clock = notices, waves, wall_clock

    def roll_back(self, gang: Gang, decision: Decision, action: RollBack, memory: Memory, now: float) -> Done:
        """Delete the owned members of the timed-out (or refused) release (their owner
        recreates them), tell the ownerless ones, and back off. The backoff is recorded
        (:meth:`~reconciler.ports.state.StateStore.save_backoff`) before any member
        is deleted, so a new leader keeps it even if this one dies mid-rollback. One Event
        (the rule's: ``GangTimedOut``, ``GangRefused``) tells the gang. A refusal does not
        back off: its nodes are recorded as avoided instead
        (:data:`~reconciler.engine.gangs.refusals.AVOID_SECONDS`), and the next plan differs
        (docs/decisions/032-scheduler-refusals.md)."""
        by_key = {p.key: p for p in gang.members}
        why, at = decision.reason, rfc3339(now)
        again = set(action.releases) <= set(memory.rolled_back)  # finishing a rollback cut short
        refused = bool(action.avoid)
        timeouts = memory.timeouts if again or refused else memory.timeouts + 1
        backoff = 0.0 if refused else backoff_seconds(timeouts)
        not_before = memory.not_before if again or refused else now + backoff
        avoided = {node: entry for node, entry in (memory.avoid or {}).items() if entry[0] > now}
        avoid = {**avoided, **{r.node: (now + AVOID_SECONDS, r.describe()) for r in action.avoid if r.node not in avoided}}
        present = {p.planned_at or p.released_at for p in gang.members}
        releases = tuple(sorted({*action.releases, *(r for r in memory.rolled_back if r in present)}))
        if (action.delete and not again) or avoid != (memory.avoid or {}):
            try:
                self.state.save_backoff(gang.key, timeouts, not_before, releases, avoid)
            except WriteError as e:
                log.warning("gang %s: rollback not recorded (a new leader would not know it): %s", gang.key, e)
        notice = decision.rule.notice
        if action.delete and notice is not None:
            self.notices.event_once(gang, by_key[action.delete[0]], notice.kind, notice.reason,
                                    f"{why}; deleting {len(action.delete)} member(s): their controller recreates them")

        def delete(key: PodKey) -> int:
            try:
                self.pods.mark_disrupted_and_delete(key, by_key[key].uid, DISRUPTION_REASON,
                                                    f"Troupe: gang {gang.key} rolled back: {why}", at)
            except Gone:
                return 0
            except WriteError as e:
                log.warning("gang %s: rollback of %s failed: %s", gang.key, key, e)
                return 0
            return 1

        deleted = sum(self.waves.write(action.delete, delete, lambda _key, _why: 0))
        for key in action.keep:
            self.notices.event_once(gang, by_key[key], "Warning", notice.reason if notice else "GangTimedOut",
                                    f"{why}; not deleted: no controller owns this pod, delete it to retry the gang")
        detail = f"deleted {deleted} member(s)"
        if action.keep:
            detail += f"; ownerless, kept: {', '.join(sorted(k.name for k in action.keep))}"
        with self.memories.lock:
            if action.delete:
                memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
            memory.avoid = avoid or None
        if not deleted:
            return Done(note=detail, retry=bool(action.delete), rolled_back=True)
        return Done(note=f"{detail}; next release in {backoff:.0f}s at the earliest", requeue_after=backoff,
                    rolled_back=True)

    def clear_plans(self, gang: Gang, decision: Decision, action: ClearPlans, memory: Memory, now: float) -> Done:
        """Remove the plan record from the ownerless members of a rolled-back release: they
        reserve nothing any more. A failure is logged (the next decision asks again)."""
        for key in action.pods:
            try:
                self.pods.clear_plan(key)
            except WriteError as e:  # LostLeadership included: the next leader clears it
                log.warning("gang %s: plan record of %s not removed: %s", gang.key, key, e)
        return Done()

    def forget_backoff(self, gang: Gang, decision: Decision, action: ForgetBackoff, memory: Memory,
                       now: float) -> Done:
        """The gang runs whole: its timeouts count afresh, every node it avoided may be tried
        again, and its recorded backoff goes (best effort)."""
        if not memory.timeouts and not memory.avoid:
            return Done()
        # the gang runs whole: afresh, and every node it avoided may be tried again
        memory.timeouts, memory.not_before, memory.rolled_back, memory.avoid = 0, 0.0, (), None
        self.erase(gang.key, "recorded backoff not cleared")
        return Done()

    def erase(self, key: str, failure: str = "recorded backoff of a gone gang not removed") -> None:
        """Remove gang ``key``'s recorded backoff from the state ConfigMap; a failure is logged
        as ``failure`` (best effort: :meth:`restore` prunes what is left)."""
        try:
            self.state.save_backoff(key, 0, 0.0)
        except WriteError as e:
            log.warning("gang %s: %s: %s", key, failure, e)

    def restore(self) -> int:
        """Read back the rollback backoffs recorded by this or an earlier leader (a failover
        keeps every deadline) into the gangs' memories; returns how many are kept. Called
        once the cache has synced: an entry is pruned from the record when nothing is left
        for it to do, that is its backoff has run out and its gang has no pod left (nothing
        to finish deleting, and no member for the backoff to hold back), or it ran out an
        hour ago and names no release still to finish; in both cases only once no node it
        avoids is avoided any more."""
        try:
            found = self.state.load_backoffs()
        except WriteError as e:
            log.warning("recorded backoffs not read (gangs that timed out may be retried early): %s", e)
            return 0
        now = self.wall_clock()
        stale = {key for key, (_, not_before, releases, avoid) in found.items()
                 if not_before <= now and all(until <= now for until, _ in avoid.values())
                 and (self.cache.gang(key) is None or (not_before < now - 3600 and not releases))}
        for key, (timeouts, not_before, releases, avoid) in found.items():
            if key not in stale:
                memory = self.memories.of(key)
                with self.memories.lock:
                    memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
                    memory.avoid = avoid or None
        for key in sorted(stale):
            try:
                self.state.save_backoff(key, 0, 0.0)
            except WriteError as e:
                log.warning("stale recorded backoffs not pruned: %s", e)
                break
        return len(found) - len(stale)
