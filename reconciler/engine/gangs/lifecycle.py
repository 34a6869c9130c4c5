"""The gang lifecycle: its phases, the rules that pick a phase from what is observed, and
the moves between phases that can happen.

The reconciler is level-triggered. Every decision observes the gang afresh (an
:class:`Observation`: counts of its members in each state, its clocks, what holds it) and
:func:`classify` picks the first rule of :data:`RULES` that applies. A rule names the
phase, says why with numbers, and names the Event the members get. Only when every rule
passes is the placement engine asked (:data:`READY`); its answer picks :data:`PLACED` or
:data:`UNPLACED`. The order is the policy, so it is written here once, as data:

======  ====================  ==============  ==========================================
order   rule                  phase           applies when
======  ====================  ==============  ==========================================
1       ``NoMembers``         Waiting         no active member (all finished or deleted)
1b      ``Refused``           RolledBack      kube-scheduler refused a released member on
                                              the node it is pinned to: the release is
                                              rolled back and the node avoided
2       ``TimedOut``          RolledBack      a release did not complete, or its members
                                              were not all bound, within the timeout
2b      ``MemberFailed``      RolledBack      ``RestartGang``: a running member failed (its
                                              pod Failed, its node deleted, NotReady past
                                              the grace, or tainted NoExecute): every
                                              running member is deleted, the gang placed
                                              again whole
3       ``ReleaseInProgress`` Releasing       gated members hold nodes reserved by a
                                              release cut short: finish it
3b      ``ReleaseAsCreated``  Releasing       the gang's workload carries its reservation:
                                              release each member onto its rank's node
                                              as it comes (docs/decisions/034)
4       ``AllReleased``       Released        no active member is gated
5       ``MembersDisagree``   Held            members disagree on size, timeout or level,
                                              or carry malformed gang annotations
6       ``DeviceGroup``       Held            a gated member's SharedDeviceGroup does not
                                              exist, cannot be read or is being deleted
7       ``BackingOff``        BackingOff      a rollback's backoff has not run out
7b      ``WorkloadUnknown``   Waiting         the workload that sizes the gang is not
                                              known (not found, or its kind unreadable)
8       ``Settling``          Waiting         an auto-gang's size is not known yet
9       ``MembersMissing``    Waiting         fewer than ``size`` active members (or its
                                              minimum size), none released
                                              (all-or-nothing), and the gang is not
                                              released as created
10      ``Queued``            Waiting         StrictFIFO: a gang ahead in the queue does
                                              not fit, and every gang behind it waits
11      ``Placed``            Placed          a placement exists for every gated member
        ``Reserved``          Placed          released as created: a placement exists for
                                              every slot; the reservation is written
12      ``Preempting``        Preempting      none does, but evicting lower-priority
                                              gangs makes one (``gangPreemptionMode``);
        ``AwaitingVictims``   Preempting      the gang's nomination holds its nodes while
                                              its victims terminate
        ``EvictionRefused``   Preempting      a PodDisruptionBudget refused an eviction
                                              and no other plan exists: wait, then retry
13      ``Unplaced``          Unschedulable   no placement, and no preemption helps
        ``Provisioning``      Unschedulable   ... and the gang asks the autoscaler for its
                                              room with a ProvisioningRequest, or waits
                                              on it (docs/decisions/080)
======  ====================  ==============  ==========================================

A pin is a commitment: rules 2 to 4 come before anything that could hold a gang back,
so a release once begun is finished (or rolled back at its deadline) whatever else
changes. Members released later than their gang (replacements) are placed on their own
(rules 9 and 10: ``MembersMissing`` applies only while nothing is released).

Moves (:data:`MOVES`). Observations can change arbitrarily between two reconciles
(members come and go), so most moves can happen; what cannot is that a gang becomes
*committed* (a member released, or its node reserved) behind the controller's back: only
a ``Placed`` decision of the controller commits. Hence ``Releasing`` follows only
``Placed`` or ``Releasing``, and nothing committed (``Releasing``, ``Released``,
``RolledBack``) follows ``Waiting``, which observes no committed member. A reconciler
that starts (or takes over) sees each gang for the first time, and any first phase is
legal. :func:`move` raises :class:`IllegalTransition` naming the gang, both phases and the
observation (h11's habit: rules as data, errors that explain themselves).

A move is told by what was observed (:class:`Transition`): the rule that applied and its
reason, never a text chosen by the two phases. One pair of phases has several causes:
``Placed -> Releasing`` is a reservation on the workload whose members come
(``ReleaseAsCreated``) or a release whose writes failed (``ReleaseInProgress``, whose reason
then says which write failed, when this reconciler saw it: ``Observation.unwritten``);
``Released -> RolledBack`` a timeout, a refusal by kube-scheduler or a member that failed
(docs/decisions/054-transitions-told-by-what-was-observed.md).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class Phase(enum.Enum):
    """A gang's phase; see the module docstring for the rule that leads to each."""

    WAITING = "Waiting"
    HELD = "Held"
    BACKING_OFF = "BackingOff"
    UNSCHEDULABLE = "Unschedulable"
    PLACED = "Placed"
    RELEASING = "Releasing"
    RELEASED = "Released"
    ROLLED_BACK = "RolledBack"
    PREEMPTING = "Preempting"


