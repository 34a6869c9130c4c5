"""The writer port of nodes: Troupe's nominated-node taint, added and removed
(docs/decisions/033-nominated-nodes-are-tainted.md), the record of the gang members that
failed on a node (``reconciler.troupe.io/failures``, docs/decisions/041-failing-nodes.md),
and the Events about a node.

:class:`NodeWrites` makes them over two primitives an implementation provides (``_get_node``
and ``_patch_node``) and :meth:`~NodeWrites.emit_event`:
:class:`reconciler.kube.writer.nodes.KubeNodeWrites` against the API server,
:class:`reconciler.ports.fake.nodes.FakeNodeWrites` in memory.
``spec.taints`` has no merge key, so a patch replaces the whole list: each write reads the
node, changes only Troupe's taint, and sends the list back with the node's
``resourceVersion`` as its precondition, retried on a conflict after a fresh read.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.ports.base import Conflict, Fenced
from troupe import contract

#: Writes of a node's taints retried on conflict, each after a fresh read.
NODE_CONFLICT_RETRIES = 3


def _taints(node: Mapping[str, Any]) -> list[Any]:
    taints = (node.get("spec") or {}).get("taints") or []
    return list(taints) if isinstance(taints, list) else []


def _is_ours(taint: object) -> bool:
    return (isinstance(taint, Mapping) and taint.get("key") == contract.NOMINATED_TAINT_KEY
            and taint.get("effect") == contract.NOMINATED_TAINT_EFFECT)


class NodeWrites(Fenced, abc.ABC):
    """Troupe's taint on a node, its failures record and its Events (module docstring)."""

    @abc.abstractmethod
    def _get_node(self, name: str) -> dict[str, Any]:
        """The node as it is now. Raises :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply the JSON merge patch ``patch`` to node ``name``; returns the node. Raises
        :class:`~reconciler.ports.base.Conflict` (a stale
        ``metadata.resourceVersion``), :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def emit_event(self, name: str, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on node ``name`` (``kind`` ``Normal`` or ``Warning``); best
        effort, never raises."""

    def record_failures(self, name: str, record: Callable[[str | None], str]) -> tuple[str | None, str]:
        """Rewrite node ``name``'s :data:`troupe.contract.NODE_FAILURES` annotation as
        ``record`` makes it from the current value (None: absent), under the node's
        ``resourceVersion``, retried after a conflict; returns the value before and the
        value written. Raises as :meth:`taint_node`."""
        for attempt in range(NODE_CONFLICT_RETRIES + 1):
            self.fence.check()
            node = self._get_node(name)
            meta = node.get("metadata") or {}
            before = (meta.get("annotations") or {}).get(contract.NODE_FAILURES)
            after = record(before)
            if after == before:
                return before, after
            self.fence.check()
            try:
                self._patch_node(name, {"metadata": {"resourceVersion": str(meta.get("resourceVersion") or ""),
                                                     "annotations": {contract.NODE_FAILURES: after}}})
                return before, after
            except Conflict:
                if attempt == NODE_CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def taint_node(self, name: str) -> dict[str, Any] | None:
        """Add :func:`troupe.contract.nominated_taint` to node ``name`` unless it carries it;
        returns the node written, or None when nothing had to be written. Raises
        :class:`~reconciler.ports.base.Gone` (no such node),
        :class:`~reconciler.ports.base.LostLeadership`,
        :class:`~reconciler.ports.base.WriteError` (a conflict on every attempt
        included)."""
        return self._rewrite_taints(name, lambda taints: None if any(map(_is_ours, taints))
                                    else [*taints, contract.nominated_taint()])

    def untaint_node(self, name: str) -> dict[str, Any] | None:
        """Remove Troupe's taint from node ``name`` (other taints stay); returns the node
        written, or None when it did not carry it. Raises as :meth:`taint_node`."""
        return self._rewrite_taints(name, lambda taints: [t for t in taints if not _is_ours(t)]
                                    if any(map(_is_ours, taints)) else None)

    def _rewrite_taints(self, name: str, change: Callable[[list[Any]], list[Any] | None]) -> dict[str, Any] | None:
        """Read node ``name``, ``change`` its taints (None: nothing to write) and write them
        back under the node's ``resourceVersion``, retried after a conflict."""
        for attempt in range(NODE_CONFLICT_RETRIES + 1):
            self.fence.check()
            node = self._get_node(name)
            taints = change(_taints(node))
            if taints is None:
                return None
            rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
            self.fence.check()
            try:
                return self._patch_node(name, {"metadata": {"resourceVersion": rv}, "spec": {"taints": taints}})
            except Conflict:
                if attempt == NODE_CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
