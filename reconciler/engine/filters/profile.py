"""The profile: kube-scheduler's filter plugins that Troupe models, in the order of its default
profile (Kubernetes 1.37: ``pkg/scheduler/apis/config/v1/default_plugins.go``,
``getDefaultPlugins``, which puts ``NodeName`` before ``NodeUnschedulable`` since 1.37, with
``DynamicResources`` inserted before ``DefaultPreemption`` as DRA is on by default since
Kubernetes 1.34), and the one place a plugin module is registered (:data:`PROFILE`).

Reasons are listed in this order: by the plugin that gave them, then in the plugin's own
order (:meth:`~reconciler.engine.filters.status.Registered.rank`: a taint by its text, a
resource as :func:`~reconciler.engine.model.resources.resource_order`, a plugin's fixed
reasons as it lists them). So ``fits 3 of 8 members; 12 nodes excluded: untolerated taint
dedicated=infer: 4, insufficient nvidia.com/gpu: 8`` names TaintToleration's reason before
NodeResourcesFit's.

kube-scheduler stops at a node's first failing plugin. Troupe evaluates the plugins that
read only the node and the pod's node filter (:func:`node_status`: NodeUnschedulable,
TaintToleration, NodeAffinity) once per node filter, cached
(:meth:`~reconciler.engine.ledger.snapshot.Snapshot.eligible`); then the gang's loop
(:class:`~reconciler.engine.filters.gang.GangFilters`) runs, in this order, the plugins that
register a PreFilter state (:attr:`~reconciler.engine.filters.status.Registered.state`:
``NodeName`` and those that read the pods around a member), with the caller's
``NodeResourcesFit`` at its place. So a pod naming its node on a tainted node is refused for
the taint; a gated member never names its node, so it never meets that difference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from reconciler.engine.filters import (
    dynamicresources,
    interpodaffinity,
    nodeaffinity,
    nodename,
    nodeports,
    noderesources,
    nodeunschedulable,
    nodevolumelimits,
    podtopologyspread,
    tainttoleration,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from reconciler.engine.filters.status import NodeCheck, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.selectors import NodeFilter

#: Every plugin Troupe models, in kube-scheduler's default profile order: the one registration.
PROFILE: tuple[Registered, ...] = (
    nodename.REGISTERED,
    nodeunschedulable.REGISTERED,
    tainttoleration.REGISTERED,
    nodeaffinity.REGISTERED,
    nodeports.REGISTERED,
    noderesources.REGISTERED,
    volumerestrictions.REGISTERED,
    nodevolumelimits.REGISTERED,
    volumebinding.REGISTERED,
    volumezone.REGISTERED,
    podtopologyspread.REGISTERED,
    interpodaffinity.REGISTERED,
    dynamicresources.REGISTERED,
)
_POSITION = {registered.plugin: k for k, registered in enumerate(PROFILE)}
_BY_PLUGIN = {registered.plugin: registered for registered in PROFILE}
_NODE_CHECKS: tuple[NodeCheck, ...] = tuple(r.node for r in PROFILE if r.node is not None)


def position(plugin: Plugin) -> int:
    """``plugin``'s place in :data:`PROFILE`; raises ``KeyError`` for one not registered."""
    return _POSITION[plugin]


def rank(plugin: Plugin, reason: str) -> tuple[int, tuple[int, str]]:
    """The sort key of ``reason`` given by ``plugin``: the plugin's place, then the
    reason's among the plugin's (module docstring)."""
    return (_POSITION[plugin], _BY_PLUGIN[plugin].rank(reason))


def node_status(flt: NodeFilter, node: NodeInfo) -> Status | None:
    """The first failing plugin among those that read only ``node`` and the pod's node
    filter ``flt``, in profile order; None when all pass."""
    for check in _NODE_CHECKS:
        found = check(flt, node)
        if found is not None:
            return found
    return None


def listed(counts: Mapping[Status, int]) -> list[tuple[str, int]]:
    """Nodes per reason of ``counts`` (nodes per status; a status naming several reasons
    counts for each), in profile order (module docstring)."""
    per_reason: Counter[tuple[Plugin, str]] = Counter()
    for status, n in counts.items():
        for reason in status.reasons:
            per_reason[(status.plugin, reason)] += n
    return [(reason, n) for (_, reason), n in sorted(per_reason.items(), key=lambda t: rank(*t[0]))]


def render(counts: Mapping[Status, int] | Iterable[tuple[str, int]]) -> str:
    """``reason: nodes, ...``: ``counts`` (nodes per status, or reasons already
    :func:`listed`) as messages write them."""
    pairs = listed(counts) if isinstance(counts, Mapping) else counts
    return ", ".join(f"{reason}: {n}" for reason, n in pairs)
