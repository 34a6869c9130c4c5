"""What the volume filters and pod affinity's namespace selectors read: PersistentVolumeClaims,
PersistentVolumes, CSINodes (kept as the engine's
:class:`~reconciler.engine.model.volumes.VolumeCatalog` values) and namespaces' labels.

:class:`VolumeIndex` is the part of :class:`~reconciler.daemon.cache.ClusterCache` that
keeps them; the cache's snapshot takes :meth:`VolumeIndex.view`. Objects are parsed as
they arrive and only the parsed values are kept; one that cannot be parsed is left out
(logged), as an unreadable node is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.engine.model.fields import string
from reconciler.engine.model.volumes import PARSERS, VolumeCatalog
from reconciler.objects.retain import CLAIM, CSI_NODE, NAMESPACE, VOLUME, Keep, retain

Obj = Mapping[str, Any]

CLAIMS, VOLUMES, CSI_NODES, NAMESPACES = "persistentvolumeclaims", "persistentvolumes", "csinodes", "namespaces"
#: Per kind: its retain policy, its key in the index and the value kept.
_KINDS: dict[str, tuple[Keep, Callable[[Obj], Any]]] = {
    CLAIMS: (CLAIM, PARSERS["PersistentVolumeClaim"]),
    VOLUMES: (VOLUME, PARSERS["PersistentVolume"]),
    CSI_NODES: (CSI_NODE, PARSERS["CSINode"]),
    NAMESPACES: (NAMESPACE, PARSERS["Namespace"]),
}


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), string(meta, "name") if isinstance(meta, Mapping) else ""


class VolumeIndex:
    """Parsed claims, volumes, CSINodes and namespaces' labels, by kind and ``(namespace,
    name)``. :attr:`version` counts changes. Thread-safe; it takes no other lock while it
    holds its own."""

    def __init__(self, unreadable: Unreadable | None = None) -> None:
        self._unreadable = unreadable or Unreadable()
        self._lock = threading.RLock()
        self._items: dict[str, dict[tuple[str, str], Any]] = {kind: {} for kind in _KINDS}
        self._view: tuple[int, VolumeCatalog, dict[str, Mapping[str, str]]] | None = None
        self.version = 0

    @staticmethod
    def retain(kind: str, obj: Obj) -> Obj:
        """What is kept of an object of ``kind`` (one of ``persistentvolumeclaims``,
        ``persistentvolumes``, ``csinodes``, ``namespaces``): its informer's ``transform``."""
        return retain(_KINDS[kind][0], obj)

    def _parsed(self, kind: str, obj: Obj) -> Any:
        """The parsed object, or None when it cannot be read (whatever reading it raised:
        logged once and counted, :mod:`.unreadable`)."""
        return self._unreadable.read(kind, "/".join(_key(obj)), _KINDS[kind][1], obj)[0]

    def replace(self, kind: str, items: Iterable[Obj]) -> None:
        """Every object of ``kind`` from a fresh list."""
        parsed = {_key(obj): value for obj in items if (value := self._parsed(kind, obj)) is not None}
        with self._lock:
            self._items[kind] = parsed
            self.version += 1

    def event(self, kind: str, event: str, obj: Obj) -> None:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``, ``SYNC``) of ``kind``."""
        key = _key(obj)
        value = None if event == "DELETED" else self._parsed(kind, obj)
        with self._lock:
            if value is None:
                self._items[kind].pop(key, None)
            else:
                self._items[kind][key] = value
            self.version += 1

    def view(self) -> tuple[int, VolumeCatalog, dict[str, Mapping[str, str]]]:
        """``(version, the catalog, namespace -> labels)`` as one consistent value, made
        again only after a change; callers must not change it."""
        with self._lock:
            if self._view is None or self._view[0] != self.version:
                items = self._items
                catalog = VolumeCatalog(items[CLAIMS].values(), items[VOLUMES].values(), items[CSI_NODES].values())
                self._view = (self.version, catalog, {name: labels for (_, name), labels in items[NAMESPACES].items()})
            return self._view
