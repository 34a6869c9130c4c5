"""An in-memory :class:`~reconciler.ports.nodes.NodeWrites` (:class:`FakeNodeWrites`),
with the API server's rules for nodes that matter here."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Conflict
from reconciler.ports.fake.base import FakeStore, RecordedEvent, record_event
from reconciler.ports.nodes import NodeWrites


@dataclass
class FakeNodeWrites(FakeStore[str], NodeWrites):
    """In-memory :class:`NodeWrites` over a dict of nodes by name (``objects``, filled by
    :meth:`add`). A node takes a JSON merge patch of ``spec.taints`` (the whole list: it has
    no merge key) and of ``metadata.annotations``, under a ``metadata.resourceVersion``
    precondition (a stale one raises :class:`~..base.Conflict`); a node that does not exist raises
    :class:`~..base.Gone`. ``fail`` maps a node name to an error its next writes raise. Every patch
    applied is recorded in ``patches``, the Events in ``events`` (about ``PodKey("", name)``).
    Thread-safe."""

    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add(self, node: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a Node (given a fresh resourceVersion) and return it."""
        return self._store(node["metadata"]["name"], node)

    def _get_node(self, name: str) -> dict[str, Any]:
        return self._read(name, f"node {name} not found")

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            node = self._writable(name, name, f"node {name} not found")
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != node["metadata"].get("resourceVersion"):
                raise Conflict(f"patch node {name}: resourceVersion {want_rv} is stale")
            node = copy.deepcopy(node)
            if "spec" in patch:
                node.setdefault("spec", {})["taints"] = copy.deepcopy(list((patch.get("spec") or {}).get("taints") or []))
            for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
                node["metadata"].setdefault("annotations", {})[key] = value
            node["metadata"]["resourceVersion"] = self.versions.next()
            self.objects[name] = node
            self.patches.append((name, copy.deepcopy(dict(patch))))
            return copy.deepcopy(node)

    def emit_event(self, name: str, kind: str, reason: str, message: str) -> None:
        """Record the Event in ``events`` unless the fence refuses; never raises."""
        record_event(self.events, self.fence, RecordedEvent(PodKey("", name), kind, reason, message, "Node"))
