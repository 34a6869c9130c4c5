"""Node filters, as kube-scheduler defines them, for what Troupe models.

In kube-scheduler's order (the first failing filter is the node's reason, as its
framework stops at the first failing plugin):

1. the node is Ready and not ``spec.unschedulable`` (``NodeUnschedulable``; Troupe also
   checks the Ready condition itself, without waiting for the not-ready taint);
2. every taint with effect ``NoSchedule`` or ``NoExecute`` is tolerated
   (``TaintToleration``; ``PreferNoSchedule`` only scores, so it is ignored);
3. ``spec.nodeSelector`` and required node affinity (``NodeAffinity``): terms are ORed,
   the expressions of a term ANDed; ``matchFields`` supports ``metadata.name``;
4. resources (``NodeResourcesFit``): every requested resource, ``pods`` included.

Reasons are short phrases aggregated per node in "why not placed" messages:
``untolerated taint dedicated=infer``, ``insufficient nvidia.com/gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.resources import PODS, resource_order
from reconciler.engine.model.selectors import NodeFilter, Taint

NOT_READY = "node not ready"
UNSCHEDULABLE = "node unschedulable"
SELECTOR_MISMATCH = "node selector mismatch"
AFFINITY_MISMATCH = "node affinity mismatch"
TOO_MANY_PODS = "too many pods"
#: kube-scheduler's own reasons, worded as its plugins word them (``ErrReason`` constants
#: of ``pkg/scheduler/framework/plugins``): NodeName, NodePorts, PodTopologySpread,
#: InterPodAffinity. The volume plugins' are in :mod:`.volumes`.
NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"
PORTS_IN_USE = "node(s) didn't have free ports for the requested pod ports"
SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
#: Reasons after resources, in kube-scheduler's filter order (VolumeRestrictions,
#: NodeVolumeLimits, VolumeBinding, VolumeZone, PodTopologySpread, InterPodAffinity).
_LATER_REASONS = (
    "node has pod using PersistentVolumeClaim", "node(s) exceed max volume count", "persistentvolumeclaim ",
    "node(s) unavailable due to one or more pvc", "node(s) had volume node affinity conflict",
    "node(s) had no available volume zone", SPREAD_MISSING_LABEL, SPREAD_MISMATCH, EXISTING_ANTI_AFFINITY,
    AFFINITY_RULES, ANTI_AFFINITY_RULES,
)

def static_reason(
    flt: NodeFilter, name: str, labels: Mapping[str, str], taints: Sequence[Taint], ready: bool, unschedulable: bool
) -> str | None:
    """Why a node fails the non-resource filters for ``flt``, or None when it passes."""
    if not ready:
        return NOT_READY
    if unschedulable:
        return UNSCHEDULABLE
    taint = flt.untolerated(taints)
    if taint is not None:
        return f"untolerated taint {taint.describe()}"
    if not flt.selector_matches(labels):
        return SELECTOR_MISMATCH
    if not flt.affinity_matches(labels, name):
        return AFFINITY_MISMATCH
    return None


def insufficient(free: Mapping[str, int], requests: Mapping[str, int]) -> list[str]:
    """Reasons for every requested resource the node has too little of (empty: fits)."""
    out = []
    for name in sorted(requests, key=resource_order):
        if requests[name] > 0 and requests[name] > free.get(name, 0):
            out.append(TOO_MANY_PODS if name == PODS else f"insufficient {name}")
    return out


def reason_order(reason: str) -> tuple[int, tuple[int, str] | str]:
    """Sort key listing reasons in filter order, resources as :func:`resource_order`."""
    if reason == NOT_READY:
        return (0, "")
    if reason == UNSCHEDULABLE:
        return (1, "")
    if reason.startswith("untolerated taint"):
        return (2, reason)
    if reason == SELECTOR_MISMATCH:
        return (3, "")
    if reason == AFFINITY_MISMATCH:
        return (4, "")
    if reason == NODE_NAME_MISMATCH:
        return (1, "name")
    if reason == PORTS_IN_USE:
        return (4, "ports")
    if reason == TOO_MANY_PODS:
        return (5, resource_order(PODS))
    for k, prefix in enumerate(_LATER_REASONS):
        if reason.startswith(prefix):
            return (6 + k, reason)
    return (5, resource_order(reason.removeprefix("insufficient ")))


def node_reasons(snapshot: Snapshot, i: int, flt: NodeFilter, requests: Mapping[str, int]) -> list[str]:
    """Why node ``i`` of ``snapshot`` takes no pod with this filter and these requests
    (empty: it takes one): the failing filter, or every resource it has too little of."""
    node = snapshot.nodes[i]
    why = static_reason(flt, node.name, node.labels, node.taints, node.ready, node.unschedulable)
    if why is not None:
        return [why]
    return insufficient(snapshot.free(i), requests)
