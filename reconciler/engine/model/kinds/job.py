"""A batch/v1 Job as a workload (docs/decisions/014-workload-gangs.md): one gang per Job
(the pod's controller owner), of ``parallelism`` members capped by the completions still to
go; its slots are copies of ``spec.template``, an Indexed Job's slot ``i`` carrying
``batch.kubernetes.io/job-completion-index: i``; its deadline ``spec.activeDeadlineSeconds``
(the Job controller's ``pastActiveDeadline``)."""

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
from troupe.workloadkinds import JOB


class JobKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a batch/v1 Job."""

    facts = JOB

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """``parallelism``, capped by the completions still to go (``status.succeeded``)."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        succeeded = count(as_map(obj.get("status")).get("succeeded"), 0)
        return (job_pods(as_map(obj.get("spec")), succeeded),
                f"Job {name} parallelism" + (f", {succeeded} completed" if succeeded else ""))

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """``min(parallelism, completions)``, its completed pods not taken off."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        return job_pods(as_map(obj.get("spec"))), f"Job {name}: min(spec.parallelism, spec.completions)"

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """One copy of ``spec.template`` per member, indexed for an Indexed Job."""
        spec = as_map(obj.get("spec"))
        base = template_pod(as_map(spec.get("template")), namespace, created)
        if base is None:
            return
        succeeded = count(as_map(obj.get("status")).get("succeeded"), 0)
        indexed = spec.get("completionMode") == "Indexed"
        owner = Owner("batch/v1", "Job", name, uid)
        for i in range(job_pods(spec, succeeded)):
            labels = {contract.JOB_COMPLETION_INDEX: str(i)} if indexed else {}
            yield slot(base, f"{name}[{i}]", f"slot:{uid}:{i}", labels, owner)

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``job:<name>`` of the pod's controlling batch Job."""
        owner = pod.owner
        if owner is None or owner.kind != JOB.kind or owner.api_version.split("/", 1)[0] != JOB.group:
            return None
        return f"job:{owner.name}", (JOB.kind, pod.namespace, owner.name)

    def deadline(self, spec: Mapping[str, Any]) -> Any:
        """``spec.activeDeadlineSeconds``."""
        return spec.get("activeDeadlineSeconds")
