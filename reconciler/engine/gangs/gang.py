"""A gang, parsed once: which pods form it, how many members it needs, and what it asks.

Membership and size are decided together, here, for the reconciler's cache and the
simulator alike (DESIGN.md "Gangs" and "Topology"; ``docs/contract.md``, "Which pods form
a gang"):

- **Troupe's gang annotations** (``<prefix>-name``, ``-size``, ``-schedule-timeout-seconds``,
  ``seeds/001``): gang ``<namespace>/<name>`` of the annotated size.
- **A ``gke.io/topology-aware-auto-*`` gate** and no gang annotations (``seeds/002``):
  gang ``<namespace>/gke:<group>``, grouped as the GKE daemon groups them (``job-name``,
  ``training.kubeflow.org/job-name``, owner UID, ``name`` label). Its size is the owning
  Job's ``parallelism`` when the Job is known, else the members present once none has been
  created for ``autoGangSettleSeconds`` (read from creation timestamps, so a restarted
  reconciler and the simulator agree).
- **``<prefix>-size: auto``** (set by the user, or by the webhook in a namespace labelled
  ``troupe.io/gang-mode: auto``): gang ``<namespace>/<workload id>``, one per Job, JobSet
  restart attempt, LeaderWorkerSet group or Kubeflow job, sized from the workload object
  (:mod:`reconciler.engine.model.workloads`). Until that object is known the gang waits, with the reason.
- **A pod group** named by the member (the upstream Workload API's
  ``spec.schedulingGroup.podGroupName``, Volcano's, coscheduling's or KAI's key,
  :mod:`troupe.podgroups`) and no gang annotations: gang ``<namespace>/<source>:<group>``
  (:func:`_group_sized`): its minimum is the group's, its size the members as they come
  (docs/decisions/038-minimum-size.md), its level, priority and timeout the group's. Until
  the group object is known the gang waits, with the reason. Whatever else names the
  gang, the group's constraints bind it (:func:`_bound_by_group`,
  docs/decisions/056-pod-groups.md).
- **Troupe's gate and nothing else** (a topology or device-group request alone): a gang of
  one, ``<namespace>/pod:<pod name>``, placed on its own. Pods are never grouped by their
  owner without being asked: a Job whose pods carry only a topology request gets each pod
  placed alone, never a wait for peers it did not name.
- **Malformed gang annotations** (the pod got past admission while the webhook was out of
  the path): the pod still belongs to its gang (or to a gang of one when even the name is
  unreadable), and the gang is *held*, the parse error its reason, instead of the pod
  being ignored. So is a gang with a member whose other labels or annotations Troupe
  reads cannot be read (:attr:`~reconciler.engine.model.pods.PodInfo.malformed`: a rank
  index, a plan or nomination record, the selected devices).

Pure: plain data in (:class:`~reconciler.engine.model.pods.PodInfo`), a :class:`Gang` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import troupe.contract as contract
import troupe.kueue as kueue
from reconciler.engine.gangs.memberkeys import member_keys
from reconciler.engine.gangs.queued import beyond_queued_workload, group_fix, keys_fix, kueue_gated
from reconciler.engine.model import adopted
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.membership import (
    auto_namespaces,
    gang_keys,
    group_by_gang,
    planned_gangs,
)
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from reconciler.engine.model.timestamps import epoch
from troupe.config import Config
from troupe.errors import MAX_QUOTED, ContractError, quoted
from troupe.podgroups import VOLCANO, PodGroupSpec, constrained
from troupe.policies import (
    AS_CREATED,
    GANG_POLICY_KEYS,
    REPLACE_MEMBER,
    WHEN_COMPLETE,
)

#: Annotation keys whose values every member must share (DESIGN.md "Gangs": members
#: whose size or timeout disagree are held; a topology request is the gang's, too).
AGREE_ON_TOPOLOGY = (*contract.TOPOLOGY_KEYS, *GANG_POLICY_KEYS, *kueue.TOPOLOGY_KEYS)


#: The disruptions that say a member's node was lost (the taint manager's eviction of a
#: NoExecute or unreachable node, the pod garbage collector's of a node that is gone): a
#: member that ended ``Failed`` with one of them failed with its node. Any other disruption
#: (a preemption, an eviction, Troupe's own rollback) is not a failure of the member.
NODE_LOSS_DISRUPTIONS = frozenset({"DeletionByTaintManager", "DeletionByPodGC"})


def member_failed(pod: PodInfo) -> bool:
    """Whether ``pod`` is a member that failed after Troupe released it: phase ``Failed``,
    a release of its own, and either its node's loss (:data:`NODE_LOSS_DISRUPTIONS`) or no
    disruption and no deletion: a member deleted (by a user, its namespace's deletion, its
    controller; the Job controller marks such pods ``Failed``), preempted, evicted or rolled
    back by Troupe did not fail."""
    if pod.phase != "Failed" or not (pod.planned_at or pod.released_at):
        return False
    return pod.disruption in NODE_LOSS_DISRUPTIONS or (not pod.disruption and not pod.deleting)


@dataclass(frozen=True)
class Gang:
    """One gang, as a decision needs it.

    ``key``: ``namespace/id`` (the work queue's key). ``name``: how users know it (the
    gang name, ``gke:job-name=w`` or ``pod:<name>``). ``members``: its active pods
    (neither terminal nor being deleted), in rank order (:func:`troupe.ranks.rank_key`).
    ``size``: members the gang has; None while an auto-gang settles, until ``settle_at``
    (seconds since the epoch). ``min_size``: members needed before the first release
    (``<prefix>-min-size``), None: ``size`` (docs/decisions/038-minimum-size.md). ``size_from`` says where a size not
    stated by the members came from (``"Job w parallelism"``). ``timeout_seconds``: the
    effective timeout (defaulted and capped, ``seeds/001``); ``jitter_seconds`` the bound
    of the jitter added to it. ``topology``: the members' level request. ``held``: why the
    members cannot be released as they are (malformed or disagreeing keys), else ``""``.
    ``device_groups``: the SharedDeviceGroups its members join. ``priority``: the priority
    the pod group its members name states, else the highest ``spec.priority`` of its
    members: its one priority, in the queue and in preemption, as preemptor and as victim
    (:meth:`~reconciler.engine.ledger.snapshot.Snapshot.priority_of`). ``created``: the earliest creation timestamp
    (RFC 3339). ``not_before`` (seconds since the epoch) and ``timeouts``: the backoff
    after consecutive rollbacks, and ``rolled_back``: the releases (their ``planned-at``)
    rolled back whose owned members must still be deleted: what the caller knows (the
    reconciler keeps it in the cluster; 0, 0 and none for the simulator).
    ``workload_missing``: for a gang sized by its workload, why that workload object is
    not known (the gang waits), else ``""``. ``avoid``: node name -> why the gang's plans
    avoid it (kube-scheduler refused a member there, :mod:`.refusals`): what the caller
    knows, as the backoff. ``unwritten``: what failed of the last release the caller wrote
    for the gang (``1 of 4 write(s) failed (...)``), ``""`` when nothing failed or the caller
    does not know (the reconciler remembers it; the simulator fails no write).

    A gang released as created (docs/decisions/034-release-as-created.md) also has its
    ``workload`` (``(kind, namespace, name)``), its ``slots`` (the members its pod
    templates make, in rank order, :mod:`reconciler.engine.model.templates`), ``release_mode``
    (:data:`troupe.policies.AS_CREATED`) and the ``reservation`` record its workload
    carries (None before one is made); ``reservation_stale`` says why that record no
    longer fits the workload (suspended, being deleted, resized, another gang's), ``""``;
    ``ends_at`` when its workload's deadline runs out (seconds since the epoch; None: none).
    Other gangs have ``release_mode`` :data:`troupe.policies.WHEN_COMPLETE` and no slots.

    ``failure_policy``: the members' ``troupe.io/gang-failure-policy``; ``failed``: its
    members that ended ``Failed`` after Troupe released them, not by a disruption other
    than their node's loss (:func:`member_failed`; a ``RestartGang`` gang
    restarts when one belongs to a release still running); ``failure_grace_seconds``: how
    long a running member's node may be NotReady before the member counts as failed
    (``nodeFailureGraceSeconds``; docs/decisions/040-failure-policy.md).
    """

    key: str
    namespace: str
    name: str
    members: tuple[PodInfo, ...]
    size: int | None
    timeout_seconds: int
    jitter_seconds: int
    topology: contract.TopologyRequest = field(default_factory=contract.TopologyRequest)
    size_from: str = ""
    settle_at: float = 0.0
    held: str = ""
    device_groups: tuple[str, ...] = ()
    priority: int = 0
    created: str = ""
    not_before: float = 0.0
    timeouts: int = 0
    rolled_back: tuple[str, ...] = ()
    workload_missing: str = ""
    avoid: Mapping[str, str] = field(default_factory=dict)
    unwritten: str = ""
    workload: WorkloadKey | None = None
    slots: tuple[PodInfo, ...] = ()
    release_mode: str = WHEN_COMPLETE
    reservation: Record | None = None
    reservation_stale: str = ""
    ends_at: float | None = None
    min_size: int | None = None
    failure_policy: str = REPLACE_MEMBER
    failed: tuple[PodInfo, ...] = ()
    failure_grace_seconds: int = 60

    @property
    def as_created(self) -> bool:
        """Released as created: planned from its slots, each member released as it comes."""
        return self.release_mode == AS_CREATED and bool(self.slots)




def _disagreement(members: Iterable[PodInfo], keys: Iterable[str]) -> str:
    """A message naming the keys the members disagree on (values sorted), or ``""``."""
    values: dict[str, set[str]] = {}
    for pod in members:
        for k in keys:
            value = pod.gang_annotations.get(k, "<unset>")
            values.setdefault(k, set()).add(value if len(value) <= MAX_QUOTED else quoted(value))
    differing = [f"{k}: {', '.join(sorted(v))}" for k, v in values.items() if len(v) > 1]
    return "members disagree on " + "; ".join(differing) + " (held until they agree)" if differing else ""


def build_gang(key: str, pods: Iterable[PodInfo], config: Config, parallelism: Mapping[tuple[str, str], int],
               workloads: wl.Workloads | None = None, planned: wl.Workload | None = None) -> Gang:
    """The :class:`Gang` ``key`` of ``pods`` (every pod with that key, active or not).

    ``parallelism`` maps a Job's ``(namespace, name)`` to its ``spec.parallelism``: the
    size of an auto-gang owned by that Job. ``workloads``: the workload objects that size
    gangs of ``<prefix>-size: auto`` (none known when None). ``planned``: the workload the
    gang is released as created from (:func:`planned_gangs`), whose slots stand for the
    members that do not exist yet. Never raises: what cannot be read makes the gang held,
    with the reason.
    """
    if planned is not None:
        return _as_created(key, list(pods), config, parallelism, workloads, planned)
    gang = _build(key, pods, config, parallelism, workloads)
    return _bound_by_group(gang, config, workloads or wl.Workloads())


def _build(key: str, pods: Iterable[PodInfo], config: Config, parallelism: Mapping[tuple[str, str], int],
           workloads: wl.Workloads | None) -> Gang:
    """:func:`build_gang` of a gang not released as created, before a pod group binds it."""
    namespace, _, name = key.partition("/")
    pods = list(pods)
    keys = gang_keys(config.gang_annotation_prefix)
    auto = [p for p in pods if p.gang_annotations.get(keys.size) == contract.AUTO_SIZE]
    old = wl.superseded(p for p in auto if p.active) if auto else set()
    members = tuple(sorted((p for p in pods if p.active and p.key not in old), key=lambda p: (p.rank, p.key)))
    timeout = min(config.gang_schedule_default_timeout_seconds, config.gang_schedule_timeout_seconds_limit)
    failed = tuple(p for p in pods if member_failed(p))
    base = Gang(key, namespace, name, members, None, timeout, config.gang_schedule_timeout_jitter_seconds,
                failed=failed, failure_grace_seconds=config.node_failure_grace_seconds)
    if not members:
        return base
    created = min((p.creation_timestamp for p in members if p.creation_timestamp), default="")
    groups = tuple(sorted({p.device_group for p in members if p.device_group}))
    priority = max(p.priority for p in members)
    topology, policy, held = _requests(members, config)
    gang = Gang(key, namespace, name, members, None, timeout, config.gang_schedule_timeout_jitter_seconds,
                topology=topology, held=held, device_groups=groups, priority=priority, created=created,
                failure_policy=policy, failed=failed, failure_grace_seconds=config.node_failure_grace_seconds)
    annotated = any(k in members[0].gang_annotations for k in keys.all())
    if name.startswith("gke:"):
        return _auto_sized(gang, config, parallelism)
    if members[0].gang_annotations.get(keys.size) == contract.AUTO_SIZE:
        if name.startswith("pod:") or wl.group(members[0]) is None:
            return replace(gang, held=f"member {members[0].name}: {keys.size}: {contract.AUTO_SIZE}, but no "
                                      f"supported workload ({', '.join(k.kind for k in wl.KINDS)}) created it")
        return _workload_sized(gang, config, workloads or wl.Workloads())
    group = members[0].pod_group
    if group is not None and not annotated and name == group.gang_name():
        return _group_sized(gang, config, workloads or wl.Workloads())
    if not annotated and name == adopted.implicit_gang_id(members[0]):
        return _adopted_sized(gang, config, workloads or wl.Workloads())
    if name.startswith("pod:") and not annotated:
        return replace(gang, size=1, held=held or _disagreement(members, AGREE_ON_TOPOLOGY))
    specs = []
    for pod in members:
        read = member_keys(pod, config)
        if read.spec_error:
            return replace(gang, held=held or f"member {pod.name}: {read.spec_error} (held until it is fixed)")
        if read.spec is not None:
            specs.append(read.spec)
    if not specs:
        return replace(gang, held=f"member {members[0].name} carries none of the gang annotations")
    disagree = _disagreement(members, (keys.size, keys.timeout, keys.min_size, *AGREE_ON_TOPOLOGY))
    gang = replace(gang, size=specs[0].size, timeout_seconds=specs[0].timeout_seconds, held=held or disagree,
                   min_size=specs[0].min_size)
    key = keys.min_size if gang.min_size else keys.size
    return replace(gang, held=gang.held or beyond_queued_workload(
        members, gang.min_size or gang.size, f"annotation {key}", keys_fix(keys), workloads or wl.Workloads()))


def _requests(members: Sequence[PodInfo], config: Config) -> tuple[contract.TopologyRequest, str, str]:
    """What the members ask for, read from the first: its topology request, its failure
    policy, and why the gang is held (``""``: it is not): a member that cannot be read, one
    behind Kueue's gates, or a request that cannot be parsed."""
    malformed = next((p for p in members if p.malformed), None)
    held = f"member {malformed.name}: {malformed.malformed} (held until it is fixed)" if malformed else ""
    held = held or kueue_gated(members)
    first = members[0]
    read = member_keys(first, config)
    if read.request_error:
        held = held or f"member {first.name}: {read.request_error}"
    return read.topology, read.policy, held


