"""One decision per gang: ``decide(gang, snapshot, now) -> Decision``, and the typed actions it holds.

The reconciler and the simulator both call :func:`decide`, so a what-if is never a second
opinion: the same gang on the same snapshot at the same time gives the same phase, the
same reason and the same actions. It is pure: plain data in, plain data out; ``now``
(seconds since the epoch) is the only clock, and nothing is written. The lifecycle rule
that matches builds the decision and its actions (:data:`_BUILD`: the table is the
machine); the reconciler (:mod:`reconciler.daemon.controller`) and the simulator
(:mod:`reconciler.tools.simulate`) are two interpreters of the same actions
(:mod:`.actions`), and :func:`reconciler.engine.decision.step.step` is the one call both make:
decide, then note what the gang means for the queue behind it.

What it sees of each active member of the gang (``snapshot`` must hold the gang's pods):

- *gated*: it carries a Troupe gate. Among gated members, *reserved* ones are committed to
  a node already: pinned by an earlier version of the release protocol, or named by the
  plan record of a release cut short (a write refused, the reconciler killed);
- *released*: no Troupe gate; *bound* once ``spec.nodeName`` is set.

Each group of committed members that one decision released (they share
``reconciler.troupe.io/planned-at``) is a *release*, with its own clock
(docs/decisions/007-release-writes.md):

- while some of its members are still gated, it must be finished within the gang's
  timeout (+ jitter) from when it was planned;
- once complete, its members must all be bound within the timeout (+ jitter) from its
  last member's ``released-at``: the clock starts when the release is complete.

A release whose clock runs out is rolled back, and only that release: members released
later (replacements, retried writes) never roll back members that are already running
from an earlier release, and a gang's first release is the whole gang. A release whose
planned node no longer exists, or was cordoned before its member was bound there (it
never will be), is rolled back at once; so is a release whose pinned member kube-scheduler
refused on its node, and the gang's plans then avoid that node (:mod:`reconciler.engine.gangs.refusals`,
docs/decisions/032-scheduler-refusals.md). The phase itself comes from the
rules of :mod:`reconciler.engine.gangs.lifecycle`, in their order.

The jitter is drawn from ``[0, gangScheduleTimeoutJitterSeconds]`` (``seeds/001``) by a hash
of the gang and the release, so it is spread across gangs yet the same after a restart
and in the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from reconciler.engine.decision import capacity
from reconciler.engine.decision.actions import (
    Action,
    ClearNominations,
    ClearPlans,
    DropReservation,
    ForgetBackoff,
    Hold,
    MemberRelease,
    Preempt,
    RecordNodeFailures,
    Release,
    RollBack,
    Status,
    Wait,
)
from reconciler.engine.decision.ascreated import (
    member_release,
    planned_at,
    release_as_created,
    reservation_clock,
    reserve,
)
from reconciler.engine.decision.seen import Decision, Seen, earliest
from reconciler.engine.filters.status import Code
from reconciler.engine.filters.unmodeled import note as unmodeled_note
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.avoidance import place_avoiding, to_record
from reconciler.engine.gangs.backfill import backfill_note, closed_to
from reconciler.engine.gangs.clocks import Clock, ReleaseGroup, jitter, release_clock
from reconciler.engine.gangs.failures import describe as describe_failures
from reconciler.engine.gangs.failures import failures
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Observation, Rule
from reconciler.engine.gangs.minimum import at_minimum
from reconciler.engine.gangs.nominating import by_uid, held_note, nomination_deadline, nomination_of
from reconciler.engine.gangs.queueing import Policy, QueueView
from reconciler.engine.gangs.refusals import Refusal, avoid_note, avoiding, refusals
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.records import Nomination, Plan
from reconciler.engine.model.timestamps import epoch, rfc3339
from reconciler.engine.placement.devicegroups import DevicePlacement, group_problem
from reconciler.engine.placement.place import PlacementResult
from reconciler.engine.preemption import candidates as victims
from reconciler.engine.preemption.budgeted import plan_within_budgets
from reconciler.engine.preemption.naming import gangs_told, namespace_of

__all__ = ["Decision", "MemberRelease", "decide", "epoch", "jitter", "rfc3339"]

def _see(gang: Gang, snapshot: Snapshot, now: float, policy: Policy, queue: QueueView) -> Seen:
    """Sort the gang's members, time its releases and build the :class:`Observation`."""
    released = [p for p in gang.members if not p.gated]
    gated = [p for p in gang.members if p.gated]
    reserved = [p for p in gated if snapshot.committed_node(p)]
    free = [p for p in gated if not snapshot.committed_node(p)]
    if gang.avoid:  # kube-scheduler refused members there: the gang's plans avoid those nodes
        free = [replace(p, node_filter=avoiding(p.node_filter, gang.avoid)) for p in free]
    refused, refused_later = refusals(released, snapshot.committed_node, gang.avoid, now)
    releases: dict[str, ReleaseGroup] = {}
    for pod in [*released, *reserved]:
        rid = snapshot.plan_of(pod) or pod.released_at
        if not rid:
            continue  # released without Troupe: nothing to time
        r = releases.setdefault(rid, ReleaseGroup(rid))
        r.members.append(pod)
        if pod.gated:
            r.reserved.append(pod)
    clocks = {rid: c for rid, r in sorted(releases.items()) if (c := release_clock(gang, r, snapshot, now))}
    # A workload past its deadline is failing: its controller deletes the members before it
    # writes the condition that ends it. Nothing is reserved for it, released onto its
    # reservation or written to it (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md).
    ending = gang.ends_at is not None and now >= gang.ends_at
    reservation = gang.reservation if gang.as_created and not ending else None
    if reservation is not None:  # its own clock: all of it bound, from the reservation (docs/decisions/034)
        clocks.pop(reservation.planned_at, None)
        if (held := reservation_clock(gang, released, snapshot, now)) is not None:
            clocks[reservation.planned_at] = held
    for rid in gang.rolled_back:  # a rollback cut short (a refused delete): finish it
        left = [p for p in releases[rid].members if p.owner is not None] if rid in releases else []
        if left:
            clocks[rid] = Clock(now, f"the release of {rid} was rolled back; {len(left)} member(s) of it still to delete")
    expired = [rid for rid, c in clocks.items() if c.deadline <= now]
    failed, failing_at = failures(gang, released, snapshot, now)
    pending = [c.deadline for c in clocks.values() if c.deadline > now] + ([refused_later] if refused_later else []) \
        + ([failing_at] if failing_at is not None else [])
    size, settle_left = gang.size, 0.0
    if size is None:
        settle_left = gang.settle_at - now
        if settle_left <= 0:
            size = len(gang.members)
    as_created = (gang.as_created and not ending and reservation is None and not released and size is not None
                  and len(gang.members) < size)
    obs = Observation(
        gang=gang.key, active=len(gang.members), size=size, gated=len(gated), reserved=len(reserved),
        released=len(released), bound=sum(1 for p in released if p.node_name),
        running=sum(1 for p in released if p.phase == "Running"),
        expired=sum(len(releases[rid].members) if rid in releases else 1 for rid in expired),
        expired_why="; ".join(clocks[rid].why for rid in expired), held=gang.held,
        device_problem=group_problem(snapshot, gated),
        backoff_left=max(0.0, gang.not_before - now), timeouts=gang.timeouts, settle_left=max(0.0, settle_left),
        size_from=gang.size_from, workload_missing=gang.workload_missing,
        refused=len(refused), refused_why="; ".join(r.describe() for r in refused),
        reservation=len(reservation.nodes) if reservation is not None else 0, as_created=as_created,
        min_size=gang.min_size, failed=len(failed), failed_why=describe_failures(failed), unwritten=gang.unwritten,
    )
    return Seen(gang, snapshot, now, policy, queue, released, gated, reserved, free, releases, expired, obs,
                 min(pending) if pending else None, tuple(refused))


