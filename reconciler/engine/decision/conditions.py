"""The ``troupe.io/Gang`` pod condition: a gang's decision, where users look for it.

``kubectl describe pod`` and ``kubectl get pod -o yaml`` show a pod's conditions; so every
gated member of a waiting gang carries the reason its gang waits, with numbers, and a
released member says so (DESIGN.md; the "why is my gang waiting" issue). Pure: a
:class:`~reconciler.engine.decision.seen.Decision` in, the conditions each member should have
out; the reconciler writes those that differ from what the pods carry (through
``pods/status``), and sends an Event only when a member's condition changes, so a new
leader, which reads the conditions back, sends no duplicate.

Which reason each rule's waiting members carry is a column of the lifecycle table
(:attr:`reconciler.engine.gangs.lifecycle.Rule.condition`: ``WaitingForMembers``,
``WaitingForWorkload``, ``Queued``, ``Held``, ``BackingOff``, ``Unschedulable``,
``Preempting``); the members a :class:`~reconciler.engine.decision.actions.Release` releases carry
``True``/``Released`` with their node and rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.engine.decision.actions import MemberRelease, Release, Wait
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.model.keys import PodKey

RELEASED = "Released"


@dataclass(frozen=True)
class GangCondition:
    """One member's ``troupe.io/Gang`` condition: ``status`` (``"True"`` once released),
    ``reason`` and ``message``. ``notable``: a ``Released`` condition that says more than
    where the member went (what the plan did not model, the nodes it avoids): written even
    on a member that was never shown waiting."""

    status: str
    reason: str
    message: str
    notable: bool = False

    def as_tuple(self) -> tuple[str, str, str]:
        """``(status, reason, message)``, as :attr:`~reconciler.engine.model.pods.PodInfo.condition` holds it."""
        return (self.status, self.reason, self.message)


#: Longest condition message written (the API takes 32 KiB; a describe stays readable).
MAX_MESSAGE = 1024


def conditions(gang: Gang, decision: Decision) -> dict[PodKey, GangCondition]:
    """Pod key -> the condition it should carry after ``decision``: the members its
    :class:`~reconciler.engine.decision.actions.Wait` (or ``Hold``) names get the rule's condition
    reason and the decision's reason as message; the members
    released now get ``Released`` with their node and rank. Members the decision does not
    speak of are left out (a released member keeps its ``Released``)."""
    release = decision.find(Release)
    if release is not None:
        return {m.pod: released(m, max(gang.size or 0, len(gang.members)), release.note) for m in release.members}
    reason = decision.rule.condition
    if reason is None:
        return {}
    message = decision.reason[:MAX_MESSAGE]
    waiting = {k for action in decision.actions if isinstance(action, Wait) for k in action.members}
    return {p.key: GangCondition("False", reason, message) for p in gang.members if p.key in waiting}


def released(m: MemberRelease, size: int, note: str = "") -> GangCondition:
    """The condition of member ``m`` once released, in a gang of ``size`` members; ``note``
    (:attr:`~reconciler.engine.decision.actions.Release.note`) follows its node and rank."""
    devices = f" with devices {_ids(m.devices)}" if m.devices else ""
    message = f"released onto node {m.node} as rank {m.rank} of {size}{devices}" + (f"; {note}" if note else "")
    return GangCondition("True", RELEASED, message[:MAX_MESSAGE], notable=bool(note))


def _ids(devices: Mapping[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{r} {','.join(map(str, ids))}" for r, ids in sorted(devices.items()))
