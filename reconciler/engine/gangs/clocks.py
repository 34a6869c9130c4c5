"""A release's clock: when it runs out of time, and why (docs/decisions/007-release-writes.md).

Each group of committed members that one decision released (they share
``reconciler.troupe.io/planned-at``) is a *release* (:class:`ReleaseGroup`); :func:`release_clock`
says when it is rolled back (:mod:`reconciler.engine.decision.decide`'s module docstring gives the rules) and
:func:`jitter` spreads the timeouts of gangs. Pure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch


def jitter(gang: Gang, release: str) -> float:
    """The jitter of ``release`` of ``gang``: ``[0, gang.jitter_seconds]`` seconds, from a
    hash of both (the same after a restart and in the simulator)."""
    digest = hashlib.blake2b(f"{gang.key}@{release}".encode(), digest_size=8).digest()
    return gang.jitter_seconds * int.from_bytes(digest, "big") / 2**64


@dataclass
class ReleaseGroup:
    """Committed members sharing one ``planned_at``; ``reserved`` are still gated."""

    id: str
    members: list[PodInfo] = field(default_factory=list)
    reserved: list[PodInfo] = field(default_factory=list)


@dataclass(frozen=True)
class Clock:
    """When a release runs out of time (seconds since the epoch) and why."""

    deadline: float
    why: str


def release_clock(gang: Gang, r: ReleaseGroup, snapshot: Snapshot, now: float) -> Clock | None:
    """When release ``r`` runs out of time and why; None when it is done (every member
    bound) or has no readable clock."""
    seconds, jit = gang.timeout_seconds, jitter(gang, r.id)
    for pod in r.members:
        node = pod.node_name or snapshot.committed_node(pod)
        if not pod.node_name and node and node not in snapshot.index:
            return Clock(now, f"the planned node {node} of member {pod.name} no longer exists")
        if not pod.node_name and node and snapshot.nodes[snapshot.index[node]].unschedulable:
            return Clock(now, f"the planned node {node} of member {pod.name} was cordoned before it was bound")
    if r.reserved:
        start = epoch(r.id)
        if start is None:
            return None
        return Clock(start + seconds + jit,
                      f"release of {len(r.members)} member(s) not complete within {seconds}s "
                      f"(+{jit:.0f}s jitter): {len(r.reserved)} still gated")
    unbound = [p for p in r.members if not p.node_name]
    if not unbound:
        return None
    stamps = [t for p in r.members if (t := epoch(p.released_at)) is not None]
    if not stamps:
        return None
    return Clock(max(stamps) + seconds + jit,
                  f"{len(unbound)} released member(s) not bound within {seconds}s (+{jit:.0f}s jitter)")