def decide(gang: Gang, snapshot: Snapshot, now: float, policy: Policy | None = None,
           queue: QueueView | None = None) -> Decision:
    """The decision for ``gang`` on ``snapshot`` at ``now`` (seconds since the epoch).

    ``snapshot`` holds the gang's pods as the gang does (committed members use their
    nodes; free gated members use nothing). ``policy``: the preemption mode and queueing
    strategy (default: none, BestEffortFIFO); ``queue``: what the gangs ahead of this one
    in the queue hold or block (:mod:`reconciler.engine.gangs.queueing`; default: nothing). The first rule of
    :data:`lifecycle.RULES` that applies builds the decision (:data:`_BUILD`).
    Deterministic; never raises on cluster data.
    """
    seen = _see(gang, snapshot, now, policy or Policy(), queue or QueueView())
    decision = _BUILD[lifecycle.classify(seen.obs)](seen)
    failures = to_record(gang, seen.released, snapshot, now)
    return replace(decision, actions=(*decision.actions, RecordNodeFailures(failures))) if failures else decision


# --- the rules' builders: one per observation rule ---------------------------------------
def _no_members(s: Seen) -> Decision:
    return s.made(lifecycle.NO_MEMBERS)


def _timed_out(s: Seen) -> Decision:
    return _roll_back(s, lifecycle.TIMED_OUT, s.expired)


