"""What the cache's tables hold and what its handlers of each kind share: an object's
:class:`Entry` (its parsed form and its version), the comparisons of versions that keep an
event from undoing a newer write of ours (:func:`older`, :func:`same_version`), and
:class:`Tables`, the tables of :class:`~reconciler.daemon.cache.cluster.ClusterCache` as its
per-kind handlers (:mod:`.nodes`, :mod:`.devicegroups`) read them
(docs/decisions/059-cache-keeps-parsed-forms.md, docs/decisions/017-cache-memory.md)."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.daemon.cache.tombstones import Tombstones
from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.daemon.cache.workloads import Obj
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.usage import BoundUsage
from reconciler.engine.model.keys import PodKey
from reconciler.objects.retain import Keep, retain
from troupe import contract


@dataclass(frozen=True, slots=True)
class Entry:
    """A cached object's parsed form (``info``; None when it could not be parsed) and its
    ``version``, ``(uid, resourceVersion)`` as the object gave them (``""`` when absent).
    ``obj``: the object itself, kept for SharedDeviceGroups (their writers read it) and by a
    cache that keeps objects whole (a benchmark's baseline); None for a pod or a node of a
    retaining cache, whose readers read the parsed form alone
    (docs/decisions/059-cache-keeps-parsed-forms.md). ``partial``: the form is a pod's
    :func:`~reconciler.engine.model.pods.unreadable_pod`, for its gang only (kept out of
    snapshots)."""

    obj: Obj | None
    info: Any
    partial: bool = False
    version: tuple[str, str] = ("", "")


#: A resourceVersion the cache compares: etcd's revision, a uint64 (20 ASCII digits at most).
RESOURCE_VERSION = re.compile(r"[0-9]{1,20}")


def resource_version(raw: str) -> int | None:
    """A resourceVersion as the number it is, None when it is not one (absent: ``""``)."""
    return int(raw) if RESOURCE_VERSION.fullmatch(raw) else None


def object_version(obj: Obj) -> tuple[str, str]:
    """An object's ``(uid, resourceVersion)``, ``""`` for either when absent or not a string."""
    meta = contract.pod_meta(obj)
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    return (uid if isinstance(uid, str) else "", rv if isinstance(rv, str) else "")


def older(obj: Obj, current: Entry | None) -> bool:
    """Whether ``obj`` is older (a lower resourceVersion) than the cached ``current``: an
    event or a list that a write of ours overtook."""
    new_rv, cur_rv = resource_version(object_version(obj)[1]), resource_version(current.version[1]) if current else None
    return new_rv is not None and cur_rv is not None and new_rv < cur_rv


def same_version(current: Entry | None, obj: Obj) -> bool:
    """``obj`` is the version ``current`` was made of: same uid and resourceVersion."""
    return current is not None and bool(current.version[1]) and current.version == object_version(obj)


class Tables:
    """The tables of the cluster's cache that its per-kind handlers share, declared here and
    filled by :class:`~reconciler.daemon.cache.cluster.ClusterCache`: pods and nodes by key
    (:class:`Entry`), each pod's gang key, the SharedDeviceGroups and the pods naming each,
    the tombstones of deleted objects, the last snapshot and its node table, and
    :attr:`version`, which counts changes. Every access holds ``_lock``."""

    retained: bool
    unreadable: Unreadable
    version: int
    _lock: threading.RLock
    _pods: dict[PodKey, Entry]
    _nodes: dict[str, Entry]
    _gang_of: dict[PodKey, str]
    _groups: dict[str, Entry]
    _group_pods: dict[str, set[PodKey]]
    _gone: Tombstones
    _snapshot: tuple[tuple[int, ...], Snapshot] | None
    _node_version: int
    _table: tuple[int, NodeTable] | None
    _usage: BoundUsage | None

    def _retain(self, policy: Keep, obj: Obj, current: Entry | None) -> Obj:
        if same_version(current, obj):
            return obj  # the cache keeps its entry and lets this copy go: no cut
        return retain(policy, obj) if self.retained else obj

    def _kept(self, obj: Obj) -> Obj | None:
        """What an entry of a pod or a node holds of its object: nothing, unless the cache
        keeps objects whole."""
        return None if self.retained else obj

    def _lookup(self, table: Mapping[Any, Entry], key: object) -> tuple[Obj | None, Any]:
        """The object of ``key`` in ``table`` (one of the cache's) and its parsed form, or
        ``(None, None)``."""
        with self._lock:
            entry = table.get(key)
        return (None, None) if entry is None else (entry.obj, entry.info)
