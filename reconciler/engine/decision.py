"""One decision per gang: ``decide(gang, snapshot, now) -> Decision``.

The reconciler and the simulator both call :func:`decide`, so a what-if is never a second
opinion: the same gang on the same snapshot at the same time gives the same phase, the
same reason and the same plan. It is pure: plain data in, plain data out; ``now`` (seconds
since the epoch) is the only clock, and nothing is written. The caller acts on it: the
reconciler writes (:mod:`reconciler.daemon.controller`), the simulator applies the plan to its
snapshot and moves to the next gang (:mod:`reconciler.tools.simulate`).

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
never will be), is rolled back at once. The phase itself comes from the
rules of :mod:`.lifecycle`, in their order.

The jitter is drawn from ``[0, gangScheduleTimeoutJitterSeconds]`` (``seeds/001``) by a hash
of the gang and the release, so it is spread across gangs yet the same after a restart
and in the simulator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.engine import lifecycle
from reconciler.engine.allocation import DevicePlacement, group_problem, place_with_devices
from reconciler.engine.cluster import PodInfo
from reconciler.engine.devices import Devices, Holding
from reconciler.engine.gang import Gang
from reconciler.engine.lifecycle import Observation, Phase
from reconciler.engine.placement import Code, PlacementResult
from reconciler.engine.preemption import PreemptionPlan, plan_preemption
from reconciler.engine.preemption import candidates as victims
from reconciler.engine.queueing import (
    Hold,
    Policy,
    QueueView,
    complete_since,
    hold_for,
    queue_order,
)
from reconciler.engine.records import Nomination, Plan
from reconciler.engine.snapshot import Snapshot
from reconciler.engine.timestamps import epoch, rfc3339


@dataclass(frozen=True)
class MemberRelease:
    """One member to release in one write: pin it to ``node`` (the pin adds
    ``kubernetes.io/hostname: <hostname>`` to its node selection), stamp its ``rank``
    (0-based, in the whole gang) and the release's ``planned_at``, and remove its Troupe
    gates. ``pod`` is ``namespace/name``; ``uid`` and ``resource_version`` are those the
    decision saw (a write made against a newer version must check it is still the same
    pod, still unpinned or pinned to ``node``). ``devices``: the IDs of its
    SharedDeviceGroup, written in the same update (``deviceshare.io/selected-devices`` and
    ``deviceshare.io/env.<VAR>``); empty for a pod in no group."""

    pod: str
    uid: str
    resource_version: str
    node: str
    hostname: str
    rank: int
    planned_at: str
    devices: Devices = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """What to do with one gang, and why.

    ``phase``/``rule``/``reason``: the lifecycle rule that applied and its reason (with
    numbers); ``observation`` what it saw. ``release``: members to release now, in rank
    order (a new plan for ``Placed``, the reserved members for ``Releasing``). ``plan``:
    the record to write on ``release[0]`` together with its release, before any other
    member is written (a new plan of more than one member). ``rollback``: members to mark
    as disrupted and delete (their controller recreates them); ``kept``: members of the
    same rolled-back release that no controller owns, never deleted (they get an Event);
    ``clear_plan``: members whose plan record must be removed (the record of a rolled-back
    release that survives on an ownerless member). ``rolled_back``: the releases (their
    ``planned-at``) rolled back, which the caller must remember until their members are
    gone (:attr:`Gang.rolled_back`), so that a rollback cut short is finished. ``notify``: the members the rule's
    ``event`` (``(type, reason)``) is about. ``recheck_at`` (seconds since the epoch): when
    the decision changes with nothing else happening (a deadline, the end of a settle
    period or of a backoff); None: only when something changes. ``code`` is the placement
    engine's code (``Success``, ``Unschedulable``, ``UnschedulableAndUnresolvable``) when
    it was asked; ``placement`` its result. ``devices``: pod key -> the device IDs of its
    SharedDeviceGroup, for the members released now; ``bindings``: the groups this
    decision binds to a node (their status is written after the members).

    Preemption (phase ``Preempting``): ``victims``, the pods to evict now (``namespace/name``,
    sorted; those already terminating are not listed again); ``nomination``, the record to
    write on ``nominee`` (the first gated member) before any eviction, holding the nodes
    of ``placement`` for the gang; ``preemption`` the planner's plan when one was made.
    ``clear_nomination``: members whose nomination must be removed (it ran out).
    ``holds``: what gangs ahead in the queue held back from this one (for messages).
    """

    gang: str
    phase: Phase
    rule: str
    reason: str
    observation: Observation
    code: str = ""
    release: tuple[MemberRelease, ...] = ()
    plan: Plan | None = None
    rollback: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    clear_plan: tuple[str, ...] = ()
    notify: tuple[str, ...] = ()
    event: tuple[str, str] | None = None
    recheck_at: float | None = None
    placement: PlacementResult | None = None
    victims: tuple[str, ...] = ()
    devices: Mapping[str, Devices] = field(default_factory=dict)
    bindings: tuple[Holding, ...] = ()
    rolled_back: tuple[str, ...] = ()
    nomination: Nomination | None = None
    nominee: str = ""
    preemption: PreemptionPlan | None = None
    clear_nomination: tuple[str, ...] = ()


def jitter(gang: Gang, release: str) -> float:
    """The jitter of ``release`` of ``gang``: ``[0, gang.jitter_seconds]`` seconds, from a
    hash of both (the same after a restart and in the simulator)."""
    digest = hashlib.blake2b(f"{gang.key}@{release}".encode(), digest_size=8).digest()
    return gang.jitter_seconds * int.from_bytes(digest, "big") / 2**64


@dataclass
class _Release:
    """Committed members sharing one ``planned_at``; ``reserved`` are still gated."""

    id: str
    members: list[PodInfo] = field(default_factory=list)
    reserved: list[PodInfo] = field(default_factory=list)


@dataclass(frozen=True)
class _Clock:
    deadline: float
    why: str


def _release_clock(gang: Gang, r: _Release, snapshot: Snapshot, now: float) -> _Clock | None:
    """When release ``r`` runs out of time and why; None when it is done (every member
    bound) or has no readable clock."""
    seconds, jit = gang.timeout_seconds, jitter(gang, r.id)
    for pod in r.members:
        node = pod.node_name or snapshot.committed_node(pod)
        if not pod.node_name and node and node not in snapshot.index:
            return _Clock(now, f"the planned node {node} of member {pod.name} no longer exists")
        if not pod.node_name and node and snapshot.nodes[snapshot.index[node]].unschedulable:
            return _Clock(now, f"the planned node {node} of member {pod.name} was cordoned before it was bound")
    if r.reserved:
        start = epoch(r.id)
        if start is None:
            return None
        return _Clock(start + seconds + jit,
                      f"release of {len(r.members)} member(s) not complete within {seconds}s "
                      f"(+{jit:.0f}s jitter): {len(r.reserved)} still gated")
    unbound = [p for p in r.members if not p.node_name]
    if not unbound:
        return None
    stamps = [t for p in r.members if (t := epoch(p.released_at)) is not None]
    if not stamps:
        return None
    return _Clock(max(stamps) + seconds + jit,
                  f"{len(unbound)} released member(s) not bound within {seconds}s (+{jit:.0f}s jitter)")


def decide(gang: Gang, snapshot: Snapshot, now: float, policy: Policy | None = None,
           queue: QueueView | None = None) -> Decision:
    """The decision for ``gang`` on ``snapshot`` at ``now`` (seconds since the epoch).

    ``snapshot`` holds the gang's pods as the gang does (committed members use their
    nodes; free gated members use nothing). ``policy``: the preemption mode and queueing
    strategy (default: none, BestEffortFIFO); ``queue``: what the gangs ahead of this one
    in the queue hold or block (:mod:`.queueing`; default: nothing). Deterministic; never
    raises on cluster data.
    """
    released = [p for p in gang.members if not p.gated]
    gated = [p for p in gang.members if p.gated]
    reserved = [p for p in gated if snapshot.committed_node(p)]
    free = [p for p in gated if not snapshot.committed_node(p)]
    releases: dict[str, _Release] = {}
    for pod in [*released, *reserved]:
        rid = snapshot.plan_of(pod) or pod.released_at
        if not rid:
            continue  # released without Troupe: nothing to time
        r = releases.setdefault(rid, _Release(rid))
        r.members.append(pod)
        if pod.gated:
            r.reserved.append(pod)
    clocks = {rid: c for rid, r in sorted(releases.items()) if (c := _release_clock(gang, r, snapshot, now))}
    for rid in gang.rolled_back:  # a rollback cut short (a refused delete): finish it
        left = [p for p in releases[rid].members if p.owner is not None] if rid in releases else []
        if left:
            clocks[rid] = _Clock(now, f"the release of {rid} was rolled back; {len(left)} member(s) of it still to delete")
    expired = [rid for rid, c in clocks.items() if c.deadline <= now]
    pending = [c.deadline for c in clocks.values() if c.deadline > now]

    size = gang.size
    settle_left = 0.0
    if size is None:
        settle_left = gang.settle_at - now
        if settle_left <= 0:
            size = len(gang.members)
    obs = Observation(
        gang=gang.key, active=len(gang.members), size=size, gated=len(gated), reserved=len(reserved),
        released=len(released), bound=sum(1 for p in released if p.node_name),
        running=sum(1 for p in released if p.phase == "Running"),
        expired=sum(len(releases[rid].members) for rid in expired),
        expired_why="; ".join(clocks[rid].why for rid in expired), held=gang.held,
        device_problem=group_problem(snapshot, gated),
        backoff_left=max(0.0, gang.not_before - now), timeouts=gang.timeouts, settle_left=max(0.0, settle_left),
        size_from=gang.size_from, workload_missing=gang.workload_missing,
    )
    rule = lifecycle.classify(obs)
    recheck = min(pending) if pending else None

    def made(rule: lifecycle.Rule, reason: str | None = None, **fields: object) -> Decision:
        return Decision(gang.key, rule.phase, rule.name, rule.reason(obs) if reason is None else reason, obs,
                        event=rule.event, **fields)  # type: ignore[arg-type]

    keys = tuple(p.key for p in gated)
    if rule is lifecycle.TIMED_OUT:
        members = [p for rid in expired for p in releases[rid].members]
        holders = [p for p in gang.members if p.plan is not None and p.plan.planned_at in expired and p.owner is None]
        return made(rule, rollback=tuple(p.key for p in members if p.owner is not None),
                    kept=tuple(p.key for p in members if p.owner is None),
                    clear_plan=tuple(p.key for p in holders), notify=tuple(p.key for p in members),
                    rolled_back=tuple(expired))
    if rule is lifecycle.RELEASE_IN_PROGRESS:
        ranks = {p.key: i for i, p in enumerate(gang.members)}
        holdings = snapshot.devices.holdings
        out = tuple(_member(p, snapshot.committed_node(p), snapshot, ranks[p.key], snapshot.plan_of(p) or p.released_at,
                            holdings[p.device_group].devices if p.device_group in holdings else {})
                    for p in reserved)
        return made(rule, release=out, notify=tuple(m.pod for m in out), recheck_at=recheck,
                    devices={m.pod: m.devices for m in out if m.devices})
    if rule in (lifecycle.ALL_RELEASED, lifecycle.NO_MEMBERS, lifecycle.MEMBERS_MISSING):
        return made(rule, recheck_at=recheck)
    if rule in (lifecycle.MEMBERS_DISAGREE, lifecycle.DEVICE_GROUP):
        return made(rule, notify=keys, recheck_at=recheck)
    if rule is lifecycle.BACKING_OFF:
        return made(rule, notify=keys, recheck_at=_earliest(recheck, gang.not_before))
    if rule is lifecycle.SETTLING:
        return made(rule, recheck_at=_earliest(recheck, gang.settle_at))
    if rule is lifecycle.WORKLOAD_UNKNOWN:
        return made(rule, recheck_at=recheck)
    latest = max((t for rid in releases if (t := epoch(rid)) is not None), default=None)
    return _place(gang, snapshot, now, obs, free, released, recheck, latest, policy or Policy(), queue or QueueView())


def _earliest(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _member(pod: PodInfo, node: str, snapshot: Snapshot, rank: int, planned_at: str,
            devices: Devices | None = None) -> MemberRelease:
    i = snapshot.index.get(node)
    hostname = snapshot.nodes[i].hostname if i is not None else node
    return MemberRelease(pod.key, pod.uid, pod.resource_version, node, hostname, rank, planned_at, devices or {})


def _place(gang: Gang, snapshot: Snapshot, now: float, obs: Observation, free: Sequence[PodInfo],
           released: Sequence[PodInfo], recheck: float | None, latest: float | None, policy: Policy,
           queue: QueueView) -> Decision:
    """Rules 10 to 13: the queue, then where the gated members go (next to the members
    that already run, when there are some), then preemption. A new release's
    ``planned_at`` names it, so it is later than every release of the gang already there
    (``latest``, seconds), by a millisecond if the clock says otherwise.

    A gang that holds a nomination (docs/decisions/020-preemption-in-the-decision.md) plans
    on the room the nomination holds for it; while its victims have not all terminated it
    waits (``AwaitingVictims``), and once they have, it is placed like any gang. A
    nomination that ran out (the gang's timeout, its jitter and the victims' longest grace
    period after it was made) is cleared and the gang decided afresh."""
    what = f"replacement member(s) {', '.join(p.name for p in free)}: " if released else ""
    keys = tuple(p.key for p in free)
    nominee, nom = _nomination(gang)
    clear: tuple[str, ...] = ()
    if nom is not None:
        deadline = _nomination_deadline(gang, nom, snapshot)
        if deadline <= now:
            clear, nom = (nominee,), None
        else:
            recheck = _earliest(recheck, deadline)
    own = [p.key for p in free if snapshot.nominated_node(p)]
    base = snapshot.with_removed(own) if own else snapshot
    if nom is not None:
        remaining = [v for v in nom.victims if (p := snapshot.pods.get(v)) is not None and not p.terminal]
        refused = frozenset(nom.refused)
        gang_of = victims.gang_of_pod(snapshot, policy.gang_prefix) if refused else {}
        blocked = [v for v in remaining if gang_of.get(v) in refused]
        if remaining and not blocked:
            rule = lifecycle.AWAITING_VICTIMS
            evict = tuple(v for v in remaining if not snapshot.pods[v].deleting)
            reason = (f"{what}waiting for {len(remaining)} victim pod(s) to terminate "
                      f"({len(remaining) - len(evict)} terminating); their room is held for the gang")
            return Decision(gang.key, rule.phase, rule.name, reason, obs, code=Code.UNSCHEDULABLE.value,
                            notify=keys, event=rule.event, recheck_at=recheck, victims=evict, nomination=nom,
                            nominee=nominee)
    elif queue.blocked_by:
        rule = lifecycle.QUEUED
        return Decision(gang.key, rule.phase, rule.name, f"{what}queued behind {queue.blocked_by} (StrictFIFO)", obs,
                        notify=keys, event=rule.event, recheck_at=recheck, clear_nomination=clear)
    held = queue.held_nodes - {snapshot.index[n] for p in free if (n := snapshot.nominated_node(p)) in snapshot.index}
    view = base.with_blocked(held) if held else base
    near = sorted({n for p in released if (n := p.node_name or snapshot.committed_node(p))})
    required, preferred = gang.topology.required_level, gang.topology.preferred_level
    found = place_with_devices(view, free, required, preferred, near=near)
    result = found.result
    if result.placed:
        return _placed(gang, snapshot, now, obs, free, recheck, latest, found, what, clear + (
            (nominee,) if nom is not None else ()))
    note = _held_note(queue, held)
    if result.code is Code.UNSCHEDULABLE and policy.preemption != "off":
        preempted = _preempt(gang, view, now, obs, free, near, policy, nom, what, keys, recheck)
        if preempted is not None:
            return preempted
        if nom is not None:  # a refused eviction and no other plan: hold what is freed, retry later
            rule = lifecycle.EVICTION_REFUSED
            reason = (f"{what}eviction of {', '.join(sorted(nom.refused))} refused (PodDisruptionBudget) and no other "
                      f"lower-priority gangs make room; retrying when the nomination runs out")
            return Decision(gang.key, rule.phase, rule.name, reason, obs, code=result.code.value, notify=keys,
                            event=rule.event, recheck_at=recheck, nomination=nom, nominee=nominee)
        note += "; no lower-priority gangs whose eviction makes room"
    rule = lifecycle.UNPLACED
    return Decision(gang.key, rule.phase, rule.name, what + result.reason + note, obs, code=result.code.value,
                    notify=keys, event=rule.event, recheck_at=recheck, placement=result,
                    clear_nomination=clear + ((nominee,) if nom is not None else ()))


def _placed(gang: Gang, snapshot: Snapshot, now: float, obs: Observation, free: Sequence[PodInfo],
            recheck: float | None, latest: float | None, found: DevicePlacement, what: str,
            clear: tuple[str, ...]) -> Decision:
    result = found.result
    planned_at = rfc3339(now if latest is None or now >= latest + 0.001 else latest + 0.001)
    ranks = {p.key: i for i, p in enumerate(gang.members)}
    by_key = {p.key: p for p in free}
    out = tuple(_member(by_key[a.pod_key], a.node, snapshot, ranks[a.pod_key], planned_at, found.devices.get(a.pod_key))
                for a in result.assignments)
    bindings = tuple(replace(h, source=f"plan {planned_at}") for h in found.bindings)
    plan = (Plan(planned_at, {by_key[m.pod].uid: m.node for m in out}, {h.group: h for h in bindings})
            if len(out) > 1 else None)
    rule = lifecycle.PLACED
    return Decision(gang.key, rule.phase, rule.name, what + result.reason, obs, code=result.code.value, release=out,
                    plan=plan, notify=tuple(p.key for p in free), event=rule.event, recheck_at=recheck,
                    placement=result, devices=dict(found.devices), bindings=bindings, clear_nomination=clear)


def _nomination(gang: Gang) -> tuple[str, Nomination | None]:
    """The first gated member in rank order (who carries the gang's nomination) and the
    latest nomination a gated member carries (None without one)."""
    gated = [p for p in gang.members if p.gated]
    noms = sorted((p.nomination for p in gated if p.nomination is not None), key=lambda n: n.at)
    return (gated[0].key if gated else ""), (noms[-1] if noms else None)


def _nomination_deadline(gang: Gang, nom: Nomination, snapshot: Snapshot) -> float:
    """When a nomination runs out: its time, plus the gang's timeout and jitter, plus the
    longest grace period of its victims still there (the Eviction API gives each its own)."""
    start = epoch(nom.at)
    if start is None:
        return 0.0
    grace = max((p.grace_seconds for v in nom.victims if (p := snapshot.pods.get(v)) is not None), default=0)
    return start + gang.timeout_seconds + jitter(gang, nom.at) + grace


def _held_note(queue: QueueView, held: frozenset[int]) -> str:
    if not held:
        return ""
    first = min(queue.holds, key=lambda h: h.order)
    return (f"; {len(held)} node(s) held for {len(queue.holds)} gang(s) ahead in the queue "
            f"({first.gang}, priority {first.priority}, in {first.domain})")


def _preempt(gang: Gang, snapshot: Snapshot, now: float, obs: Observation, free: Sequence[PodInfo],
             near: Sequence[str], policy: Policy, nom: Nomination | None, what: str, keys: tuple[str, ...],
             recheck: float | None) -> Decision | None:
    """A ``Preempting`` decision when evicting lower-priority gangs makes room, else None.
    Pods already terminating count as gone (their room is coming); members of a
    SharedDeviceGroup plan on their group's node when it is bound (a gang that would bind a
    new group is not a preemptor: its node is chosen by its devices, not by victims)."""
    members = []
    holdings = snapshot.devices.holdings
    for p in free:
        if p.device_group:
            if p.device_group not in holdings:
                return None
            p = replace(p, node_filter=p.node_filter.on_node(holdings[p.device_group].node))
        members.append(p)
    refused = frozenset(nom.refused) if nom is not None else frozenset()
    found = victims.candidates(snapshot, policy.gang_prefix, gang.key, gang.priority, refused)
    if not found:
        return None
    going = victims.leaving(snapshot)
    view = snapshot.with_removed(going) if going else snapshot
    plan = plan_preemption(view, members, found, policy.preemption, gang.topology.required_level,
                           gang.topology.preferred_level, near=near, gang=gang.key)
    if plan is None or not plan.victims:
        return None
    by_key = {p.key: p for p in free}
    nomination = Nomination(rfc3339(now), {by_key[a.pod_key].uid: a.node for a in plan.placement.assignments},
                            plan.victims, tuple(sorted(refused)))
    nominee, _ = _nomination(gang)
    rule = lifecycle.PREEMPTING
    return Decision(gang.key, rule.phase, rule.name, f"{what}{plan.reason} ({policy.preemption})", obs,
                    code=Code.UNSCHEDULABLE.value, notify=keys, event=rule.event,
                    recheck_at=_earliest(recheck, now + gang.timeout_seconds), placement=plan.placement,
                    victims=plan.victims, nomination=nomination, nominee=nominee, preemption=plan)


@dataclass(frozen=True)
class QueueEffect:
    """What a decision means for the gangs behind this one in the queue (:mod:`.queueing`):
    ``standing``, it could fit once room frees (placement code ``Unschedulable``, or a
    preemptor waiting for its victims) and stands in their way; ``what`` describes it for
    their reasons; ``hold``, the capacity held for it once it has waited
    ``headOfLineSeconds`` (BestEffortFIFO); ``recheck_at`` (seconds since the epoch), when
    it will have waited that long."""

    standing: bool
    what: str = ""
    hold: Hold | None = None
    recheck_at: float | None = None


def queue_effect(gang: Gang, decision: Decision, snapshot: Snapshot, policy: Policy, now: float) -> QueueEffect:
    """The :class:`QueueEffect` of ``decision`` for ``gang`` (docs/decisions/019-queue-order.md)."""
    standing = decision.code == Code.UNSCHEDULABLE.value and decision.phase in (Phase.UNSCHEDULABLE, Phase.PREEMPTING)
    if not standing:
        return QueueEffect(False)
    since = complete_since(gang.members) or now
    waited = now - since
    what = f"gang {gang.key} (priority {gang.priority}, waiting {_duration(waited)})"
    if policy.queueing != "BestEffortFIFO" or decision.phase is not Phase.UNSCHEDULABLE:
        return QueueEffect(True, what)
    if waited < policy.head_of_line_seconds:
        return QueueEffect(True, what, recheck_at=since + policy.head_of_line_seconds)
    free = [p for p in gang.members if p.gated and not snapshot.committed_node(p)]
    nodes, domain = hold_for(snapshot, free, gang.topology.required_level) if free else (frozenset(), "")
    order = queue_order(gang.key, gang.priority, gang.created)
    hold = Hold(gang.key, order, gang.priority, since, nodes, domain) if nodes else None
    return QueueEffect(True, what, hold)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
