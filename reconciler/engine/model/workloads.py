"""Workloads as gangs: which workload a pod belongs to, which gang that makes, its size.

A pod whose ``<prefix>-size`` is ``auto`` (the user's, or stamped by the webhook in a
namespace labelled ``troupe.io/gang-mode: auto``) is grouped by the workload that created
it, and the gang's size is read from the workload object, never counted by hand
(docs/decisions/014-workload-gangs.md):

============================  =====================================  ===============================
workload (API)                one gang per                           size
============================  =====================================  ===============================
Job (``batch/v1``)            Job (the pod's controller owner)       ``parallelism``, capped by the
                                                                     completions still to go
JobSet                        JobSet and restart attempt (labels     sum over ``replicatedJobs`` of
(``jobset.x-k8s.io/v1alpha2``) ``jobset.sigs.k8s.io/jobset-name``,   ``replicas x parallelism``
                              ``restart-attempt``)                   (each capped by completions)
LeaderWorkerSet               group (``leaderworkerset.sigs.k8s.io/  ``leaderWorkerTemplate.size``
(``leaderworkerset.x-k8s.io/  name`` and ``group-index``)
v1``)
PyTorchJob (``kubeflow.org/   job (controller owner, label           sum of the replica specs'
v1``)                         ``training.kubeflow.org/job-name``)    ``replicas``
============================  =====================================  ===============================

A JobSet's restart is a new gang (its pods carry the new ``restart-attempt``), so the pods
of the old attempt, still terminating, never count and the new ones are never taken for
replacements of a running gang. A LeaderWorkerSet group that is recreated keeps its
labels; its pods created before the group's current leader are of the old group and are
left out (:func:`superseded`). Ranks are :func:`troupe.ranks.rank_key`'s (a JobSet's
``job-global-index`` is replicated-job order then job index).

A topology level may be given once on the workload object (the pod annotations
``troupe.io/topology-required-level`` / ``-preferred-level`` and the slice, placement and
exclusive keys of :mod:`troupe.layers`, as annotations of the Job, JobSet,
LeaderWorkerSet or PyTorchJob); a member's own request wins.

Pure: plain dicts in (workload objects as the API serves them), plain values out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import troupe.contract as contract
import troupe.kueue as kueue
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds import MODULE_OF, REGISTRY
from reconciler.engine.model.limits import label_seconds
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record, Reservation, authentic
from reconciler.engine.model.templates import MAX_SLOTS, slots
from reconciler.engine.model.timestamps import epoch
from troupe.adoption import VOLCANO_MIN_MEMBER
from troupe.errors import quoted
from troupe.podgroups import PodGroupRef, PodGroupSpec
from troupe.policies import RELEASE_MODE
from troupe.workloadkinds import CUSTOM_KINDS as CUSTOM_KINDS
from troupe.workloadkinds import JOB as JOB
from troupe.workloadkinds import JOBSET as JOBSET
from troupe.workloadkinds import KIND_OF as KIND_OF
from troupe.workloadkinds import KINDS as KINDS
from troupe.workloadkinds import LEADER_WORKER_SET as LEADER_WORKER_SET
from troupe.workloadkinds import PYTORCH_JOB as PYTORCH_JOB
from troupe.workloadkinds import Kind as Kind

GroupKey = tuple[str, str, str]
"""A pod group's ``(source, namespace, name)`` (docs/decisions/056-pod-groups.md)."""


