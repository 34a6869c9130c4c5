"""The reconciler's in-memory view of the cluster (:class:`ClusterCache`; the package
docstring of :mod:`reconciler.daemon.cache` says how it is fed and what it keeps)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from reconciler.daemon.cache.assumed import UNKNOWN_OUTCOME_SECONDS, Assumptions
from reconciler.daemon.cache.budgets import BudgetIndex
from reconciler.daemon.cache.capacity import CapacityIndex
from reconciler.daemon.cache.devicegroups import DeviceGroupHandlers
from reconciler.daemon.cache.dra import DraIndex
from reconciler.daemon.cache.entries import (
    Entry,
    object_version,
    older,
    resource_version,
    same_version,
)
from reconciler.daemon.cache.keys import group_key
from reconciler.daemon.cache.nodes import NodeHandlers
from reconciler.daemon.cache.podgroups import PodGroupIndex
from reconciler.daemon.cache.tombstones import Tombstones
from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.daemon.cache.volumes import VolumeIndex
from reconciler.daemon.cache.workloads import Obj, WorkloadIndex
from reconciler.engine.gangs.gang import Gang, build_gang
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.draunits import NodesMemo
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.parts import SnapshotParts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.ledger.usage import BoundUsage
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.devicegroups import DeviceGroup
from reconciler.engine.model.fields import shared
from reconciler.engine.model.keys import PodKey, WorkloadKey
from reconciler.engine.model.pods import PodInfo, same_for_decisions, unreadable_pod
from reconciler.engine.model.workloads import Workload
from reconciler.objects.retain import JOB, POD, retain
from troupe.config import Config

__all__ = ["ClusterCache", "Entry"]


class ClusterCache(NodeHandlers, DeviceGroupHandlers):
    """Pods by :class:`PodKey`, nodes by name, gang key -> member refs, Jobs'
    parallelism, SharedDeviceGroups by name (and their pods). Thread-safe.

    Objects are never mutated in place: an update replaces the entry, so a caller may keep
    what it was given. :attr:`version` counts changes; :meth:`snapshot` is rebuilt only
    when it moved. ``retained`` (default True) stores objects cut down by
    :mod:`reconciler.objects.retain`; False stores them whole (a benchmark's baseline).
    An object that cannot be read is kept with no parsed form and left out of plans
    (:attr:`unreadable`; ``on_unreadable(kind)`` is called when one is found, for a metric).
    ``reservation_key``: the key reservations are signed with and read under
    (:class:`~.workloads.WorkloadIndex`; None: a random one of this process's own).
    ``clock`` gives monotonic seconds (how long an assumed member outlives a write whose
    outcome is unknown, :mod:`.assumed`).
    """

    def __init__(self, config: Config, retained: bool = True,
                 on_unreadable: Callable[[str], None] | None = None, reservation_key: bytes | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        #: The objects that could not be read, and why (:mod:`.unreadable`).
        self.unreadable = Unreadable(on_unreadable)
        self.retained = retained
        self.levels = TopologyLevels.from_config(config)
        self._lock = threading.RLock()
        self._pods: dict[PodKey, Entry] = {}
        self._nodes: dict[str, Entry] = {}
        self._gang_of: dict[PodKey, str] = {}
        self._members: dict[str, set[PodKey]] = {}
        #: Jobs' parallelism and the workloads that size auto gangs.
        self.workloads = WorkloadIndex(self.unreadable, reservation_key)
        #: The PodDisruptionBudgets every snapshot carries (atomic preemption counts them).
        self.budgets = BudgetIndex(self.unreadable)
        #: Claims, volumes, CSINodes and namespaces' labels (:mod:`.volumes`).
        self.volumes = VolumeIndex(self.unreadable)
        #: The DRA objects (:mod:`.dra`); a change changes what workloads' slots ask for.
        self.dra = DraIndex(self.unreadable, on_change=self.workloads.touch)
        self.workloads.devices = self.dra.view
        #: The pod groups gangs are declared by (:mod:`.podgroups`); a change changes the
        #: workloads' view every gang is built with (docs/decisions/056-pod-groups.md).
        self.pod_groups = PodGroupIndex(config, self.unreadable, on_change=self.workloads.touch)
        self.workloads.pod_groups = self.pod_groups.view
        #: The ProvisioningRequests, read when ``provisioning`` is on (:mod:`.capacity`).
        self.capacity = CapacityIndex()
        self.version = 0
        self._snapshot: tuple[tuple[int, ...], Snapshot] | None = None
        self._node_version = 0
        self._table: tuple[int, NodeTable] | None = None
        #: What the bound pods use on the nodes of ``_table``, kept up to date pod by pod
        #: (docs/decisions/061-bound-usage.md); None until a snapshot is built on that table.
        self._usage: BoundUsage | None = None
        #: The parsed pods a snapshot holds (readable ones), in the order they came.
        self._readable_pods: dict[PodKey, PodInfo] = {}
        #: DRA's counted nodes and their table, kept across snapshots (:class:`~reconciler.engine.ledger.draunits.NodesMemo`).
        self._devices = NodesMemo()
        self._gang_version: dict[str, int] = {}
        self._gangs: dict[str, tuple[tuple[int, int], Gang]] = {}
        self._groups: dict[str, Entry] = {}
        self._group_pods: dict[str, set[PodKey]] = {}
        #: Objects deleted, with the resourceVersion of their deletion (:mod:`.tombstones`).
        self._gone = Tombstones()
        #: Members of releases decided whose writes the cache has not seen yet: snapshots
        #: count them as written (:mod:`.assumed`, docs/decisions/068-release-pipeline.md).
        self._assumed = Assumptions(clock)

    # --- retaining (nodes' and groups' in :mod:`.nodes`, :mod:`.devicegroups`) -----------
    def retain_pod(self, pod: Obj) -> Obj:
        """What the cache parses of ``pod`` (:data:`reconciler.objects.retain.POD`), or ``pod``
        as it is when the cache holds this version already (it will not be read again):
        the pods informer's ``transform``."""
        with self._lock:
            current = self._pods.get(PodKey.of(pod))
        return self._retain(POD, pod, current)

    def retain_job(self, job: Obj) -> Obj:
        """What is read of a Job (:data:`reconciler.objects.retain.JOB`): the jobs informer's ``transform``."""
        return retain(JOB, job) if self.retained else job

    def assume_workload(self, kind: str, obj: Obj) -> None:
        """Apply a workload as a write of ours returned it, ahead of its watch event."""
        self.workloads.workload_event(kind, "MODIFIED", self.retain_job(obj) if kind == "Job" else obj)

    # --- pods ------------------------------------------------------------------------
    def _touch(self, key: str) -> None:
        self._gang_version[key] = self._gang_version.get(key, 0) + 1
        self._gangs.pop(key, None)  # stale now; dropped so its members' old infos can go

    def _unindex(self, ref: PodKey) -> set[str]:
        touched: set[str] = set()
        entry = self._pods.get(ref)
        group = entry.info.device_group if entry is not None and entry.info is not None else ""
        if group:
            self._group_pods.get(group, set()).discard(ref)
            touched.add(group_key(group))
        key = self._gang_of.pop(ref, None)
        if key is None:
            return touched
        self._touch(key)
        self._members[key].discard(ref)
        if not self._members[key]:
            del self._members[key]
            self._gang_version.pop(key, None)
            self._gangs.pop(key, None)
        return {key} | touched

    def _put_pod(self, pod: Obj) -> set[str]:
        ref = PodKey.of(pod)
        current = self._pods.get(ref)
        if same_version(current, pod):  # this very version is stored, parsed and indexed already
            if ref in self._assumed and current is not None and \
                    self._assumed.settled_by(ref, None if current.partial else current.info):
                self._restore(ref)  # a write's response that the watch delivered first
                self.version += 1
            return set()
        pod = self._retain(POD, pod, None)
        was = self._gang_of.get(ref)
        touched = self._unindex(ref)
        # An unreadable pod is still a member of its gang, which it holds with why.
        read, why = self.unreadable.read("pod", str(ref), self._read_pod, pod,
                                         lambda o, why: self._read_pod(o, unreadable_pod(o, why)))
        info, key = read if read is not None else (None, None)
        if info is not None and info.key == ref:
            ref = info.key  # one key object for the pod's entry, its info and the indexes
        if key is not None:
            key = shared(key)  # the gang's members hold one string
        self._pods[ref] = Entry(self._kept(pod), info, bool(why), object_version(pod))
        if self._usage is not None:
            self._usage.remove(ref)
        if info is not None and not why:  # what a snapshot holds (an unreadable pod counts for nothing)
            assumed = self._assumed.get(ref)
            self._readable_pods[ref] = info if assumed is None or self._assumed.settled_by(ref, info) else assumed
            if self._usage is not None:
                self._usage.add(info)
        else:
            self._assumed.settled_by(ref, None)
            self._readable_pods.pop(ref, None)
        if info is not None and info.device_group:
            self._group_pods.setdefault(info.device_group, set()).add(ref)
            touched.add(group_key(info.device_group))
        if key is not None:
            self._gang_of[ref] = key
            self._members.setdefault(key, set()).add(ref)
            self._touch(key)
            touched.add(key)
        self.version += 1
        if (current is not None and current.info is not None and not current.partial and info is not None
                and not why and was == key and same_for_decisions(current.info, info)):
            return set()  # nothing a decision reads changed (the reconciler's own condition, say): none to queue
        return touched

    def _read_pod(self, pod: Obj, info: PodInfo | None = None) -> tuple[PodInfo, str | None]:
        """A pod's parsed form (``info``, else :meth:`PodInfo.from_object`) and its gang key
        (None: no gang); raises what they raise."""
        info = PodInfo.from_object(pod) if info is None else info
        return info, gang_key(info, self.config)

    def _drop_pod(self, ref: PodKey) -> set[str]:
        self.unreadable.forget("pod", str(ref))
        self._assumed.forget((ref,))
        touched = self._unindex(ref)
        if self._usage is not None:
            self._usage.remove(ref)
        self._readable_pods.pop(ref, None)
        if self._pods.pop(ref, None) is not None:
            self.version += 1
        return touched

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
            before = set(self._members) | {group_key(g) for g in self._group_pods}
            self._snapshot = None
        seen: set[PodKey] = set()
        for pod in items:
            with self._lock:
                ref = PodKey.of(pod)
                seen.add(ref)
                if older(pod, self._pods.get(ref)):
                    continue  # the controller assumed a newer version while the list was on its way
                self._put_pod(pod)
        with self._lock:
            for ref in [r for r in self._pods if r not in seen]:
                self._drop_pod(ref)
            self.version += 1
            return before | set(self._members) | {group_key(g) for g in self._group_pods}

    def pod_event(self, kind: str, pod: Obj) -> set[str]:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``); returns touched gang keys.

        An event older than an object the controller assumed (lower resourceVersion) is
        ignored: the watch will deliver the newer one.
        """
        with self._lock:
            ref = PodKey.of(pod)
            if kind == "DELETED":
                self._gone.bury(("pod", str(ref)), resource_version(object_version(pod)[1]))
                return self._drop_pod(ref)
            current = self._pods.get(ref)
            if older(pod, current):
                return set()
            if current is None and self._gone.buried(("pod", str(ref)), resource_version(object_version(pod)[1])):
                return set()
            return self._put_pod(pod)

    def assume(self, pod: Obj) -> None:
        """Record the object a write of ours returned, ahead of its watch event."""
        self.pod_event("MODIFIED", pod)

    def assume_deleting(self, ref: PodKey) -> None:
        """Hold pod ``ref`` as being deleted (``deletionTimestamp`` set) ahead of its watch
        event: an eviction of ours was accepted. It still uses its node until it is gone
        (a snapshot counts it as before); a decision does not ask for its eviction again.
        The entry keeps its version, so the pod the watch delivers next replaces it."""
        with self._lock:
            entry = self._pods.get(ref)
            if entry is None or entry.info is None or entry.partial or entry.info.deleting:
                return
            info = replace(entry.info, deleting=True)
            self._pods[ref] = replace(entry, info=info)
            if ref in self._readable_pods:
                self._readable_pods[ref] = info
                if self._usage is not None:
                    self._usage.remove(ref)
                    self._usage.add(info)
            key = self._gang_of.get(ref)
            if key is not None:
                self._touch(key)
            self.version += 1

    # --- releases in flight (:mod:`.assumed`) --------------------------------------------
    def assume_release(self, members: Iterable[PodInfo]) -> None:
        """Count each of ``members`` (pods as their release's writes will leave them,
        :meth:`~reconciler.engine.decision.actions.MemberRelease.applied`) in the snapshots
        from now on, until the pod the cache receives shows the write landed, or
        :meth:`forget_assumed`/:meth:`assumed_unknown` end it (:mod:`.assumed`). A member
        the cache no longer holds (deleted meanwhile) is not assumed."""
        with self._lock:
            for info in members:
                entry = self._pods.get(info.key)
                if entry is None or entry.info is None or entry.partial:
                    continue
                self._assumed.add(info)
                self._readable_pods[info.key] = info
            self.version += 1

    def forget_assumed(self, refs: Iterable[PodKey]) -> None:
        """End the assumptions of ``refs``: their writes were refused for sure (nothing
        was written), so snapshots count the pods as the cache holds them again."""
        with self._lock:
            for ref in self._assumed.forget(refs):
                self._restore(ref)
            self.version += 1

    def assumed_unknown(self, refs: Iterable[PodKey], seconds: float = UNKNOWN_OUTCOME_SECONDS) -> None:
        """Keep the assumptions of ``refs`` (writes whose outcome is unknown: a timeout, a
        5xx) at most ``seconds`` more, unless the pod shows the outcome first."""
        with self._lock:
            self._assumed.expire_after(refs, seconds)

    def assumed_keys(self, refs: Iterable[PodKey]) -> set[PodKey]:
        """Which of ``refs`` are assumed now."""
        with self._lock:
            return {ref for ref in refs if ref in self._assumed}

    def assumed_count(self) -> int:
        """How many members are assumed now (a gauge: writes in flight, or of unknown outcome)."""
        with self._lock:
            return len(self._assumed)

    def _restore(self, ref: PodKey) -> None:
        """What a snapshot holds of ``ref`` once its assumption ends: the pod as cached."""
        entry = self._pods.get(ref)
        if entry is not None and entry.info is not None and not entry.partial:
            self._readable_pods[ref] = entry.info
        else:
            self._readable_pods.pop(ref, None)

    def pod_info(self, ref: PodKey) -> PodInfo | None:
        """The parsed cached pod, or None (unknown, or unreadable)."""
        info: PodInfo | None = self._lookup(self._pods, ref)[1]
        return info

    def pod_refs(self) -> list[PodKey]:
        """Every cached pod's reference, sorted."""
        with self._lock:
            return sorted(self._pods)

    def members(self, key: str) -> list[PodInfo]:
        """Every parsed pod of gang ``key`` (active or not), in no particular order."""
        with self._lock:
            return [self._pods[r].info for r in self._members.get(key, ())]

    def planned(self) -> dict[str, Workload]:
        """Gang key -> the workload it is released as created from (:meth:`WorkloadIndex.planned`)."""
        version, _, namespaces = self.volumes.view()
        return self.workloads.planned(self.config, version, namespaces)

    def stray_records(self) -> dict[WorkloadKey, Workload]:
        """The unfinished workloads that carry a reservation annotation (a record or not) but whose gang Troupe
        does not plan (not :meth:`planned`): it holds nothing and the reconciler removes it (decision 049); a
        finished workload's goes with it, as nothing is written to a finished workload (decision 067)."""
        carrying = {k: w for k, w in self.workloads.view()[2].objects.items() if w.carries_record and not w.finished}
        if not carrying:
            return {}
        planned = {w.key for w in self.planned().values()}
        return {k: w for k, w in carrying.items() if k not in planned}

    def stray_record(self, key: WorkloadKey) -> Workload | None:
        """The workload ``key`` if its record is stray (:meth:`stray_records`), else None."""
        found = self.workloads.view()[2].objects.get(key)
        if found is None or not found.carries_record or found.finished:
            return None
        return None if any(w.key == key for w in self.planned().values()) else found

    def gang(self, key: str) -> Gang | None:
        """Gang ``key`` built from its cached pods (:func:`~reconciler.engine.gangs.gang.build_gang`),
        or None when it has no pod left and is not :meth:`planned`. Built again only when one
        of its pods (or a workload) changed since the last call."""
        planned = self.planned().get(key)
        with self._lock:
            refs = self._members.get(key)
            if not refs and planned is None:
                return None
            jobs_version, parallelism, workloads = self.workloads.view()
            stamp = (self._gang_version.get(key, 0), jobs_version)
            memo = self._gangs.get(key)
            if memo is not None and memo[0] == stamp:
                return memo[1]
            pods = [self._pods[r].info for r in refs or ()]
        if any(p.claims for p in pods) and self.dra.view()[1]:  # as the snapshot counts their DRA claims
            pods = [self.snapshot().pods.get(p.key, p) for p in pods]
        gang = build_gang(key, pods, self.config, parallelism, workloads, planned)
        with self._lock:
            if (self._gang_version.get(key, 0), self.workloads.version) == stamp:
                self._gangs[key] = (stamp, gang)
        return gang

    def gang_keys(self) -> list[str]:
        """Every known gang key (of pods, and of workloads released as created), sorted."""
        planned = self.planned()
        with self._lock:
            return sorted({*self._members, *planned})

    def pending_gangs(self) -> list[str]:
        """Gang keys with at least one gated active member, and those of workloads released
        as created (:meth:`planned`: reserved, or to be), sorted."""
        planned = self.planned()
        with self._lock:
            gated = {k for k, refs in self._members.items() if any((i := self._pods[r].info).active and i.gated for r in refs)}
        return sorted(gated | planned.keys())

    def gangs_on_node(self, name: str) -> list[str]:
        """Gang keys with an active member bound to node ``name``, sorted: the gangs a
        change of that node may fail (docs/decisions/040-failure-policy.md)."""
        with self._lock:
            return sorted({key for ref, key in self._gang_of.items()
                           if (info := self._pods[ref].info) is not None and info.active and info.node_name == name})

    # --- jobs and workloads (:class:`WorkloadIndex`) -----------------------------------
    def replace_jobs(self, items: Iterable[Obj]) -> None:
        """:meth:`WorkloadIndex.replace_jobs`."""
        self.workloads.replace_jobs(items)

    def job_event(self, kind: str, job: Obj) -> None:
        """:meth:`WorkloadIndex.job_event`."""
        self.workloads.job_event(kind, job)

    def replace_workloads(self, kind: str, items: Iterable[Obj]) -> None:
        """:meth:`WorkloadIndex.replace_workloads`."""
        self.workloads.replace_workloads(kind, items)

    def workload_event(self, kind: str, event: str, obj: Obj) -> None:
        """:meth:`WorkloadIndex.workload_event`."""
        self.workloads.workload_event(kind, event, obj)

    def workload_unavailable(self, kind: str, why: str) -> None:
        """:meth:`WorkloadIndex.workload_unavailable`."""
        self.workloads.workload_unavailable(kind, why)

    # --- snapshots -------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A snapshot of every parsed node and pod, for plans, made by the one builder
        (:func:`~reconciler.engine.ledger.builder.build_snapshot`) of what the indexes hold.
        Built again only when the cache changed since the last one, on the node table of
        the last one while the nodes are the same and DRA changes none of them; callers
        must not change it (decisions do not)."""
        budget_version, budgets = self.budgets.values()
        jobs_view = self.workloads.view()
        jobs_version, _, workloads = jobs_view
        dra_version, devices = self.dra.view()
        volumes_version, catalog, namespaces = self.volumes.view()
        with self._lock:
            expired = self._assumed.expired() if len(self._assumed) else []
            for ref in expired:  # writes of unknown outcome the cache never saw land
                self._restore(ref)
            self.version += bool(expired)
            version = (self.version, budget_version, volumes_version, jobs_version, dra_version)
            node_version = self._node_version
            if self._snapshot is not None and self._snapshot[0] == version:
                return self._snapshot[1]
            pods = list(self._readable_pods.values())
            table = self._table[1] if self._table is not None and self._table[0] == node_version else None
            usage = self._usage.copy() if self._usage is not None and self._usage.table is table else None
            listed = [e.info for e in self._nodes.values() if e.info is not None] if table is None else []
            groups = [e.info for e in self._groups.values() if isinstance(e.info, DeviceGroup)]
            errors = {n: e.info for n, e in self._groups.items() if isinstance(e.info, str)}
        if table is None:  # the nodes changed: their table, kept while they stay (DRA counts on it)
            table = NodeTable(listed, self.levels)
        planned = frozenset(w.key for w in self.workloads.planned(self.config, volumes_version, namespaces,
                                                                  jobs_view).values())
        parts = SnapshotParts(table, pods, groups, errors, budgets, catalog, namespaces, devices, workloads,
                              self.config, self.levels, usage, planned)
        snapshot = build_snapshot(parts, self._devices)
        with self._lock:
            self._snapshot = (version, snapshot)
            if self._node_version == node_version:
                self._table = (node_version, table)
                if self._usage is None or self._usage.table is not table:  # counted once a table, then kept
                    self._usage = BoundUsage(table, self._readable_pods.values())
        return snapshot
