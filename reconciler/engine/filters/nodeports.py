"""``NodePorts``: no host port of the pod is in use on the node, by the pods there or by
the gang's members placed there (``pkg/scheduler/framework/plugins/nodeports``); the
conflict rule is :meth:`~reconciler.engine.model.podterms.HostPort.conflicts`.

Its PreFilter state (:class:`PortsInUse`) keeps the host ports in use per node.

Reason: ``node(s) didn't have free ports for the requested pod ports`` (``Unschedulable``:
evicting the pod that holds the port frees it).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.filters.status import (
    Code,
    Cycle,
    Plugin,
    PreFilterState,
    Registered,
    Status,
    tally,
)
from reconciler.engine.model.podterms import HostPort

PORTS_IN_USE = "node(s) didn't have free ports for the requested pod ports"

PLUGIN = Plugin("NodePorts")
IN_USE = Status(Code.UNSCHEDULABLE, PLUGIN, (PORTS_IN_USE,))


def check(ports: Sequence[HostPort], used: Sequence[HostPort] | None) -> Status | None:
    """None when none of ``ports`` (the pod's) conflicts with ``used`` (the node's)."""
    if used and any(mine.conflicts(other) for mine in ports for other in used):
        return IN_USE
    return None


class PortsInUse(PreFilterState):
    """Each member's host ports, and per node index the host ports of the pods there
    (those using nodes, then the members placed)."""

    __slots__ = ("ports", "used")

    def __init__(self, ports: list[tuple[HostPort, ...]]) -> None:
        self.ports = ports
        self.used: dict[int, list[HostPort]] = {}

    @classmethod
    def prefilter(cls, cycle: Cycle) -> PortsInUse | None:
        """None when no member has a host port."""
        ports = [m.terms.host_ports if m.terms is not None else () for m in cycle.order]
        if not any(ports):
            return None
        state = cls(ports)
        for pod, i in cycle.existing:
            if pod.terms is not None and pod.terms.host_ports:
                tally(state.used.setdefault(i, []), pod.terms.host_ports, 1)
        return state

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m``'s ports on node ``i``."""
        ports = self.ports[m]
        return check(ports, self.used.get(i)) if ports else None

    def add_pod(self, m: int, i: int) -> None:
        """Member ``m``'s ports are in use on node ``i``."""
        if self.ports[m]:
            tally(self.used.setdefault(i, []), self.ports[m], 1)

    def remove_pod(self, m: int, i: int) -> None:
        """Member ``m``'s ports are free again on node ``i``."""
        if self.ports[m]:
            tally(self.used.setdefault(i, []), self.ports[m], -1)

    def one_per_node(self, m: int) -> bool:
        """A member with host ports: two never share a node."""
        return bool(self.ports[m])


REGISTERED = Registered(PLUGIN, (PORTS_IN_USE,), "pkg/scheduler/framework/plugins/nodeports", state=PortsInUse)