def _auto_sized(gang: Gang, config: Config, parallelism: Mapping[tuple[str, str], int]) -> Gang:
    """A GKE auto-gang's size (``seeds/002``): the owning Job's parallelism when the Job
    is known, else the members present once ``autoGangSettleSeconds`` have passed since
    the newest one was created (``settle_at``)."""
    owner = gang.members[0].owner
    if owner is not None and owner.kind == "Job" and owner.api_version.startswith("batch/"):
        size = parallelism.get((gang.namespace, owner.name))
        if size is not None:
            return replace(gang, size=max(size, 1), size_from=f"Job {owner.name} parallelism")
    stamps = [t for p in gang.members if (t := epoch(p.creation_timestamp)) is not None]
    newest = max(stamps, default=0.0)
    return replace(gang, settle_at=newest + config.auto_gang_settle_seconds)


def _group_sized(gang: Gang, config: Config, workloads: wl.Workloads, spec: PodGroupSpec | None = None,
                 declared: str = "") -> Gang:
    """A gang its members declare by naming a pod group (docs/decisions/056-pod-groups.md):
    its minimum is the group's count (1 for upstream's ``basic`` policy, which is no
    gang: each member released as it fits), its size the members present, never below the
    minimum (docs/decisions/038-minimum-size.md); its level the group's, bound with any
    level the members ask (:func:`~troupe.podgroups.constrained`); its priority the group's
    ``priority`` when it states one; its timeout coscheduling's ``scheduleTimeoutSeconds``
    (capped as an annotation's is). It waits, with the reason, while the group object is
    not known, and is held when it cannot be read. ``spec``: the group no object declares
    (a peer's, its minimum ``declared`` so: docs/decisions/065-adopted-pods-join-their-peers-groups.md)."""
    if spec is None:
        ref = gang.members[0].pod_group
        assert ref is not None  # build_gang sends only such gangs here
        spec = workloads.group(gang.namespace, ref)
        if spec is None:
            return replace(gang, settle_at=float("inf"), workload_missing=workloads.group_missing(gang.namespace, ref))
    if spec.error or gang.held:
        return replace(gang, size=len(gang.members), held=gang.held or f"{spec.error} (held until it is fixed)")
    minimum = spec.min_count if spec.min_count is not None else 1
    timeout = gang.timeout_seconds if spec.timeout_seconds is None else \
        min(spec.timeout_seconds, config.gang_schedule_timeout_seconds_limit)
    declared = declared or f"{spec.describe()} {spec.ref.api.min_field}"
    held = _disagreement(gang.members, AGREE_ON_TOPOLOGY) or beyond_queued_workload(
        gang.members, spec.min_count, declared, group_fix, workloads)
    return replace(gang, size=max(len(gang.members), minimum), min_size=minimum, held=held,
                   size_from=declared if spec.gang else f"{spec.describe()}: basic, no minimum",
                   topology=constrained(gang.topology, spec, config), timeout_seconds=timeout,
                   priority=spec.priority if spec.priority is not None else gang.priority)


