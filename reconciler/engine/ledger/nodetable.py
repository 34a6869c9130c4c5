"""The part of a snapshot derived from its nodes alone (:class:`NodeTable`), shared by the
snapshots a cache builds while only pods change (:mod:`.snapshot`)."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.ledger.topology import TopologyLevels, TopologyTree
from reconciler.engine.model.devicegroups import is_shared
from reconciler.engine.model.nodes import NodeInfo


class NodeTable:
    """What a snapshot derives from its nodes alone: the nodes in topology order, their
    paths, the topology tree, names to indexes, which pass the static
    checks, and allocatable per resource. Immutable; a cache keeps one per set of nodes
    and builds snapshots on it while only pods change (kwok's and kubelets' status
    heartbeats do not change it).

    Raises ``ValueError`` on a duplicate node name.
    """

    def __init__(self, nodes: Iterable[NodeInfo], levels: TopologyLevels) -> None:
        keyed = sorted(((levels.path_of(node.name, node.labels), node.name, node) for node in nodes),
                       key=lambda entry: (entry[0], entry[1]))
        self.levels = levels
        self.nodes: tuple[NodeInfo, ...] = tuple(node for _, _, node in keyed)
        self.paths: tuple[tuple[str, ...], ...] = tuple(path for path, _, _ in keyed)
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in self.index:
                raise ValueError(f"duplicate node {node.name!r}")
            self.index[node.name] = i
        self.tree = TopologyTree([node.name for node in self.nodes], self.paths, levels)
        self.weights = levels.weights()
        self.static_ok = [node.ready and not node.unschedulable for node in self.nodes]
        #: Per node: opted in to shared device groups (``deviceshare.io/mode: shared``).
        self.shared = [is_shared(node.labels) for node in self.nodes]
        #: The nodes that carry member failures (docs/decisions/041-failing-nodes.md).
        self.failing: tuple[NodeInfo, ...] = tuple(node for node in self.nodes if node.failures)
        resources = sorted({resource for node in self.nodes for resource in node.allocatable})
        self.allocatable: dict[str, tuple[int, ...]] = {
            resource: tuple(node.allocatable.get(resource, 0) for node in self.nodes) for resource in resources}
        self._columns: dict[str, tuple[str | None, ...]] = {}

    def label_column(self, key: str) -> tuple[str | None, ...]:
        """Per node (topology order): its value of label ``key``, None where it has none;
        built once per key."""
        column = self._columns.get(key)
        if column is None:
            column = self._columns[key] = tuple(node.labels.get(key) for node in self.nodes)
        return column
