"""The writer port of SharedDeviceGroups (cluster-scoped custom objects): their status and
Troupe's finalizer.

:class:`DeviceGroupWrites` makes them over two primitives an implementation provides
(``_patch_group`` and ``_patch_group_status``):
:class:`reconciler.kube.writer.devicegroups.KubeDeviceGroupWrites` against the API server,
:class:`reconciler.ports.fake.devicegroups.FakeDeviceGroupWrites` in memory.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from reconciler.ports.base import Fenced


class DeviceGroupWrites(Fenced, abc.ABC):
    """A SharedDeviceGroup's status (through its ``status`` subresource) and finalizers."""

    @abc.abstractmethod
    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        """Patch the SharedDeviceGroup ``name`` (cluster-scoped): ``patch`` is a JSON merge
        patch (a mapping) or a JSON patch (a list of operations). Returns the group. Raises
        :class:`~reconciler.ports.base.Conflict` (a stale
        ``metadata.resourceVersion`` in a merge patch),
        :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def _patch_group_status(self, name: str, patch: Any) -> dict[str, Any]:
        """Patch the SharedDeviceGroup ``name`` through its ``status`` subresource, as
        :meth:`_patch_group` does the object. Returns the group. Raises as it does."""

    def set_group_status(self, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the group's whole ``status`` (phase, nodeName, selectedDevices,
        conditions) through its status subresource; returns the group. Raises
        :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""
        self.fence.check()
        return self._patch_group_status(name, [{"op": "add", "path": "/status", "value": dict(status)}])

    def set_group_finalizers(self, name: str, finalizers: list[str], resource_version: str) -> dict[str, Any]:
        """Set the group's ``metadata.finalizers`` to ``finalizers`` if it is still at
        ``resource_version`` (adding or removing Troupe's finalizer; other finalizers are
        kept by the caller); returns the group. Raises
        :class:`~reconciler.ports.base.Conflict` when the group changed meanwhile,
        :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""
        self.fence.check()
        return self._patch_group(name, {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}})
