"""A gang, parsed once: which pods form it, how many members it needs, and what it asks.

Membership and size are decided together, for the reconciler's cache and the simulator
alike (DESIGN.md "Gangs" and "Topology"; ``docs/contract.md``, "Which pods form a gang"):
the ways a gang is declared (Troupe's annotations, a workload's size, a pod group, a peer's
implicit group, GKE's gate, Troupe's gate alone) are the sources of
:mod:`reconciler.engine.model.declared`, each giving the gang's key and its shape, tried in
the order of :data:`~reconciler.engine.model.declared.SOURCES`; whatever declares the gang,
the pod group its members name binds it (docs/decisions/056-pod-groups.md). Here the gang
is built around that shape: its members, their requests, priority, device groups, failures
and, for a gang released as created, its workload's slots and reservation.

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
from reconciler.engine.gangs.capacity import Ask, Observed
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared import shaped
from reconciler.engine.model.declared.base import Shape, Sizing
from reconciler.engine.model.declared.memberkeys import gang_keys, member_keys
from reconciler.engine.model.declared.queued import kueue_gated
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.membership import auto_namespaces, group_by_gang, planned_gangs
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from troupe.config import Config
from troupe.policies import AS_CREATED, REPLACE_MEMBER, WHEN_COMPLETE

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

    ``capacity``: whether and how it may ask for room with a ProvisioningRequest, and
    ``capacity_request``: the request of its name the cluster holds (what the caller knows,
    :mod:`.capacity`; None and None for the simulator unless it is told; docs/decisions/080).
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
    capacity: Ask | None = None
    capacity_request: Observed | None = None

    @property
    def as_created(self) -> bool:
        """Released as created: planned from its slots, each member released as it comes."""
        return self.release_mode == AS_CREATED and bool(self.slots)




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
    return _build(key, pods, config, parallelism, workloads)


def _build(key: str, pods: Iterable[PodInfo], config: Config, parallelism: Mapping[tuple[str, str], int],
           workloads: wl.Workloads | None) -> Gang:
    """:func:`build_gang` of a gang not released as created: its members and what they ask,
    shaped by the source that declares it (:func:`~reconciler.engine.model.declared.shaped`)."""
    namespace, _, name = key.partition("/")
    pods = list(pods)
    keys = gang_keys(config.gang_annotation_prefix)
    auto = [p for p in pods if p.gang_annotations.get(keys.size) == contract.AUTO_SIZE]
    old = wl.superseded(p for p in auto if p.active) if auto else set()
    members = tuple(sorted((p for p in pods if p.active and p.key not in old), key=lambda p: (p.rank, p.key)))
    timeout = min(config.gang_schedule_default_timeout_seconds, config.gang_schedule_timeout_seconds_limit)
    failed = tuple(p for p in pods if member_failed(p))
    if not members:
        return Gang(key, namespace, name, members, None, timeout, config.gang_schedule_timeout_jitter_seconds,
                    failed=failed, failure_grace_seconds=config.node_failure_grace_seconds)
    created = min((p.creation_timestamp for p in members if p.creation_timestamp), default="")
    groups = tuple(sorted({p.device_group for p in members if p.device_group}))
    priority = max(p.priority for p in members)
    topology, policy, held = _requests(members, config)
    s = shaped(Shape(namespace, name, members, timeout, topology, held, priority),
               Sizing(config, parallelism, workloads or wl.Workloads()))
    return Gang(key, namespace, name, members, s.size, s.timeout_seconds, config.gang_schedule_timeout_jitter_seconds,
                topology=s.topology, size_from=s.size_from, settle_at=s.settle_at, held=s.held,
                device_groups=groups, priority=s.priority, created=created, workload_missing=s.workload_missing,
                min_size=s.min_size, failure_policy=policy, failed=failed,
                failure_grace_seconds=config.node_failure_grace_seconds)


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
