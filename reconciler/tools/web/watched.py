"""The live cluster of ``kubectl troupe topology --web``, kept by watches instead of listed
again for every refresh of the page (docs/decisions/053-map-at-scale.md).

:class:`WatchedCluster` lists the pods and nodes once and then watches them, each with an
:class:`~reconciler.kube.informer.Informer` (the reconciler's own list+watch: resumed from
the last ``resourceVersion``, listed again on ``410 Gone``, retried with backoff), applying
every event to the objects it holds. The other kinds a decision reads (Jobs, workloads,
PodDisruptionBudgets, DRA and volume objects...: :func:`~reconciler.kube.readonly.read_cluster`
without ``Pod`` and ``Node``) change rarely and draw nothing on the map: they are listed
again at most every :data:`RELIST_SECONDS`, when the page asks (:meth:`WatchedCluster.stamp`,
which changes when anything does, so the page's data is computed again only then:
:func:`reconciler.tools.web.local.reader`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from reconciler.kube.informer import Informer, Resource
from reconciler.objects.retain import NODE, POD, retain

#: Seconds between two lists of the kinds that are not watched (and the longest a page goes
#: without being decided again, so that timeouts and waiting times move on a quiet cluster).
RELIST_SECONDS = 60.0
#: What is kept of an object of each watched kind: what the reconciler's cache keeps.
KEPT = {"Pod": POD, "Node": NODE}

Triple = tuple[str, str, Mapping[str, Any]]


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class WatchedCluster:
    """The objects of a live cluster, as ``(where, kind, object)`` triples
    (:func:`reconciler.tools.views.read` reads them), the watched kinds kept up to date by
    events.

    ``watched``: kind -> the collection its informer lists and watches
    (:func:`~reconciler.kube.readonly.watched_resources`); ``list_rest()``: every other
    kind's objects, listed once (raises ``OSError`` when the cluster cannot be read);
    ``informer``: the informer class (tests pass a stand-in); ``clock``: monotonic seconds.
    Thread-safe: the informers' threads apply events while a request reads."""

    def __init__(self, watched: Mapping[str, Resource], list_rest: Callable[[], list[Triple]],
                 relist_seconds: float = RELIST_SECONDS, informer: type[Informer] = Informer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.list_rest = list_rest
        self.relist_seconds = relist_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {kind: {} for kind in watched}
        self._rest: list[Triple] = []
        self._listed_at: float | None = None
        #: How many changes the watched kinds have seen (a list, an event).
        self.version = 0
        self.informers = {kind: informer(resource, self._on_list(kind), self._on_event(kind),
                                         transform=self._transform(kind))
                          for kind, resource in watched.items()}

    @staticmethod
    def _transform(kind: str) -> Callable[[dict[str, Any]], Mapping[str, Any]] | None:
        policy = KEPT.get(kind)
        return None if policy is None else (lambda obj: retain(policy, obj))

    def _on_list(self, kind: str) -> Callable[[Any], None]:
        def on_list(items: Any) -> None:
            fresh = {_key(o): o for o in items}
            with self._lock:
                self._held[kind] = fresh
                self.version += 1
        return on_list

    def _on_event(self, kind: str) -> Callable[[str, Mapping[str, Any]], None]:
        def on_event(event: str, obj: Mapping[str, Any]) -> None:
            with self._lock:
                if event == "DELETED":
                    self._held[kind].pop(_key(obj), None)
                else:
                    self._held[kind][_key(obj)] = obj
                self.version += 1
        return on_event

    def start(self, wait: float) -> WatchedCluster:
        """List the other kinds, start the informers and wait up to ``wait`` seconds for each
        first list; returns self. Raises ``OSError`` (``PermissionError`` for a 403) naming
        the collection and its last error when one has not listed by then, after stopping
        them all."""
        self._relist()
        for informer in self.informers.values():
            informer.start()
        deadline = self.clock() + wait
        for informer in self.informers.values():
            if not informer.synced.wait(max(0.0, deadline - self.clock())):
                why = informer.last_error or "no answer"
                self.stop()
                error = PermissionError if " 403 " in f" {why} " else OSError
                raise error(f"cannot list {informer.resource.name} within {wait:g}s: {why}")
        return self

    def stop(self) -> None:
        """Stop every informer (their watches are cut)."""
        for informer in self.informers.values():
            informer.stop()

    def _relist(self) -> None:
        rest = self.list_rest()
        with self._lock:
            self._rest = rest
            self._listed_at = self.clock()

    def stamp(self) -> tuple[int, float | None]:
        """What changes when the objects do: the watched kinds' :attr:`version` and when the
        other kinds were last listed, after listing them again if they are due. Raises
        ``OSError`` when a watch has failed for
        :data:`~reconciler.kube.informer.UNHEALTHY_AFTER_SECONDS` (the page keeps its last
        map and says why) or the other kinds cannot be listed."""
        problem = self.problem()
        if problem:
            raise OSError(problem)
        if self._listed_at is None or self.clock() - self._listed_at >= self.relist_seconds:
            self._relist()
        with self._lock:
            return self.version, self._listed_at

    def problem(self) -> str:
        """``""`` while every watch works, else what is wrong
        (:meth:`~reconciler.kube.informer.Informer.problem`)."""
        return "; ".join(p for informer in self.informers.values() if (p := informer.problem()))

    def objects(self) -> list[Triple]:
        """Every object, in :func:`~reconciler.kube.readonly.read_cluster`'s order: the nodes,
        the other kinds as last listed (:meth:`stamp` lists them again), the pods as the
        watches last told them, then the SharedDeviceGroups."""
        with self._lock:
            nodes, pods = (self._triples(kind) for kind in ("Node", "Pod"))
            rest = [t for t in self._rest if t[1] != "SharedDeviceGroup"]
            groups = [t for t in self._rest if t[1] == "SharedDeviceGroup"]
            return [*nodes, *rest, *pods, *groups]  # the order the simulator builds in

    def _triples(self, kind: str) -> list[Triple]:
        return [(f"watched {kind} {namespace + '/' if namespace else ''}{name}", kind, obj)
                for (namespace, name), obj in sorted(self._held.get(kind, {}).items())]


#: Seconds to wait for the first lists of the pods and nodes when ``--request-timeout`` is 0.
FIRST_LIST_SECONDS = 60.0


def watch_cluster(api: Any, timeout: float | None, err: Any = None) -> WatchedCluster:
    """A started :class:`WatchedCluster` of the cluster ``api`` (a Kubernetes client)
    reaches: pods and nodes watched (:func:`~reconciler.kube.readonly.watched_resources`), the
    rest listed by :func:`~reconciler.kube.readonly.read_cluster`. ``timeout``: seconds for
    each request and for the first lists (``--request-timeout``; None: no request timeout,
    :data:`FIRST_LIST_SECONDS` for the first lists). What a list says of a kind this user may
    not list is printed once on ``err`` (default stderr). Raises ``OSError`` as
    :meth:`WatchedCluster.start` and ``read_cluster`` do."""
    from reconciler import kube

    told: set[str] = set()

    def rest() -> list[Triple]:
        notes: list[str] = []
        objects = kube.read_cluster(api, (), notes, timeout, frozenset(KEPT))
        for note in notes:
            if note not in told:
                told.add(note)
                print(note, file=err or sys.stderr)
        return objects

    return WatchedCluster(kube.watched_resources(api), rest).start(timeout or FIRST_LIST_SECONDS)
