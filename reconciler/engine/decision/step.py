"""One gang's turn in the queue: :func:`step` decides it and notes what it means for the
gangs behind it (docs/decisions/019-queue-order.md, 025-actions.md).

The reconciler (each reconcile and its warm-up after a takeover) and the simulator make
this one call, in queue order, so a what-if and the cluster hold and block alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.engine.decision.decide import decide
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.backfill import backfilled, earliest_start
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.queueing import Hold as QueueHold
from reconciler.engine.gangs.queueing import (
    Policy,
    QueueState,
    QueueView,
    complete_since,
    hold_for,
    queue_order,
)
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.timestamps import rfc3339
from reconciler.engine.placement.layers import Layout, layout_of


# --- the queue ----------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueEffect:
    """What a decision means for the gangs behind this one in the queue (:mod:`reconciler.engine.gangs.queueing`):
    ``standing``, it could fit once room frees (placement code ``Unschedulable``, or a
    preemptor waiting for its victims) and stands in their way; ``what`` describes it for
    their reasons; ``hold``, the capacity held for it once it has waited
    ``headOfLineSeconds`` (BestEffortFIFO); ``recheck_at`` (seconds since the epoch), when
    it will have waited that long."""

    standing: bool
    what: str = ""
    hold: QueueHold | None = None
    recheck_at: float | None = None


def queue_effect(gang: Gang, decision: Decision, snapshot: Snapshot, policy: Policy, now: float,
                 view: QueueView | None = None) -> QueueEffect:
    """The :class:`QueueEffect` of ``decision`` for ``gang`` (docs/decisions/019-queue-order.md):
    a gang stands in the way when it waits for room that freed capacity (or eviction) could
    give it; only a gang with no nomination of its own (:data:`lifecycle.UNPLACED`) gets the
    head-of-line hold, or under ``Backfill`` a reservation at its earliest start while fewer
    than ``backfillReservations`` gangs ahead (in ``view``) hold one
    (docs/decisions/079-reservation-at-earliest-start-and-backfill.md)."""
    if not (decision.rule.waits_for_room and decision.status.preemption_can_help):
        return QueueEffect(False)
    since = complete_since(gang.members) or now
    waited = now - since
    what = f"priority {gang.priority}, waiting {_duration(waited)}"
    if policy.queueing == "Backfill" and decision.rule is lifecycle.UNPLACED:
        return _reservation(gang, snapshot, policy, now, view or QueueView(), since, what)
    if policy.queueing != "BestEffortFIFO" or decision.rule is not lifecycle.UNPLACED:
        return QueueEffect(True, what)
    if waited < policy.head_of_line_seconds:
        return QueueEffect(True, what, recheck_at=since + policy.head_of_line_seconds)
    free = [p for p in gang.members if p.gated and not snapshot.committed_node(p)]
    nodes, domain = hold_for(snapshot, free, gang.topology.required_level) if free else (frozenset(), "")
    order = queue_order(gang.key, gang.priority, gang.created)
    hold = QueueHold(gang.key, order, gang.priority, since, nodes, domain, table=snapshot.table) if nodes else None
    return QueueEffect(True, what, hold)


def _reservation(gang: Gang, snapshot: Snapshot, policy: Policy, now: float, view: QueueView, since: float,
                 what: str) -> QueueEffect:
    """``Backfill``: the reservation of a gang that does not fit (:func:`queue_effect`), its
    slices and exclusive level counted as its placement keeps them (none when its layout
    cannot be used; no slices for a gang with members running, placed next to them)."""
    ahead = view.reservations
    if len(ahead) >= policy.backfill_reservations:
        return QueueEffect(True, what)
    members = list(gang.slots) if gang.as_created else [p for p in gang.members if p.gated
                                                         and not snapshot.committed_node(p)]
    layout, unusable = layout_of(snapshot, gang.topology)
    if unusable or not members:
        return QueueEffect(True, what)
    if not gang.as_created and any(not p.gated and (p.node_name or snapshot.committed_node(p)) for p in gang.members):
        layout = Layout(exclusive=layout.exclusive)  # placed next to its running members: no slices (decision 035)
    taken = frozenset().union(*(h.nodes for h in ahead)) if ahead else frozenset()
    start = earliest_start(snapshot, members, gang.topology.required_level, now, taken, layout)
    if start is None or not start.nodes:
        return QueueEffect(True, what)
    order = queue_order(gang.key, gang.priority, gang.created)
    hold = QueueHold(gang.key, order, gang.priority, since, start.nodes, start.domain, True, start.at,
                     backfilled(snapshot, start.nodes, since), snapshot.table)
    return QueueEffect(True, f"{what}, {reserved_note(hold, now)}", hold,
                       recheck_at=start.at if start.at is not None and start.at > now else None)


def reserved_note(hold: QueueHold, now: float) -> str:
    """How a reservation reads in reasons: ``reserved gce-topology-subblock=b0/s1 (8 node(s))
    from 12:04:00 (in 6m), 3 gang(s) backfilled``; ``from when a pod without a time limit
    ends`` when its start is not known."""
    key, _, value = hold.domain.partition("=")
    domain = f"{key.rpartition('/')[2]}={value}" if value else hold.domain
    tail = f", {hold.backfilled} gang(s) backfilled" if hold.backfilled else ""
    if hold.start is None:
        return f"reserved {domain} ({len(hold.nodes)} node(s)) from when a pod without a time limit ends{tail}"
    clock = rfc3339(hold.start)[11:19]
    return f"reserved {domain} ({len(hold.nodes)} node(s)) from {clock} (in {_duration(hold.start - now)}){tail}"


@dataclass(frozen=True)
class Step:
    """One gang's turn in the queue: its ``decision``, the ``effect`` on the gangs behind it,
    ``others`` (True when that effect changed: they may need deciding again) and ``queue``,
    what the gangs ahead of it held or blocked when it was decided."""

    decision: Decision
    effect: QueueEffect
    others: bool
    queue: QueueView


def step(gang: Gang, snapshot: Snapshot, now: float, policy: Policy, queue: QueueState) -> Step:
    """Decide ``gang`` behind the gangs ahead of it in ``queue``, then note in ``queue``
    what it means for the gangs behind it: the one call the reconciler, its warm-up and
    the simulator all make. ``now`` in seconds since the epoch."""
    order = queue_order(gang.key, gang.priority, gang.created)
    view = queue.view(order, gang.namespace).on(snapshot.table)
    decision = decide(gang, snapshot, now, policy, view)
    effect = queue_effect(gang, decision, snapshot, policy, now, view)
    if effect.hold is not None and effect.hold.reservation:
        status = decision.status
        decision = replace(decision, status=replace(status, reasons=(*status.reasons, reserved_note(effect.hold, now))))
    others = queue.note(gang.key, order, effect.standing, effect.what, effect.hold)
    return Step(decision, effect, others, view)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
