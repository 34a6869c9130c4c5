"""The state ConfigMap's writer port against the API server (:class:`KubeStateStore`)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from kubernetes import client

from reconciler.kube.client import MERGE_PATCH
from reconciler.kube.writer.calls import Calls
from reconciler.ports.base import Gone
from reconciler.ports.state import StateStore


class KubeStateStore(StateStore):
    """The :class:`~reconciler.ports.state.StateStore` primitives against a real API
    server, through ``calls`` (``fence`` is its fence). ``location`` is the ``(namespace,
    name)`` of the ConfigMap that keeps the reconciler's own state (rollback backoffs), so a
    new leader continues where the last one stopped; None keeps nothing (a read finds it
    empty, a write is dropped)."""

    def __init__(self, api: client.ApiClient, calls: Calls, location: tuple[str, str] | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.calls = calls
        self.fence = calls.fence
        self.location = location

    def _read_state(self) -> dict[str, str]:
        if self.location is None:
            return {}
        namespace, name = self.location
        try:
            resp = self.calls.call(f"read configmap {namespace}/{name}", self.core.read_namespaced_config_map, name,
                                   namespace, _preload_content=False)
        except Gone:
            return {}
        return dict(json.loads(resp.data).get("data") or {})

    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        if self.location is None:
            return
        namespace, name = self.location
        try:
            self.calls.call(f"patch configmap {namespace}/{name}", self.core.patch_namespaced_config_map, name,
                            namespace, {"data": dict(changes)}, _content_type=MERGE_PATCH, _preload_content=False)
        except Gone:  # not made yet (the chart makes it empty): make it
            self.calls.call(f"create configmap {namespace}/{name}", self.core.create_namespaced_config_map, namespace,
                            {"metadata": {"name": name, "labels": {"app.kubernetes.io/name": "troupe"}},
                             "data": {k: v for k, v in changes.items() if v is not None}}, _preload_content=False)
