"""A JobSet as a workload (docs/decisions/014-workload-gangs.md): one gang per JobSet and
restart attempt (its pods' labels ``jobset.sigs.k8s.io/jobset-name`` and
``restart-attempt``), of the sum over ``replicatedJobs`` of ``replicas x parallelism`` (each
capped by its completions); its slots, per replicated Job in order, per child Job ``j`` and
per completion index ``k``, carry ``job-global-index`` and ``job-completion-index`` of the
current restart attempt, as the JobSet controller (sigs.k8s.io/jobset) labels them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
        spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
        attempt = str(count(status.get("restarts"), 0))
        replicated = spec.get("replicatedJobs")
        global_index = 0
        for rj in replicated if isinstance(replicated, list) else []:
            rj = as_map(rj)
            rj_name = str(rj.get("name") or "")
            job_spec = as_map(as_map(rj.get("template")).get("spec"))
            base = template_pod(as_map(job_spec.get("template")), namespace, created)
            pods = job_pods(job_spec)
            if pods == 0:  # no pods, however many Jobs: nothing to make one by one
                global_index += count(rj.get("replicas"), 1)
                continue
            for j in range(count(rj.get("replicas"), 1)):
                job = f"{name}-{rj_name}-{j}"
                for k in range(pods):
                    if base is None:
                        return
                    labels = {contract.JOBSET_NAME_LABEL: name, contract.JOBSET_RESTART_LABEL: attempt,
                              contract.JOBSET_GLOBAL_INDEX_LABEL: str(global_index),
                              contract.JOB_COMPLETION_INDEX: str(k)}
                    yield slot(base, f"{job}[{k}]", f"slot:{uid}:{attempt}:{global_index}:{k}", labels,
                               Owner("batch/v1", "Job", job, f"slot:{uid}:{j}"))
                global_index += 1

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``jobset:<name>:<restart attempt>`` of its labels (attempt ``0`` without one)."""
        jobset = pod.labels.get(contract.JOBSET_NAME_LABEL)
        if not jobset:
            return None
        attempt = pod.labels.get(contract.JOBSET_RESTART_LABEL) or "0"
        return f"jobset:{jobset}:{attempt}", (JOBSET.kind, pod.namespace, jobset)
