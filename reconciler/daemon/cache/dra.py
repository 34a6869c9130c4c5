"""What Dynamic Resource Allocation counts read: ResourceSlices, DeviceClasses, ResourceClaims
and ResourceClaimTemplates (``resource.k8s.io/v1``), kept parsed
(:mod:`reconciler.engine.model.dra`).

:class:`DraIndex` is the part of :class:`~reconciler.daemon.cache.ClusterCache` that keeps
them; the cache's snapshot and its workloads' slots take :meth:`DraIndex.view`. Each object
is parsed as it arrives and only the parsed value kept; one that cannot be parsed is left
out (logged and counted, as an unreadable node is). A cluster that does not serve
``resource.k8s.io/v1`` has none: its informers find the collections absent, and nothing
changes for anyone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.engine.model import dra

Obj = Mapping[str, Any]

#: The collections, by the resource name of their informer, with the kind they hold.
KINDS = {"resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass", "resourceclaims": "ResourceClaim",
         "resourceclaimtemplates": "ResourceClaimTemplate"}
#: What is kept of each object: its identity, spec and (claims) the allocation.
_KEEP = ("apiVersion", "kind", "metadata", "spec", "status")


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class DraIndex:
    """Parsed DRA objects by collection and ``(namespace, name)``; :attr:`version` counts
    changes; ``on_change`` is called after each, outside the lock (the cache bumps what
    depends on it). Thread-safe; it takes no other lock while it holds its own."""

    def __init__(self, unreadable: Unreadable | None = None, on_change: Callable[[], None] | None = None) -> None:
        self._unreadable = unreadable or Unreadable()
        self._on_change = on_change
        self._lock = threading.RLock()
        self._items: dict[str, dict[tuple[str, str], Obj]] = {name: {} for name in KINDS}
        self._view: tuple[int, dra.Catalog] | None = None
        self.version = 0

    @staticmethod
    def retain(obj: Obj) -> Obj:
        """What is kept of an object (its informer's ``transform``): metadata's name and
        namespace, spec and status (a slice's devices are what is counted)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        kept = {k: obj[k] for k in _KEEP if k in obj and k != "metadata"}
        kept["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
        return kept

    def _parsed(self, collection: str, obj: Obj) -> Obj | None:
        """The object if it can be read (its kind's parser accepts it), else None (logged
        once and counted, :mod:`.unreadable`)."""
        kind = KINDS[collection]

        def check(o: Obj) -> Obj:
            dra.catalog([(kind, o)])
            return o

        return self._unreadable.read(kind, "/".join(p for p in _key(obj) if p), check, obj)[0]

    def _changed(self) -> None:
        """Called after a change, with this index's lock released: ``on_change`` takes other
        locks (the workload index's, whose views read this index under their own)."""
        if self._on_change is not None:
            self._on_change()

    def replace(self, collection: str, items: Iterable[Obj]) -> None:
        """Every object of ``collection`` from a fresh list."""
        parsed = {_key(obj): value for obj in items if (value := self._parsed(collection, obj)) is not None}
        with self._lock:
            self._items[collection] = parsed
            self.version += 1
        self._changed()

    def event(self, collection: str, event: str, obj: Obj) -> None:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``, ``SYNC``) of ``collection``."""
        key = _key(obj)
        value = None if event == "DELETED" else self._parsed(collection, obj)
        with self._lock:
            if value is None:
                self._items[collection].pop(key, None)
            else:
                self._items[collection][key] = value
            self.version += 1
        self._changed()

    def view(self) -> tuple[int, dra.Catalog]:
        """``(version, the catalog)``, made again only after a change; callers must not change it."""
        with self._lock:
            if self._view is None or self._view[0] != self.version:
                pairs = [(KINDS[c], obj) for c, items in self._items.items() for obj in items.values()]
                self._view = (self.version, dra.catalog(pairs))
            return self._view
