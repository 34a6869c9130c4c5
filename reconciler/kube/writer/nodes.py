"""The nodes' writer port against the API server (:class:`KubeNodeWrites`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from reconciler.engine.model.keys import PodKey
from reconciler.kube.client import MERGE_PATCH
from reconciler.kube.writer.calls import Calls
from reconciler.kube.writer.events import EventSink
from reconciler.ports.nodes import NodeWrites


class KubeNodeWrites(NodeWrites):
    """The :class:`~reconciler.ports.nodes.NodeWrites` primitives against a real API
    server, through ``calls`` (``fence`` is its fence): a node read, and a JSON merge patch of
    a node. Events go out on ``events``'s thread."""

    def __init__(self, api: client.ApiClient, calls: Calls, events: EventSink) -> None:
        self.core, self.calls, self.fence, self.events = client.CoreV1Api(api), calls, calls.fence, events

    def _get_node(self, name: str) -> dict[str, Any]:
        resp = self.calls.call(f"read node {name}", self.core.read_node, name, _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        resp = self.calls.call(f"patch node {name}", self.core.patch_node, name, patch, _content_type=MERGE_PATCH,
                               _preload_content=False)
        return dict(json.loads(resp.data))

    def emit_event(self, name: str, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on node ``name`` (in namespace ``default``, where Events of
        cluster-scoped objects go); best effort: never raises, never blocks."""
        self.events.emit(PodKey("", name), None, kind, reason, message, ("v1", "Node"))
