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
``RolledBack``          released members were not all bound within the gang's timeout:
                        the members a controller owns were deleted (it recreates them,
                        gated again) and the next release backs off
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
    ROLLED_BACK = "RolledBack"


W, H, U, RG, RD, RB = (
    Phase.WAITING, Phase.HELD, Phase.UNSCHEDULABLE, Phase.RELEASING, Phase.RELEASED, Phase.ROLLED_BACK,
)

#: from-phase -> phases it may move to. Staying in a phase is always legal. A gang with
#: released members that time out is rolled back from whatever phase it is in (a
#: replacement member may be waiting or being placed at that moment).
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    W: frozenset({H, U, RG, RB}),
    H: frozenset({W, U, RG, RB}),
    U: frozenset({W, H, RG, RB}),
    # A member may be deleted mid-release (back to Waiting); a write may fail (stay).
    RG: frozenset({W, H, U, RD, RB}),
    # A replacement member of a running gang is released on its own (Releasing again);
    # a gang whose members were all deleted and recreated starts over (Waiting).
    RD: frozenset({W, RG, RB}),
    # The owners recreate the deleted members, gated: the gang starts over.
    RB: frozenset({W, H, U, RG, RD}),
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
    #: None until the first observation: a reconciler that starts (or restarts) finds each
    #: gang in whatever phase the cluster shows, and every first move is legal.
    phase: Phase | None = None
    reason: str = ""
    #: (phase, reason) moves, oldest first, at most :data:`HISTORY` kept.
    history: list[tuple[Phase, str]] = field(default_factory=list)
    #: Consecutive failed attempts (unschedulable, failed writes): drives the backoff.
    attempts: int = 0
    #: Consecutive rollbacks since the gang last ran whole: drives the release backoff.
    timeouts: int = 0
    #: No release before this time (the controller's monotonic clock, seconds).
    not_before: float = 0.0

    def move(self, new: Phase, reason: str) -> bool:
        """Move to ``new`` for ``reason``; returns True when the phase or reason changed.

        Raises :class:`IllegalTransition` when the table forbids the move.
        """
        old = self.phase
        if old is not None and new is not old and new not in TRANSITIONS[old]:
            raise IllegalTransition(self.key, old, new, reason)
        changed = (new, reason) != (old, self.reason)
        if changed:
            log.info("gang %s: %s -> %s: %s", self.key, old.value if old else "(new)", new.value, reason)
            self.history = [*self.history, (new, reason)][-HISTORY:]
        self.phase, self.reason = new, reason
        return changed


HISTORY = 20
