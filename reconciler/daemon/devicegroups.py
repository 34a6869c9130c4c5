"""The SharedDeviceGroup controller: a group's finalizer and status follow its pods.

A group's devices are chosen by the gang decision that releases its first pod (the
engine's :mod:`~reconciler.engine.placement.devicegroups`); this controller only keeps the object in
line with the cluster (docs/decisions/018-shared-device-groups.md): Troupe's finalizer on a
live group, removed once none of its pods runs when the group is deleted (which frees its
devices), and its ``status`` (phase, nodeName, selectedDevices, the ``Allocated``
condition) as :func:`~reconciler.engine.placement.devicegroups.group_view` computes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model.devicegroups import DeviceGroup
from reconciler.engine.model.timestamps import rfc3339
from reconciler.engine.placement.devicegroups import GroupView, group_view
from reconciler.ports.base import Gone, WriteError
from reconciler.ports.devicegroups import DeviceGroupWrites
from troupe import contract

log = logging.getLogger(__name__)

#: The condition type of a SharedDeviceGroup's status that says whether it holds devices.
GROUP_CONDITION = "Allocated"


class DeviceGroupController:
    """Reconciles one SharedDeviceGroup at a time from the cache, writing through
    ``groups``; ``wall_clock`` gives seconds since the epoch (condition times)."""

    def __init__(self, cache: ClusterCache, groups: DeviceGroupWrites, wall_clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.groups = groups
        self.wall_clock = wall_clock
        #: One reconcile at a time: the worker and the release threads (after a release
        #: binds a group) both call :meth:`reconcile`.
        self._lock = threading.Lock()

    def reconcile(self, name: str) -> bool:
        """:meth:`_reconcile`, one call at a time (the worker's and the release threads')."""
        with self._lock:
            return self._reconcile(name)

    def _reconcile(self, name: str) -> bool:
        """Bring SharedDeviceGroup ``name`` in line with the cluster; returns True when it
        should be retried (a write failed). Keeps Troupe's finalizer on a live group; on a
        group being deleted, removes it once none of its pods runs (gated pods never ran;
        a pod being deleted still runs until it is gone), which frees its devices; writes
        its status (phase, nodeName, selectedDevices and the ``Allocated`` condition) when
        it differs from :func:`~reconciler.engine.placement.devicegroups.group_view`."""
        found = self.cache.group(name)
        if found is None:
            return False
        obj, info = found
        try:
            if not isinstance(info, DeviceGroup):  # its pods are held with the reason; the group says it too
                status = invalid_status(info, obj.get("status") or {}, rfc3339(self.wall_clock()))
                if status is not None:
                    self.cache.assume_group(self.groups.set_group_status(name, status))
                    log.warning("SharedDeviceGroup %s cannot be used: %s", name, info)
                return False
            if info.deleting:
                self._finish_deletion(name, info)
                return False
            if contract.DEVICE_GROUP_FINALIZER not in info.finalizers:
                obj = self.groups.set_group_finalizers(
                    name, [*info.finalizers, contract.DEVICE_GROUP_FINALIZER], info.resource_version)
                self.cache.assume_group(obj)
            view = group_view(self.cache.snapshot(), info, self.cache.group_pods(name))
            status = group_status(view, obj.get("status") or {}, rfc3339(self.wall_clock()))
            if status is not None:
                self.cache.assume_group(self.groups.set_group_status(name, status))
                log.info("SharedDeviceGroup %s: %s (%s: %s)", name, view.phase, view.reason, view.message)
        except Gone:
            return False
        except WriteError as e:  # Conflict included: decided again on a fresh read
            log.warning("SharedDeviceGroup %s: %s", name, e)
            return True
        return False

    def _finish_deletion(self, name: str, info: DeviceGroup) -> None:
        """Remove Troupe's finalizer from a group being deleted once none of its pods runs."""
        running = [p.key for p in self.cache.group_pods(name) if not p.terminal and not p.gated]
        if contract.DEVICE_GROUP_FINALIZER not in info.finalizers or running:
            return
        rest = [f for f in info.finalizers if f != contract.DEVICE_GROUP_FINALIZER]
        written = self.groups.set_group_finalizers(name, rest, info.resource_version)
        # Without finalizers a group being deleted is gone: so it is for the cache.
        self.cache.group_event("MODIFIED" if rest else "DELETED", written)
        log.info("SharedDeviceGroup %s deleted: no pod of it runs; its devices are free", name)


#: The ``Allocated`` condition's reason on a group whose spec Troupe refuses.
INVALID_SPEC = "InvalidSpec"


def invalid_status(why: str, current: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The status of a group Troupe cannot use (``why`` names the field and the value):
    ``Pending`` with ``Allocated=False``, reason :data:`INVALID_SPEC`; None when the group
    says so already. Its devices are never allocated."""
    condition = {"type": GROUP_CONDITION, "status": "False", "reason": INVALID_SPEC, "message": why[:1024]}
    return _status({"phase": "Pending"}, condition, current, now)


def group_status(view: GroupView, current: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The status to write for ``view`` given the ``current`` one (RFC 3339 ``now``), or
    None when they agree."""
    condition = {"type": GROUP_CONDITION, "status": "True" if view.phase == "Bound" else "False",
                 "reason": view.reason, "message": view.message[:1024]}
    return _status(view.status(), condition, current, now)


def _status(want: Mapping[str, Any], condition: dict[str, Any], current: Mapping[str, Any],
            now: str) -> dict[str, Any] | None:
    """``want`` (phase, nodeName, selectedDevices) with ``condition`` among the other
    conditions of ``current``, or None when ``current`` says both already. The condition's
    ``lastTransitionTime`` moves only when its status flips (``metav1.Condition`` semantics)."""
    old = next((c for c in current.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") == GROUP_CONDITION),
               None)
    same_fields = all(current.get(k) == v for k, v in want.items()) and set(want) == {
        k for k in ("phase", "nodeName", "selectedDevices") if k in current}
    if same_fields and old is not None and all(old.get(k) == v for k, v in condition.items()):
        return None
    keep = old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime")
    condition["lastTransitionTime"] = keep or now
    others = [c for c in current.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != GROUP_CONDITION]
    return {**want, "conditions": [*others, condition]}
