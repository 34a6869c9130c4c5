"""The SharedDeviceGroups' writer port against the API server (:class:`KubeDeviceGroupWrites`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from reconciler.kube.client import JSON_PATCH, MERGE_PATCH
from reconciler.kube.writer.calls import Calls
from reconciler.ports.devicegroups import DeviceGroupWrites
from troupe import contract


class KubeDeviceGroupWrites(DeviceGroupWrites):
    """The :class:`~reconciler.ports.devicegroups.DeviceGroupWrites` primitives against a real API
    server, through ``calls`` (``fence`` is its fence): patches of a cluster-scoped
    SharedDeviceGroup and of its ``status`` subresource."""

    def __init__(self, api: client.ApiClient, calls: Calls) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.calls = calls
        self.fence = calls.fence

    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        return self._send_group_patch(f"patch shareddevicegroup {name}", self.custom.patch_cluster_custom_object,
                                      name, patch)

    def _patch_group_status(self, name: str, patch: Any) -> dict[str, Any]:
        return self._send_group_patch(f"patch shareddevicegroup {name}/status",
                                      self.custom.patch_cluster_custom_object_status, name, patch)

    def _send_group_patch(self, what: str, fn: Callable[..., Any], name: str, patch: Any) -> dict[str, Any]:
        """``patch`` (a JSON patch when a list of operations, else a JSON merge patch) of
        the SharedDeviceGroup ``name`` through the client's patch function ``fn``."""
        group, version, plural = contract.DEVICE_GROUP_API
        resp = self.calls.call(what, fn, group, version, plural, name, patch,
                               _content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH,
                               _preload_content=False)
        return dict(json.loads(resp.data))