@dataclass(frozen=True)
class Workload:
    """What a gang needs of one workload object: its ``size`` (members of one gang),
    how it was counted (``size_from``, for reasons: ``JobSet train: driver 1x1 +
    workers 2x4``) and the topology annotations it carries (``topology``: key ->
    value, only Troupe's two level keys)."""

    kind: str
    namespace: str
    name: str
    size: int
    size_from: str
    topology: Mapping[str, str] = field(default_factory=dict)
    #: The members its gang starts with when its kind declares fewer than ``size`` (a
    #: RayCluster's ``minReplicas``: :meth:`~reconciler.engine.model.kinds.base.WorkloadKind.minimum`),
    #: else None; a member's ``<prefix>-min-size`` wins (docs/decisions/038-minimum-size.md).
    min_size: int | None = None
    #: Its members before their pods exist (:mod:`.templates`), in rank order; ``()`` for
    #: a kind released when complete. Compared through ``generation`` (a spec change).
    slots: tuple[PodInfo, ...] = field(default=(), compare=False, repr=False)
    generation: int = 0
    #: Whether it still runs pods: not suspended, not finished, not being deleted.
    active: bool = True
    #: Whether a condition ends it (:data:`FINISHING_CONDITIONS`): it runs no pod again,
    #: is never planned and nothing is written to it, a record it carries included.
    finished: bool = False
    #: When its deadline runs out (seconds since the epoch): ``status.startTime`` plus a
    #: Job's ``spec.activeDeadlineSeconds`` or a Kubeflow job's
    #: ``spec.runPolicy.activeDeadlineSeconds``; None without one, not started, or suspended.
    #: Past it the workload is finishing: its controller deletes the members before it
    #: writes the condition that ends it (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md).
    ends_at: float | None = None
    #: Kueue's ``kueue.x-k8s.io/max-exec-time-seconds`` label on it (seconds), and its
    #: ``status.startTime`` (seconds since the epoch, None before it starts): another limit
    #: that ends it (:mod:`reconciler.engine.model.limits`).
    max_exec_seconds: int | None = None
    started: float | None = None
    #: Its ``troupe.io/release`` annotation (``""`` without one).
    release: str = ""
    #: The reservation it carries (``reconciler.troupe.io/reservation``), None without one
    #: or when the value cannot be read; ``record_error`` says why not (``""``).
    record: Record | None = None
    record_error: str = ""
    #: It is a batch/v1 Job a supported custom workload controls (a JobSet's child Job, an
    #: MPIJob's launcher, a RayJob's submitter): its pods are that workload's members, or
    #: none's, so it makes no gang of its own planned as created.
    owned: bool = False
    #: Its ``metadata.uid``: a reservation is signed for this very object
    #: (:func:`~reconciler.engine.model.reservations.sign`).
    uid: str = ""
    #: Why its gang is held for its size (more members than
    #: :data:`~reconciler.engine.model.templates.MAX_SLOTS`), ``""`` when it is not.
    too_large: str = ""
    #: The most pods it ever runs at once, over its whole life (``size`` counts those still
    #: to run), and how they are counted: what a gang named in its template may need at
    #: most (:func:`most_pods`).
    most_pods: int = 0
    most_pods_from: str = ""
    #: Its ``kueue.x-k8s.io/queue-name`` label: the LocalQueue Kueue admits it from
    #: (``""`` without one; docs/decisions/058-kueue-for-quota.md).
    queue: str = ""
    #: Its ``scheduling.volcano.sh/group-min-member`` annotation as written (None without
    #: one): the minimum of the group Volcano's controller makes for its pods when they
    #: name none (:mod:`troupe.adoption`, docs/decisions/065-adopted-pods-join-their-peers-groups.md).
    min_member: str | None = None
    #: Its own controlling owner, ``(apiVersion, kind, name)``, None without one: KAI groups a
    #: Job's pods by the Job's top owner (docs/decisions/065-adopted-pods-join-their-peers-groups.md).
    controller: tuple[str, str, str] | None = None

    @property
    def key(self) -> WorkloadKey:
        """``(kind, namespace, name)``."""
        return (self.kind, self.namespace, self.name)

    @property
    def carries_record(self) -> bool:
        """Whether it carries a ``reconciler.troupe.io/reservation`` annotation, read as a
        record or not (unreadable, or not signed by this reconciler)."""
        return self.record is not None or bool(self.record_error)


