"""Brute force for gang-aware preemption, independent of the planner.

Every subset of the candidates' pods (``minimal``) or of the candidate gangs (``atomic``)
is evicted in turn; the placement engine says whether the preemptor then fits; the
objective of decision 009 is computed here from the subset and that placement:
(highest victim priority, gangs disrupted, pods evicted, overage vector). Only for small
instances: ``2 ** pods`` placements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, combinations

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.resources import resource_order
from reconciler.engine.placement.place import PlacementResult, place_gang
from reconciler.engine.preemption import VictimGang
from troupe.contract import TopologyRequest

Objective = tuple[int, int, int, tuple[int, ...]]


@dataclass
class Instance:
    """A preemption problem: the cluster, the preemptor's members, the candidate gangs and
    the members' required level."""

    snapshot: Snapshot
    members: list[PodInfo]
    candidates: list[VictimGang]
    required: str | None


def overage_resources(members: Sequence[PodInfo]) -> list[str]:
    """What the members request but ``pods``: extended resources first, then cpu, memory."""
    names = {r for m in members for r, v in m.requests.items() if v > 0 and r != "pods"}
    return sorted(names, key=lambda r: (0 if resource_order(r)[0] == 4 else 1, resource_order(r)))


def overage(snapshot: Snapshot, members: Sequence[PodInfo], victims: Sequence[PodInfo],
            placement: PlacementResult) -> tuple[int, ...]:
    """Freed capacity that the placement does not use, per resource the members request."""
    out = []
    for r in overage_resources(members):
        total = 0
        nodes = {snapshot.using(v.key) for v in victims}
        for node in nodes:
            freed = sum(v.requests.get(r, 0) for v in victims if snapshot.using(v.key) == node)
            demand = sum(a.requests.get(r, 0) for a in placement.assignments if a.node == node)
            free = snapshot.free(node).get(r, 0)
            total += freed - min(max(demand - free, 0), freed)
        out.append(total)
    return tuple(out)


def objective(snapshot: Snapshot, members: Sequence[PodInfo], gangs: Sequence[VictimGang],
              victims: Sequence[PodInfo], placement: PlacementResult) -> Objective:
    keys = {v.key for v in victims}
    hit = [g for g in gangs if any(p.key in keys for p in g.pods)]
    return (max((g.priority for g in hit), default=0), len(hit), len(victims),
            overage(snapshot, members, victims, placement))


def brute_force(snapshot: Snapshot, members: Sequence[PodInfo], gangs: Sequence[VictimGang], mode: str,
                required_level: str | None = None) -> Objective | None:
    """The least objective over every victim set that lets the members be placed; None
    when none does. ``gangs`` must already be the eligible candidates (lower priority)."""
    if mode == "atomic":
        sets = (list(chain.from_iterable(g.pods for g in combo))
                for k in range(len(gangs) + 1) for combo in combinations(gangs, k))
    else:
        pods = [p for g in gangs for p in g.pods]
        sets = (list(combo) for k in range(len(pods) + 1) for combo in combinations(pods, k))
    best: Objective | None = None
    for victims in sets:
        with snapshot.without(v.key for v in victims) as s:
            placement = place_gang(s, members, TopologyRequest(required_level=required_level))
        if not placement.placed:
            continue
        value = objective(snapshot, members, gangs, victims, placement)
        if best is None or value < best:
            best = value
    return best