@dataclass(frozen=True)
class Observation:
    """What a decision sees of one gang: counts of its active members (neither terminal
    nor being deleted) and the facts the rules read.

    ``size`` is None while an auto-gang settles (``settle_left`` seconds to go).
    ``gated``: active members not released yet (they carry a Troupe gate); ``reserved``:
    gated members whose node a release in progress holds; ``released``: active members
    without a Troupe gate, ``bound`` of them with a node, ``running`` of them Running.
    ``expired``: members of releases whose clock ran out, ``expired_why`` the reason.
    ``held``: why the members cannot be released as they are (``""``: nothing).
    ``device_problem``: why a gated member's SharedDeviceGroup cannot take it (``""``).
    ``backoff_left``: seconds before a rolled-back gang may be released again, after
    ``timeouts`` consecutive rollbacks. ``refused``: released members kube-scheduler
    refused on their pinned nodes (:mod:`.refusals`), ``refused_why`` its words.
    """

    gang: str
    active: int
    size: int | None
    gated: int = 0
    reserved: int = 0
    released: int = 0
    bound: int = 0
    running: int = 0
    expired: int = 0
    expired_why: str = ""
    held: str = ""
    device_problem: str = ""
    backoff_left: float = 0.0
    timeouts: int = 0
    settle_left: float = 0.0
    size_from: str = ""
    workload_missing: str = ""
    refused: int = 0
    refused_why: str = ""
    #: Released as created: ``reservation`` ranks reserved on the workload (0: none),
    #: ``as_created`` the gang may be reserved now (none of it released, members missing).
    reservation: int = 0
    as_created: bool = False
    #: The members needed before the first release (``<prefix>-min-size``); None: ``size``.
    min_size: int | None = None
    #: A ``RestartGang`` gang: running members that failed (their pod, or their node lost),
    #: and the words for them (docs/decisions/040-failure-policy.md).
    failed: int = 0
    failed_why: str = ""
    #: What failed of the last release this reconciler wrote for the gang (``1 of 4 write(s)
    #: failed (...)``), ``""``: none failed, or none seen (a release cut short by a restart).
    unwritten: str = ""

    @property
    def needed(self) -> int | None:
        """Members needed before the first release: the minimum size, else the size (None
        while an auto-gang settles)."""
        if self.size is None:
            return None
        return min(self.min_size, self.size) if self.min_size is not None else self.size

    def summary(self) -> str:
        """One line for errors and logs: ``active=4 size=4 gated=2 reserved=2 ...``."""
        parts = [f"active={self.active}", f"size={self.size}", f"gated={self.gated}", f"reserved={self.reserved}",
                 f"released={self.released}", f"bound={self.bound}", f"expired={self.expired}"]
        if self.held:
            parts.append("held")
        if self.backoff_left > 0:
            parts.append(f"backoff={self.backoff_left:.0f}s")
        return " ".join(parts)


Reason = Callable[[Observation], str]


class Audience(enum.Enum):
    """Who gets a rule's Event (docs/decisions/025-actions.md)."""

    #: One Event per change of the gang, on its lead member (the first concerned, in rank
    #: order): the per-member story is in each member's condition.
    GANG = "gang"
    #: One Event on each member concerned: the news is about that member's own input.
    EACH = "each"


@dataclass(frozen=True)
class Notice:
    """The Event a rule sends: ``kind`` (``Normal`` or ``Warning``), ``reason``
    (``GangWaiting``...) and ``audience``. For waiting members it goes with each write of
    their condition, coalesced: whenever its message changes, so the Event follows the
    numbers, or with ``on_change_only`` only when the condition's reason changes (a
    message that counts seconds down says nothing new). For a release or a rollback, once
    per change."""

    kind: str
    reason: str
    audience: Audience = Audience.GANG
    on_change_only: bool = False


