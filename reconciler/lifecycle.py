"""The gang lifecycle: every phase and every legal move between them, in one table.

The controller is level-triggered: on each reconcile it observes the members and decides
the gang's phase again; this module is the single place that says which moves are legal
and records why each one happened. An illegal move raises :class:`IllegalTransition`
naming the gang, the phases and the reason (h11's habit: a state machine whose rules are
data, and whose errors explain themselves).

Phases (DESIGN.md "Gangs"):

======================  =================================================================
``Waiting``             fewer than ``size`` active members exist; none is released
``Held``                the members disagree (size, timeout, topology request); never released
``Unschedulable``       complete, but no placement exists for all members together
``Releasing``           a plan exists; members are being pinned and ungated
``Released``            every active member is ungated; kube-scheduler binds them
======================  =================================================================
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """A gang's phase; see the module docstring."""

    WAITING = "Waiting"
    HELD = "Held"
    UNSCHEDULABLE = "Unschedulable"
    RELEASING = "Releasing"
    RELEASED = "Released"


W, H, U, RG, RD = Phase.WAITING, Phase.HELD, Phase.UNSCHEDULABLE, Phase.RELEASING, Phase.RELEASED

#: from-phase -> phases it may move to. Staying in a phase is always legal.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    W: frozenset({H, U, RG}),
    H: frozenset({W, U, RG}),
    U: frozenset({W, H, RG}),
    # A member may be deleted mid-release (back to Waiting); a write may fail (stay).
    RG: frozenset({W, H, U, RD}),
    # A replacement member of a running gang is released on its own (Releasing again);
    # a gang whose members were all deleted and recreated starts over (Waiting).
    RD: frozenset({W, RG}),
}


class IllegalTransition(RuntimeError):
    """A move the table does not allow."""

    def __init__(self, gang: str, old: Phase, new: Phase, reason: str) -> None:
        super().__init__(f"gang {gang}: illegal move {old.value} -> {new.value} ({reason})")
        self.gang, self.old, self.new, self.reason = gang, old, new, reason


@dataclass
class GangState:
    """What the controller remembers of one gang between reconciles."""

    key: str
    phase: Phase = Phase.WAITING
    reason: str = ""
    #: (phase, reason) moves, oldest first, at most :data:`HISTORY` kept.
    history: list[tuple[Phase, str]] = field(default_factory=list)
    #: Consecutive failed attempts (unschedulable, failed writes): drives the backoff.
    attempts: int = 0

    def move(self, new: Phase, reason: str) -> bool:
        """Move to ``new`` for ``reason``; returns True when the phase or reason changed.

        Raises :class:`IllegalTransition` when the table forbids the move.
        """
        if new is not self.phase and new not in TRANSITIONS[self.phase]:
            raise IllegalTransition(self.key, self.phase, new, reason)
        changed = (new, reason) != (self.phase, self.reason)
        if changed:
            log.info("gang %s: %s -> %s: %s", self.key, self.phase.value, new.value, reason)
            self.history = [*self.history, (new, reason)][-HISTORY:]
        self.phase, self.reason = new, reason
        return changed


HISTORY = 20
