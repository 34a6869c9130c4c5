"""The reconciler's in-memory view of the cluster: each pod and node with its parsed form,
the index of gangs, SharedDeviceGroups and their pods (:class:`ClusterCache`, in
:mod:`~reconciler.daemon.cache.cluster`, over its tables and the versions they compare in
:mod:`~reconciler.daemon.cache.entries`, with the handlers of nodes and of SharedDeviceGroups in
:mod:`~reconciler.daemon.cache.nodes` and :mod:`~reconciler.daemon.cache.devicegroups`), and what sizes gangs of ``<prefix>-size: auto``:
Jobs' parallelism and the workload objects (Jobs, JobSets, LeaderWorkerSets, PyTorchJobs,
kept as :class:`~reconciler.engine.model.workloads.Workload` values, not as objects;
:class:`WorkloadIndex`, in :mod:`~reconciler.daemon.cache.workloads`), and the
PodDisruptionBudgets that atomic preemption counts (:class:`BudgetIndex`, in
:mod:`~reconciler.daemon.cache.budgets`).

Fed by the informers (:mod:`reconciler.kube`) and by the controller's own writes
(:meth:`ClusterCache.assume`, so that a gang released a moment ago already uses its nodes
when the next gang is planned, before the watch event arrives, the way kube-scheduler
assumes a pod it has bound), and by the releases decided whose writes are still in flight
(:meth:`ClusterCache.assume_release`, :mod:`.assumed`, docs/decisions/068-release-pipeline.md).
Objects are parsed once, when they arrive
(:class:`~reconciler.engine.ledger.snapshot.PodInfo`, :class:`~reconciler.engine.ledger.snapshot.NodeInfo`);
a pod or a node is kept as its parsed form and its version alone, the object let go
(docs/decisions/059-cache-keeps-parsed-forms.md); an object that cannot be parsed, whatever the exception, is
kept out of plans with one log line and a count (one odd node, say one still registering
without ``status.allocatable``, must not stop every plan; :mod:`.unreadable`). A pod that
cannot be parsed still joins its gang, which it holds with the reason. Each feeding method returns the gang keys whose state may have changed,
for the work queue.

Only what Troupe reads is stored or parsed: every object is cut down by the retain policy of its
kind (:mod:`reconciler.objects.retain`) before it is stored or parsed, whether it comes from an informer
(:meth:`ClusterCache.retain_pod`, :meth:`ClusterCache.retain_node` as the informers'
``transform``, page by page during a list) or from a write's response (:meth:`ClusterCache.assume`).
A re-list after ``410 Gone`` does not hold two copies: an object whose uid and
resourceVersion the cache already holds is neither cut, parsed nor indexed again
(docs/decisions/017-cache-memory.md).
"""

from __future__ import annotations

from reconciler.daemon.cache.budgets import BudgetIndex
from reconciler.daemon.cache.cluster import ClusterCache
from reconciler.daemon.cache.entries import Entry
from reconciler.daemon.cache.keys import (
           GroupKey,
           RecordKey,
           group_key,
           group_of_key,
           record_key,
           workload_of_key,
)
from reconciler.daemon.cache.workloads import WorkloadIndex

__all__ = ["BudgetIndex", "ClusterCache", "Entry", "GroupKey", "RecordKey", "WorkloadIndex", "group_key", "group_of_key",
           "record_key", "workload_of_key"]