def _member_failed(s: Seen) -> Decision:
    """``RestartGang``: a running member failed; roll back every release its running
    members belong to, so every one of them is deleted and the gang placed again whole."""
    current = sorted({rid for p in [*s.released, *s.reserved] if (rid := s.snapshot.plan_of(p) or p.released_at)})
    return _roll_back(s, lifecycle.MEMBER_FAILED, current)


def _refused(s: Seen) -> Decision:
    """kube-scheduler refused members on their pinned nodes: roll back their releases (and
    any that ran out of time) now, and avoid those nodes (:mod:`reconciler.engine.gangs.refusals`)."""
    by_key = {p.key: p for p in s.released}
    refused = {rid for r in s.refused if (rid := s.snapshot.plan_of(by_key[r.pod]) or by_key[r.pod].released_at)}
    return _roll_back(s, lifecycle.REFUSED, sorted({*refused, *s.expired}), s.refused)


def _roll_back(s: Seen, rule: Rule, expired: Sequence[str], avoid: tuple[Refusal, ...] = ()) -> Decision:
    """Roll back the releases ``expired`` (their ``planned-at``) under ``rule``."""
    members = [p for rid in expired if rid in s.releases for p in s.releases[rid].members]
    holders = tuple(p.key for p in s.gang.members
                    if p.plan is not None and p.plan.planned_at in expired and p.owner is None)
    rollback = RollBack(delete=tuple(p.key for p in members if p.owner is not None),
                        keep=tuple(p.key for p in members if p.owner is None), releases=tuple(expired), avoid=avoid)
    actions: list[Action] = [rollback, *([ClearPlans(holders)] if holders else [])]
    reservation, workload = s.gang.reservation, s.gang.workload
    if reservation is not None and workload is not None and reservation.planned_at in expired:
        actions.append(DropReservation(workload, reservation.planned_at, "rolled back"))
    return s.made(rule, actions)


def _finish_release(s: Seen) -> Decision:
    ranks = {p.key: i for i, p in enumerate(s.gang.members)}
    holdings = s.snapshot.devices.holdings
    out = tuple(member_release(p, s.snapshot.committed_node(p), s.snapshot, ranks[p.key],
                        s.snapshot.plan_of(p) or p.released_at,
                        holdings[p.device_group].devices if p.device_group in holdings else {})
                for p in s.reserved)
    return s.made(lifecycle.RELEASE_IN_PROGRESS, (Release(out, finishing=True),))


def _all_released(s: Seen) -> Decision:
    o = s.obs
    whole = bool(s.gang.timeouts or s.gang.avoid) and o.bound == o.active == (o.size or 0)
    bound = capacity.done_with(s, "the gang is bound") if o.bound == o.active else ()
    return s.made(lifecycle.ALL_RELEASED, ((ForgetBackoff(),) if whole else ()) + bound)


def _waiting(rule: Rule, until: Callable[[Gang], float | None] = lambda g: None) -> Callable[[Seen], Decision]:
    """The builder of a rule whose gated members wait (rechecked at ``until(gang)`` too)."""
    return lambda s: s.made(rule, (Wait(s.gated_keys),), recheck_at=until(s.gang))


def _held(rule: Rule) -> Callable[[Seen], Decision]:
    """The builder of a rule that holds the gated members."""
    return lambda s: s.made(rule, (Hold(s.gated_keys),))


