"""``NodePorts``: no host port of the pod is in use on the node, by the pods there or by
the gang's members placed there (``pkg/scheduler/framework/plugins/nodeports``); the
conflict rule is :meth:`~reconciler.engine.model.podterms.HostPort.conflicts`.

Reason: ``node(s) didn't have free ports for the requested pod ports`` (``Unschedulable``:
evicting the pod that holds the port frees it).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.podterms import HostPort

PORTS_IN_USE = "node(s) didn't have free ports for the requested pod ports"

PLUGIN = Plugin("NodePorts")
IN_USE = Status(Code.UNSCHEDULABLE, PLUGIN, (PORTS_IN_USE,))


def check(ports: Sequence[HostPort], used: Sequence[HostPort] | None) -> Status | None:
    """None when none of ``ports`` (the pod's) conflicts with ``used`` (the node's)."""
    if used and any(mine.conflicts(other) for mine in ports for other in used):
        return IN_USE
    return None


REGISTERED = Registered(PLUGIN, (PORTS_IN_USE,), "pkg/scheduler/framework/plugins/nodeports")
