"""The group a peer gang scheduler's own controller makes for a pod that names none: how the
pods Troupe adopts from Volcano and KAI (``adoptSchedulerNames``) are ganged
(docs/decisions/065-adopted-pods-join-their-peers-groups.md).

Volcano and KAI put every pod bound for them in a pod group, whether or not the pod names
one: their controllers make the group from the pod's owner. A pod adopted from them
(``spec.schedulerName`` rewritten to ``default-scheduler``, the name kept in
:data:`~troupe.podgroups.ORIGINAL_SCHEDULER_NAME`) that names no group therefore belongs to
the group its peer would have made, never to none:

===========  ===========================================  ==============================================
peer         its group of a pod that names none           the group's minimum
===========  ===========================================  ==============================================
Volcano      ``podgroup-<uid>`` of the pod's controlling  the annotation :data:`VOLCANO_MIN_MEMBER` of the
(``volcano``) owner (of the pod itself without one), one   pod's owners among ReplicaSets, DaemonSets,
             group per owner (Volcano's ``pkg/controllers   StatefulSets and Jobs (a Deployment's
             /podgroup``, ``GeneratePodgroupName``)       annotations are copied to its ReplicaSets), 1
                                                          without one (:func:`volcano_minimum`)
KAI          the pod's top owner (the last of its chain   per top owner kind (KAI's ``pkg/podgrouper``):
(``kai-      of owners; KAI's ``pkg/podgrouper``)         a JobSet, a LeaderWorkerSet group, a PyTorchJob,
scheduler``)                                              an MPIJob, a RayCluster: all their pods (Troupe
                                                          sizes them as workload gangs, decisions 014,
                                                          075); a Job: 1 under KAI, its ``parallelism``
                                                          under Troupe (decision 065 says why); a
                                                          Deployment's ReplicaSet, a StatefulSet, a
                                                          DaemonSet, a pod without owner: 1; a TFJob...:
                                                          kinds Troupe cannot size
===========  ===========================================  ==============================================

What the webhook decides at creation, from the pod alone (:func:`at_creation`): the pod is
gated, so that the reconciler gangs it by its group (:data:`GATE`); or it is adopted
without a gate, its group's minimum being 1 whatever its owner says (:data:`ALONE`); or it
is not adopted at all, with the reason (a group Troupe cannot size: adopting the pod would
release it alone). The webhook cannot read the owner: it decides from the pod's
``ownerReferences`` and labels, and the reconciler reads the owner (its annotations, the
owner's own controller) before the gang is released.

Pure: plain values in, plain values out; no Kubernetes client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from troupe.contract import JOBSET_NAME_LABEL, LWS_NAME_LABEL, pod_labels, pod_meta
from troupe.podgroups import GROUP_ANNOTATIONS, KAI, ORIGINAL_SCHEDULER_NAME, VOLCANO

#: Volcano's scheduler name, as its install names it.
VOLCANO_SCHEDULER = "volcano"
#: KAI scheduler's name, as its install names it.
KAI_SCHEDULER = "kai-scheduler"
#: Scheduler name -> the source (:mod:`troupe.podgroups`) whose controller's rule groups
#: the pods adopted from it that name no group. A name listed in ``adoptSchedulerNames``
#: but not here (a coscheduling profile's: its pods without a group are no gang) is adopted
#: as before: its pods that name no group are released alone.
GROUPING_PEERS: Mapping[str, str] = {VOLCANO_SCHEDULER: VOLCANO, KAI_SCHEDULER: KAI}

#: Volcano's annotation on a pod's owner giving the minimum of the group its controller
#: makes for the owner's pods.
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
#: The prefix of the name Volcano's controller gives that group (``podgroup-<owner uid>``).
VOLCANO_GROUP_PREFIX = "podgroup-"
#: The owner kinds whose annotations Volcano's controller reads that minimum from (matched
#: by kind alone, as Volcano matches them).
VOLCANO_OWNER_KINDS = ("ReplicaSet", "DaemonSet", "StatefulSet", "Job")
#: Of those, the ``apps/v1`` kinds: the reconciler reads them only for this (Jobs it reads
#: as workloads), and only when a Volcano name is adopted.
APPS_OWNER_KINDS = ("ReplicaSet", "StatefulSet", "DaemonSet")

#: The annotations that say which group a pod joins: Volcano's and KAI's references, and the
#: scheduler a pod was adopted from, whose peer's group it joins when it names none. Like
#: coscheduling's label, they are fixed while Troupe's gate holds the pod (the webhook
#: denies an UPDATE that adds, changes or removes one: docs/decisions/057-adopted-scheduler-names.md).
FIXED_WHILE_GATED: tuple[str, ...] = (*GROUP_ANNOTATIONS, ORIGINAL_SCHEDULER_NAME)

_INT32_MAX = 2**31 - 1


class Verdict(NamedTuple):
    """What the webhook does with a pod adopted from a grouping peer that names no group:
    ``gate`` it (the reconciler gangs it by the group its peer makes), or not; or refuse
    to adopt it (``refused``: why, ``""`` when it is adopted)."""

    gate: bool
    refused: str = ""


#: Adopted and gated: the reconciler gangs it by its peer's group.
GATE = Verdict(True)
#: Adopted, not gated: its peer's group has a minimum of 1 whatever its owner says.
ALONE = Verdict(False)

#: KAI: the first owner a pod names (API group, kind) -> the verdict, for owners KAI groups
#: as Troupe can: a Job (the Job's gang, unless the Job's own top owner is a kind KAI
#: gangs, which the reconciler reads), a PyTorchJob, an MPIJob's worker and a RayCluster's
#: pod (all the workload's pods) gated; the kinds
#: KAI's default grouper gives a minimum of 1 (a Deployment's ReplicaSet: one group per
#: pod) adopted alone. Pods of a JobSet or a LeaderWorkerSet are told by their labels.
KAI_OWNERS: Mapping[tuple[str, str], Verdict] = {
    ("batch", "Job"): GATE,
    ("kubeflow.org", "PyTorchJob"): GATE,
    ("kubeflow.org", "MPIJob"): GATE,
    ("ray.io", "RayCluster"): GATE,
    ("apps", "ReplicaSet"): ALONE,
    ("apps", "StatefulSet"): ALONE,
    ("apps", "DaemonSet"): ALONE,
}


def peer_source(scheduler_name: object) -> str | None:
    """The source whose grouping rule applies to pods adopted from ``scheduler_name``
    (:data:`GROUPING_PEERS`), or None."""
    return GROUPING_PEERS.get(scheduler_name) if isinstance(scheduler_name, str) else None


def reads_owners(adopted: tuple[str, ...]) -> bool:
    """Whether the reconciler reads ReplicaSets, StatefulSets and DaemonSets, given the
    scheduler names adopted (``adoptSchedulerNames``): only when one is Volcano's, whose
    groups take their minimum from them."""
    return any(peer_source(name) == VOLCANO for name in adopted)


#: Why they are not read otherwise: the reason of a gang that would need one.
OWNERS_UNREAD = (f"the reconciler reads ReplicaSets, StatefulSets and DaemonSets only when adoptSchedulerNames "
                 f"names {VOLCANO_SCHEDULER}")


def volcano_minimum(value: str | None) -> int:
    """The minimum of the group Volcano's controller makes, from its owner's
    :data:`VOLCANO_MIN_MEMBER` annotation (``value``; None without one): the value when it
    is a decimal int32 of at least 1, else 1 (Volcano's default and what it falls back to for
    a value it cannot read or a negative one; its 0 asks for no gang, which is 1 here)."""
    if value is None:
        return 1
    text = value.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or len(digits) > 10:
        return 1
    number = int(text)
    return number if 1 <= number <= _INT32_MAX else 1


def _owner_references(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    owners = pod_meta(pod).get("ownerReferences")
    return [o for o in owners if isinstance(o, Mapping)] if isinstance(owners, list) else []


def at_creation(source: str, pod: Mapping[str, Any]) -> Verdict:
    """The :class:`Verdict` for ``pod`` (a Pod as JSON, as it is created) adopted from the
    peer of ``source`` (:data:`~troupe.podgroups.VOLCANO` or :data:`~troupe.podgroups.KAI`)
    that names no group, read from the pod alone (the webhook reads no owner).

    Volcano: gated when one of its owners is a ReplicaSet, DaemonSet, StatefulSet or Job
    (the kinds whose annotation may give the group a minimum above 1); else alone. KAI:
    gated when it is a JobSet's or a LeaderWorkerSet's pod (their labels) or its first owner
    is a Job, a PyTorchJob, an MPIJob or a RayCluster; alone without an owner or when that owner is a ReplicaSet,
    StatefulSet or DaemonSet (:data:`KAI_OWNERS`); for any other owner, not adopted, the
    reason naming the owner. Never raises."""
    owners = _owner_references(pod)
    if source == VOLCANO:
        return GATE if any(o.get("kind") in VOLCANO_OWNER_KINDS for o in owners) else ALONE
    labels = pod_labels(pod)
    if labels.get(JOBSET_NAME_LABEL) or labels.get(LWS_NAME_LABEL):  # LWS's own webhook may add group-index later
        return GATE
    if not owners:
        return ALONE
    first = owners[0]
    api_version, kind, name = (str(first.get(k) or "") for k in ("apiVersion", "kind", "name"))
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    verdict = KAI_OWNERS.get((group, kind))
    if verdict is not None:
        return verdict
    return Verdict(False, f"not adopted from {KAI_SCHEDULER}: KAI's pod-grouper makes this pod's group from its top "
                          f"owner, here {kind} {name} ({api_version or 'no apiVersion'}) or above it, and Troupe cannot "
                          f"size that group yet (it sizes Jobs, JobSets, LeaderWorkerSets, PyTorchJobs, MPIJobs and RayClusters); adopted, "
                          f"the pod would be released alone, so it keeps spec.schedulerName {KAI_SCHEDULER}")
