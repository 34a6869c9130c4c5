"""The reconciler's in-memory view of the cluster: each pod and node with its parsed form,
the index of gangs, and Jobs' parallelism.

Fed by the informers (:mod:`reconciler.kube`) and by the controller's own writes
(:meth:`ClusterCache.assume`, so that a gang released a moment ago already uses its nodes
when the next gang is planned, before the watch event arrives, the way kube-scheduler
assumes a pod it has bound). Objects are parsed once, when they arrive
(:class:`~reconciler.engine.snapshot.PodInfo`, :class:`~reconciler.engine.snapshot.NodeInfo`),
and kept next to the object; an object that cannot be parsed is kept out of plans with one
log line (one odd node, say one still registering without ``status.allocatable``, must not
stop every plan). Each feeding method returns the gang keys whose state may have changed,
for the work queue.

Only what Troupe reads is stored: every object is cut down by the retain policy of its
kind (:mod:`reconciler.retain`) before it is stored, whether it comes from an informer
(:meth:`ClusterCache.retain_pod`, :meth:`ClusterCache.retain_node` as the informers'
``transform``, page by page during a list) or from a write's response (:meth:`assume`).
A re-list after ``410 Gone`` does not hold two copies: an object whose uid and
resourceVersion the cache already holds is not cut again but shared, and is neither parsed
nor indexed again (docs/decisions/017-cache-memory.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.engine.fields import ObjectError
from reconciler.engine.gang import Gang, build_gang, gang_key, job_parallelism
from reconciler.engine.snapshot import NodeInfo, NodeTable, PodInfo, Snapshot
from reconciler.engine.topology import TopologyLevels
from reconciler.retain import JOB, NODE, POD, Keep, retain
from reconciler.writer import PodRef
from troupe import contract
from troupe.config import Config

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Entry:
    """A cached object and its parsed form (None when it could not be parsed)."""

    obj: Obj
    info: Any


def _rv(obj: Obj) -> int | None:
    raw = contract.pod_meta(obj).get("resourceVersion")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = contract.pod_meta(obj)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _parse(kind: str, obj: Obj, parse: Any) -> Any:
    try:
        return parse(obj)
    except ObjectError as e:
        ns, name = _ns_name(obj)
        log.warning("%s %s left out of placement: %s", kind, f"{ns}/{name}" if kind == "pod" else name, e)
        return None


def _same_node(a: NodeInfo | None, b: NodeInfo | None) -> bool:
    """Whether two parses of a node agree on everything the engine reads."""
    if a is None or b is None:
        return a is b
    return (a.labels == b.labels and a.allocatable == b.allocatable and a.taints == b.taints
            and a.ready == b.ready and a.unschedulable == b.unschedulable)


def _same_version(a: Obj, b: Obj) -> bool:
    """Same uid and resourceVersion: the same version of the same object."""
    ma, mb = contract.pod_meta(a), contract.pod_meta(b)
    rv = ma.get("resourceVersion")
    return bool(rv) and rv == mb.get("resourceVersion") and ma.get("uid") == mb.get("uid")


class ClusterCache:
    """Pods by :class:`PodRef`, nodes by name, gang key -> member refs, Jobs'
    parallelism. Thread-safe.

    Objects are never mutated in place: an update replaces the entry, so a caller may keep
    what it was given. :attr:`version` counts changes; :meth:`snapshot` is rebuilt only
    when it moved. ``retained`` (default True) stores objects cut down by
    :mod:`reconciler.retain`; False stores them whole (a benchmark's baseline).
    """

    def __init__(self, config: Config, retained: bool = True) -> None:
        self.config = config
        self.retained = retained
        self.levels = TopologyLevels.from_config(config)
        self._lock = threading.RLock()
        self._pods: dict[PodRef, Entry] = {}
        self._nodes: dict[str, Entry] = {}
        self._gang_of: dict[PodRef, str] = {}
        self._members: dict[str, set[PodRef]] = {}
        self._parallelism: dict[tuple[str, str], int] = {}
        self.version = 0
        self._snapshot: tuple[int, Snapshot] | None = None
        self._node_version = 0
        self._table: tuple[int, NodeTable] | None = None
        self._jobs_version = 0
        self._gang_version: dict[str, int] = {}
        self._gangs: dict[str, tuple[tuple[int, int], Gang]] = {}

    # --- retaining ---------------------------------------------------------------------
    def _retain(self, policy: Keep, obj: Obj, current: Entry | None) -> Obj:
        if current is not None and _same_version(current.obj, obj):
            return current.obj
        return retain(policy, obj) if self.retained else obj

    def retain_pod(self, pod: Obj) -> Obj:
        """What the cache keeps of ``pod`` (:data:`reconciler.retain.POD`), or the object
        it holds already when this is the same version: the pods informer's ``transform``."""
        with self._lock:
            current = self._pods.get(PodRef.of(pod))
        return self._retain(POD, pod, current)

    def retain_node(self, node: Obj) -> Obj:
        """What the cache keeps of ``node`` (:data:`reconciler.retain.NODE`), or the object
        it holds already when this is the same version: the nodes informer's ``transform``."""
        with self._lock:
            current = self._nodes.get(_ns_name(node)[1])
        return self._retain(NODE, node, current)

    def retain_job(self, job: Obj) -> Obj:
        """What is read of a Job (:data:`reconciler.retain.JOB`): the jobs informer's ``transform``."""
        return retain(JOB, job) if self.retained else job

    # --- pods ------------------------------------------------------------------------
    def _touch(self, key: str) -> None:
        self._gang_version[key] = self._gang_version.get(key, 0) + 1
        self._gangs.pop(key, None)  # stale now; dropped so its members' old infos can go

    def _unindex(self, ref: PodRef) -> set[str]:
        key = self._gang_of.pop(ref, None)
        if key is None:
            return set()
        self._touch(key)
        self._members[key].discard(ref)
        if not self._members[key]:
            del self._members[key]
            self._gang_version.pop(key, None)
            self._gangs.pop(key, None)
        return {key}

    def _put_pod(self, pod: Obj) -> set[str]:
        ref = PodRef.of(pod)
        current = self._pods.get(ref)
        pod = self._retain(POD, pod, current)
        if current is not None and current.obj is pod:
            return set()  # this very version is stored, parsed and indexed already
        touched = self._unindex(ref)
        info: PodInfo | None = _parse("pod", pod, PodInfo.from_object)
        self._pods[ref] = Entry(pod, info)
        key = gang_key(info, self.config) if info is not None else None
        if key is not None:
            self._gang_of[ref] = key
            self._members.setdefault(key, set()).add(ref)
            self._touch(key)
            touched.add(key)
        self.version += 1
        return touched

    def _drop_pod(self, ref: PodRef) -> set[str]:
        if self._pods.pop(ref, None) is not None:
            self.version += 1
        return self._unindex(ref)

    def replace_pods(self, items: Iterable[Obj]) -> set[str]:
        """Replace every pod with a fresh list; returns every gang key before or after.

        Each pod is applied as it comes (``items`` may be an informer's stream of pages:
        the lock is not held while it fetches the next one), then the pods absent from the
        list are dropped. A pod of the same version as the stored one keeps its entry (no
        second copy, no parse). Meanwhile a snapshot may see some pods already fresh and
        others still stale, as watch events in flight would leave it; the cache lets go
        of its own snapshot at the start, so the replaced objects can be freed as they go.
        """
        with self._lock:
            before = set(self._members)
            self._snapshot = None
        seen: set[PodRef] = set()
        for pod in items:
            with self._lock:
                ref = PodRef.of(pod)
                seen.add(ref)
                current = self._pods.get(ref)
                new_rv, cur_rv = _rv(pod), _rv(current.obj) if current is not None else None
                if new_rv is not None and cur_rv is not None and new_rv < cur_rv:
                    continue  # the controller assumed a newer version while the list was on its way
                self._put_pod(pod)
        with self._lock:
            for ref in [r for r in self._pods if r not in seen]:
                self._drop_pod(ref)
            self.version += 1
            return before | set(self._members)

    def pod_event(self, kind: str, pod: Obj) -> set[str]:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``); returns touched gang keys.

        An event older than an object the controller assumed (lower resourceVersion) is
        ignored: the watch will deliver the newer one.
        """
        with self._lock:
            ref = PodRef.of(pod)
            if kind == "DELETED":
                return self._drop_pod(ref)
            current = self._pods.get(ref)
            new_rv, cur_rv = _rv(pod), _rv(current.obj) if current is not None else None
            if new_rv is not None and cur_rv is not None and new_rv < cur_rv:
                return set()
            return self._put_pod(pod)

    def assume(self, pod: Obj) -> None:
        """Record the object a write of ours returned, ahead of its watch event."""
        self.pod_event("MODIFIED", pod)

    def pod(self, ref: PodRef) -> Obj | None:
        """The cached pod object, or None."""
        with self._lock:
            entry = self._pods.get(ref)
            return None if entry is None else entry.obj

    def members(self, key: str) -> list[PodInfo]:
        """Every parsed pod of gang ``key`` (active or not), in no particular order."""
        with self._lock:
            return [self._pods[r].info for r in self._members.get(key, ())]

    def gang(self, key: str) -> Gang | None:
        """Gang ``key`` built from its cached pods (:func:`~reconciler.engine.gang.build_gang`),
        or None when it has no pod left. Built again only when one of its pods (or a Job)
        changed since the last call."""
        with self._lock:
            refs = self._members.get(key)
            if not refs:
                return None
            stamp = (self._gang_version.get(key, 0), self._jobs_version)
            memo = self._gangs.get(key)
            if memo is not None and memo[0] == stamp:
                return memo[1]
            pods = [self._pods[r].info for r in refs]
            parallelism = dict(self._parallelism)
        gang = build_gang(key, pods, self.config, parallelism)
        with self._lock:
            if (self._gang_version.get(key, 0), self._jobs_version) == stamp:
                self._gangs[key] = (stamp, gang)
        return gang

    def gang_keys(self) -> list[str]:
        """Every known gang key, sorted."""
        with self._lock:
            return sorted(self._members)

    def pending_gangs(self) -> list[str]:
        """Gang keys with at least one gated active member, sorted."""
        with self._lock:
            return sorted(
                k for k, refs in self._members.items()
                if any((i := self._pods[r].info).active and i.gated for r in refs)
            )

    # --- jobs ------------------------------------------------------------------------
    def replace_jobs(self, items: Iterable[Obj]) -> None:
        """Replace every Job with a fresh list (only its parallelism is kept)."""
        with self._lock:
            self._parallelism = {_ns_name(j): job_parallelism(j) for j in items}
            self._jobs_version += 1

    def job_event(self, kind: str, job: Obj) -> None:
        """Apply a Job watch event."""
        with self._lock:
            key = _ns_name(job)
            before = self._parallelism.get(key)
            if kind == "DELETED":
                self._parallelism.pop(key, None)
            else:
                self._parallelism[key] = job_parallelism(job)
            if self._parallelism.get(key) != before:
                self._jobs_version += 1

    # --- nodes -----------------------------------------------------------------------
    def replace_nodes(self, items: Iterable[Obj]) -> None:
        """Replace every node with a fresh list, applied as it comes (``items`` may be a
        stream, as for :meth:`replace_pods`); a node of the same version as the stored
        one keeps its entry; nodes absent from the list are dropped."""
        with self._lock:
            self._snapshot = self._table = None
        seen: set[str] = set()
        for n in items:
            with self._lock:
                name = _ns_name(n)[1]
                seen.add(name)
                current = self._nodes.get(name)
                n = self._retain(NODE, n, current)
                if current is None or current.obj is not n:
                    self._nodes[name] = Entry(n, _parse("node", n, NodeInfo.from_object))
        with self._lock:
            for name in [k for k in self._nodes if k not in seen]:
                del self._nodes[name]
            self._node_version += 1
            self.version += 1

    def node_event(self, kind: str, node: Obj) -> None:
        """Apply a node watch event."""
        with self._lock:
            name = _ns_name(node)[1]
            if kind == "DELETED":
                if self._nodes.pop(name, None) is None:
                    return
            else:
                current = self._nodes.get(name)
                node = self._retain(NODE, node, current)
                if current is not None and current.obj is node:
                    return
                info = _parse("node", node, NodeInfo.from_object)
                self._nodes[name] = Entry(node, info)
                if current is not None and _same_node(current.info, info):
                    return  # a status heartbeat: nothing a decision reads has changed
            self._node_version += 1
            self.version += 1

    def node(self, name: str) -> Obj | None:
        """The cached node object, or None."""
        with self._lock:
            entry = self._nodes.get(name)
            return None if entry is None else entry.obj

    # --- snapshots -------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A snapshot of every parsed node and pod, for plans. Built again only when the
        cache changed since the last one; callers must not change it (decisions do not)."""
        with self._lock:
            if self._snapshot is not None and self._snapshot[0] == self.version:
                return self._snapshot[1]
            version, node_version = self.version, self._node_version
            table = self._table[1] if self._table is not None and self._table[0] == node_version else None
            nodes = [e.info for e in self._nodes.values() if e.info is not None] if table is None else []
            pods = [e.info for e in self._pods.values() if e.info is not None]
        if table is None:
            table = NodeTable(nodes, self.levels)
        snapshot = Snapshot(table, pods, self.levels)
        with self._lock:
            self._snapshot = (version, snapshot)
            self._table = (node_version, table)
        return snapshot
