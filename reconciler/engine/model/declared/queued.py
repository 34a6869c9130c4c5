"""What Kueue's queueing asks of a gang: it is held while a member waits behind one of Kueue's
gates (:func:`kueue_gated`, docs/decisions/039-kueue-annotations.md), and when its minimum
is one no workload queued in Kueue can ever fill alone, whatever declares that minimum
(:func:`beyond_queued_workload`, docs/decisions/058-kueue-for-quota.md,
docs/decisions/066-queued-minimum-by-every-source.md).

Kueue admits each workload (label ``kueue.x-k8s.io/queue-name``) alone and holds its quota
while its pods exist. A gang whose first release needs more members than such a workload
ever runs at once can never complete with that workload alone; if its other members were in
another queued workload, Kueue could admit one and keep the other waiting on the quota the
first holds. So the gang is held, with a reason naming what declared the minimum, the
workload, its count and its queue, instead of waiting for members that never come. The
minimum may be declared by Troupe's keys (``<prefix>-min-size``, else ``<prefix>-size``), by
a pod group the members name (its ``minCount`` or ``minMember``), by a group that raises a
Troupe gang's minimum, or by the group a peer scheduler's controller would make for an
adopted pod (:mod:`reconciler.engine.model.declared.adopted`): :func:`beyond_queued_workload` judges
them all alike.

Pure: plain values in, a reason out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import troupe.contract as contract
import troupe.kueue as kueue
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.pods import PodInfo


def beyond_queued_workload(members: Iterable[PodInfo], need: int | None, declared: str,
                           fix: Callable[[int], str], workloads: wl.Workloads) -> str:
    """Why a gang is held because a workload queued in Kueue that makes some of its
    ``members`` runs fewer pods than ``need`` (the members the gang's first release needs),
    or ``""`` when none does (or ``need`` is None: the gang states none).

    ``declared`` names what declares ``need``, as the reason starts
    (``annotation troupe.io/gang-size``, ``PodGroup ml/g (scheduling.volcano.sh)
    spec.minMember``); ``fix(most)`` says what to change, given the most pods the workload
    runs (``give the gang at most 4 members, or troupe.io/gang-size: auto``). The first
    such workload in key order is named, e.g. ``annotation troupe.io/gang-size: 5 members,
    but Job ml/train runs at most 4 pods (Job train: min(spec.parallelism,
    spec.completions)); Kueue admits it alone (label kueue.x-k8s.io/queue-name: team-a), so
    the gang can never complete and the workload holds its quota (held until it is fixed:
    give the gang at most 4 members, or troupe.io/gang-size: auto)``. The workload's count
    is :func:`~reconciler.engine.model.workloads.most_pods`, as the chart's policy
    ``<release>-gang-fits-workload`` counts it."""
    if need is None:
        return ""
    for workload_key in sorted({found[1] for p in members if (found := wl.group(p)) is not None}):
        w = workloads.objects.get(workload_key)
        if w is None or not w.queue or not 0 < w.most_pods < need:
            continue
        return (f"{declared}: {need} members, but {w.kind} {w.namespace}/{w.name} runs at most {w.most_pods} "
                f"pods ({w.most_pods_from}); Kueue admits it alone (label {kueue.QUEUE_NAME_LABEL}: {w.queue}), so "
                f"the gang can never complete and the workload holds its quota (held until it is fixed: "
                f"{fix(w.most_pods)})")
    return ""


def keys_fix(keys: contract.GangKeys) -> Callable[[int], str]:
    """What to change when the gang's own keys (of ``keys``' prefix) declare the minimum no
    queued workload fills."""
    return lambda most: f"give the gang at most {most} members, or {keys.size}: {contract.AUTO_SIZE}"


def group_fix(most: int) -> str:
    """What to change when a pod group's minimum is the one no queued workload fills."""
    return f"give the group a minimum of at most {most}"


def kueue_gated(members: Iterable[PodInfo]) -> str:
    """Why a gang with a member that carries one of Kueue's scheduling gates is held
    (docs/decisions/039-kueue-annotations.md), or ``""``: Kueue's topology gate means
    Kueue places the pod itself, and a release by Troupe would pin it elsewhere; its
    admission gate means Kueue has not admitted the pod's workload yet, and a member
    released behind it could not be bound."""
    for pod in members:
        if kueue.TOPOLOGY_GATE in pod.gates:
            return (f"member {pod.name} carries Kueue's scheduling gate {kueue.TOPOLOGY_GATE}: Kueue's "
                    f"topology-aware scheduling places it, so Troupe does not (held; use one of them for a workload)")
        if kueue.ADMISSION_GATE in pod.gates:
            return (f"member {pod.name} waits for Kueue to admit its workload (scheduling gate "
                    f"{kueue.ADMISSION_GATE}); held until Kueue removes the gate")
    return ""
