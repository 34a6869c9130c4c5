"""``NodeAffinity``: ``spec.nodeSelector`` (every pair on the node) and required node
affinity (terms ORed, a term's expressions ANDed, ``matchFields`` on ``metadata.name``)
(``pkg/scheduler/framework/plugins/nodeaffinity``; Kubernetes docs "Assigning Pods to
Nodes"). The matching rules are :class:`~reconciler.engine.model.selectors.NodeFilter`'s.

Reasons, in this order: ``node selector mismatch``, ``node affinity mismatch``
(``UnschedulableAndUnresolvable``).
"""

from __future__ import annotations

from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.selectors import NodeFilter

SELECTOR_MISMATCH = "node selector mismatch"
AFFINITY_MISMATCH = "node affinity mismatch"

PLUGIN = Plugin("NodeAffinity")
SELECTOR_STATUS = Status(Code.UNRESOLVABLE, PLUGIN, (SELECTOR_MISMATCH,))
AFFINITY_STATUS = Status(Code.UNRESOLVABLE, PLUGIN, (AFFINITY_MISMATCH,))


def check(flt: NodeFilter, node: NodeInfo) -> Status | None:
    """None when ``node``'s labels and name satisfy ``flt``'s selector and affinity."""
    if not flt.selector_matches(node.labels):
        return SELECTOR_STATUS
    if not flt.affinity_matches(node.labels, node.name):
        return AFFINITY_STATUS
    return None


REGISTERED = Registered(PLUGIN, (SELECTOR_MISMATCH, AFFINITY_MISMATCH), "pkg/scheduler/framework/plugins/nodeaffinity", node=check)