#: The lifecycle table's observation rules and the builder of each: the machine.
_BUILD: Mapping[Rule, Callable[[Seen], Decision]] = {
    lifecycle.NO_MEMBERS: _no_members,
    lifecycle.REFUSED: _refused,
    lifecycle.TIMED_OUT: _timed_out,
    lifecycle.MEMBER_FAILED: _member_failed,
    lifecycle.RELEASE_IN_PROGRESS: _finish_release,
    lifecycle.RELEASE_AS_CREATED: release_as_created,
    lifecycle.ALL_RELEASED: _all_released,
    lifecycle.MEMBERS_DISAGREE: _held(lifecycle.MEMBERS_DISAGREE),
    lifecycle.DEVICE_GROUP: _held(lifecycle.DEVICE_GROUP),
    lifecycle.BACKING_OFF: _waiting(lifecycle.BACKING_OFF, lambda g: g.not_before),
    lifecycle.WORKLOAD_UNKNOWN: _waiting(lifecycle.WORKLOAD_UNKNOWN),
    lifecycle.SETTLING: _waiting(lifecycle.SETTLING, lambda g: g.settle_at),
    lifecycle.MEMBERS_MISSING: _waiting(lifecycle.MEMBERS_MISSING),
    lifecycle.READY: lambda s: reserve(s) if s.obs.as_created else _place(s),
}


# --- rules 10 to 13: the queue, placement, preemption --------------------------------------
def _place(s: Seen) -> Decision:
    """Rules 10 to 13: the queue, then where the gated members go (next to the members
    that already run, when there are some), then preemption. The room nominations of
    lower-priority gangs hold is the gang's to take (kube-scheduler honours only
    nominations of equal or higher priority).

    A gang that holds a nomination (docs/decisions/020-preemption-in-the-decision.md) plans
    on the room the nomination holds for it; while its victims have not all terminated it
    waits (``AwaitingVictims``), and once they have, it is placed like any gang. A
    nomination that ran out (the gang's timeout, its jitter and the victims' longest grace
    period after it was made) is cleared and the gang decided afresh."""
    gang, snapshot = s.gang, s.snapshot
    subject = f"replacement member(s) {', '.join(p.name for p in s.free)}: " if s.released else ""
    if s.released and (progress := lifecycle.running_of_minimum(s.obs)):
        subject = f"{progress}; member(s) {', '.join(p.name for p in s.free)}: "
    nominee, nom = nomination_of(gang)
    clear: tuple[PodKey, ...] = ()
    if nom is not None and nominee is not None:
        deadline = nomination_deadline(gang, nom, snapshot, s.policy.nomination_max_seconds)
        if deadline <= s.now:
            clear, nom = (nominee,), None
        else:
            s.recheck = earliest(s.recheck, deadline)
    wait = Wait(s.gated_keys)
    if nom is not None and nominee is not None:
        awaiting = _awaiting_victims(s, nom, nominee, subject, wait)
        if awaiting is not None:
            return awaiting
    elif s.queue.blocked_by:
        return s.made(lifecycle.QUEUED, _with_clear((wait,), clear),
                      Status.of(f"queued behind {s.queue.blocked_by} (StrictFIFO)", subject=subject))
    base = snapshot.planned_from(s.free, gang.priority)
    held = closed_to(gang, snapshot, s.now, s.queue) - {snapshot.index[n] for p in s.free if (n := snapshot.nominated_node(p)) in snapshot.index}
    view = base.with_blocked(held) if held else base
    near = sorted({n for p in s.released if (n := p.node_name or snapshot.committed_node(p))})
    avoided = s.policy.avoidance.avoided(snapshot, s.now)
    found, avoided_note = place_avoiding(view, s.free, gang.topology, near, avoided)
    if nom is not None and nominee is not None:
        clear += (nominee,)
    if found.result.placed:
        nodes = [a.node for a in found.result.assignments]
        backfilled = backfill_note(gang, snapshot, s.now, s.queue, nodes) if s.queue.reservations else ""
        return _placed(s, found, subject, clear, note="; ".join(filter(None, [avoided_note, backfilled])))
    minimum = None if s.released or s.reserved else at_minimum(gang, s.free, view, near)
    if minimum is not None:
        return _placed(s, minimum, subject, clear, waiting=len(s.free) - len(minimum.result.assignments))
    return _unplaced(s, view, found.result, near, nom, nominee, subject, wait, clear, held_note(s.queue, held, s.gang.namespace))


