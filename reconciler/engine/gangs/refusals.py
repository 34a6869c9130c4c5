"""kube-scheduler's refusals of pinned members, read from the pods, and the nodes a gang
avoids after one (docs/decisions/032-scheduler-refusals.md).

Troupe pins a released member to its planned node (``kubernetes.io/hostname`` in its node
selection); kube-scheduler then runs every filter of its profile there. When one the engine
does not model fails (:mod:`reconciler.engine.filters.unmodeled`), the member stays unbound and kube-scheduler says
why on the pod: condition ``PodScheduled`` with status ``False``, reason ``Unschedulable``
and its message (``0/16 nodes are available: 1 node(s) didn't match pod anti-affinity
rules, 15 node(s) didn't match Pod's node affinity/selector...``; Kubernetes docs "Pod
Lifecycle", pod conditions; kube-scheduler's ``handleSchedulingFailure``). Such a member
never binds where it is pinned. Instead of waiting for the gang's timeout and repeating the
same plan, the decision rolls its release back at once and records the node, with
kube-scheduler's words, for the gang to avoid: the next plan excludes it (its members'
node filters gain ``metadata.name NotIn``), and says so.

Pure: the observation is data of the snapshot (:attr:`PodInfo.scheduled`); the nodes
avoided are what the caller knows (:attr:`~reconciler.engine.gangs.gang.Gang.avoid`, kept by the reconciler in its
state ConfigMap), as the rollback backoff is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import POD_SCHEDULED, PodInfo
from reconciler.engine.model.selectors import NAME_FIELD, NodeFilter, Requirement, Term
from reconciler.engine.model.timestamps import epoch

__all__ = ["AVOID_SECONDS", "MAX_AVOIDED_NODES", "POD_SCHEDULED", "REFUSAL_GRACE_SECONDS", "Refusal", "avoid_note", "avoiding",
           "is_refused", "refusals"]

#: kube-scheduler's reason on ``PodScheduled`` when no node fits.
UNSCHEDULABLE = "Unschedulable"
#: The most nodes one gang avoids at once: past it, a refusal on yet another node is left
#: to the gang's timeout (and its backoff), so a gang refused everywhere does not churn.
MAX_AVOIDED_NODES = 4
#: How long a node stays avoided after its refusal, seconds (unless the gang runs whole
#: first, which ends every avoidance).
AVOID_SECONDS = 600.0
#: How long a member must have been released before its refusal counts, seconds: a
#: refusal kube-scheduler makes on a view a moment behind the API server's (a pod just
#: deleted still counted on the node) is retried by kube-scheduler on the event that frees
#: the room, within a second or two, and should cost no rollback.
REFUSAL_GRACE_SECONDS = 5.0
#: The longest message of kube-scheduler's kept per node avoided (it lists every node's
#: reason; the first part names the filter that failed).
MAX_REASON = 240


@dataclass(frozen=True)
class Refusal:
    """kube-scheduler refused member ``pod`` (``namespace/name``) on ``node``, where
    Troupe pinned it, saying ``message``."""

    pod: PodKey
    node: str
    message: str

    def describe(self) -> str:
        """``kube-scheduler refused member w-1 on node n3: <its message>``."""
        name = self.pod.split("/", 1)[-1]
        return f"kube-scheduler refused member {name} on node {self.node}: {self.message or '(no message)'}"


def is_refused(pod: PodInfo) -> bool:
    """``pod`` carries kube-scheduler's refusal: ``PodScheduled`` ``False``, reason
    ``Unschedulable`` (a gated pod's reason is ``SchedulingGated``: never a refusal)."""
    return pod.scheduled is not None and pod.scheduled[0] == "False" and pod.scheduled[1] == UNSCHEDULABLE


def refusals(released: Iterable[PodInfo], pinned: Callable[[PodInfo], str], avoid: Mapping[str, str],
             now: float) -> tuple[list[Refusal], float | None]:
    """The refusals among ``released`` members (active, not gated) at ``now`` (seconds since
    the epoch): each unbound member that Troupe released (it carries ``released-at``) at
    least :data:`REFUSAL_GRACE_SECONDS` ago, pinned to ``pinned(pod)`` (a node name, ``""``
    for none), and refused there. A refusal on a node not avoided yet counts only while the
    gang avoids fewer than :data:`MAX_AVOIDED_NODES` nodes (the others are left to the
    timeout). Rank order, as ``released`` is; with the time a refusal seen too early
    counts (None: none)."""
    out: list[Refusal] = []
    later: list[float] = []
    room = MAX_AVOIDED_NODES - len(avoid)
    for pod in released:
        node = pinned(pod)
        if pod.gated or pod.node_name or not node or not is_refused(pod):
            continue
        at = epoch(pod.released_at)
        if at is None:
            continue  # not released by Troupe
        if at + REFUSAL_GRACE_SECONDS > now:
            later.append(at + REFUSAL_GRACE_SECONDS)
            continue
        if node not in avoid and node not in {r.node for r in out}:
            if room <= 0:
                continue
            room -= 1
        assert pod.scheduled is not None
        out.append(Refusal(pod.key, node, pod.scheduled[2][:MAX_REASON]))
    return out, min(later, default=None)


def avoiding(flt: NodeFilter, nodes: Iterable[str]) -> NodeFilter:
    """``flt`` narrowed off ``nodes``: a ``matchFields`` ``metadata.name NotIn [nodes]``
    requirement ANDed into every term of its required node affinity (one term when it had
    none), kube-scheduler's ``NodeAffinity`` semantics. ``flt`` itself when ``nodes`` is
    empty."""
    names = tuple(sorted(set(nodes)))
    if not names:
        return flt
    off = Requirement(NAME_FIELD, "NotIn", names)
    terms = (Term(fields=(off,)),) if flt.terms is None else tuple(
        Term(t.expressions, (*t.fields, off)) for t in flt.terms)
    return replace(flt, terms=terms)


def avoid_note(avoid: Mapping[str, str]) -> str:
    """The reason part a plan that avoids nodes carries: ``avoiding node n3 (kube-scheduler
    refused member w-1 on node n3: ...)``; ``""`` without any."""
    if not avoid:
        return ""
    return "; ".join(f"avoiding node {node} ({why})" for node, why in sorted(avoid.items()))
