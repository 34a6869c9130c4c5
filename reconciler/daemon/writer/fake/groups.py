"""An in-memory :class:`~reconciler.daemon.writer.groups.GroupWrites` (:class:`FakeGroupWrites`),
with the API server's rules for the patches Troupe sends a SharedDeviceGroup."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.daemon.writer.base import UNFENCED, Conflict, Fence, Gone, WriteError
from reconciler.daemon.writer.fake.base import Versions
from reconciler.daemon.writer.groups import GroupWrites


@dataclass
class FakeGroupWrites(GroupWrites):
    """In-memory :class:`GroupWrites` over SharedDeviceGroups by name (``objects``, filled by
    :meth:`add`; one copy of a group, status included). A JSON patch may only ``add
    /status`` (anything else is refused with :class:`WriteError`, as an unsupported
    operation would be); a JSON merge patch of ``metadata.finalizers`` applies under a
    ``metadata.resourceVersion`` precondition (a stale one raises :class:`Conflict`), and a
    group being deleted that is left without finalizers is gone, as the API server removes
    it. A group that does not exist raises :class:`Gone`; ``fail`` maps a group's name to an
    error its next writes raise. Thread-safe."""

    fence: Fence = UNFENCED
    versions: Versions = field(default_factory=Versions)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail: dict[str, WriteError] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def add(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a SharedDeviceGroup (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = self.objects[group["metadata"]["name"]] = self.versions.stamped(group)
            return copy.deepcopy(stored)

    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            group = self.objects.get(name)
            if group is None:
                raise Gone(f"shareddevicegroup {name}: not found")
            group = copy.deepcopy(group)
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