@dataclass(frozen=True)
class Rule:
    """One rule of the lifecycle table: ``name`` (what was observed), the ``phase`` it
    leads to, ``applies`` (None for the placement rules, which the engine's answer picks),
    ``reason`` (the text, with numbers), ``notice`` (the Event, or None), ``condition``
    (the ``troupe.io/Gang`` condition reason its waiting members carry, or None),
    ``waits_for_room`` (only freed capacity can move it on: a pod's or node's change may
    help) and ``retry`` (the work queue backs off and tries again)."""

    name: str
    phase: Phase
    applies: Callable[[Observation], bool] | None
    reason: Reason
    notice: Notice | None = None
    condition: str | None = None
    waits_for_room: bool = False
    retry: bool = False


def _members(o: Observation) -> str:
    size = "?" if o.size is None else str(o.size)
    minimum = f" (minimum {o.min_size})" if o.min_size is not None and o.min_size != o.size else ""
    return f"{o.active} of {size} members present{minimum}" + (f" ({o.size_from})" if o.size_from else "")


def running_of_minimum(o: Observation) -> str:
    """``6 of 8 running (minimum 4)``: a gang with a minimum size below its size, once
    released (docs/decisions/038-minimum-size.md); ``""`` for any other gang."""
    if o.min_size is None or o.size is None or o.min_size >= o.size:
        return ""
    return f"{o.running} of {o.size} running (minimum {o.min_size})"


def _released(o: Observation) -> str:
    progress = running_of_minimum(o)
    if progress:
        unbound = f"; {o.bound} of {o.released} released members bound" if o.bound != o.released else ""
        left = (o.size or 0) - o.active
        missing = f"; {left} member(s) not created yet, each placed next to the gang when it comes" if left > 0 else ""
        return progress + unbound + missing
    if o.size is not None and o.active < o.size:
        missing = f"; {o.size - o.active} missing, a replacement is placed on its own when it comes"
    else:
        missing = ""
    if o.bound == o.released:
        return f"all {o.released} active members released and bound ({o.running} running){missing}"
    return f"{o.bound} of {o.released} released members bound{missing}"


def _backoff(o: Observation) -> str:
    return f"backing off after {o.timeouts} timeout(s): {o.backoff_left:.0f}s left"


NO_MEMBERS = Rule("NoMembers", Phase.WAITING, lambda o: o.active == 0 and not o.as_created and not o.reservation,
                  lambda o: "no active members")
#: kube-scheduler refused a pinned member: roll its release back now and avoid the node
#: (docs/decisions/032-scheduler-refusals.md).
REFUSED = Rule("Refused", Phase.ROLLED_BACK, lambda o: o.refused > 0,
               lambda o: f"{o.refused_why}; rolling the release back to plan again off that node",
               Notice("Warning", "GangRefused"))
TIMED_OUT = Rule("TimedOut", Phase.ROLLED_BACK, lambda o: o.expired > 0, lambda o: o.expired_why,
                 Notice("Warning", "GangTimedOut"))
#: A running member of a ``RestartGang`` gang failed: every running member is deleted and
#: the gang placed again whole (docs/decisions/040-failure-policy.md).
MEMBER_FAILED = Rule("MemberFailed", Phase.ROLLED_BACK, lambda o: o.failed > 0,
                     lambda o: f"{o.failed_why}: restarting the whole gang (RestartGang)",
                     Notice("Warning", "GangMemberFailed"))
RELEASE_IN_PROGRESS = Rule(
    "ReleaseInProgress", Phase.RELEASING, lambda o: o.reserved > 0,
    lambda o: f"finishing a release{f' after {o.unwritten}' if o.unwritten else ''}: {o.released} of "
              f"{o.released + o.reserved} members released, {o.reserved} to go on their planned nodes",
    Notice("Normal", "GangReleased"),
)
#: A reservation on the gang's workload: each member is released onto its rank's node as it
#: comes (docs/decisions/034-release-as-created.md). The handler tells of each release.
RELEASE_AS_CREATED = Rule("ReleaseAsCreated", Phase.RELEASING, lambda o: o.reservation > 0, lambda o: "")
ALL_RELEASED = Rule("AllReleased", Phase.RELEASED, lambda o: o.gated == 0 and not o.as_created, _released)
MEMBERS_DISAGREE = Rule("MembersDisagree", Phase.HELD, lambda o: bool(o.held), lambda o: o.held,
                        Notice("Warning", "GangSpecMismatch", Audience.EACH), "Held")