def _adopted_sized(gang: Gang, config: Config, workloads: wl.Workloads) -> Gang:
    """Pods adopted from Volcano or KAI that name no group, ganged as their peer's controller
    groups them (:mod:`reconciler.engine.model.adopted`): a KAI workload's as a workload
    gang (held when a Job's top owner is one Troupe cannot size); Volcano's with its owner's
    minimum, waiting while the owner is not known."""
    if adopted.peer(gang.members[0]) != VOLCANO:
        missing, problem = adopted.kai_job_problem(gang.members[0], workloads)
        if missing or problem:
            return replace(gang, settle_at=float("inf") if missing else gang.settle_at, workload_missing=missing,
                           held=gang.held or problem)
        return _workload_sized(gang, config, workloads)
    spec, declared, missing = adopted.volcano_group(gang.namespace, gang.members, workloads, config)
    if spec is None:
        return replace(gang, settle_at=float("inf"), workload_missing=missing)
    return _group_sized(gang, config, workloads, spec, declared)


def _bound_by_group(gang: Gang, config: Config, workloads: wl.Workloads) -> Gang:
    """``gang``, declared by Troupe's own keys (or a workload), bound by the pod group its
    members name, if any (docs/decisions/056-pod-groups.md): its level intersected with
    the group's (:func:`~troupe.podgroups.constrained`), its minimum raised to the
    group's count (held when that is above the gang's size: kube-scheduler would never
    schedule fewer), its priority the group's when it states one (a gang's one priority, in
    the queue and in preemption: docs/decisions/064-preemption-names-no-other-tenant.md). It
    waits while the group is not known; it is held when its members name different groups
    or the group cannot be read."""
    if not gang.members:
        return gang
    ref = gang.members[0].pod_group
    if ref is None or gang.name == ref.gang_name():
        return gang
    names = sorted({p.pod_group.gang_name() if p.pod_group else "<none>" for p in gang.members})
    if len(names) > 1:
        return replace(gang, held=gang.held or f"members name different pod groups: {', '.join(names)} (held until "
                                               f"they agree)")
    spec = workloads.group(gang.namespace, ref)
    if spec is None:
        return replace(gang, workload_missing=gang.workload_missing or workloads.group_missing(gang.namespace, ref))
    held = gang.held or _group_problem(gang, spec) or beyond_queued_workload(
        gang.members, spec.min_count, f"{spec.describe()} {spec.ref.api.min_field}", group_fix, workloads)
    return replace(gang, held=held, topology=constrained(gang.topology, spec, config),
                   min_size=_raised_minimum(gang, spec),
                   priority=spec.priority if spec.priority is not None and not spec.error else gang.priority)