@dataclass(frozen=True, slots=True)
class OwnerObject:
    """What is kept of an object that controls pods and is no workload Troupe sizes (a
    ReplicaSet, StatefulSet or DaemonSet): ``kind``, ``namespace``, ``name``, ``uid``, and
    its ``scheduling.volcano.sh/group-min-member`` annotation as written (``min_member``,
    None without one): the minimum of the group Volcano's controller makes for its pods
    (:mod:`troupe.adoption`)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    min_member: str | None = None

    @property
    def key(self) -> WorkloadKey:
        """``(kind, namespace, name)``."""
        return (self.kind, self.namespace, self.name)


def owner_object(kind: str, obj: Mapping[str, Any]) -> OwnerObject | None:
    """The :class:`OwnerObject` of an object of ``kind`` (a plain dict in the API shape), or
    None without a name. Never raises."""
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    value = _map(meta.get("annotations")).get(VOLCANO_MIN_MEMBER)
    return OwnerObject(kind, str(meta.get("namespace") or "default"), name, str(meta.get("uid") or ""),
                       value if isinstance(value, str) else None)


@dataclass(frozen=True)
class Workloads:
    """The workload objects known (by :attr:`Workload.key`) and, for kinds whose objects
    cannot be read at all, why (``unavailable``: kind -> reason, e.g. its CRD is not
    installed). What a decision needs; the reconciler's cache and the simulator build it."""

    objects: Mapping[WorkloadKey, Workload] = field(default_factory=dict)
    unavailable: Mapping[str, str] = field(default_factory=dict)
    #: The pod groups known (:class:`~troupe.podgroups.PodGroupSpec` by
    #: ``(source, namespace, name)``), and for sources whose groups cannot be read, why
    #: (``groups_unavailable``: source -> reason, e.g. the API is not served):
    #: docs/decisions/056-pod-groups.md.
    groups: Mapping[GroupKey, PodGroupSpec] = field(default_factory=dict)
    groups_unavailable: Mapping[str, str] = field(default_factory=dict)
    #: The ReplicaSets, StatefulSets and DaemonSets known (:class:`OwnerObject` by
    #: ``(kind, namespace, name)``), read for the minimum of the group Volcano makes for their
    #: pods; ``owners_unavailable``: why none is known (``""``: they are read):
    #: docs/decisions/065-adopted-pods-join-their-peers-groups.md.
    owners: Mapping[WorkloadKey, OwnerObject] = field(default_factory=dict)
    owners_unavailable: str = ""

    def reservations(self, planned: Collection[WorkloadKey] | None = None) -> list[Reservation]:
        """The reservations of the workloads that still run pods (what a snapshot holds):
        one of a finished or suspended workload holds nothing, nor, given ``planned`` (the
        workloads whose gangs are released as created,
        :func:`~reconciler.engine.model.membership.planned_gangs`), one of a workload
        Troupe does not plan (docs/decisions/049-hostile-tenants-third-round.md)."""
        return [Reservation(w.namespace, w.key, w.record, w.slots) for w in self.objects.values()
                if w.record is not None and w.active and w.slots and (planned is None or w.key in planned)]

    def missing(self, key: WorkloadKey) -> str:
        """Why ``key`` is not known, for a gang's reason."""
        kind, namespace, name = key
        why = self.unavailable.get(kind)
        if why:
            return f"{kind} {namespace}/{name} cannot be read: {why}"
        return f"{kind} {namespace}/{name} not found (deleted, or not readable by the reconciler)"

    def group(self, namespace: str, ref: PodGroupRef) -> PodGroupSpec | None:
        """The group ``ref`` of ``namespace``, or None when it is not known."""
        return self.groups.get((ref.source, namespace, ref.name))

    def group_missing(self, namespace: str, ref: PodGroupRef) -> str:
        """Why the group ``ref`` of ``namespace`` is not known, for a gang's reason:
        ``PodGroup team/train (scheduling.k8s.io) not found``."""
        api = ref.api
        what = f"{api.kind} {namespace}/{ref.name} ({api.group})"
        why = self.groups_unavailable.get(ref.source)
        if why:
            return f"{what} cannot be read: {why}"
        return f"{what} not found (not created yet, deleted, or not readable by the reconciler)"


#: The largest count read from a workload: the API's counts are int32.
_MAX_COUNT = 2**31 - 1


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def job_parallelism(job: Mapping[str, Any]) -> int:
    """The ``spec.parallelism`` of a batch/v1 Job object, the size of an auto-gang it owns:
    1 when absent or not a positive int32 (the Job API's default and type)."""
    spec = job.get("spec")
    value = spec.get("parallelism") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31 - 1 else 1