DEVICE_GROUP = Rule("DeviceGroup", Phase.HELD, lambda o: bool(o.device_problem), lambda o: o.device_problem,
                    Notice("Warning", "SharedDeviceGroupUnavailable", Audience.EACH), "Held")
BACKING_OFF = Rule("BackingOff", Phase.BACKING_OFF, lambda o: o.backoff_left > 0, _backoff,
                   Notice("Normal", "GangBackingOff", on_change_only=True), "BackingOff")
#: No Event: the workload object normally follows its pods by milliseconds on another
#: watch, and a Warning for that would be noise; the reason is in /debug/gangs and the
#: simulator (docs/decisions/014-workload-gangs.md).
WORKLOAD_UNKNOWN = Rule("WorkloadUnknown", Phase.WAITING, lambda o: bool(o.workload_missing),
                        lambda o: f"{o.active} members present; "
                                  f"{'size unknown' if o.size is None else 'waiting'}: {o.workload_missing}",
                        None, "WaitingForWorkload")
SETTLING = Rule("Settling", Phase.WAITING, lambda o: o.size is None,
                lambda o: f"{o.active} members present, settling for {o.settle_left:.0f}s more",
                Notice("Normal", "GangWaiting", on_change_only=True), "WaitingForMembers")
MEMBERS_MISSING = Rule("MembersMissing", Phase.WAITING,
                       lambda o: o.released == 0 and o.needed is not None and o.active < o.needed
                       and not o.as_created,
                       _members,
                       Notice("Normal", "GangWaiting"), "WaitingForMembers")
#: Every rule above passed: ask the placement engine (not a phase of its own).
READY = Rule("Ready", Phase.PLACED, lambda o: True, lambda o: "complete")
#: The engine placed every gated member; the reason is the engine's.
PLACED = Rule("Placed", Phase.PLACED, None, lambda o: "", Notice("Normal", "GangReleased"))
#: Released as created: every slot placed; the reservation is written on the workload.
RESERVED = Rule("Reserved", Phase.PLACED, None, lambda o: "", Notice("Normal", "GangReserved"))
#: A member does not fit its rank's reserved node (a taint, a node lost, a larger request
#: than its template's), or another pod took a free rank's room once members are released:
#: the whole reservation is rolled back.
RESERVATION_BROKEN = Rule("ReservationBroken", Phase.ROLLED_BACK, None, lambda o: "",
                          Notice("Warning", "GangReservationBroken"))
#: The reservation no longer fits its workload (suspended, finished, resized), or another
#: pod took a reserved node's room before any member was released: dropped.
RESERVATION_DROPPED = Rule("ReservationDropped", Phase.WAITING, None, lambda o: "",
                           Notice("Normal", "GangReservationDropped"))
#: The engine found no placement; the reason is the engine's.
UNPLACED = Rule("Unplaced", Phase.UNSCHEDULABLE, None, lambda o: "",
                Notice("Warning", "GangUnschedulable"), "Unschedulable",
                waits_for_room=True, retry=True)
#: StrictFIFO: a gang ahead in the queue does not fit; this one waits behind it.
QUEUED = Rule("Queued", Phase.WAITING, None, lambda o: "", Notice("Normal", "GangQueued"), "Queued",
              waits_for_room=True)
#: Evicting lower-priority gangs makes room: the nomination is written, the victims evicted.
PREEMPTING = Rule("Preempting", Phase.PREEMPTING, None, lambda o: "",
                  Notice("Normal", "GangPreempting"), "Preempting", waits_for_room=True)
#: The nomination holds the gang's nodes; its victims have not all terminated yet.
AWAITING_VICTIMS = Rule("AwaitingVictims", Phase.PREEMPTING, None, lambda o: "", None, "Preempting",
                        waits_for_room=True)
#: An eviction was refused (a PodDisruptionBudget) and no other plan exists.
EVICTION_REFUSED = Rule("EvictionRefused", Phase.PREEMPTING, None, lambda o: "",
                        Notice("Warning", "GangPreemptionBlocked"), "Preempting",
                        waits_for_room=True)
#: No placement, and the gang's ProvisioningRequest is asked for or awaited: its state is the
#: reason (docs/decisions/080-provisioning-requests.md).
PROVISIONING = Rule("Provisioning", Phase.UNSCHEDULABLE, None, lambda o: "",
                    Notice("Normal", "GangProvisioning"), "Provisioning", waits_for_room=True)