def _with_clear(actions: tuple[Action, ...], clear: tuple[PodKey, ...]) -> tuple[Action, ...]:
    return (*actions, ClearNominations(clear)) if clear else actions


def _awaiting_victims(s: Seen, nom: Nomination, nominee: PodKey, subject: str, wait: Wait) -> Decision | None:
    """``AwaitingVictims`` while victims of the gang's nomination still run and none of
    their gangs refused an eviction; None otherwise (the gang is placed on what is left)."""
    snapshot = s.snapshot
    remaining = [p.key for p in by_uid(snapshot, nom.victims) if not p.terminal]
    refused = _refused_gangs(s, nom)
    gang_of = victims.gang_of_pod(snapshot, s.policy.gang_prefix) if refused else {}
    if not remaining or any(gang_of.get(v) in refused for v in remaining):
        return None
    evict = tuple(v for v in remaining if not snapshot.pods[v].deleting)
    reason = (f"waiting for {len(remaining)} victim pod(s) to terminate "
              f"({len(remaining) - len(evict)} terminating); their room is held for the gang")
    return s.made(lifecycle.AWAITING_VICTIMS, (Preempt(nominee, nom, evict), wait),
                  Status.of(reason, Code.UNSCHEDULABLE, subject))


def _refused_gangs(s: Seen, nom: Nomination) -> frozenset[str]:
    """The keys of the gangs whose eviction a PodDisruptionBudget refused for ``nom``: the
    gangs of its refused victims (by UID) that the snapshot still holds."""
    if not nom.refused:
        return frozenset()
    gang_of = victims.gang_of_pod(s.snapshot, s.policy.gang_prefix)
    return frozenset(g for p in by_uid(s.snapshot, nom.refused) if (g := gang_of.get(p.key)) is not None)


def _unplaced(s: Seen, view: Snapshot, result: PlacementResult, near: Sequence[str], nom: Nomination | None,
              nominee: PodKey | None, subject: str, wait: Wait, clear: tuple[PodKey, ...], note: str) -> Decision:
    """No placement: preempt when the mode allows and eviction makes room, hold a refused
    nomination's room, or wait ``Unschedulable`` with the engine's reasons."""
    reasons = [result.reason, *([note.removeprefix("; ")] if note else []), *_avoided(s)]
    asks_first = s.gang.capacity is not None and not s.gang.capacity.prefer_preemption
    if asks_first and (asked := capacity.ask(s, result, subject, wait, clear)) is not None:
        return asked
    if result.code is Code.UNSCHEDULABLE and s.policy.preemption != "off":
        preempted = _preempt(s, view, near, nom, subject, wait)
        if preempted is not None:
            return preempted
        if nom is not None and nominee is not None:  # a refused eviction and no other plan: hold what is freed, retry later
            refused = gangs_told(_refused_gangs(s, nom), namespace_of(s.gang.key)) or "its victims"
            reason = (f"eviction of {refused} refused (PodDisruptionBudget) and no other "
                      f"lower-priority gangs make room; retrying when the nomination runs out")
            return s.made(lifecycle.EVICTION_REFUSED, (Preempt(nominee, nom, ()), wait),
                          Status.of(reason, result.code, subject))
        held = victims.held_by_budgets(view, s.policy.gang_prefix, s.gang.key, s.gang.priority, s.policy.preemption)
        reasons.append(f"no lower-priority gangs whose eviction makes room"
                       f"{victims.budget_note(held, namespace_of(s.gang.key))}")
    if not asks_first and (asked := capacity.ask(s, result, subject, wait, clear)) is not None:
        return asked
    return s.made(lifecycle.UNPLACED, _with_clear((wait,), clear), Status(tuple(reasons), result.code, subject),
                  placement=result)


