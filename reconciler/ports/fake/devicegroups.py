"""An in-memory :class:`~reconciler.ports.devicegroups.DeviceGroupWrites` (:class:`FakeDeviceGroupWrites`),
with the API server's rules for the patches Troupe sends a SharedDeviceGroup."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.ports.base import Conflict, WriteError
from reconciler.ports.devicegroups import DeviceGroupWrites
from reconciler.ports.fake.base import FakeStore


@dataclass
class FakeDeviceGroupWrites(FakeStore[str], DeviceGroupWrites):
    """In-memory :class:`DeviceGroupWrites` over SharedDeviceGroups by name (``objects``, filled by
    :meth:`add`; one copy of a group, status included). A JSON patch may only ``add
    /status`` (anything else is refused with :class:`~..base.WriteError`, as an unsupported
    operation would be); a JSON merge patch of ``metadata.finalizers`` applies under a
    ``metadata.resourceVersion`` precondition (a stale one raises :class:`~..base.Conflict`), and a
    group being deleted that is left without finalizers is gone, as the API server removes
    it. A group that does not exist raises :class:`~..base.Gone`; ``fail`` maps a group's name to an
    error its next writes raise. Thread-safe."""

    def add(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a SharedDeviceGroup (given a fresh resourceVersion) and return it."""
        return self._store(group["metadata"]["name"], group)

    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        with self._lock:
            group = copy.deepcopy(self._writable(name, name, f"shareddevicegroup {name}: not found"))
            if isinstance(patch, list):
                for op in patch:
                    if op["op"] != "add" or op["path"] != "/status":
                        raise WriteError(f"patch shareddevicegroup {name}: unsupported operation {op}")
                    group["status"] = copy.deepcopy(op["value"])
            else:
                meta = patch.get("metadata") or {}
                want_rv = meta.get("resourceVersion")
                if want_rv is not None and want_rv != group["metadata"].get("resourceVersion"):
                    raise Conflict(f"patch shareddevicegroup {name}: resourceVersion {want_rv} is stale")
                if "finalizers" in meta:
                    group["metadata"]["finalizers"] = list(meta["finalizers"])
            if group["metadata"].get("deletionTimestamp") and not group["metadata"].get("finalizers"):
                del self.objects[name]
                return group
            group["metadata"]["resourceVersion"] = self.versions.next()
            self.objects[name] = group
            return copy.deepcopy(group)

    def _patch_group_status(self, name: str, patch: Any) -> dict[str, Any]:
        return self._patch_group(name, patch)  # the fake keeps one copy of a group, status included
