"""What sizes gangs of ``<prefix>-size: auto``: Jobs' parallelism and the workload objects
(Jobs, JobSets, LeaderWorkerSets, PyTorchJobs, kept as
:class:`~reconciler.engine.model.workloads.Workload` values, not as objects), and the kinds that
cannot be read (docs/decisions/014-workload-gangs.md).

:class:`WorkloadIndex` is the part of :class:`~reconciler.daemon.cache.ClusterCache` that
keeps them; the cache builds a gang from its pods and :meth:`WorkloadIndex.view`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.engine.ledger.parts import count_slots
from reconciler.engine.model import dra
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.membership import PlannedMemo, auto_namespaces, planned_gangs
from reconciler.engine.model.reservations import Record
from troupe import contract
from troupe.adoption import VOLCANO_MIN_MEMBER
from troupe.config import Config

Obj = Mapping[str, Any]


def namespace_and_name(obj: Obj) -> tuple[str, str]:
    """An object's ``(namespace, name)`` (namespace ``default`` when absent; a value that
    is not a string reads as absent)."""
    meta = contract.pod_meta(obj)
    namespace, name = meta.get("namespace"), meta.get("name")
    return (namespace if isinstance(namespace, str) and namespace else "default",
            name if isinstance(name, str) else "")


class WorkloadIndex:
    """Jobs' parallelism by ``(namespace, name)``, workloads by
    :data:`~reconciler.engine.model.workloads.WorkloadKey`, and why a kind cannot be read.
    :attr:`version` counts changes (a gang built from an older version is stale).
    Thread-safe; it takes no other lock while it holds its own. An object that cannot be
    read is left out and noted in ``unreadable`` (:mod:`.unreadable`).

    ``reservation_key`` (bytes) is the key the reconciler signs reservations with
    (:meth:`signed`) and reads them under: a record whose signature does not verify is no
    record (:func:`~reconciler.engine.model.reservations.authentic`); without one, a random
    key of this process's own (docs/decisions/049-hostile-tenants-third-round.md)."""

    def __init__(self, unreadable: Unreadable | None = None, reservation_key: bytes | None = None) -> None:
        self.unreadable = unreadable if unreadable is not None else Unreadable()
        self._key = reservation_key if reservation_key is not None else secrets.token_bytes(32)
        self._lock = threading.RLock()
        self._parallelism: dict[tuple[str, str], int] = {}
        self._workloads: dict[WorkloadKey, wl.Workload] = {}
        self._unavailable: dict[str, str] = {}
        self._view: tuple[int, dict[tuple[str, str], int], wl.Workloads] | None = None
        self._planned: tuple[tuple[int, int], dict[str, wl.Workload]] | None = None
        # What planned_gangs found of each workload, for the config it was found with.
        self._planned_memo: tuple[Config | None, PlannedMemo] = (None, {})
        self._planning = threading.Lock()
        #: resourceVersion of each workload: an event older than what is held (a write of
        #: ours overtook it) is ignored, so a reservation written is never lost again.
        self._rv: dict[WorkloadKey, int] = {}
        self.version = 0
        #: The DRA catalog (``() -> (version, catalog)``) the slots' claims are counted with.
        self.devices: Callable[[], tuple[int, dra.Catalog]] | None = None
        #: The pod groups (``() -> (version, groups, unavailable)``,
        #: :meth:`~reconciler.daemon.cache.podgroups.PodGroupIndex.view`) every view carries.
        self.pod_groups: Callable[[], tuple[int, Mapping[wl.GroupKey, Any], Mapping[str, str]]] | None = None
        #: ReplicaSets, StatefulSets and DaemonSets (what Volcano reads its groups' minimum
        #: from), and why they are not read (``""``: they are);
        #: docs/decisions/065-adopted-pods-join-their-peers-groups.md.
        self._owners: dict[WorkloadKey, wl.OwnerObject] = {}
        self._owners_unread = ""
        #: Reservations written whose write the index has not seen land, by workload: the
        #: workload is held as carrying it (:meth:`assume_record`,
        #: docs/decisions/068-release-pipeline.md), its object as received in ``_real``.
        self._assumed: dict[WorkloadKey, tuple[Record, str]] = {}
        self._real: dict[WorkloadKey, wl.Workload] = {}

    def touch(self) -> None:
        """Something the slots depend on changed (the DRA objects): views are made again."""
        with self._lock:
            self.version += 1

    def view(self) -> tuple[int, dict[tuple[str, str], int], wl.Workloads]:
        """``(version, Jobs' parallelism, workloads)`` as one consistent value, made again
        only after a change; callers must not change it."""
        with self._lock:
            version = self.version
        # The DRA catalog and the pod groups are read without this lock held (their indexes
        # take their own locks, and call touch() after a change); a change after this read makes the view stale, so it
        # is stamped with the version read before.
        catalog = self.devices()[1] if self.devices is not None else None
        _, groups, no_groups = self.pod_groups() if self.pod_groups is not None else (0, {}, {})
        with self._lock:
            if self._view is None or self._view[0] != self.version:
                # Their slots ask for DRA devices as their pods will, counted as read_parts counts them.
                workloads = count_slots(self._workloads, catalog) if catalog is not None else dict(self._workloads)
                self._view = (version, dict(self._parallelism),
                              wl.Workloads(workloads, dict(self._unavailable), groups, no_groups, dict(self._owners),
                                           self._owners_unread))
            return self._view

    def planned(self, config: Config, namespaces_version: int, namespaces: Mapping[str, Mapping[str, str]],
                view: tuple[int, dict[tuple[str, str], int], wl.Workloads] | None = None) -> dict[str, wl.Workload]:
        """Gang key -> the workload it is released as created from
        (:func:`~reconciler.engine.gangs.gang.planned_gangs`; ``namespaces``: name -> labels, of
        version ``namespaces_version``) of :meth:`view`, or of ``view`` (one the caller read
        before), made again only after a change; callers must not change it."""
        version, _, workloads = self.view() if view is None else view
        stamp = (version, namespaces_version)
        with self._lock:
            if self._planned is not None and self._planned[0] == stamp:
                return self._planned[1]
        with self._planning:  # one caller at a time reads and fills the memo; events go on
            if self._planned_memo[0] is not config:
                self._planned_memo = (config, {})
            planned = planned_gangs(workloads, config, auto_namespaces(namespaces), self._planned_memo[1])
        with self._lock:
            self._planned = (stamp, planned)
        return planned

    def replace_jobs(self, items: Iterable[Obj]) -> None:
        """Replace every Job with a fresh list (only its parallelism and its
        :class:`~reconciler.engine.model.workloads.Workload` are kept)."""
        items = list(items)
        with self._lock:
            self._parallelism = {namespace_and_name(j): wl.job_parallelism(j) for j in items}
            self.version += 1
        self.replace_workloads(wl.JOB.kind, items)

    def job_event(self, kind: str, job: Obj) -> None:
        """Apply a Job watch event."""
        with self._lock:
            key = namespace_and_name(job)
            before = self._parallelism.get(key)
            if kind == "DELETED":
                self._parallelism.pop(key, None)
            else:
                self._parallelism[key] = wl.job_parallelism(job)
            if self._parallelism.get(key) != before:
                self.version += 1
        self.workload_event(wl.JOB.kind, kind, job)

    def replace_workloads(self, kind: str, items: Iterable[Obj]) -> None:
        """Replace every workload of ``kind`` (``JobSet``...) with a fresh list; the kind
        is readable again."""
        items = list(items)
        fresh = {w.key: w for obj in items if (w := self._read(kind, obj)) is not None}
        with self._lock:
            self._workloads = {k: v for k, v in self._workloads.items() if k[0] != kind}
            self._workloads.update({k: self._with_assumed(w) for k, w in fresh.items()})
            self._rv = {k: v for k, v in self._rv.items() if k[0] != kind}
            self._unavailable.pop(kind, None)
            self.version += 1

    def workload_event(self, kind: str, event: str, obj: Obj) -> None:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``) of a workload of ``kind``;
        one older than the version held is ignored."""
        new = self._read(kind, obj)
        if new is None:
            return
        raw = contract.pod_meta(obj).get("resourceVersion")
        rv = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 20 else None
        with self._lock:
            before = self._workloads.get(new.key)
            held = self._rv.get(new.key)
            if event == "DELETED":
                self._workloads.pop(new.key, None)
                self._rv.pop(new.key, None)
                self._assumed.pop(new.key, None)
                self._real.pop(new.key, None)
            elif rv is not None and held is not None and rv < held:
                return
            else:
                self._workloads[new.key] = self._with_assumed(new)
                if rv is not None:
                    self._rv[new.key] = rv
            if self._workloads.get(new.key) != before:
                self.version += 1

    def _with_assumed(self, real: wl.Workload) -> wl.Workload:
        """``real`` (a workload as received) as the index holds it: carrying the reservation
        assumed for it until it shows that one itself (the write landed) or another UID
        (a new object, which the record was not signed for). Called with the lock held."""
        found = self._assumed.get(real.key)
        if found is None:
            return real
        assumed, uid = found
        if real.record == assumed or (real.uid and real.uid != uid):
            del self._assumed[real.key]
            self._real.pop(real.key, None)
            return real
        self._real[real.key] = real
        return replace(real, record=assumed, record_error="")

    def assume_record(self, key: WorkloadKey, record: Record) -> bool:
        """Hold workload ``key`` as carrying ``record`` (signed for it: :meth:`signed`) from
        now on, while its write is in flight (:meth:`forget_record` ends it when the write is
        refused; the workload received with the record ends it when it lands). False when
        the index holds no such workload."""
        with self._lock:
            found = self._workloads.get(key)
            if found is None:
                return False
            self._real[key] = self._real.get(key, found)
            self._assumed[key] = (record, found.uid)
            self._workloads[key] = replace(found, record=record, record_error="")
            self.version += 1
            return True

    def forget_record(self, key: WorkloadKey, record: Record) -> None:
        """End the assumption of ``record`` on workload ``key`` (its write was refused, or
        its outcome is unknown and the next decision will look again): the workload is
        held as last received."""
        with self._lock:
            if self._assumed.get(key, (None, ""))[0] != record:
                return
            del self._assumed[key]
            real = self._real.pop(key, None)
            if real is not None and key in self._workloads:
                self._workloads[key] = real
            self.version += 1

    def _read(self, kind: str, obj: Obj) -> wl.Workload | None:
        """:func:`~reconciler.engine.model.workloads.workload` of ``obj``, or None (also when
        reading it raised: then it is noted in :attr:`unreadable`)."""
        namespace, name = namespace_and_name(obj)
        return self.unreadable.read(kind, f"{namespace}/{name}", lambda o: wl.workload(kind, o, self._key), obj)[0]

    def signed(self, key: WorkloadKey, record: Record) -> tuple[Record, str] | None:
        """``record`` signed for the workload ``key`` as the cache holds it, and that
        workload's UID (the write's precondition), or None when the cache holds no such
        workload (:meth:`Record.signed <reconciler.engine.model.reservations.Record.signed>`)."""
        with self._lock:
            found = self._workloads.get(key)
        if found is None:
            return None
        return record.signed(key, found.uid, self._key), found.uid

    def workload_unavailable(self, kind: str, why: str) -> None:
        """Record that no object of ``kind`` can be read (``why``: its CRD is not
        installed, say); its gangs wait with that reason."""
        with self._lock:
            self._workloads = {k: v for k, v in self._workloads.items() if k[0] != kind}
            if self._unavailable.get(kind) != why:
                self._unavailable[kind] = why
                self.version += 1

    @staticmethod
    def retain_owner(obj: Obj) -> Obj:
        """What is kept of a ReplicaSet, StatefulSet or DaemonSet (its informer's
        ``transform``): its name, namespace, uid, resourceVersion and Volcano's
        ``scheduling.volcano.sh/group-min-member`` annotation, nothing of its spec."""
        meta = contract.pod_meta(obj)
        kept: dict[str, Any] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping) and VOLCANO_MIN_MEMBER in annotations:
            kept["annotations"] = {VOLCANO_MIN_MEMBER: annotations[VOLCANO_MIN_MEMBER]}
        return {"metadata": kept}

    def replace_owners(self, kind: str, items: Iterable[Obj]) -> None:
        """Replace every owner object of ``kind`` (``ReplicaSet``...) with a fresh list."""
        fresh = {o.key: o for obj in items if (o := wl.owner_object(kind, obj)) is not None}
        with self._lock:
            self._owners = {k: v for k, v in self._owners.items() if k[0] != kind}
            self._owners.update(fresh)
            self._owners_unread = ""
            self.version += 1

    def owner_event(self, kind: str, event: str, obj: Obj) -> None:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``) of an owner object of
        ``kind``; views are made again only when what is kept of it changed."""
        new = wl.owner_object(kind, obj)
        if new is None:
            return
        with self._lock:
            before = self._owners.get(new.key)
            if event == "DELETED":
                self._owners.pop(new.key, None)
            else:
                self._owners[new.key] = new
            if self._owners.get(new.key) != before:
                self.version += 1

    def owners_unread(self, why: str) -> None:
        """Record that no owner object is read (``why``); Volcano's gangs whose owner is one
        wait with that reason."""
        with self._lock:
            self._owners, self._owners_unread = {}, why
            self.version += 1
