"""Release as created: the decisions of a gang planned from its workload before its pods
exist (docs/decisions/034-release-as-created.md).

Three builders of :mod:`.decide`'s table, and the reservation's clock:

- :func:`reserve` (rule ``Reserved``): none of the gang is released and members are
  missing: place every slot (:mod:`reconciler.engine.model.templates`), or for a gang with a minimum size whose
  slots do not all fit its first ``min_size`` (docs/decisions/038-minimum-size.md), and
  write the placement on the workload (:class:`~.actions.Reserve`). A gang that does not fit waits ``Unplaced``; preemption is
  considered once every member exists, as for a gang released when complete.
- :func:`release_as_created` (rule ``ReleaseAsCreated``): the workload carries the
  reservation: release each gated member onto its rank's node in one update, as today's
  releases do. A member that no longer fits its rank's node rolls the whole reservation
  back (``ReservationBroken``); a reservation that no longer fits its workload (suspended,
  finished, resized) is dropped (``ReservationDropped``); once every member is bound the
  reservation is removed and the gang is ``Released``. The reservation is checked whole at
  every decision, not only the ranks of the members that come: a reserved node another pod
  took while its rank waits (a pod bound there directly, or one the reservation was decided
  without, its watch event not yet in) drops the reservation while none of its members is
  released, so nothing is deleted, and rolls it back as soon as one is.
- :func:`reservation_clock`: all or nothing. The reservation must be complete (every rank's
  member released and bound) within the gang's timeout (+ jitter), counted from the
  reservation or from the newest member's creation, whichever is later: a gang whose
  members keep coming is not rolled back while its controller creates them; one whose
  last members never come is, whole, a timeout after the last one came. A reserved node
  that is gone or cordoned before its member was bound rolls it back at once.

Pure: the builders take the decision's view of the gang (``Seen``) and return a
:class:`~.seen.Decision`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.engine.decision.actions import (
    DropReservation,
    ForgetBackoff,
    MemberRelease,
    Release,
    Reserve,
    RollBack,
    Status,
    Wait,
)
from reconciler.engine.decision.seen import Decision, Seen
from reconciler.engine.filters import noderesources, profile
from reconciler.engine.filters.unmodeled import note as unmodeled_note
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.avoidance import place_avoiding
from reconciler.engine.gangs.backfill import backfill_note, closed_to
from reconciler.engine.gangs.clocks import Clock, jitter
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.refusals import avoid_note, avoiding
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.devicegroups import Devices
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record, assign, fill
from reconciler.engine.model.timestamps import epoch, rfc3339


def member_release(pod: PodInfo, node: str, snapshot: Snapshot, rank: int, planned_at: str,
                   devices: Devices | None = None) -> MemberRelease:
    """The :class:`~.actions.MemberRelease` of ``pod`` onto ``node`` (its hostname label from
    the snapshot, else the node's name) with its rank and release."""
    i = snapshot.index.get(node)
    hostname = snapshot.nodes[i].hostname if i is not None else node
    return MemberRelease(pod.key, pod.uid, pod.resource_version, node, hostname, rank, planned_at, devices or {})


def planned_at(now: float, releases: Sequence[str]) -> str:
    """The ``planned-at`` of a new release at ``now``: later than every release of the gang
    (``releases``, their ``planned-at``) already there, by a millisecond if the clock says
    otherwise."""
    latest = max((t for rid in releases if (t := epoch(rid)) is not None), default=None)
    return rfc3339(now if latest is None or now >= latest + 0.001 else latest + 0.001)


#: How far in the future a reservation's ``plannedAt`` may be (clocks of two replicas differ).
CLOCK_SKEW_SECONDS = 60


def record_problem(gang: Gang, record: Record, snapshot: Snapshot, now: float) -> str:
    """Why the reservation ``record`` cannot be the gang's own, whatever its signature says
    (docs/decisions/049-hostile-tenants-third-round.md), ``""`` when it can: planned in the
    future (a record that would never run out of time), or its nodes spread over more than
    one domain of the level the gang requires."""
    at = epoch(record.planned_at)
    if at is None or at > now + CLOCK_SKEW_SECONDS:
        return f"the reservation is planned at {record.planned_at!r}, not a time that has come"
    level = gang.topology.required_level
    depth = snapshot.levels.depth_of(level) if level is not None else None
    if depth is not None:
        domains = {snapshot.tree.domain_of[depth][i] for n in record.nodes if (i := snapshot.index.get(n)) is not None}
        if len(domains) > 1:
            return f"the reserved nodes span {len(domains)} domains of {level}, which the gang requires one of"
    return ""


def reservation_clock(gang: Gang, released: Sequence[PodInfo], snapshot: Snapshot, now: float) -> Clock | None:
    """When ``gang``'s reservation runs out of time and why (module docstring); None when
    it is complete (every rank's member released onto its node and bound)."""
    record = gang.reservation
    if record is None:
        return None
    mine = [p for p in released if p.planned_at == record.planned_at]
    filled = fill(record, gang.slots, mine)
    for rank, node in enumerate(record.nodes):
        member = filled.get(rank)
        if member is not None and member.node_name:
            continue
        i = snapshot.index.get(node)
        if i is None:
            return Clock(now, f"the reserved node {node} of rank {rank} no longer exists")
        if snapshot.nodes[i].unschedulable:
            return Clock(now, f"the reserved node {node} of rank {rank} was cordoned before its member was bound")
    bound = sum(1 for p in filled.values() if p.node_name)
    if bound == len(record.nodes):
        return None
    planned = epoch(record.planned_at)
    start = max([t for t in (min(planned, now) if planned is not None else None,
                             *(epoch(p.creation_timestamp) for p in gang.members)) if t is not None], default=now)
    seconds, jit = gang.timeout_seconds, jitter(gang, record.planned_at)
    return Clock(start + seconds + jit,
                 f"reservation of {len(record.nodes)} node(s) not complete within {seconds}s (+{jit:.0f}s jitter) "
                 f"of the reservation or its newest member: {len(gang.members)} of {len(gang.slots)} members "
                 f"exist, {len(filled)} released, {bound} bound")


def _misfits(pairs: Sequence[tuple[PodInfo, int]], record: Record, slots: Sequence[PodInfo],
             snapshot: Snapshot) -> list[str]:
    """Why members do not fit their ranks' reserved nodes (``[]``: all fit): the node is
    gone, a filter refuses the member (a taint, its node selection), or it requests more
    than its slot holds plus what the node has free (members on one node share that)."""
    problems: list[str] = []
    extra: dict[int, dict[str, int]] = {}
    for pod, rank in pairs:
        node = record.nodes[rank]
        i = snapshot.index.get(node)
        if i is None:
            problems.append(f"the reserved node {node} of rank {rank} (member {pod.name}) no longer exists")
            continue
        info = snapshot.nodes[i]
        why = profile.node_status(pod.node_filter, info)
        if why is not None:
            problems.append(f"member {pod.name} does not fit its reserved node {node} (rank {rank}): {why.reasons[0]}")
            continue
        held = slots[min(rank, len(slots) - 1)].requests if slots else {}
        used = extra.setdefault(i, {})
        free = snapshot.free(i)
        room = {r: free.get(r, 0) + held.get(r, 0) - used.get(r, 0) for r in pod.requests}
        short = noderesources.insufficient(room, pod.requests)
        if short:
            problems.append(f"member {pod.name} does not fit its reserved node {node} (rank {rank}, "
                            f"requests differ from the pod template): {'; '.join(short)}")
            continue
        for r, amount in pod.requests.items():
            used[r] = used.get(r, 0) + max(0, amount - held.get(r, 0))
    return problems


def _overcommitted(record: Record, filled: Mapping[int, PodInfo], snapshot: Snapshot) -> list[str]:
    """Why the reservation no longer holds its room (``[]``: it does): a node of a rank
    whose member is not there yet has less than nothing free of a resource (the units of
    the snapshot: millicores, bytes, devices), so something other than the reservation
    took what the rank holds. A node whose ranks are all filled is not looked at: its
    members run there, whatever came after them."""
    problems: list[str] = []
    for node in dict.fromkeys(node for rank, node in enumerate(record.nodes) if rank not in filled):
        i = snapshot.index.get(node)
        if i is None:  # the reservation's clock rolls a gone node back
            continue
        short = {r: -free for r, free in snapshot.free(i).items() if free < 0}
        if short:
            problems.append(f"the reserved node {node} is overcommitted ("
                            f"{', '.join(f'{r}: {n} short' for r, n in sorted(short.items()))}): "
                            f"another pod took the room its free rank(s) hold")
    return problems


def release_as_created(s: Seen) -> Decision:
    """Rule ``ReleaseAsCreated``: release the gated members onto their ranks' nodes, drop a
    stale or complete reservation, or one another pod took room from while none of its
    members is released, or roll back one a member no longer fits or another pod took room
    from."""
    gang, snapshot = s.gang, s.snapshot
    record, workload = gang.reservation, gang.workload
    assert record is not None and workload is not None  # the rule applies only with both
    rid = record.planned_at
    stale = gang.reservation_stale or record_problem(gang, record, snapshot, s.now)
    mine = [p for p in s.released if p.planned_at == rid]
    filled = fill(record, gang.slots, mine)
    taken = _overcommitted(record, filled, snapshot)
    if not stale and taken and not mine:
        stale = taken[0]
    if stale:
        return s.made(lifecycle.RESERVATION_DROPPED,
                      (DropReservation(workload, rid, stale), Wait(s.gated_keys)),
                      Status.of(f"reservation dropped: {stale}"))
    pairs, without = assign(record, gang.slots, filled, s.gated)
    problems = taken + _misfits(pairs, record, gang.slots, snapshot)
    if problems:
        rollback = RollBack(delete=tuple(p.key for p in mine if p.owner is not None),
                            keep=tuple(p.key for p in mine if p.owner is None), releases=(rid,))
        return s.made(lifecycle.RESERVATION_BROKEN,
                      (rollback, DropReservation(workload, rid, problems[0])),
                      Status((*problems[:3], "rolling the whole reservation back")))
    n = len(record.nodes)
    bound = sum(1 for p in filled.values() if p.node_name)
    if not pairs and bound == n:
        whole = (ForgetBackoff(),) if gang.timeouts or gang.avoid else ()
        return s.made(lifecycle.ALL_RELEASED,
                      (DropReservation(workload, rid, "every member is bound", complete=True), *whole),
                      Status.of(f"all {n} members released and bound (AsCreated, reserved at {rid})"))
    members = tuple(member_release(pod, record.nodes[rank], snapshot, rank, rid) for pod, rank in pairs)
    reason = (f"AsCreated: {n} node(s) reserved; {len(gang.members)} of {n} members exist, "
              f"{len(filled) + len(members)} released, {bound} bound")
    note = "; ".join(filter(None, ["released as created", avoid_note(gang.avoid),
                                   unmodeled_note([p for p, _ in pairs], snapshot.volumes)]))
    actions: tuple[Release | Wait, ...] = (Release(members, note=note),) if members else ()
    if without:
        reason += (f"; {len(without)} member(s) without a free rank wait for the reservation to complete: "
                   f"{', '.join(p.name for p in without[:3])}")
        actions += (Wait(tuple(p.key for p in without)),)
    return s.made(lifecycle.RELEASE_AS_CREATED, actions, Status.of(reason))


def reserve(s: Seen) -> Decision:
    """Rule ``Reserved``: place every slot and write the reservation; ``Unplaced`` (waiting,
    no preemption yet) when the slots do not fit; ``Queued`` while a gang ahead blocks it
    (``StrictFIFO``, as for a gang released when complete)."""
    gang, snapshot = s.gang, s.snapshot
    assert gang.workload is not None  # only gangs released as created get here
    if s.queue.blocked_by:  # StrictFIFO: a gang ahead that does not fit holds back every gang behind
        return s.made(lifecycle.QUEUED, (Wait(s.gated_keys),),
                      Status.of(f"queued behind {s.queue.blocked_by} (StrictFIFO)"))
    slots = list(gang.slots)
    if gang.avoid:
        slots = [replace(p, node_filter=avoiding(p.node_filter, gang.avoid)) for p in slots]
    held = closed_to(gang, snapshot, s.now, s.queue)
    view = snapshot.with_blocked(held) if held else snapshot
    avoided = s.policy.avoidance.avoided(snapshot, s.now)
    found, avoided_note = place_avoiding(view, slots, gang.topology, (), avoided)
    minimum = gang.min_size
    if not found.result.placed and minimum is not None and minimum < len(slots):
        # A gang with a minimum: room for its first ranks is enough (docs/decisions/038).
        first, first_note = place_avoiding(view, slots[:minimum], gang.topology, (), avoided)
        if first.result.placed:
            slots, found, avoided_note = slots[:minimum], first, first_note
    result = found.result
    if not result.placed:
        reasons = (result.reason, "the reservation waits for room; preemption is considered once every member exists")
        return s.made(lifecycle.UNPLACED, (Wait(s.gated_keys),), Status(reasons, result.code, "reservation: "),
                      placement=result)
    at = planned_at(s.now, list(s.releases))
    node_of = {a.pod_key: a.node for a in result.assignments}
    record = Record(gang.key.partition("/")[2], at, tuple(node_of[p.key] for p in slots))
    kind, _, name = gang.workload
    deadline = (epoch(at) or s.now) + gang.timeout_seconds + jitter(gang, at)
    reason = (f"AsCreated: reserved {len(record.nodes)} node(s) from the {kind} {name} pod template "
              f"({len(gang.members)} of {len(gang.slots)} members exist)")
    if len(record.nodes) < len(gang.slots):
        reason += (f"; room for the first {len(record.nodes)} (minimum {gang.min_size}): the others are placed "
                   f"next to them once they run")
    backfilled = backfill_note(gang, snapshot, s.now, s.queue, record.nodes) if s.queue.reservations else ""
    notes = [*([avoid_note(gang.avoid)] if gang.avoid else []),
             *filter(None, [unmodeled_note(slots, snapshot.volumes), avoided_note, backfilled])]
    return s.made(lifecycle.RESERVED, (Reserve(gang.workload, record),),
                  Status((reason, result.reason, *notes), result.code), recheck_at=deadline, placement=result)
