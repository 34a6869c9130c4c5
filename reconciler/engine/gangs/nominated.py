"""Which nodes carry Troupe's nominated-node taint and which should
(docs/decisions/033-nominated-nodes-are-tainted.md).

The reconciler taints each node of a preemptor's nomination (``troupe.io/nominated``,
``NoSchedule``: :data:`troupe.contract.NOMINATED_TAINT_KEY`) before it evicts the victims,
so that kube-scheduler, which cannot see the nomination, binds no other controller's pod
to the room the evictions free. A taint is wanted on a node while either holds:

- a gated, active pod carries a nomination that names the node, made less than
  ``max_seconds`` ago (the configuration's ``nominationMaxSeconds``, the longest any
  nomination lasts: the decision clears one sooner, see
  :func:`reconciler.engine.gangs.nominating.nomination_deadline`);
- an active pod released by Troupe is pinned to the node and not yet bound, released less
  than ``max_seconds`` ago (the nomination ends with the release; the taint stays until
  kube-scheduler has bound the member, which tolerates it).

Every other taint of Troupe's is stale: a reconciler killed between the taint and the
evictions, a nomination cleared or run out, a release rolled back. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.selectors import Taint
from reconciler.engine.model.timestamps import epoch
from troupe.contract import NOMINATED_TAINT_EFFECT, NOMINATED_TAINT_KEY


def is_tainted(node: NodeInfo) -> bool:
    """Whether ``node`` carries Troupe's nominated-node taint (key and effect)."""
    return any(t.key == NOMINATED_TAINT_KEY and t.effect == NOMINATED_TAINT_EFFECT for t in node.taints)


#: The taint as the engine's filters see it.
TAINT = Taint(NOMINATED_TAINT_KEY, "", NOMINATED_TAINT_EFFECT)


def tolerated_by(pods: Iterable[PodInfo]) -> bool:
    """Whether every gated pod of ``pods`` (a preemptor's members) tolerates the taint. A
    gang admitted before the webhook added the toleration does not: its own nominated
    nodes must then stay untainted, or it could not go there."""
    return all(pod.node_filter.untolerated((TAINT,)) is None for pod in pods if pod.gated)


def tainted(nodes: Iterable[NodeInfo]) -> frozenset[str]:
    """The names of the ``nodes`` that carry Troupe's nominated-node taint."""
    return frozenset(node.name for node in nodes if is_tainted(node))


def _recent(stamp: str, now: float, max_seconds: float) -> bool:
    start = epoch(stamp)
    return start is not None and now < start + max_seconds


def wanted(pods: Iterable[PodInfo], now: float, max_seconds: float) -> frozenset[str]:
    """The nodes whose taint must stay at ``now`` (seconds since the epoch): those of the
    nominations in force and of the released members not yet bound, each younger than
    ``max_seconds`` (module docstring)."""
    nodes: set[str] = set()
    for pod in pods:
        if not pod.active:
            continue
        if pod.gated and pod.nomination is not None and _recent(pod.nomination.at, now, max_seconds):
            nodes.update(pod.nomination.nodes.values())
        elif (not pod.gated and pod.assigned_node and not pod.node_name
              and _recent(pod.released_at, now, max_seconds)):
            nodes.add(pod.assigned_node)
    return frozenset(nodes)
