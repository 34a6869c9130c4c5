"""Which running members of a ``RestartGang`` gang have failed
(``troupe.io/gang-failure-policy``, docs/decisions/040-failure-policy.md).

A member fails when its pod ends ``Failed`` after Troupe released it, or when the node it
runs on is lost: deleted, ``Ready`` not ``True`` for longer than the gang's grace
(``nodeFailureGraceSeconds``; kube-controller-manager marks a node NotReady once its
``--node-monitor-grace-period`` passes without a heartbeat), or tainted ``NoExecute`` with
a taint the member does not tolerate (the taint manager evicts it:
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions).

Only failures of a release still running count: once a restart deleted that release's
members, a failed pod of it left behind by its Job names no current release, so a gang
restarts once per failure. Pure: plain data in, words out.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from troupe.policies import RESTART_GANG

#: At most this many failures are named in a reason; the rest are counted.
NAMED = 3


def failures(gang: Gang, released: Sequence[PodInfo], snapshot: Snapshot, now: float) -> tuple[list[str], float | None]:
    """The failures of ``gang``'s running members (``released``: its active members without
    a gate) that restart it, one phrase each (``member w-3 failed``, ``node n2 of member w-1
    was deleted``...), and when a node NotReady now within the grace would next count
    (seconds since the epoch; None: none). ``([], None)`` unless the gang's policy is
    ``RestartGang``."""
    if gang.failure_policy != RESTART_GANG:
        return [], None
    current = {rid for p in released if (rid := p.planned_at or p.released_at)}
    found = [f"member {p.name} failed" for p in gang.failed if (p.planned_at or p.released_at) in current]
    recheck: float | None = None
    seen: set[str] = set()
    for pod in released:
        node_name = pod.node_name
        if not node_name or node_name in seen:
            continue
        seen.add(node_name)
        index = snapshot.index.get(node_name)
        if index is None:
            found.append(f"node {node_name} of member {pod.name} was deleted")
            continue
        node = snapshot.nodes[index]
        evicting = next((t for t in node.taints if t.effect == "NoExecute"
                         and not any(tol.tolerates(t) for tol in pod.node_filter.tolerations)), None)
        if evicting is not None:
            found.append(f"node {node_name} of member {pod.name} is tainted {evicting.describe()}:NoExecute")
        elif not node.ready:
            since = epoch(node.not_ready_since)
            if since is None or now - since >= gang.failure_grace_seconds:
                how_long = f" for {now - since:.0f}s" if since is not None else ""
                found.append(f"node {node_name} of member {pod.name} is NotReady{how_long}")
            else:
                at = since + gang.failure_grace_seconds
                recheck = at if recheck is None else min(recheck, at)
    return found, recheck


def describe(found: Sequence[str]) -> str:
    """The failures as a reason names them: the first :data:`NAMED`, then how many more."""
    named = "; ".join(found[:NAMED])
    return named + (f"; and {len(found) - NAMED} more" if len(found) > NAMED else "")
