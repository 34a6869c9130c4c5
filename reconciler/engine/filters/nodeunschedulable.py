"""``NodeUnschedulable``: a cordoned node (``spec.unschedulable``) takes no pod
(``pkg/scheduler/framework/plugins/nodeunschedulable``; Kubernetes docs "Safely Drain a
Node"). Troupe also checks the Ready condition itself, without waiting for the
``node.kubernetes.io/not-ready`` taint the node lifecycle controller adds.

Reasons: ``node not ready`` before ``node unschedulable``; both
``UnschedulableAndUnresolvable`` (freeing room does not uncordon a node).
"""

from __future__ import annotations

from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.selectors import NodeFilter

NOT_READY = "node not ready"
UNSCHEDULABLE = "node unschedulable"

PLUGIN = Plugin("NodeUnschedulable")
NOT_READY_STATUS = Status(Code.UNRESOLVABLE, PLUGIN, (NOT_READY,))
UNSCHEDULABLE_STATUS = Status(Code.UNRESOLVABLE, PLUGIN, (UNSCHEDULABLE,))


def check(flt: NodeFilter, node: NodeInfo) -> Status | None:
    """None when ``node`` is Ready and schedulable; ``flt`` is not read (kube-scheduler's
    toleration of the unschedulable taint is not modeled: Troupe's members never carry it)."""
    return NOT_READY_STATUS if not node.ready else UNSCHEDULABLE_STATUS if node.unschedulable else None


REGISTERED = Registered(PLUGIN, (NOT_READY, UNSCHEDULABLE), "pkg/scheduler/framework/plugins/nodeunschedulable", node=check)