def _group_problem(gang: Gang, spec: PodGroupSpec) -> str:
    if spec.error:
        return f"{spec.error} (held until it is fixed)"
    if spec.min_count is not None and gang.size is not None and spec.min_count > gang.size:
        return (f"{spec.describe()} {spec.ref.api.min_field}: {spec.min_count} is more than the gang's "
                f"{gang.size} members: kube-scheduler would never schedule it (held until it is fixed)")
    return ""


def _raised_minimum(gang: Gang, spec: PodGroupSpec) -> int | None:
    """The gang's minimum, never below the group's count (None: the gang's size, which is
    not below it, :func:`_group_problem`)."""
    if gang.min_size is None or spec.min_count is None:
        return gang.min_size
    return max(gang.min_size, spec.min_count)


def _workload_sized(gang: Gang, config: Config, workloads: wl.Workloads) -> Gang:
    """A gang of ``<prefix>-size: auto`` members: sized by its workload object, with the
    workload's topology request when the members make none; waiting, with the reason,
    while the workload is not known (docs/decisions/014-workload-gangs.md)."""
    found = wl.group(gang.members[0])
    if found is None:  # build_gang holds such a gang before it gets here
        return gang
    keys = gang_keys(config.gang_annotation_prefix)
    disagree = _disagreement(gang.members, (keys.size, keys.timeout, keys.min_size, *AGREE_ON_TOPOLOGY))
    timeout, minimum = gang.timeout_seconds, None
    read = member_keys(gang.members[0], config)
    if read.spec_error:
        return replace(gang, held=f"member {gang.members[0].name}: {read.spec_error} (held until it is fixed)")
    spec = read.spec
    if spec is not None:
        timeout, minimum = spec.timeout_seconds, spec.min_size
    gang = replace(gang, timeout_seconds=timeout, held=gang.held or disagree, min_size=minimum)
    workload = workloads.objects.get(found[1])
    if workload is None:
        return replace(gang, settle_at=float("inf"), workload_missing=workloads.missing(found[1]))
    topology, held = gang.topology, gang.held or workload.too_large
    member_asks = any(k in gang.members[0].gang_annotations for k in AGREE_ON_TOPOLOGY)
    if workload.topology and not member_asks:
        try:
            topology = contract.parse_topology_annotations(workload.topology, config)
        except ContractError as e:
            held = held or f"{workload.kind} {workload.name}: {e}"
    if minimum is not None and minimum > workload.size and not held:
        held = (f"annotation {keys.min_size}: {minimum} is more than the gang's {workload.size} members "
                f"({workload.size_from}) (held until it is fixed)")
    return replace(gang, size=workload.size, size_from=workload.size_from, topology=topology, held=held)


