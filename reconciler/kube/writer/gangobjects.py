"""The Gang objects' writer port against the API server (:class:`KubeGangObjectWrites`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from reconciler.kube.client import JSON_PATCH
from reconciler.kube.writer.calls import Calls
from reconciler.ports.base import Conflict, Gone
from reconciler.ports.gangobjects import GangObjectWrites
from troupe import contract


class KubeGangObjectWrites(GangObjectWrites):
    """The :class:`~reconciler.ports.gangobjects.GangObjectWrites` primitives against
    a real API server, through ``calls`` (``fence`` is its fence): the paged list of every
    namespace's Gang objects, a get of one, a create, a JSON patch of the ``status`` subresource, a delete
    under a UID precondition."""

    def __init__(self, api: client.ApiClient, calls: Calls) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.calls = calls
        self.fence = calls.fence

    def _list_gang_objects(self) -> list[dict[str, Any]]:
        group, version, plural = contract.GANG_API
        items: list[dict[str, Any]] = []
        token = None
        while True:
            resp = self.calls.call("list gangs", self.custom.list_cluster_custom_object, group, version, plural,
                                   limit=500, _continue=token, _preload_content=False)
            page = json.loads(resp.data)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _get_gang_object(self, namespace: str, name: str) -> dict[str, Any]:
        group, version, plural = contract.GANG_API
        resp = self.calls.call(f"get gang {namespace}/{name}", self.custom.get_namespaced_custom_object, group,
                               version, namespace, plural, name, _preload_content=False)
        return dict(json.loads(resp.data))

    def _create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        group, version, plural = contract.GANG_API
        name = body["metadata"]["name"]
        resp = self.calls.call(f"create gang {namespace}/{name}", self.custom.create_namespaced_custom_object, group,
                               version, namespace, plural, {"apiVersion": f"{group}/{version}", "kind": "Gang", **body},
                               _preload_content=False)
        return dict(json.loads(resp.data))

    def _patch_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        group, version, plural = contract.GANG_API
        resp = self.calls.call(f"patch gang {namespace}/{name}/status",
                               self.custom.patch_namespaced_custom_object_status, group, version, namespace, plural,
                               name, [{"op": "add", "path": "/status", "value": dict(status)}],
                               _content_type=JSON_PATCH, _preload_content=False)
        return dict(json.loads(resp.data))

    def _delete_gang_object(self, namespace: str, name: str, uid: str) -> None:
        group, version, plural = contract.GANG_API
        options = {"preconditions": {"uid": uid}} if uid else {}
        try:
            self.calls.call(f"delete gang {namespace}/{name}", self.custom.delete_namespaced_custom_object, group,
                            version, namespace, plural, name, body=options, _preload_content=False)
        except Conflict as e:  # another object of that name now: not ours to delete
            raise Gone(str(e)) from e
