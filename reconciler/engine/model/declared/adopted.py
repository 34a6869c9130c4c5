"""The gang of a pod Troupe adopted from Volcano or KAI that names no group: the group that
peer's own controller would make for it (:mod:`troupe.adoption`,
docs/decisions/065-adopted-pods-join-their-peers-groups.md), read by the reconciler from the
pod (its :data:`~troupe.podgroups.ORIGINAL_SCHEDULER_NAME` annotation, which
:attr:`~reconciler.engine.model.pods.PodInfo.gang_annotations` keeps, and its owner) and
from the owner objects (:class:`~reconciler.engine.model.workloads.Workloads`):

- **Volcano**: gang ``<namespace>/volcano:podgroup-<uid>``, ``<uid>`` the pod's controlling
  owner's (the pod's own without one), the name Volcano gives that group. Its minimum is
  the owner's ``scheduling.volcano.sh/group-min-member`` (a ReplicaSet, StatefulSet or
  DaemonSet of :attr:`Workloads.owners <reconciler.engine.model.workloads.Workloads.owners>`,
  a Job of its workloads), 1 for an owner of another kind; while the owner is not known,
  the gang waits, with the reason (:func:`volcano_group`).
- **KAI**: a JobSet's, a LeaderWorkerSet group's, a PyTorchJob's or a Job's pod joins that
  workload's gang, sized as Troupe sizes workload gangs (:func:`implicit_gang_id`): the
  top-level owner KAI's pod-grouper groups by, all or nothing (a Job's gang is its
  ``parallelism``, where KAI's pod-grouper gives a plain Job's group a minimum of 1:
  docs/decisions/065-adopted-pods-join-their-peers-groups.md says why Troupe does not). A
  Job whose own top owner is a kind KAI would group it by, which Troupe cannot size, is
  held (:func:`kai_job_problem`).

:class:`Adopted` is this source of gangs (docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md).

Pure: plain values in, plain values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared.base import (
    Shape,
    Sizing,
    Source,
    annotated,
    keyed,
    workload_sized,
)
from reconciler.engine.model.declared.groups import group_sized
from reconciler.engine.model.pods import PodInfo
from troupe.adoption import VOLCANO_GROUP_PREFIX, VOLCANO_MIN_MEMBER, peer_source, volcano_minimum
from troupe.config import Config
from troupe.podgroups import (
    API_BY_SOURCE,
    KAI,
    ORIGINAL_SCHEDULER_NAME,
    VOLCANO,
    PodGroupSpec,
    parse_pod_group,
)

#: The workload kinds whose pods a KAI-adopted pod's gang is made of (all the workload's pods,
#: or a LeaderWorkerSet group's), by the gang id prefix :func:`~reconciler.engine.model.workloads.group` gives.
_KAI_WORKLOAD_GANGS = ("jobset:", "lws:", "pytorchjob:", "mpijob:", "raycluster:", "job:")
#: The top owners of a Job under which the Job itself is the group (a CronJob makes one Job a
#: run; a RayJob's submitter Job is outside its cluster's gang, decision 075).
_KAI_JOB_ALONE = frozenset({"", "CronJob", "RayJob"})
#: The top owners of a Job whose pods are that owner's members (a JobSet's child Job, an
#: MPIJob's launcher Job): the owner's gang is the group KAI makes.
_KAI_JOB_IN_OWNER = frozenset({wl.JOBSET.kind, "MPIJob"})


def peer(pod: PodInfo) -> str | None:
    """The source (:data:`~troupe.podgroups.VOLCANO`, :data:`~troupe.podgroups.KAI`) whose
    grouping rule applies to ``pod``: the peer it was adopted from, when that peer groups the
    pods that name no group and the pod names none; else None."""
    if pod.pod_group is not None or not pod.gang_annotations:
        return None
    return peer_source(pod.gang_annotations.get(ORIGINAL_SCHEDULER_NAME))


def implicit_gang_id(pod: PodInfo) -> str | None:
    """The id (after ``<namespace>/``) of the gang the group ``pod``'s peer would make stands
    for, or None (the pod's own rules decide): ``volcano:podgroup-<uid>``, or a KAI pod's
    JobSet, LeaderWorkerSet group, PyTorchJob, MPIJob, RayCluster or Job gang
    (``jobset:train:0``, ``raycluster:rc``, ``job:train``)."""
    source = peer(pod)
    if source == VOLCANO:
        return f"{VOLCANO}:{VOLCANO_GROUP_PREFIX}{pod.owner.uid if pod.owner is not None else pod.uid}"
    if source == KAI:
        found = wl.group(pod)
        if found is not None and found[0].startswith(_KAI_WORKLOAD_GANGS):
            return found[0]
    return None


def volcano_group(namespace: str, members: Sequence[PodInfo], workloads: wl.Workloads,
                  config: Config) -> tuple[PodGroupSpec | None, str, str]:
    """The group Volcano's controller would make for ``members`` (of one gang
    ``volcano:podgroup-<uid>``, in ``namespace``), as a
    :class:`~troupe.podgroups.PodGroupSpec` read from the Volcano PodGroup it would write
    (``minMember`` from the owner's annotation, :func:`troupe.adoption.volcano_minimum`);
    what declared that minimum, for reasons (``annotation scheduling.volcano.sh/group-min-member
    of ReplicaSet ml/web-7f9c``); and why the group cannot be made yet (``""``: it can): the
    owner is not known. Returns ``(spec or None, declared, missing)``."""
    first = members[0]
    owner = first.owner
    name = f"{VOLCANO_GROUP_PREFIX}{owner.uid if owner is not None else first.uid}"
    value, declared = None, "Volcano's default minimum of a pod's group"
    if owner is not None and owner.kind in ("ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
        key = (owner.kind, namespace, owner.name)
        found: wl.Workload | wl.OwnerObject | None = (workloads.objects.get(key) if owner.kind == "Job"
                                                      else workloads.owners.get(key))
        if found is None or (found.uid and found.uid != owner.uid):
            why = workloads.unavailable.get(owner.kind) if owner.kind == "Job" else workloads.owners_unavailable
            what = f"{owner.kind} {namespace}/{owner.name}"
            return None, "", (f"{what} cannot be read: {why}" if why else
                              f"{what} not found (deleted, or not readable by the reconciler)")
        value, declared = found.min_member, f"annotation {VOLCANO_MIN_MEMBER} of {owner.kind} {namespace}/{owner.name}"
    api = API_BY_SOURCE[VOLCANO]
    obj = {"apiVersion": f"{api.group}/{api.versions[0]}", "kind": api.kind,
           "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": volcano_minimum(value)}}
    return parse_pod_group(VOLCANO, obj, config), declared, ""


def kai_job_problem(pod: PodInfo, workloads: wl.Workloads) -> tuple[str, str]:
    """For ``pod``, adopted from KAI and made by a Job (of the Job's gang): ``(missing,
    held)``, why its gang waits (the Job is not known yet, so its top owner is not) and why it
    is held (the Job's top owner is a kind KAI would group it by, which Troupe cannot size: the
    Job alone is not the group KAI would make), each ``""`` when it does not. ``("", "")`` for
    any other pod."""
    owner = pod.owner
    if peer(pod) != KAI or owner is None or owner.kind != "Job" or not owner.api_version.startswith("batch/"):
        return "", ""
    key = ("Job", pod.namespace, owner.name)
    job = workloads.objects.get(key)
    if job is None:
        return workloads.missing(key), ""
    kind = job.controller[1] if job.controller is not None else ""
    if kind in _KAI_JOB_ALONE or kind in _KAI_JOB_IN_OWNER:
        return "", ""
    assert job.controller is not None
    api_version, _, name = job.controller
    return "", (f"adopted from kai-scheduler: KAI's pod-grouper groups the pods of Job {pod.namespace}/{owner.name} "
                f"by its top owner, here {kind} {name} ({api_version}) or above it, a group Troupe cannot size yet, "
                f"and the Job alone is not that group (held: name the gang with Troupe's keys "
                f"on the pod template, or leave such workloads to kai-scheduler, then create the pods again)")


class Adopted(Source):
    """The gang of the group a peer's controller would make for a pod adopted from it."""

    name = "adopted"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/<id>`` (:func:`implicit_gang_id`) of an adopted pod naming no group
        that Troupe holds or placed, else None."""
        implicit = implicit_gang_id(pod) if pod.gang_annotations else None
        if implicit is None or not (pod.gated or pod.planned_at or pod.released_at):
            return None
        return f"{pod.namespace}/{implicit}"

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """Ganged as the peer's controller groups them: a KAI workload's as a workload
        gang (held when a Job's top owner is one Troupe cannot size); Volcano's with its
        owner's minimum, waiting while the owner is not known. By Troupe's keys when the
        first member carries one (a ``<prefix>-min-size`` alone)."""
        first = shape.members[0]
        if annotated(first, sizing.config):
            return keyed(shape, sizing)
        if peer(first) != VOLCANO:
            missing, problem = kai_job_problem(first, sizing.workloads)
            if missing or problem:
                return replace(shape, settle_at=float("inf") if missing else shape.settle_at,
                               workload_missing=missing, held=shape.held or problem)
            return workload_sized(shape, sizing)
        spec, declared, missing = volcano_group(shape.namespace, shape.members, sizing.workloads, sizing.config)
        if spec is None:
            return replace(shape, settle_at=float("inf"), workload_missing=missing)
        return group_sized(shape, sizing, spec, declared)
