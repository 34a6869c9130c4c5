"""The topology map's data on the reconciler (``/topology/data.json`` on ``--metrics-bind``):
the tree of the reconciler's own cache and its own last decisions, made on request in the
HTTP server's thread, at most once every few seconds (:class:`~reconciler.tools.web.server.CachedData`).

The controller is not stopped: the page reads a copy of the cache's current snapshot (the
one the next decision would plan on, built only if the cache changed since the last), the
controller's last phase and reason of each gang and the capacity its queue holds for
waiting gangs (:meth:`~reconciler.engine.gangs.queueing.QueueState.holds`, a copy taken
under the queue's lock; each hold names its nodes from the node table it was decided on);
nothing is decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.engine.gangs.avoidance import Avoidance
from reconciler.engine.gangs.queueing import Hold
from reconciler.engine.ledger.occupancy import DomainUsage, occupancy
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from reconciler.run.reconciler import Reconciler
from reconciler.tools.web import data

#: The resource whose units the reconciler's map counts.
RESOURCE = "nvidia.com/gpu"
#: Seconds between two reads of the reconciler's page.
REFRESH_SECONDS = 5.0
#: What the page says of a gang the reconciler has not decided yet (just seen, or just started).
UNDECIDED = "not decided yet"


def _gang_of(reconciler: Reconciler) -> dict[PodKey, str]:
    """Pod key -> gang key, as the reconciler's cache groups its pods."""
    cache = reconciler.cache
    return {pod.key: key for key in cache.gang_keys() for pod in cache.members(key)}


def _members(pods: Mapping[PodKey, PodInfo], gang_of: Mapping[PodKey, str]) -> tuple[dict[str, list[int]], dict[str, float]]:
    """Per gang: its active members' counts ``[present, gated, released, bound, running]``,
    and the creation time (seconds since the epoch) of its oldest gated member."""
    counts: dict[str, list[int]] = {}
    oldest: dict[str, float] = {}
    for pod_key, key in gang_of.items():
        pod = pods.get(pod_key)
        if pod is None or not pod.active:
            continue
        c = counts.setdefault(key, [0, 0, 0, 0, 0])
        c[0] += 1
        if pod.gated:
            c[1] += 1
            t = epoch(pod.creation_timestamp)
            if t is not None:
                oldest[key] = min(oldest.get(key, t), t)
            continue
        c[2] += 1
        c[3] += bool(pod.node_name)
        c[4] += pod.phase == "Running"
    return counts, oldest


def _rows(reconciler: Reconciler, members: tuple[dict[str, list[int]], dict[str, float]],
          now: float, holds: Mapping[str, Hold]) -> list[dict[str, Any]]:
    """One row per gang: the controller's last phase and reason, its members as
    ``kubectl troupe status -o json`` counts them, how long its oldest gated member has
    waited, (for a gang that waits) its size, and (for a gang capacity is held for, in
    ``holds``) :func:`~reconciler.tools.web.data.held_row`'s fields."""
    decided = reconciler.controllers.gangs.status()
    counts, oldest = members
    rows = []
    for key in sorted(counts.keys() | decided.keys()):
        phase, reason = decided.get(key, (None, UNDECIDED))
        c = counts.get(key, [0, 0, 0, 0, 0])
        row: dict[str, Any] = {
            "gang": key, "phase": phase.value if phase is not None else "", "reason": reason,
            "members": {"present": c[0], "gated": c[1], "released": c[2], "bound": c[3], "running": c[4]},
            "waitingSeconds": round(max(0.0, now - oldest[key]), 3) if key in oldest else None,
        }
        if row["phase"] not in data.NOT_WAITING:
            gang = reconciler.cache.gang(key)
            row["size"] = gang.size if gang is not None else None
        if key in holds:
            row.update(data.held_row(holds[key]))
        rows.append(row)
    return rows


def page(reconciler: Reconciler, resource: str = RESOURCE, refresh_seconds: float = REFRESH_SECONDS) -> dict[str, Any]:
    """The page data (:func:`reconciler.tools.web.data.page`) of the running reconciler.
    What depends only on the cache's snapshot (the tree, the marks, the members' counts) is
    kept with that snapshot (:meth:`~reconciler.engine.ledger.snapshot.Snapshot.memo`) until the
    cache changes; the decisions and the holds (the ``held`` marks) are read anew each time."""
    base = reconciler.cache.snapshot()
    config = reconciler.config
    now = reconciler.wall_clock()
    avoided = Avoidance.from_config(config).avoided(base, now)

    def tree() -> tuple[DomainUsage, dict[str, dict[str, list[str]]], dict[str, dict[str, Any]],
                        tuple[dict[str, list[int]], dict[str, float]]]:
        snapshot = base.with_removed(())  # a copy: a plan may change the cache's in place and undo it
        gang_of = _gang_of(reconciler)
        return (occupancy(snapshot, gang_of, resource, avoided), data.node_marks(snapshot, gang_of),
                data.node_room(snapshot, gang_of), _members(snapshot.pods, gang_of))

    domains, marks, room, members = base.memo(f"topology-map {resource} {sorted(avoided.items())}", tree)
    holds = reconciler.controllers.gangs.queue.holds()
    marked = data.with_marks(marks, data.held_marks(holds.values()))
    return data.page(domains, _rows(reconciler, members, now, holds), marked, room, resource=resource,
                     levels=config.topology_levels, source="reconciler", at=now, refresh_seconds=refresh_seconds)
