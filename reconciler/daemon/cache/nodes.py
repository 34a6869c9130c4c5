"""The cluster cache's handlers of nodes: the nodes informer's list, events and
``transform``, and the parsed node a reader asks for (the tables are
:class:`~reconciler.daemon.cache.entries.Tables`; a heartbeat changes nothing a decision
reads, so it is no change of the cache)."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.daemon.cache.entries import Entry, Tables, object_version, same_version
from reconciler.daemon.cache.workloads import Obj, namespace_and_name
from reconciler.engine.model.nodes import NodeInfo
from reconciler.objects.retain import NODE


def _same_node(a: NodeInfo | None, b: NodeInfo | None) -> bool:
    """Whether two parses of a node agree on everything the engine reads."""
    if a is None or b is None:
        return a is b
    return (a.labels == b.labels and a.allocatable == b.allocatable and a.taints == b.taints
            and a.ready == b.ready and a.unschedulable == b.unschedulable
            and a.not_ready_since == b.not_ready_since and a.failures == b.failures)


class NodeHandlers(Tables):
    """Nodes by name in the cache (:class:`~reconciler.daemon.cache.cluster.ClusterCache`)."""

    def retain_node(self, node: Obj) -> Obj:
        """What the cache parses of ``node`` (:data:`reconciler.objects.retain.NODE`), or ``node``
        as it is when the cache holds this version already: the nodes informer's ``transform``."""
        with self._lock:
            current = self._nodes.get(namespace_and_name(node)[1])
        return self._retain(NODE, node, current)


    def replace_nodes(self, items: Iterable[Obj]) -> None:
        """Replace every node with a fresh list, applied as it comes (``items`` may be a
        stream, as for :meth:`~reconciler.daemon.cache.cluster.ClusterCache.replace_pods`); a node of the same version as the stored
        one keeps its entry; nodes absent from the list are dropped."""
        with self._lock:
            self._snapshot = self._table = self._usage = None
        seen: set[str] = set()
        for n in items:
            with self._lock:
                name = namespace_and_name(n)[1]
                seen.add(name)
                if not same_version(self._nodes.get(name), n):
                    n = self._retain(NODE, n, None)
                    self._nodes[name] = Entry(self._kept(n), self.unreadable.read("node", name, NodeInfo.from_object, n)[0],
                                              False, object_version(n))
        with self._lock:
            for name in [k for k in self._nodes if k not in seen]:
                del self._nodes[name]
            self._node_version += 1
            self.version += 1

    def node_event(self, kind: str, node: Obj) -> bool:
        """Apply a node watch event; returns whether anything a decision reads changed
        (a status heartbeat changes nothing)."""
        with self._lock:
            name = namespace_and_name(node)[1]
            if kind == "DELETED":
                self.unreadable.forget("node", name)
                if self._nodes.pop(name, None) is None:
                    return False
            else:
                current = self._nodes.get(name)
                if same_version(current, node):
                    return False  # the same version again
                node = self._retain(NODE, node, None)
                info = self.unreadable.read("node", name, NodeInfo.from_object, node)[0]
                self._nodes[name] = Entry(self._kept(node), info, False, object_version(node))
                if current is not None and _same_node(current.info, info):
                    return False  # a status heartbeat: nothing a decision reads has changed
            self._node_version += 1
            self.version += 1
            return True

    def node_info(self, name: str) -> NodeInfo | None:
        """The parsed node, or None (unknown, or unreadable)."""
        info: NodeInfo | None = self._lookup(self._nodes, name)[1]
        return info