def workload(kind: str, obj: Mapping[str, Any], key: bytes | None = None) -> Workload | None:
    """The :class:`Workload` of an object of a supported ``kind`` (a plain dict in the API
    shape), or None for an unsupported kind or an object without a name. Never raises:
    a missing or malformed count takes the API's default (1). ``key``: the reconciler's
    reservation key: a record whose signature does not verify under it is no record
    (:func:`~reconciler.engine.model.reservations.authentic`; ``record_error`` says so, and
    the gang, when Troupe plans it, reserves anew over it); None (the simulator and
    ``kubectl troupe``, which do not hold the key) reads every record as the reconciler's."""
    if kind not in KIND_OF:
        return None
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = str(meta.get("namespace") or "default")
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    annotations = _map(meta.get("annotations"))
    topology = {k: str(annotations[k]) for k in contract.TOPOLOGY_KEYS if k in annotations}
    module = MODULE_OF[kind]
    size, how = module.size(obj)
    minimum = module.minimum(obj)
    record, record_error, uid = None, "", str(meta.get("uid") or "")
    raw = annotations.get(contract.RESERVATION)
    if isinstance(raw, str):
        record = Record.decode(raw)
        if record is None:
            record_error = f"{contract.RESERVATION}: {quoted(raw)} is not a reservation record"
        elif key is not None and not authentic(record, (kind, namespace, name), uid, key):
            record, record_error = None, (f"{contract.RESERVATION}: not written by this reconciler "
                                          "(its signature does not verify): ignored")
    generation = meta.get("generation")
    release = annotations.get(RELEASE_MODE)
    most, most_from = most_pods(kind, obj)
    labels = _map(meta.get("labels"))
    queue = labels.get(kueue.QUEUE_NAME_LABEL)
    min_member = annotations.get(VOLCANO_MIN_MEMBER)
    too_large = (f"{how}: {size} members, more than the {MAX_SLOTS} one gang may have (held)"
                 if size > MAX_SLOTS else "")
    return Workload(kind, namespace, name, max(size, 1), how, topology,
                    min_size=minimum if minimum is not None and 0 < minimum < size else None,
                    slots=slots(kind, obj) if 0 < size <= MAX_SLOTS else (), too_large=too_large,
                    generation=generation if isinstance(generation, int) else 0,
                    active=_active(meta, spec, status), finished=_finished(status), ends_at=_ends_at(kind, spec, status),
                    max_exec_seconds=label_seconds(labels), started=_started(status),
                    release=release if isinstance(release, str) else "", record=record, record_error=record_error,
                    owned=kind == JOB.kind and _owned(meta), uid=uid, most_pods=most, most_pods_from=most_from,
                    queue=queue if isinstance(queue, str) else "",
                    min_member=min_member if isinstance(min_member, str) else None, controller=_controller(meta))


def most_pods(kind: str, obj: Mapping[str, Any]) -> tuple[int, str]:
    """The most pods a workload object of a supported ``kind`` runs at once over its whole
    life, and how they are counted, naming the fields (``(4, "Job w: min(spec.parallelism,
    spec.completions)")``): a Job's ``min(parallelism, completions)``, a JobSet's sum over
    its replicated Jobs of ``replicas x`` that, a PyTorchJob's sum of replicas, a
    LeaderWorkerSet's ``replicas x size`` (all its groups). Counts as
    :func:`~reconciler.engine.model.templates.members` reads them, the Job's completed pods
    not taken off. The chart's policy ``<release>-gang-fits-workload`` counts the same
    (docs/decisions/058-kueue-for-quota.md). ``(0, "")`` for another kind."""
    module = MODULE_OF.get(kind)
    return module.most_pods(obj) if module is not None else (0, "")