#: The observation rules, in the order they are tried (module docstring).
RULES: tuple[Rule, ...] = (
    NO_MEMBERS, REFUSED, TIMED_OUT, MEMBER_FAILED, RELEASE_IN_PROGRESS, RELEASE_AS_CREATED, ALL_RELEASED, MEMBERS_DISAGREE, DEVICE_GROUP,
    BACKING_OFF, WORKLOAD_UNKNOWN, SETTLING, MEMBERS_MISSING, READY,
)


def classify(o: Observation) -> Rule:
    """The first rule of :data:`RULES` that applies to ``o`` (:data:`READY` at the end)."""
    return next(rule for rule in RULES if rule.applies is not None and rule.applies(o))


W, H, B, U, P, RG, RD, RB, PG = (
    Phase.WAITING, Phase.HELD, Phase.BACKING_OFF, Phase.UNSCHEDULABLE, Phase.PLACED, Phase.RELEASING,
    Phase.RELEASED, Phase.ROLLED_BACK, Phase.PREEMPTING,
)

#: from-phase -> the phases a decision may move the gang to (module docstring). Staying is
#: always legal. Which rule made a move, and why, is the decision's (:class:`Transition`): a
#: move between two phases has as many causes as there are rules leading to its phase.
MOVES: dict[Phase, frozenset[Phase]] = {
    W: frozenset({H, B, U, P, PG}),
    H: frozenset({W, B, U, P, PG, RD, RB}),
    B: frozenset({W, H, U, P, PG, RD, RB}),
    U: frozenset({W, H, B, P, PG, RD, RB}),
    P: frozenset({W, H, B, U, PG, RG, RD, RB}),
    RG: frozenset({W, H, B, U, P, PG, RD, RB}),
    RD: frozenset({W, H, B, U, P, PG, RB}),
    RB: frozenset({W, H, B, U, P, PG, RD}),
    PG: frozenset({W, H, B, U, P, RD, RB}),
}


class IllegalTransition(RuntimeError):
    """A move :data:`MOVES` does not allow: a bug or a world that changed behind the
    controller's back (a gang committed by someone else). The message names the gang,
    both phases and the observation."""

    def __init__(self, gang: str, old: Phase, new: Phase, observation: Observation) -> None:
        super().__init__(
            f"gang {gang}: illegal move {old.value} -> {new.value} ({observation.summary()}): "
            f"only a Placed decision of this reconciler commits a gang"
        )
        self.gang, self.old, self.new, self.observation = gang, old, new, observation


@dataclass(frozen=True)
class Transition:
    """A gang's move from phase ``old`` to phase ``new`` (``old`` None: the first decision
    this reconciler makes of the gang, after a start or a takeover), told by what its
    decision observed: ``cause`` is the name of the rule that applied (``ReleaseAsCreated``,
    ``ReleaseInProgress``, ``MemberFailed``...) and ``reason`` that decision's reason, with its
    numbers. Never a text chosen by the two phases: ``Placed -> Releasing`` follows a
    reservation written as often as a write that failed, and ``Released -> RolledBack`` a
    member that failed as often as a timeout."""

    gang: str
    old: Phase | None
    new: Phase
    cause: str
    reason: str

    def describe(self) -> str:
        """``Placed -> Releasing (ReleaseAsCreated): AsCreated: 4 node(s) reserved; ...``: both
        phases (``(new)`` for a first decision), the rule, then its reason when it has one."""
        moved = f"{self.old.value if self.old is not None else '(new)'} -> {self.new.value} ({self.cause})"
        return f"{moved}: {self.reason}" if self.reason else moved

    def fields(self) -> dict[str, str]:
        """The log line's structured fields: ``gang``, ``from`` (``""`` for a first
        decision), ``to`` and ``rule``."""
        return {"gang": self.gang, "from": self.old.value if self.old is not None else "", "to": self.new.value,
                "rule": self.cause}


def move(gang: str, old: Phase | None, rule: Rule, observation: Observation, reason: str) -> Transition | None:
    """The :class:`Transition` a decision of ``rule`` (with its ``reason``, made from
    ``observation``) makes of gang ``gang`` last decided ``old`` (None: never); None when
    the gang stays in its phase. Raises :class:`IllegalTransition` when :data:`MOVES` does
    not allow the move."""
    if old is rule.phase:
        return None
    if old is not None and rule.phase not in MOVES[old]:
        raise IllegalTransition(gang, old, rule.phase, observation)
    return Transition(gang, old, rule.phase, rule.name, reason)
