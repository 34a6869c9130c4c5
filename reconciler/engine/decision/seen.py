"""A decision and what it is made of: :class:`Decision`, the value
:func:`~reconciler.engine.decision.decide.decide` returns, and :class:`Seen`, everything one
decision sees of its gang, which the rules' builders (:mod:`.decide`, :mod:`.ascreated`)
read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from reconciler.engine.decision.actions import Action, MemberRelease, Preempt, Release, Status
from reconciler.engine.gangs.clocks import ReleaseGroup
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Observation, Phase, Rule
from reconciler.engine.gangs.queueing import Policy, QueueView
from reconciler.engine.gangs.refusals import Refusal
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import PlacementResult

A = TypeVar("A")


@dataclass(frozen=True)
class Decision:
    """What to do with one gang, and why.

    ``rule``: the lifecycle rule that applied (its phase, condition and Event are data of
    the table, :mod:`reconciler.engine.gangs.lifecycle`); ``status`` why, structured (:class:`~.actions.Status`);
    ``observation`` what it saw; ``actions`` what to do (:mod:`.actions`), in order;
    ``recheck_at`` (seconds since the epoch) when the decision changes with nothing else
    happening (a deadline, the end of a settle period or of a backoff), None: only when
    something changes; ``placement`` the placement engine's result when it was asked (for
    a preemptor, the placement its victims make room for).
    """

    gang: str
    rule: Rule
    status: Status
    observation: Observation
    actions: tuple[Action, ...] = ()
    recheck_at: float | None = None
    placement: PlacementResult | None = None

    @property
    def phase(self) -> Phase:
        """The phase the rule leads to."""
        return self.rule.phase

    @property
    def reason(self) -> str:
        """The status rendered: what users read in the condition, Events and the simulator."""
        return self.status.message()

    @property
    def code(self) -> str:
        """The placement engine's code (``""`` when it was not asked)."""
        return self.status.code.value if self.status.code is not None else ""

    def find(self, kind: type[A]) -> A | None:
        """The first action of exactly type ``kind``, or None."""
        return next((a for a in self.actions if type(a) is kind), None)

    @property
    def release(self) -> tuple[MemberRelease, ...]:
        """The members a :class:`~.actions.Release` action releases (``()`` without one)."""
        found = self.find(Release)
        return found.members if found is not None else ()

    @property
    def victims(self) -> tuple[str, ...]:
        """The pods a :class:`~.actions.Preempt` action evicts (``()`` without one)."""
        found = self.find(Preempt)
        return found.evict if found is not None else ()


@dataclass
class Seen:
    """Everything one decision sees of its gang: the inputs of :func:`~.decide.decide`, the members
    sorted by state, its releases and their clocks, and the :class:`Observation` the
    rules read. ``recheck``: the earliest deadline still ahead (None: none)."""

    gang: Gang
    snapshot: Snapshot
    now: float
    policy: Policy
    queue: QueueView
    released: list[PodInfo]
    gated: list[PodInfo]
    reserved: list[PodInfo]
    free: list[PodInfo]
    releases: dict[str, ReleaseGroup]
    expired: list[str]
    obs: Observation
    recheck: float | None
    refused: tuple[Refusal, ...] = ()

    def made(self, rule: Rule, actions: Sequence[Action] = (), status: Status | None = None,
             recheck_at: float | None = None, placement: PlacementResult | None = None) -> Decision:
        """The decision of ``rule``: its own reason unless ``status`` is given; rechecked at
        the earliest of ``recheck_at`` and the release clocks."""
        return Decision(self.gang.key, rule, status if status is not None else Status.of(rule.reason(self.obs)),
                        self.obs, tuple(actions), earliest(self.recheck, recheck_at), placement)

    @property
    def gated_keys(self) -> tuple[PodKey, ...]:
        """The gated members' keys, in rank order."""
        return tuple(p.key for p in self.gated)


def earliest(a: float | None, b: float | None) -> float | None:
    """The earlier of two deadlines (seconds since the epoch; None: no deadline)."""
    if a is None:
        return b
    return a if b is None else min(a, b)
