"""What the engine asks of a workload kind (:class:`WorkloadKind`), and what its modules share.

The engine's half of a kind: the contract facts are :class:`troupe.workloadkinds.Kind`'s;
what a gang needs of an object of the kind is one module of this package, a
:class:`WorkloadKind` registered once in :data:`reconciler.engine.model.kinds.REGISTRY`.
The methods are what Kueue's ``jobframework.GenericJob`` asks of an integration
(``pkg/controller/jobframework/interface.go``: its pod sets and their counts, its pods'
templates, whether it is finished), in Troupe's terms (docs/decisions/070-a-workload-kind-is-one-module.md):

* :meth:`~WorkloadKind.size`: the members of one gang, counted with arithmetic (a tenant
  writes the counts);
* :meth:`~WorkloadKind.minimum`: the members it starts with, when fewer than its size;
* :meth:`~WorkloadKind.most_pods`: the most pods it runs at once over its whole life;
* :meth:`~WorkloadKind.slots`: its members before their pods exist, from its pod
  templates (none for a kind whose gangs are released when complete);
* :meth:`~WorkloadKind.gang_of`: the gang a pod of it belongs to;
* :meth:`~WorkloadKind.superseded`: members of an earlier incarnation of a gang;
* :meth:`~WorkloadKind.deadline`: its ``activeDeadlineSeconds``.

A kind of several pod sets (a RayCluster's head and worker groups, an MPIJob's launcher and
workers) sums them in :meth:`~WorkloadKind.size` and makes their slots in rank order; a pod
it runs outside the gang (a RayJob's submitter) is one :meth:`~WorkloadKind.gang_of` gives
no gang.

Pure: plain dicts in (objects as the API serves them), plain values out. Never raises.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.pods import PodInfo
from troupe.ranks import rank_key
from troupe.workloadkinds import Kind

#: Members of one workload at most, made into slots: the API's own bound on a Job's
#: parallelism is far higher; a gang of more members than this is held with the reason.
MAX_SLOTS = 10_000


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def count(value: Any, default: int) -> int:
    """``value`` when it is an int32 count (0 to 2**31-1, not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**31 - 1 else default


def job_pods(spec: Mapping[str, Any], succeeded: int = 0) -> int:
    """Pods a Job spec runs at once: ``parallelism`` (default 1), capped by the
    completions still to go when ``completions`` is set (the Job API's rules,
    https://kubernetes.io/docs/concepts/workloads/controllers/job/#parallel-jobs)."""
    parallelism = count(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool) and abs(completions) <= 2**31 - 1:
        parallelism = min(parallelism, max(completions - succeeded, 0))
    return parallelism


def template_pod(template: Mapping[str, Any], namespace: str, created: str) -> PodInfo | None:
    """The pod a template makes, gated by Troupe (a slot waits to be placed), or None when
    the template cannot be read."""
    meta = as_map(template.get("metadata"))
    spec = dict(as_map(template.get("spec")))
    spec["schedulingGates"] = [{"name": contract.GATE}]
    obj = {"metadata": {"name": "slot", "namespace": namespace, "creationTimestamp": created,
                        "labels": copy.copy(as_map(meta.get("labels"))),
                        "annotations": copy.copy(as_map(meta.get("annotations")))},
           "spec": spec}
    try:
        return PodInfo.from_object(obj)
    except (ObjectError, ValueError, TypeError, KeyError, RecursionError):
        return None


def slot(base: PodInfo, name: str, uid: str, labels: Mapping[str, str], owner: Any) -> PodInfo:
    """``base`` as the pod of one rank: its name, uid, labels and controller owner."""
    merged = {**base.labels, **labels}
    rank = rank_key({"metadata": {"name": name, "labels": merged}})
    return replace(base, name=name, uid=uid, labels=merged, rank=rank, owner=owner)


class WorkloadKind:
    """One workload kind's behaviour, over its contract facts ``facts``. The defaults are a
    kind's that makes no slots, supersedes no member and keeps its deadline in
    ``spec.runPolicy`` (Kubeflow's); a kind's module overrides what differs."""

    facts: Kind

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The members of one gang of ``obj`` and how they are counted, for reasons
        (``(8, "JobSet train: driver 1x1 + workers 2x4")``): a missing or malformed count
        takes the API's default (1)."""
        raise NotImplementedError

    def minimum(self, obj: Mapping[str, Any]) -> int | None:
        """The members one gang of ``obj`` starts with, when the kind declares fewer than its
        :meth:`size` (a RayCluster's ``minReplicas``; docs/decisions/038-minimum-size.md),
        else None (the default: the whole size)."""
        return None

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The most pods ``obj`` runs at once over its whole life, and how, naming the
        fields (what the chart's ``<release>-gang-fits-workload`` policy counts)."""
        raise NotImplementedError

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """Its members before their pods exist (any order; the caller sorts them by rank),
        ``obj`` named ``name`` in ``namespace``, created at ``created``, of uid ``uid``.
        None by default: the kind's gangs are released when complete."""
        return iter(())

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """The gang id (the part of the gang key after ``namespace/``) and the workload of
        ``pod`` when an object of this kind created it as a member, else None."""
        raise NotImplementedError

    def superseded(self, members: Iterable[PodInfo]) -> set[str]:
        """Keys of the members of an earlier incarnation of a gang, on their way out: none
        by default."""
        return set()

    def deadline(self, spec: Mapping[str, Any]) -> Any:
        """Its ``activeDeadlineSeconds`` as written (any value; the caller checks it):
        ``spec.runPolicy.activeDeadlineSeconds`` by default (Kubeflow's run policy)."""
        return as_map(spec.get("runPolicy")).get("activeDeadlineSeconds")
