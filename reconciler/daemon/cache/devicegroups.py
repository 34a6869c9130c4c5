"""The cluster cache's handlers of SharedDeviceGroups: the groups informer's list, events
and ``transform``, the groups a write of ours returned, and what the SharedDeviceGroup
controller reads of a group and of the pods that join it (``deviceshare.io/group``;
docs/decisions/018-shared-device-groups.md)."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.daemon.cache.entries import Entry, Tables, object_version, older, resource_version
from reconciler.daemon.cache.keys import group_key
from reconciler.daemon.cache.workloads import Obj, namespace_and_name
from reconciler.engine.model.devicegroups import DeviceGroup
from reconciler.engine.model.pods import PodInfo
from reconciler.objects.retain import DEVICE_GROUP, retain


class DeviceGroupHandlers(Tables):
    """SharedDeviceGroups by name in the cache (:class:`~reconciler.daemon.cache.cluster.ClusterCache`),
    and the pods that join each."""

    def retain_group(self, group: Obj) -> Obj:
        """What is kept of a SharedDeviceGroup (:data:`reconciler.objects.retain.DEVICE_GROUP`): the
        groups informer's ``transform``, and what the controller's writes return."""
        return retain(DEVICE_GROUP, group) if self.retained else group

    def _parse_group(self, obj: Obj) -> Entry:
        group, why = self.unreadable.read("SharedDeviceGroup", namespace_and_name(obj)[1], DeviceGroup.from_object, obj)
        return Entry(obj, group if group is not None else why, False, object_version(obj))

    def replace_groups(self, items: Iterable[Obj]) -> set[str]:
        """Replace every SharedDeviceGroup with a fresh list; returns the group keys
        (:func:`group_key`) before or after."""
        with self._lock:
            before = set(self._groups)
            self._groups = {namespace_and_name(g)[1]: self._parse_group(self.retain_group(g)) for g in items}
            self.version += 1
            return {group_key(g) for g in before | set(self._groups)}

    def group_event(self, kind: str, obj: Obj) -> set[str]:
        """Apply a SharedDeviceGroup watch event; returns its group key."""
        with self._lock:
            name = namespace_and_name(obj)[1]
            if kind == "DELETED":
                self.unreadable.forget("SharedDeviceGroup", name)
                self._gone.bury(("group", name), resource_version(object_version(obj)[1]))
                self._groups.pop(name, None)
            else:
                current = self._groups.get(name)
                if older(obj, current):
                    return set()
                if current is None and self._gone.buried(("group", name), resource_version(object_version(obj)[1])):
                    return set()
                self._groups[name] = self._parse_group(self.retain_group(obj))
            self.version += 1
            return {group_key(name)}

    def assume_group(self, obj: Obj) -> None:
        """Record the group a write of ours returned, ahead of its watch event."""
        self.group_event("MODIFIED", obj)

    def group(self, name: str) -> tuple[Obj, DeviceGroup | str] | None:
        """The cached group object and its parsed form (or why it cannot be read), or None."""
        with self._lock:
            entry = self._groups.get(name)
            return None if entry is None or entry.obj is None else (entry.obj, entry.info)

    def group_keys(self) -> set[str]:
        """The work-queue keys of every cached group."""
        with self._lock:
            return {group_key(g) for g in self._groups}

    def group_pods(self, name: str) -> list[PodInfo]:
        """Every parsed pod that joins group ``name`` (``deviceshare.io/group``)."""
        with self._lock:
            return [i for r in self._group_pods.get(name, ()) if (i := self._pods[r].info) is not None]

    def group_gangs(self, name: str) -> set[str]:
        """The keys of the gangs with a gated member in group ``name``."""
        with self._lock:
            return {k for r in self._group_pods.get(name, ()) if (i := self._pods[r].info) is not None
                    and i.gated and i.active and (k := self._gang_of.get(r)) is not None}
