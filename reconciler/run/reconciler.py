"""The running reconciler (:class:`Reconciler`): its informers feed the cache and the work
queue, its one worker thread reconciles gangs and SharedDeviceGroups through the controllers
(:mod:`reconciler.run.controllers` wires them over the API server's writer ports; the
worker's loop, and the metrics of each reconcile's outcome, are :mod:`reconciler.run.worker`'s),
and it starts, checks and stops them all. The package docstring of :mod:`reconciler.run`
says what is queued when, and why one worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import Gauge

from reconciler import kube
from reconciler.daemon import metrics
from reconciler.daemon.cache import ClusterCache, group_of_key, record_key, workload_of_key
from reconciler.daemon.cache.dra import KINDS as DRA_KINDS
from reconciler.daemon.cache.podgroups import VERSIONS as POD_GROUP_VERSIONS
from reconciler.daemon.queue import WorkQueue
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.pods import TERMINAL_PHASES
from reconciler.objects.retain import BUDGET, retain
from reconciler.ports import UNFENCED, Fence, Writes
from reconciler.run.controllers import compose
from reconciler.run.worker import GangWorker
from troupe import contract
from troupe import provisioning as pr
from troupe.adoption import APPS_OWNER_KINDS, OWNERS_UNREAD, reads_owners
from troupe.config import Config
from troupe.podgroups import API_BY_SOURCE, PodGroupRef

log = logging.getLogger("reconciler")

LEADER = Gauge("troupe_leader", "1 while this replica may write: it holds the Lease and its fence is open "
               "(1 without leader election once started).")
INFORMER_FAILING = Gauge("troupe_informer_failing_seconds",
                         "Seconds since an informer's lists and watches started failing; 0 while they work.",
                         ["resource"])

#: Connections of the informers' client: a watch or a list per informer (pods, nodes,
#: Jobs, SharedDeviceGroups, PodDisruptionBudgets, claims, volumes, CSINodes, namespaces,
#: the DRA kinds, the pod group APIs, three workload kinds, the owners Volcano's groups
#: read), so that no watch opens and drops a connection of its own. The writer's client has
#: one per write in flight (:func:`reconciler.run.process.run`), the Lease's 2.
POOL_EXTRA = 32
#: Seconds a gang released whole waits to be decided again after an event of one of its
#: released members (bound, Running, a condition): such events change nothing it acts on at
#: once (a timeout, a refusal, a failure are acted on a second later), and a gang of N makes
#: N of each (docs/decisions/068-release-pipeline.md).
SETTLED_SECONDS = 1.0
#: A reconcile of one gang that has run this long, seconds, makes ``/healthz`` fail: the
#: worker is stuck (a release of 512 members takes seconds).
WORKER_STUCK_SECONDS = 300.0


def _failing_seconds(informer: kube.Informer) -> Callable[[], float]:
    """A reading of how long ``informer``'s lists and watches have been failing, seconds
    (0 while they work)."""

    def seconds() -> float:
        since = informer.failing_since
        return 0.0 if since is None else float(informer.clock() - since)

    return seconds


class Reconciler(GangWorker):
    """The running reconciler: owns the informers, the queue, the worker thread, the writer
    ports and the controllers. ``synced`` is set once every informer has listed. Writes go
    through ``writer_api`` (default ``api``) and pass ``fence`` (the leader's Lease); ``state``
    is the ``(namespace, name)`` of the ConfigMap keeping what a new leader must know
    (rollback backoffs; None: memory only). ``writes`` replaces the API server's writer ports
    (tests pass a :class:`~reconciler.ports.fake.FakeCluster`); ``wall_clock``
    returns seconds since the epoch, the ``now`` of every decision. ``reservation_key``
    (bytes): what reservations are signed with (:class:`~reconciler.daemon.cache.ClusterCache`)."""

    def __init__(self, api: Any, config: Config, writer_api: Any = None, fence: Fence = UNFENCED,
                 clock: Callable[[], float] = time.monotonic, state: tuple[str, str] | None = None,
                 writes: Writes | None = None, wall_clock: Callable[[], float] = time.time,
                 reservation_key: bytes | None = None) -> None:
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.cache = ClusterCache(config, on_unreadable=metrics.unreadable_object, reservation_key=reservation_key)
        self.queue = WorkQueue(order=self._order)
        self.writes: Writes = writes if writes is not None else kube.KubeWrites(
            writer_api if writer_api is not None else api, kube.RateLimiter(config.kube_api_qps, config.kube_api_burst),
            fence=fence, state=state)
        self.controllers = compose(self.cache, self.writes, config, wall_clock)
        self.pods = kube.StreamingInformer(kube.pods(api), self._pods_listed, self._pod_event,
                                           transform=self.cache.retain_pod)
        self.nodes = kube.StreamingInformer(kube.nodes(api), self._nodes_listed, self._node_event,
                                            transform=self.cache.retain_node)
        self.jobs = kube.Informer(kube.jobs(api), self._jobs_listed, self._job_event,
                                  transform=self.cache.retain_job)
        self.groups = kube.Informer(kube.shared_device_groups(api), self._groups_listed, self._group_event,
                                    transform=self.cache.retain_group)
        #: PodDisruptionBudgets, which atomic preemption counts (decision 030).
        self.budgets = kube.Informer(kube.pod_disruption_budgets(api), self._budgets_listed, self._budget_event,
                                     transform=lambda obj: retain(BUDGET, obj))
        #: Claims, volumes, CSINodes and namespaces: what the volume filters and pod
        #: affinity's namespace selectors read (docs/decisions/031-kube-scheduler-filters.md).
        self.volumes = [self._volume_informer(resource) for resource in kube.volume_resources(api)]
        #: One informer per workload custom resource (JobSet, LeaderWorkerSet, PyTorchJob):
        #: the size of gangs of ``<prefix>-size: auto``. A kind whose CRD is not installed
        #: is skipped, its gangs wait with that reason (docs/decisions/014-workload-gangs.md).
        self.workloads = [self._workload_informer(api, k) for k in wl.CUSTOM_KINDS]
        #: ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates
        #: (``resource.k8s.io/v1``): the DRA devices gangs are placed with. Optional, as a custom
        #: resource: a cluster that does not serve them has none (docs/decisions/044-dra.md).
        self.dra = [self._dra_informer(api, plural) for plural in DRA_KINDS]
        #: The pod groups of the upstream Workload API and of the peer schedulers, one
        #: informer per API version; optional as the DRA kinds: read where served, looked
        #: for again where not (docs/decisions/056-pod-groups.md).
        self.pod_groups = [self._pod_group_informer(api, source, version) for source, version in POD_GROUP_VERSIONS]
        #: ReplicaSets, StatefulSets and DaemonSets, only when a Volcano name is adopted: the
        #: minimum of the group Volcano makes for their pods (docs/decisions/065-adopted-pods-join-their-peers-groups.md).
        self.owners = [self._owner_informer(api, kind) for kind in APPS_OWNER_KINDS] \
            if reads_owners(config.adopt_scheduler_names) else []
        if not self.owners:
            self.cache.workloads.owners_unread(OWNERS_UNREAD)
        #: ProvisioningRequests, only with ``provisioning`` on (optional kind: docs/decisions/080).
        self.capacity = [self._capacity_informer(api)] if config.provisioning is not None else []
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="gang-worker", daemon=True)
        self._conditions = threading.Thread(target=self.controllers.conditions.run, args=(self._stop,),
                                            name="conditions", daemon=True)
        self._gang_objects = threading.Thread(target=self.controllers.gang_objects.run, args=(self._stop,),
                                              name="gang-objects", daemon=True)
        self._busy: tuple[str, float] | None = None
        #: Finishing a reconcile (metrics, requeues) happens on the worker or on a release
        #: thread, one at a time.
        self._finishing = threading.Lock()
        #: Gang timings and counts derived from each outcome (reconciler/daemon/metrics.py).
        self.gang_metrics = metrics.GangMetrics()

    # --- feeding the queue -----------------------------------------------------------
    #: Priority of SharedDeviceGroup keys in the work queue: before any gang (cheap, and
    #: a group's status is what its waiting pods' owners look at).
    GROUP_PRIORITY = 1 << 40

    def _order(self, key: str) -> tuple[int, str]:
        """Work-queue order of a key: the gang's priority and its namespace (groups first)."""
        if group_of_key(key) is not None or workload_of_key(key) is not None:
            return (self.GROUP_PRIORITY, "")
        return (self.controllers.gangs.priority(key), key.partition("/")[0])

    def _pods_listed(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._enqueue(self.cache.replace_pods(items))

    def _pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        phase = (pod.get("status") or {}).get("phase")
        keys = self.cache.pod_event(kind, pod)
        if kind == "DELETED" or phase in TERMINAL_PHASES or (pod.get("metadata") or {}).get("deletionTimestamp") \
                or any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod)):
            self._enqueue(keys)
        else:  # a released member bound, Running, its conditions: its gang, if released whole, can wait a little
            self._enqueue_settled(keys)
        if kind == "DELETED" or phase in TERMINAL_PHASES:  # room may have been freed on its node
            spec = pod.get("spec") or {}
            node = spec.get("nodeName") or contract.pod_annotations(pod).get(contract.ASSIGNED_NODE)
            if node:
                self._enqueue(self.controllers.gangs.helped_by(self.cache.node_info(str(node))))
            elif any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod)):
                self._enqueue(self.controllers.gangs.helped_by(None))  # a gated member's reservation, if any

    def _enqueue_settled(self, keys: Iterable[str]) -> None:
        """Queue ``keys`` after an event of a released, still active member: a gang released
        whole (phase ``Released``) is decided again :data:`SETTLED_SECONDS` later, so that
        its members' bindings and starts, which change nothing it must act on at once,
        make one decision between them, not one each (docs/decisions/068-release-pipeline.md);
        any other gang at once."""
        gangs = self.controllers.gangs
        for key in keys:
            if gangs.phase(key) is Phase.RELEASED:
                self.queue.add_after(key, SETTLED_SECONDS)
            else:
                self.queue.add(key)

    def _nodes_listed(self, items: Iterable[Mapping[str, Any]]) -> None:
        self.cache.replace_nodes(items)
        self._enqueue(self.cache.pending_gangs())

    def _node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        running = self.cache.gangs_on_node(name) if kind == "DELETED" else []
        if not self.cache.node_event(kind, node):
            return  # a heartbeat
        # Its running gangs: a RestartGang gang restarts when the node is lost.
        self._enqueue(running or self.cache.gangs_on_node(name))
        if kind == "DELETED":
            # Releases reserved on it are rolled back; a group bound to it goes back to Pending.
            self._enqueue(self.cache.pending_gangs())
            self._enqueue(self.cache.group_keys())
        else:
            self._enqueue(self.controllers.gangs.helped_by(self.cache.node_info(name)))

    def _jobs_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.replace_jobs(items)
        self._enqueue(self.cache.pending_gangs())

    def _job_event(self, kind: str, job: Mapping[str, Any]) -> None:
        self.cache.job_event(kind, job)
        namespace = str((job.get("metadata") or {}).get("namespace") or "default")
        # A GKE auto-gang's size is its Job's parallelism: the Job's namespace only.
        self._enqueue(k for k in self.cache.pending_gangs() if k.startswith(namespace + "/"))
        self._enqueue_stray_record(wl.JOB.kind, job)

    def _enqueue_stray_records(self) -> None:
        """Queue the removal of every stray reservation record
        (:meth:`~reconciler.daemon.cache.ClusterCache.stray_records`)."""
        self._enqueue(record_key(w) for w in self.cache.stray_records())

    def _enqueue_stray_record(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Queue the removal of the record of the workload of this event, if it is stray."""
        meta = obj.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if self.cache.stray_record(key) is not None:
            self.queue.add(record_key(key))

    def _groups_listed(self, items: list[Mapping[str, Any]]) -> None:
        self._enqueue(self.cache.replace_groups(items))
        self._enqueue(self.cache.pending_gangs())

    def _group_event(self, kind: str, group: Mapping[str, Any]) -> None:
        keys = self.cache.group_event(kind, group)
        self._enqueue(keys)
        name = str((group.get("metadata") or {}).get("name") or "")
        # Its own gangs (a new group lets its members through); and when its devices are
        # freed, every gang waiting for room.
        self._enqueue(self.cache.group_gangs(name))
        if kind == "DELETED":
            self._enqueue(self.controllers.gangs.helped_by(None))

    def _budgets_listed(self, items: list[Mapping[str, Any]]) -> None:
        self.cache.budgets.replace(items)
        self._enqueue(self.cache.pending_gangs())

    def _budget_event(self, kind: str, budget: Mapping[str, Any]) -> None:
        if self.cache.budgets.event(kind, budget):  # a gang held back by it may now preempt, or not
            self._enqueue(self.cache.pending_gangs())

    def _volume_informer(self, resource: kube.Resource) -> kube.Informer:
        """An informer feeding the cache's :class:`~reconciler.daemon.cache.volumes.VolumeIndex`;
        a change may let a waiting gang through (a volume bound, a namespace labelled)."""
        kind, index = resource.name, self.cache.volumes

        def listed(items: list[Mapping[str, Any]]) -> None:
            index.replace(kind, items)
            self._enqueue(self.cache.pending_gangs())

        def event(event: str, obj: Mapping[str, Any]) -> None:
            index.event(kind, event, obj)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(resource, listed, event, transform=lambda obj: index.retain(kind, obj))

    def _dra_informer(self, api: Any, plural: str) -> kube.Informer:
        """An informer feeding the cache's :class:`~reconciler.daemon.cache.dra.DraIndex`; a
        change (a device published, a claim allocated or freed) may let a waiting gang through."""
        index = self.cache.dra

        def listed(items: list[Mapping[str, Any]]) -> None:
            index.replace(plural, items)
            self._enqueue(self.cache.pending_gangs())

        def event(kind: str, obj: Mapping[str, Any]) -> None:
            index.event(plural, kind, obj)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(kube.custom_objects(api, "resource.k8s.io", "v1", plural), listed, event,
                             transform=index.retain)

    def _pod_group_informer(self, api: Any, source: str, version: str) -> kube.Informer:
        """An informer feeding the cache's
        :class:`~reconciler.daemon.cache.podgroups.PodGroupIndex`: a group's change re-decides
        its own gang and the waiting gangs of its namespace (Troupe's keys may name a gang
        whose members name the group)."""
        index, api_of = self.cache.pod_groups, API_BY_SOURCE[source]

        def listed(items: list[Mapping[str, Any]]) -> None:
            index.replace(source, version, items)
            self._enqueue(self.cache.pending_gangs())

        def event(kind: str, obj: Mapping[str, Any]) -> None:
            index.event(source, version, kind, obj)
            meta = obj.get("metadata") or {}
            namespace = str(meta.get("namespace") or "default")
            self._enqueue([f"{namespace}/{PodGroupRef(source, str(meta.get('name') or '')).gang_name()}"])
            self._enqueue(k for k in self.cache.pending_gangs() if k.startswith(namespace + "/"))

        def absent(why: str) -> None:
            index.absent(source, version, why)
            self._enqueue(self.cache.pending_gangs())

        resource = kube.custom_objects(api, api_of.group, version, api_of.plural, absent)
        resource.name = f"{api_of.plural}.{version}.{api_of.group}"  # one informer per version: named with it
        return kube.Informer(resource, listed, event, transform=index.retain)

    def _owner_informer(self, api: Any, kind: str) -> kube.Informer:
        def listed(items: list[Mapping[str, Any]]) -> None:
            self.cache.workloads.replace_owners(kind, items)
            self._enqueue(self.cache.pending_gangs())

        def event(event: str, obj: Mapping[str, Any]) -> None:
            self.cache.workloads.owner_event(kind, event, obj)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(kube.apps_owners(api, kind), listed, event, transform=self.cache.workloads.retain_owner)

    def _capacity_informer(self, api: Any) -> kube.Informer:
        """An informer feeding the cache's :class:`~reconciler.daemon.cache.capacity.CapacityIndex`:
        a request's change re-decides the gang it names and the waiting gangs of its namespace."""
        index = self.cache.capacity

        def listed(items: list[Mapping[str, Any]]) -> None:
            index.replace(items)
            self._enqueue(self.cache.pending_gangs())

        def event(kind: str, obj: Mapping[str, Any]) -> None:
            namespace = index.event(kind, obj)
            named = contract.pod_annotations(obj).get(contract.GANG_KEY_ANNOTATION)
            self._enqueue([named] if isinstance(named, str) and named.startswith(namespace + "/") else [])
            self._enqueue(k for k in self.cache.pending_gangs() if k.startswith(namespace + "/"))

        def absent(why: str) -> None:
            index.unavailable(why)
            log.warning("provisioning is on, but ProvisioningRequests cannot be read: %s", why)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(kube.custom_objects(api, pr.GROUP, pr.VERSION, pr.PLURAL, absent), listed, event)

    def _workload_informer(self, api: Any, k: wl.Kind) -> kube.Informer:
        def listed(items: list[Mapping[str, Any]]) -> None:
            self.cache.replace_workloads(k.kind, items)
            self._enqueue(self.cache.pending_gangs())

        def event(kind: str, obj: Mapping[str, Any]) -> None:
            self.cache.workload_event(k.kind, kind, obj)
            self._enqueue(self.cache.pending_gangs())  # a workload gang's size may have changed
            self._enqueue_stray_record(k.kind, obj)
            # A gang the workload no longer plans (a JobSet's previous run) whose pods are gone:
            # decided once more, it is forgotten (and its Gang object deleted).
            self._enqueue(set(self.controllers.gangs.phases()) - set(self.cache.gang_keys()))

        def absent(why: str) -> None:
            self.cache.workload_unavailable(k.kind, why)
            self._enqueue(self.cache.pending_gangs())

        return kube.Informer(kube.custom_objects(api, k.group, k.version, k.plural, absent), listed, event)

    # --- lifecycle -------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0) -> None:
        """Start the watches, wait until all have listed, then start the worker.

        Planning before both lists are in would count free capacity that is in use.
        Raises ``TimeoutError`` when the lists do not arrive in ``sync_timeout`` seconds.
        """
        self.export_metrics()
        self.nodes.start()
        self.jobs.start()
        self.groups.start()
        self.budgets.start()
        for informer in (*self.workloads, *self.volumes, *self.dra, *self.pod_groups, *self.owners, *self.capacity):
            informer.start()
        self.pods.start()
        for informer in (self.nodes, self.jobs, self.groups, self.budgets, *self.workloads, *self.volumes, *self.dra,
                         *self.pod_groups, *self.owners, *self.capacity, self.pods):
            if not informer.synced.wait(sync_timeout):
                raise TimeoutError(f"{informer.resource.name} not listed within {sync_timeout:.0f}s")
        backoffs = self.controllers.rollbacks.restore()
        self.controllers.taints.sweep()  # what an earlier leader left on nodes (docs/decisions/033)
        self._enqueue_stray_records()  # records on workloads Troupe does not plan (docs/decisions/049)
        decided = self.controllers.gangs.warm_queue()
        objects = self.controllers.gang_objects
        listed = objects.load()
        stale = objects.sweep(self.cache.gang_keys())
        log.info("caches synced; %d recorded backoff(s) read; %d waiting gang(s) decided in queue order; "
                 "%d gang object(s) read, %d of gone gangs to delete; reconciling", backoffs, decided, listed, stale)
        self.synced.set()
        self._worker.start()
        self._conditions.start()
        self._gang_objects.start()

    def export_metrics(self) -> None:
        """Report every informer's failing time as ``troupe_informer_failing_seconds``."""
        for informer in self.informers():
            INFORMER_FAILING.labels(informer.resource.name).set_function(_failing_seconds(informer))

    def informers(self) -> list[kube.Informer]:
        """Every informer this reconciler owns (any attribute that is one, or a list of them)."""
        out: list[kube.Informer] = []
        for v in vars(self).values():
            out.extend(i for i in (v if isinstance(v, list) else [v]) if isinstance(i, kube.Informer))
        return out

    def waiting_for(self) -> list[str]:
        """The informers that have not listed yet, by resource name, sorted."""
        return sorted(i.resource.name for i in self.informers() if not i.synced.is_set())

    def alive(self) -> str:
        """``""`` when the worker and the informers run as they should, else what is wrong
        (``; ``-separated): the worker thread died or has been on one gang for
        :data:`WORKER_STUCK_SECONDS`, an informer's thread died or it has not listed or
        watched successfully for a minute (:meth:`kube.Informer.problem`)."""
        problems = []
        if self._worker.ident is not None and not self._worker.is_alive() and not self._stop.is_set():
            problems.append("the gang worker thread has died")
        busy = self._busy
        if busy is not None and self.clock() - busy[1] >= WORKER_STUCK_SECONDS:
            problems.append(f"the gang worker has been on gang {busy[0]} for {self.clock() - busy[1]:.0f}s")
        problems += [p for p in (i.problem() for i in self.informers()) if p]
        return "; ".join(problems)

    def stop(self) -> None:
        """Stop the worker, the watches, the release threads and the writer ports."""
        self._stop.set()
        self.queue.shutdown()
        self.pods.stop()
        self.groups.stop()
        self.budgets.stop()
        self.jobs.stop()
        for informer in (*self.workloads, *self.volumes, *self.dra, *self.pod_groups, *self.owners, *self.capacity):
            informer.stop()
        self.nodes.stop()
        if self._worker.is_alive():
            self._worker.join(timeout=5)
        self.controllers.close()
        self.writes.close()
