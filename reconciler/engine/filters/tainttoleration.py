"""``TaintToleration``: every taint of effect ``NoSchedule`` or ``NoExecute`` on the node is
tolerated by the pod (``pkg/scheduler/framework/plugins/tainttoleration``; Kubernetes docs
"Taints and Tolerations"). ``PreferNoSchedule`` only scores; the matching rule is
:meth:`~reconciler.engine.model.selectors.NodeFilter.untolerated`.

Reason: ``untolerated taint key=value`` for the first taint not tolerated
(``UnschedulableAndUnresolvable``); several such reasons list by their text.
"""

from __future__ import annotations

from functools import lru_cache

from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.selectors import NodeFilter, Taint

#: The words before the taint (``key=value``, or ``key``) in this plugin's reason.
UNTOLERATED = "untolerated taint"


def _by_text(reason: str) -> tuple[int, str]:
    return (0, reason)


PLUGIN = Plugin("TaintToleration")


@lru_cache(maxsize=1024)
def untolerated(taint: Taint) -> Status:
    """The status for ``taint`` not tolerated: one per taint (taints are few and shared)."""
    return Status(Code.UNRESOLVABLE, PLUGIN, (f"{UNTOLERATED} {taint.describe()}",))


def check(flt: NodeFilter, node: NodeInfo) -> Status | None:
    """None when ``flt``'s tolerations tolerate every blocking taint of ``node``."""
    taint = flt.untolerated(node.taints)
    return None if taint is None else untolerated(taint)


REGISTERED = Registered(PLUGIN, (), "pkg/scheduler/framework/plugins/tainttoleration", _by_text, node=check)