def _owned(meta: Mapping[str, Any]) -> bool:
    """Whether a supported custom workload (another kind than a Job) controls this object."""
    owners = meta.get("ownerReferences")
    for ref in owners if isinstance(owners, list) else []:
        ref = _map(ref)
        if ref.get("controller") is True and (k := KIND_OF.get(str(ref.get("kind")))) is not None and k.custom:
            return True
    return False


def _controller(meta: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The object's controlling owner as ``(apiVersion, kind, name)``, or None."""
    owners = meta.get("ownerReferences")
    for ref in owners if isinstance(owners, list) else []:
        ref = _map(ref)
        if ref.get("controller") is True:
            return (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or ""))
    return None


#: Conditions that end a workload (Job: ``Complete``, ``Failed`` and the targets set before
#: them, ``SuccessCriteriaMet`` and ``FailureTarget``; JobSet: ``Completed``, ``Failed``;
#: Kubeflow: ``Succeeded``, ``Failed``).
FINISHING_CONDITIONS = frozenset({"Complete", "Completed", "Failed", "Succeeded", "FailureTarget", "SuccessCriteriaMet"})


def _suspended(spec: Mapping[str, Any]) -> bool:
    """``spec.suspend``, or a Kubeflow job's ``spec.runPolicy.suspend``."""
    return spec.get("suspend") is True or _map(spec.get("runPolicy")).get("suspend") is True


def _finished(status: Mapping[str, Any]) -> bool:
    """Whether a condition of :data:`FINISHING_CONDITIONS` is ``True`` in ``status``."""
    conditions = status.get("conditions")
    return any(_map(c).get("type") in FINISHING_CONDITIONS and _map(c).get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else []))


def _active(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a workload still runs pods: not being deleted, not suspended, without a
    condition that ends it."""
    return meta.get("deletionTimestamp") is None and not _suspended(spec) and not _finished(status)


def _started(status: Mapping[str, Any]) -> float | None:
    started = status.get("startTime")
    return epoch(started) if isinstance(started, str) else None


def _ends_at(kind: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> float | None:
    """When a workload's ``activeDeadlineSeconds`` runs out, counted from ``status.startTime``
    as its controller counts it (a Job's ``spec.activeDeadlineSeconds``: the Job controller's
    ``pastActiveDeadline``, which a suspended Job never is; a Kubeflow job's
    ``spec.runPolicy.activeDeadlineSeconds``), None without a deadline or a start."""
    if _suspended(spec):
        return None
    seconds = MODULE_OF[kind].deadline(spec)
    started = status.get("startTime")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0 or not isinstance(started, str):
        return None
    at = epoch(started)
    return None if at is None else at + seconds


def workloads_of(kind: str, objects: Iterable[Mapping[str, Any]],
                 key: bytes | None = None) -> dict[WorkloadKey, Workload]:
    """:func:`workload` of each object (``key`` as there), by key (objects that give none
    are left out)."""
    out = {}
    for obj in objects:
        w = workload(kind, obj, key)
        if w is not None:
            out[w.key] = w
    return out


def group(pod: PodInfo) -> tuple[str, WorkloadKey] | None:
    """The gang id (the part of the gang key after ``namespace/``) and the workload of a
    pod, or None when no supported workload created it: the first kind's
    :meth:`~reconciler.engine.model.kinds.base.WorkloadKind.gang_of` of
    :data:`~reconciler.engine.model.kinds.REGISTRY` that gives one, in its order, since a
    JobSet's pods are also owned by its Jobs: LeaderWorkerSet labels, JobSet labels, a
    Kubeflow owner, a Job owner."""
    for module in REGISTRY:
        found = module.gang_of(pod)
        if found is not None:
            return found
    return None


def superseded(members: Iterable[PodInfo]) -> set[str]:
    """Keys of the members of a LeaderWorkerSet group created before its current leader
    (worker index 0, the newest one): pods of the group as it was before it was
    recreated, on their way out. Creation timestamps have one-second resolution, so a
    pod created in the same second as the leader is kept. Empty for other workloads: each
    kind's :meth:`~reconciler.engine.model.kinds.base.WorkloadKind.superseded`, together."""
    members = list(members)
    return set().union(*(module.superseded(members) for module in REGISTRY))
