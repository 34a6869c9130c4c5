"""Telling a gang's members what the decision says (:class:`Notices`): their
``troupe.io/Gang`` conditions with the rule's Event (coalesced, :mod:`reconciler.daemon.conditions`),
and the Events a handler sends once (a release, a rollback, a preemption;
docs/decisions/025-actions.md)."""

from __future__ import annotations

from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.memory import Memories
from reconciler.engine.decision import actions
from reconciler.engine.decision.conditions import MAX_MESSAGE
from reconciler.engine.decision.conditions import conditions as gang_conditions
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Audience
from reconciler.engine.model.pods import PodInfo
from reconciler.ports.pods import PodWrites


class Notices:
    """The members' conditions through ``conditions``, the Events through ``pods``; what this
    replica told each gang is remembered in ``memories``."""

    def __init__(self, conditions: ConditionSink, pods: PodWrites, memories: Memories) -> None:
        self.conditions = conditions
        self.pods = pods
        self.memories = memories

    def tell(self, gang: Gang, decision: Decision) -> None:
        """Each waiting member's condition and, written with it, the rule's Event: on each
        member concerned (``Audience.EACH``) or on the gang's lead member, the first one
        concerned in rank order (``Audience.GANG``). The condition sink writes a condition
        only when it differs from what the pod carries, coalesced, and the Event goes with
        that write, so the Event a member shows follows its condition's numbers and a new
        leader, which reads the conditions back, repeats none. A release tells as each
        member is written."""
        if decision.find(actions.Release) is not None:
            return
        by_key = {p.key: p for p in gang.members}
        wanted = gang_conditions(gang, decision)
        preempt = decision.find(actions.Preempt)
        # A new preemption is news the moment it is carried out: its handler sends the Event.
        notice = decision.rule.notice if preempt is None or preempt.plan is None else None
        lead = next(iter(wanted), None)
        for key, condition in wanted.items():
            told = notice is not None and (notice.audience is Audience.EACH or key == lead)
            event = (notice.kind, notice.reason) if notice is not None and told else None
            self.conditions.want(key, by_key[key].uid, condition, event,
                                 notice is not None and notice.on_change_only)

    def event_once(self, gang: Gang, pod: PodInfo, kind: str, reason: str, message: str) -> None:
        """Emit an Event about ``pod`` (the handlers' way to tell: a release, a rollback)
        unless it was told already: as its ``troupe.io/Gang`` condition's message (any
        replica), or by this replica (remembered per pod and Event reason)."""
        if pod.condition is not None and pod.condition[2] == message[:MAX_MESSAGE]:
            return
        memory = self.memories.of(gang.key)
        with self.memories.lock:
            sent = memory.events = memory.events or {}
            if sent.get((pod.key, reason)) == message:
                return
            sent[(pod.key, reason)] = message
        self.pods.emit_event(pod.key, pod.uid or None, kind, reason, message)