def _as_created(key: str, pods: list[PodInfo], config: Config, parallelism: Mapping[tuple[str, str], int],
                workloads: wl.Workloads | None, planned: wl.Workload) -> Gang:
    """A gang released as created from ``planned``: built from its pods, or from its slots
    while none is active (size, timeout, topology and priority are the template's), with
    the workload's slots and reservation, and why that reservation is stale."""
    gang = build_gang(key, pods, config, parallelism, workloads)
    if not gang.members:
        from_slots = build_gang(key, planned.slots, config, parallelism, workloads)
        gang = replace(from_slots, members=(), device_groups=())
    record, stale = planned.record, ""
    if record is not None:
        gang_id = key.partition("/")[2]
        if record.gang != gang_id:
            stale = f"the reservation on {planned.kind} {planned.name} is for {record.gang}"
        elif not planned.active:  # a finished workload is not planned: suspended, or being deleted
            stale = f"{planned.kind} {planned.name} is suspended or being deleted"
        elif len(record.nodes) not in (len(planned.slots), gang.min_size):
            stale = (f"{planned.kind} {planned.name} now runs {len(planned.slots)} member(s), "
                     f"the reservation holds {len(record.nodes)}")
    return replace(gang, workload=planned.key, slots=planned.slots, release_mode=AS_CREATED,
                   reservation=record, reservation_stale=stale, ends_at=planned.ends_at)


def all_gangs(pods: Iterable[PodInfo], config: Config, parallelism: Mapping[tuple[str, str], int],
              workloads: wl.Workloads | None = None,
              namespaces: Mapping[str, Mapping[str, str]] | None = None) -> list[Gang]:
    """Every gang of ``pods`` and of the workloads released as created
    (:func:`planned_gangs`; ``namespaces``: name -> labels), by key: what the simulator and
    ``kubectl troupe`` decide, as the reconciler's cache builds them."""
    planned = planned_gangs(workloads, config, auto_namespaces(namespaces or {})) if workloads is not None else {}
    grouped = group_by_gang(pods, config)
    return [build_gang(key, grouped.get(key, []), config, parallelism, workloads, planned.get(key))
            for key in sorted({*grouped, *planned})]
