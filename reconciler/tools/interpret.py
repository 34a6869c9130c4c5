"""The simulator's interpreter of the engine's actions: each action applied to the snapshot
the next gang is decided on, and what the output shows of it (docs/decisions/025-actions.md).

:data:`APPLY` maps each action type to its handler (a missing one fails loudly), the
simulator's counterpart of the reconciler's handlers: a new release uses its nodes, a
preemptor's victims go and it takes their room, a rollback frees what it deletes, a
reservation holds its ranks' nodes and a dropped one frees them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.decision import actions
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.devicegroups import Holding


def topology_of(snapshot: Snapshot, node: str) -> str:
    """A node's path in the topology (``b0/s1/h3``; ``-`` for a level it lacks, and
    for a node not in the snapshot)."""
    i = snapshot.index.get(node)
    if i is None:
        return "-"
    return "/".join("-" if v.startswith("<") else v for v in snapshot.paths[i])



@dataclass
class Applied:
    """The simulator's interpreter state for one decision: the ``snapshot`` as its actions
    leave it, and what the output shows: ``placements`` (members placed, or a preemptor's
    intended placement), ``victims``, ``bindings`` of device groups, whether it ``placed``
    a release of new members and whether it is ``preempting``."""

    gang: Gang
    decision: Decision
    snapshot: Snapshot
    placements: list[dict[str, Any]] = field(default_factory=list)
    victims: list[dict[str, Any]] = field(default_factory=list)
    bindings: tuple[Holding, ...] = ()
    placed: bool = False
    preempting: bool = False
    reservation: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None


def _apply_release(state: Applied, action: actions.Release) -> None:
    snapshot = state.snapshot
    state.placements = [{"pod": m.pod.split("/", 1)[1], "node": m.node, "rank": m.rank,
                         "topology": topology_of(snapshot, m.node),
                         **({"devices": {r: list(ids) for r, ids in m.devices.items()}} if m.devices else {})}
                        for m in action.members]
    result = state.decision.placement
    if not action.finishing and result is not None:  # a new release: its members now use their nodes
        state.snapshot = snapshot.with_assumed(result, action.bindings)
        state.placed, state.bindings = True, action.bindings


def _apply_preempt(state: Applied, action: actions.Preempt) -> None:
    snapshot, result = state.snapshot, state.decision.placement
    state.preempting = True
    if result is not None:
        ranks = {p.key: i for i, p in enumerate(state.gang.members)}
        state.placements = [{"pod": a.pod_key.split("/", 1)[1], "node": a.node, "rank": ranks.get(a.pod_key, a.rank),
                             "topology": topology_of(snapshot, a.node)} for a in result.assignments]
    where = action.plan.nodes if action.plan is not None else {}
    state.victims = [{"namespace": v.split("/", 1)[0], "pod": v.split("/", 1)[1],
                      "node": where.get(v) or snapshot.using(v)} for v in action.evict]
    if action.plan is not None and result is not None:  # a new plan: its victims go, the gang takes their room
        state.snapshot = snapshot.with_removed(action.evict).with_assumed(result)


def _apply_rollback(state: Applied, action: actions.RollBack) -> None:
    state.snapshot = state.snapshot.with_removed(action.delete)


def _apply_reserve(state: Applied, action: actions.Reserve) -> None:
    """A reservation made: every rank's node is held from now on (the slots placed)."""
    snapshot, result = state.snapshot, state.decision.placement
    state.placements = [{"pod": slot.name, "node": node, "rank": rank, "topology": topology_of(snapshot, node)}
                        for rank, (slot, node) in enumerate(zip(state.gang.slots, action.record.nodes, strict=False))]
    state.reservation = reservation_json(state.gang, action.record.planned_at, action.record.nodes)
    if result is not None:
        state.snapshot = snapshot.with_assumed(result)
        state.placed = True


def _apply_drop(state: Applied, action: actions.DropReservation) -> None:
    """A reservation dropped: the ranks it still held are free (none once complete)."""
    held = state.snapshot.reservations.get(state.gang.key)
    if held is not None and not action.complete:
        state.snapshot = state.snapshot.with_removed(held.holding(rank) for rank in range(len(held.record.nodes)))


def reservation_json(gang: Gang, planned_at: str, nodes: Sequence[str]) -> dict[str, Any]:
    """The JSON of a gang's reservation: when, each rank's node, and how many of its
    members exist, are released (not gated) and are bound."""
    return {"plannedAt": planned_at, "nodes": list(nodes), "members": len(gang.members),
            "released": sum(1 for p in gang.members if not p.gated), "bound": sum(1 for p in gang.members if p.node_name)}


def _apply_request(state: Applied, action: actions.RequestCapacity) -> None:
    """A ProvisioningRequest asked: the simulator adds no nodes; it shows what was asked
    (docs/decisions/080-provisioning-requests.md)."""
    state.capacity = capacity_json(action)


def capacity_json(action: actions.RequestCapacity) -> dict[str, Any]:
    """The JSON of a ProvisioningRequest asked: its name, class, pods and each shape
    (template, count, the requests of one member in units, its model member)."""
    return {"request": action.name, "class": action.class_name, "pods": action.pods, "attempt": action.attempt,
            "shapes": [{"template": s.template, "count": s.count, "requests": dict(s.model.requests),
                        "model": s.model.name} for s in action.pod_sets]}


def _apply_nothing(state: Applied, action: Any) -> None:
    """Telling members and clearing records change no capacity."""


#: The simulator's interpreter: one handler per action type (a missing one fails loudly).
APPLY: Mapping[type, Callable[[Applied, Any], None]] = {
    actions.Release: _apply_release, actions.Preempt: _apply_preempt, actions.RollBack: _apply_rollback,
    actions.Wait: _apply_nothing, actions.Hold: _apply_nothing, actions.ClearNominations: _apply_nothing,
    actions.ClearPlans: _apply_nothing, actions.ForgetBackoff: _apply_nothing, actions.Reserve: _apply_reserve,
    actions.DropReservation: _apply_drop, actions.RecordNodeFailures: _apply_nothing,
    actions.RequestCapacity: _apply_request, actions.DropCapacityRequest: _apply_nothing,
}


