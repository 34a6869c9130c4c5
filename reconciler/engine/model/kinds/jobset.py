"""A JobSet as a workload (docs/decisions/014-workload-gangs.md): one gang per JobSet and
restart attempt (its pods' labels ``jobset.sigs.k8s.io/jobset-name`` and
``restart-attempt``), of the sum over ``replicatedJobs`` of ``replicas x parallelism`` (each
capped by its completions); its slots, per replicated Job in order, per child Job ``j`` and
per completion index ``k``, carry ``job-global-index`` and ``job-completion-index`` of the
current restart attempt, as the JobSet controller (sigs.k8s.io/jobset) labels them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds.base import (
    WorkloadKind,
    as_map,
    count,
    job_pods,
    slot,
    template_pod,
)
from reconciler.engine.model.pods import Owner, PodInfo
from troupe.workloadkinds import JOBSET

#: The prefix of the labels the JobSet controller puts on its Jobs and their pods.
LABELS = "jobset.sigs.k8s.io/"


@dataclass(frozen=True, slots=True)
class ChildJob:
    """One Job a JobSet makes: ``name`` ``<jobset>-<replicated Job>-<index>``, its
    replicated Job's ``replicated`` name and ``replicas``, its ``index`` there and its
    ``global_index`` (replicated-Job order, then index), and the replicated Job's
    ``template`` (a JobTemplateSpec mapping)."""

    name: str
    replicated: str
    replicas: int
    index: int
    global_index: int
    template: Mapping[str, Any]

    def labels(self, jobset: str, attempt: str = "0") -> dict[str, str]:
        """The labels (also annotations) the JobSet controller puts on this Job and its pods
        at restart ``attempt`` (sigs.k8s.io/jobset ``pkg/controllers``)."""
        return {contract.JOBSET_NAME_LABEL: jobset, LABELS + "replicatedjob-name": self.replicated,
                LABELS + "replicatedjob-replicas": str(self.replicas), LABELS + "job-index": str(self.index),
                contract.JOBSET_GLOBAL_INDEX_LABEL: str(self.global_index), contract.JOBSET_RESTART_LABEL: attempt}


def child_jobs(obj: Mapping[str, Any], name: str | None = None) -> Iterator[ChildJob]:
    """The Jobs of JobSet ``obj`` (named ``name``, default its ``metadata.name``), in the
    order its controller makes them: per replicated Job of ``spec.replicatedJobs`` in order,
    ``replicas`` (default 1) Jobs. Lenient: a field of the wrong type reads as absent
    (``kubectl troupe plan`` checks them first, reconciler/tools/manifests.py)."""
    name = str(as_map(obj.get("metadata")).get("name") or "") if name is None else name
    replicated = as_map(obj.get("spec")).get("replicatedJobs")
    global_index = 0
    for rj in replicated if isinstance(replicated, list) else []:
        rj = as_map(rj)
        rj_name, replicas = str(rj.get("name") or ""), count(rj.get("replicas"), 1)
        for j in range(replicas):
            yield ChildJob(f"{name}-{rj_name}-{j}", rj_name, replicas, j, global_index, as_map(rj.get("template")))
            global_index += 1


class JobSetKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a JobSet."""

    facts = JOBSET

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The sum over its replicated Jobs of ``replicas x`` a Job's pods at once."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        replicated = as_map(obj.get("spec")).get("replicatedJobs")
        parts, size = [], 0
        for i, rj in enumerate(replicated if isinstance(replicated, list) else []):
            rj = as_map(rj)
            replicas, pods = count(rj.get("replicas"), 1), job_pods(as_map(as_map(rj.get("template")).get("spec")))
            size += replicas * pods
            rj_name = rj.get("name")
            parts.append(f"{rj_name if isinstance(rj_name, str) and rj_name else i} {replicas}x{pods}")
        return size, f"JobSet {name}: " + " + ".join(parts)

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """As :meth:`size`: its counts read no status."""
        return self.size(obj)

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """Per child Job ``<name>-<replicated job>-<j>``, per completion index, of the current attempt."""
        attempt = str(count(as_map(obj.get("status")).get("restarts"), 0))
        for child in child_jobs(obj, name):
            job_spec = as_map(child.template.get("spec"))
            pods = job_pods(job_spec)
            if pods == 0:  # no pods, however many Jobs: nothing to make one by one
                continue
            base = template_pod(as_map(job_spec.get("template")), namespace, created)
            if base is None:
                return
            for k in range(pods):
                labels = {contract.JOBSET_NAME_LABEL: name, contract.JOBSET_RESTART_LABEL: attempt,
                          contract.JOBSET_GLOBAL_INDEX_LABEL: str(child.global_index),
                          contract.JOB_COMPLETION_INDEX: str(k)}
                yield slot(base, f"{child.name}[{k}]", f"slot:{uid}:{attempt}:{child.global_index}:{k}", labels,
                           Owner("batch/v1", "Job", child.name, f"slot:{uid}:{child.index}"))

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``jobset:<name>:<restart attempt>`` of its labels (attempt ``0`` without one)."""
        jobset = pod.labels.get(contract.JOBSET_NAME_LABEL)
        if not jobset:
            return None
        attempt = pod.labels.get(contract.JOBSET_RESTART_LABEL) or "0"
        return f"jobset:{jobset}:{attempt}", (JOBSET.kind, pod.namespace, jobset)
