"""The pod groups gangs are declared by: the upstream Workload API's ``PodGroup``
(``scheduling.k8s.io``, ``v1beta1``, ``v1alpha3`` or ``v1alpha2``) and the peer schedulers'
(Volcano, coscheduling, KAI), kept parsed (:class:`~troupe.podgroups.PodGroupSpec`;
docs/decisions/056-pod-groups.md).

:class:`PodGroupIndex` is the part of :class:`~reconciler.daemon.cache.ClusterCache` that
keeps them; the workloads' view (:class:`~reconciler.daemon.cache.workloads.WorkloadIndex`)
hands them to every gang built. Each API version has an informer of its own, optional as
a custom resource: one that is not served delivers nothing and says why, and is looked
for again as the DRA kinds and workloads are (:class:`~reconciler.kube.informer.Resource`).
Where two versions of one source are served (an upgrade), the same object listed by both
is one group, read from the preferred version (:data:`troupe.podgroups.GROUP_APIS`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.engine.model.workloads import GroupKey
from troupe.config import Config
from troupe.podgroups import GROUP_APIS, PodGroupSpec, parse_pod_group

Obj = Mapping[str, Any]

#: Every ``(source, version)`` watched, preferred versions first.
VERSIONS: tuple[tuple[str, str], ...] = tuple((api.source, v) for api in GROUP_APIS for v in api.versions)

Groups = Mapping[GroupKey, PodGroupSpec]


class PodGroupIndex:
    """Parsed pod groups by ``(source, version)`` and ``(namespace, name)``, and why a
    source's API is not served. :attr:`version` counts changes; ``on_change`` is called
    after each, outside the lock (the cache's workloads view, which carries the groups to
    the gangs, is made again). Thread-safe; it takes no other lock while it holds its own."""

    def __init__(self, config: Config, unreadable: Unreadable | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self._config = config
        self._unreadable = unreadable or Unreadable()
        self._on_change = on_change
        self._lock = threading.RLock()
        self._items: dict[tuple[str, str], dict[tuple[str, str], PodGroupSpec]] = {sv: {} for sv in VERSIONS}
        self._absent: dict[tuple[str, str], str] = {}
        self._view: tuple[int, dict[GroupKey, PodGroupSpec], dict[str, str]] | None = None
        self.version = 0

    @staticmethod
    def retain(obj: Obj) -> Obj:
        """What is kept of a group object (its informer's ``transform``): its API version,
        name, namespace and spec."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        kept: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj}
        kept["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
        return kept

    def _parsed(self, source: str, obj: Obj) -> tuple[tuple[str, str], PodGroupSpec | None]:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        spec = self._unreadable.read(f"PodGroup ({source})", f"{namespace}/{name}",
                                     lambda o: parse_pod_group(source, o, self._config), obj)[0]
        return (namespace, name), spec

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    def replace(self, source: str, version: str, items: Iterable[Obj]) -> None:
        """Every group of ``source`` served at ``version``, from a fresh list (the API is
        served: any reason noted by :meth:`absent` is dropped)."""
        parsed = {key: spec for obj in items for key, spec in (self._parsed(source, obj),) if spec is not None}
        with self._lock:
            self._items[(source, version)] = parsed
            self._absent.pop((source, version), None)
            self.version += 1
        self._changed()

    def event(self, source: str, version: str, event: str, obj: Obj) -> None:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``, ``SYNC``) of a group of
        ``source`` at ``version``."""
        key, spec = self._parsed(source, obj)
        with self._lock:
            if event == "DELETED" or spec is None:
                self._items[(source, version)].pop(key, None)
            else:
                self._items[(source, version)][key] = spec
            self.version += 1
        self._changed()

    def absent(self, source: str, version: str, why: str) -> None:
        """``source``'s API at ``version`` is not served (``why``): it holds no group."""
        with self._lock:
            self._items[(source, version)] = {}
            if self._absent.get((source, version)) == why:
                return
            self._absent[(source, version)] = why
            self.version += 1
        self._changed()

    def view(self) -> tuple[int, Groups, Mapping[str, str]]:
        """``(version, groups by (source, namespace, name), source -> why none of its
        versions is served)``, made again only after a change; callers must not change it."""
        with self._lock:
            if self._view is None or self._view[0] != self.version:
                groups: dict[GroupKey, PodGroupSpec] = {}
                for (source, _), items in self._items.items():  # preferred versions first: they win
                    for (namespace, name), spec in items.items():
                        groups.setdefault((source, namespace, name), spec)
                unavailable = {}
                for api in GROUP_APIS:
                    whys = [self._absent.get((api.source, v)) for v in api.versions]
                    if all(whys):
                        unavailable[api.source] = "; ".join(w for w in whys if w)
                self._view = (self.version, groups, unavailable)
            return self._view