def _placed(s: Seen, found: DevicePlacement, subject: str, clear: tuple[PodKey, ...], waiting: int = 0,
            note: str = "") -> Decision:
    """A new release of the free gated members (of the first ``min_size`` of them, when
    ``waiting`` more are present that do not fit with them). Its ``planned_at`` names it,
    so it is later than every release of the gang already there, by a millisecond if the
    clock says otherwise."""
    result, snapshot, now = found.result, s.snapshot, s.now
    at = planned_at(now, list(s.releases))
    ranks = {p.key: i for i, p in enumerate(s.gang.members)}
    by_key = {p.key: p for p in s.free}
    out = tuple(member_release(by_key[a.pod_key], a.node, snapshot, ranks[a.pod_key], at, found.devices.get(a.pod_key))
                for a in result.assignments)
    bindings = tuple(replace(h, source=f"plan {at}") for h in found.bindings)
    plan = (Plan(at, {by_key[m.pod].uid: m.node for m in out}, {h.group: h for h in bindings})
            if len(out) > 1 else None)
    # Looked at again when this release can first run out of time, whatever the watch
    # brings: the writes' own watch events may carry nothing new to the cache that
    # assumed them, and members that are never bound change nothing else.
    deadline = (epoch(at) or now) + s.gang.timeout_seconds + jitter(s.gang, at)
    notes = [*_avoided(s), *filter(None, [unmodeled_note(s.free, s.snapshot.volumes), note])]
    if waiting:
        notes.append(f"the first {len(out)} members (minimum {s.gang.min_size}) released; {waiting} more present "
                     f"wait for room next to them")
    consume = capacity.consumed(s)
    dropped = () if consume else capacity.done_with(s, "the gang was placed without it")
    release = Release(tuple(replace(m, annotations=consume) for m in out) if consume else out, plan, bindings,
                      note="; ".join(notes))
    return s.made(lifecycle.PLACED, _with_clear((release, *dropped), clear),
                  Status((result.reason, *notes), result.code, subject), recheck_at=deadline, placement=result)


def _avoided(s: Seen) -> list[str]:
    """The reason part of a plan that avoids nodes (``[]``: none avoided)."""
    return [avoid_note(s.gang.avoid)] if s.gang.avoid else []


def _preempt(s: Seen, snapshot: Snapshot, near: Sequence[str], nom: Nomination | None, subject: str,
             wait: Wait) -> Decision | None:
    """A ``Preempting`` decision when evicting lower-priority gangs makes room, else None.
    Pods already terminating count as gone (their room is coming); members of a
    SharedDeviceGroup plan on their group's node when it is bound (a gang that would bind a
    new group is not a preemptor: its node is chosen by its devices, not by victims)."""
    gang, policy = s.gang, s.policy
    members = []
    holdings = snapshot.devices.holdings
    for p in s.free:
        if p.device_group:
            if p.device_group not in holdings:
                return None
            p = replace(p, node_filter=p.node_filter.on_node(holdings[p.device_group].node))
        members.append(p)
    refused = _refused_gangs(s, nom) if nom is not None else frozenset()
    held = victims.held_by_budgets(snapshot, policy.gang_prefix, gang.key, gang.priority, policy.preemption)
    found = victims.candidates(snapshot, policy.gang_prefix, gang.key, gang.priority, refused | held.keys())
    if not found:
        return None
    going = victims.leaving(snapshot)
    view = snapshot.with_removed(going) if going else snapshot
    plan, shared = plan_within_budgets(view, members, found, policy.preemption, gang.topology, near=near, gang=gang.key,
                                       priority=gang.priority)
    if plan is None or not plan.victims:
        return None
    by_key = {p.key: p for p in s.free}
    uids = tuple(sorted(uid for v in plan.victims if (uid := snapshot.pods[v].uid)))
    nomination = Nomination(rfc3339(s.now), {by_key[a.pod_key].uid: a.node for a in plan.placement.assignments},
                            uids, nom.refused if nom is not None else ())
    nominee, note = nomination_of(gang)[0], victims.budget_note({**held, **shared}, namespace_of(gang.key))
    if nominee is None:  # no member is gated: nothing to carry the nomination
        return None
    return s.made(lifecycle.PREEMPTING, (Preempt(nominee, nomination, plan.victims, plan), wait),
                  Status.of(f"{plan.reason} ({policy.preemption}){note}", Code.UNSCHEDULABLE, subject),
                  recheck_at=s.now + gang.timeout_seconds, placement=plan.placement)
