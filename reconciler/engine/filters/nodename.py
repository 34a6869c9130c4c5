"""``NodeName``: a pod that names its node (``spec.nodeName``) fits only there
(``pkg/scheduler/framework/plugins/nodename``). The API refuses ``spec.nodeName`` together
with scheduling gates, so a gated member never has one; pods the gang filters count may.
It reads the member beyond its node filter, so it runs with the plugins that read the pods
around it (:class:`NamedNode`), not with the node checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.filters.status import Code, Cycle, Plugin, PreFilterState, Registered, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo

NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"

PLUGIN = Plugin("NodeName")
MISMATCH = Status(Code.UNRESOLVABLE, PLUGIN, (NODE_NAME_MISMATCH,))


def check(wanted: str, node: str) -> Status | None:
    """None when the pod names no node (``wanted`` ``""``) or names ``node``."""
    return MISMATCH if wanted and wanted != node else None


class NamedNode(PreFilterState):
    """The node each member names (``""``: none) and every node's name; nothing is counted."""

    __slots__ = ("names", "wanted_node")

    def __init__(self, wanted_node: list[str], names: list[str]) -> None:
        self.wanted_node, self.names = wanted_node, names

    @classmethod
    def wanted(cls, snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
        """Whether a member names its node."""
        return any(m.node_name for m in members)

    @classmethod
    def prefilter(cls, cycle: Cycle) -> NamedNode | None:
        """None when no member names its node."""
        wanted_node = [m.node_name for m in cycle.order]
        return cls(wanted_node, [node.name for node in cycle.snapshot.nodes]) if any(wanted_node) else None

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m`` on node ``i``."""
        wanted = self.wanted_node[m]
        return check(wanted, self.names[i]) if wanted else None


REGISTERED = Registered(PLUGIN, (NODE_NAME_MISMATCH,), "pkg/scheduler/framework/plugins/nodename", state=NamedNode)
