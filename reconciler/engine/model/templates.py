"""A gang's members before their pods exist: the *slots* a workload's pod templates make.

A slot is a :class:`~reconciler.engine.model.pods.PodInfo` made from the pod template of the
workload object, one per member the workload runs at once, labelled as its controller
will label the pod of that rank, so that it has the pod's requests, node filter, pod
terms, gang annotations and rank (:func:`troupe.ranks.rank_key`) before the pod is
created. Placement plans a gang released as created on its slots
(docs/decisions/034-release-as-created.md):

============================  ========================================================
workload                      slots, in rank order
============================  ========================================================
Job (``batch/v1``)            ``parallelism`` (capped by the completions still to go)
                              copies of ``spec.template``; an Indexed Job's slot ``i``
                              carries ``batch.kubernetes.io/job-completion-index: i``
JobSet                        per replicated job in order, per child Job ``j`` and per
                              completion index ``k``: ``job-global-index`` and
                              ``job-completion-index``, of the current restart attempt
PyTorchJob (``kubeflow.org``) per replica type (master first), per replica index:
                              ``training.kubeflow.org/replica-type``/``-replica-index``
============================  ========================================================

A LeaderWorkerSet makes none: its groups are released when complete. Each template is
parsed once and copied per slot. Never raises: a template that cannot be read makes no
slots (the gang is then released when complete, as before). The counts are the tenant's
to write (a PyTorchJob of ``replicas: 2147483647``), so a workload's members are counted
first, with arithmetic (:func:`~reconciler.engine.model.workloads.workload`), and one of
more than :data:`MAX_SLOTS` makes none: its gang is held with the reason
(docs/decisions/049-hostile-tenants-third-round.md). No loop here runs more often than
the slots it makes, so no count can cost time either.

Pure: plain dicts in (workload objects as the API serves them), slots out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.pods import Owner, PodInfo
from troupe.ranks import rank_key

#: Members of one workload at most, made into slots: the API's own bound on a Job's
#: parallelism is far higher; a gang of more members than this is held with the reason.
MAX_SLOTS = 10_000


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**31 - 1 else default


def job_pods(spec: Mapping[str, Any], succeeded: int = 0) -> int:
    """Pods a Job spec runs at once: ``parallelism`` (default 1), capped by the
    completions still to go when ``completions`` is set (the Job API's rules,
    https://kubernetes.io/docs/concepts/workloads/controllers/job/#parallel-jobs)."""
    parallelism = _count(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool) and abs(completions) <= 2**31 - 1:
        parallelism = min(parallelism, max(completions - succeeded, 0))
    return parallelism


def replica_order(item: tuple[Any, Any]) -> tuple[bool, str]:
    """Replica types with the master (chief, launcher) first, then by name."""
    name = str(item[0])
    return (name.lower() not in ("master", "chief", "launcher"), name)


def members(kind: str, obj: Mapping[str, Any]) -> tuple[int, str]:
    """How many members a Job, JobSet or Kubeflow job object runs at once, counted with
    arithmetic from its counts (never one by one: a tenant writes them), and how, for
    reasons: ``(8, "JobSet train: driver 1x1 + workers 2x4")``. A count that is missing or
    not an int32 takes the API's default (1). ``(0, ...)`` for another kind."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    name = str(meta.get("name") or "")
    if kind == "Job":
        succeeded = _count(_map(obj.get("status")).get("succeeded"), 0)
        return job_pods(spec, succeeded), f"Job {name} parallelism" + (f", {succeeded} completed" if succeeded else "")
    parts, size = [], 0
    if kind == "JobSet":
        replicated = spec.get("replicatedJobs")
        for i, rj in enumerate(replicated if isinstance(replicated, list) else []):
            rj = _map(rj)
            replicas, pods = _count(rj.get("replicas"), 1), job_pods(_map(_map(rj.get("template")).get("spec")))
            size += replicas * pods
            rj_name = rj.get("name")
            parts.append(f"{rj_name if isinstance(rj_name, str) and rj_name else i} {replicas}x{pods}")
        return size, f"JobSet {name}: " + " + ".join(parts)
    for key, replica_specs in sorted((k, v) for k, v in spec.items() if isinstance(k, str)):
        if not key.endswith("ReplicaSpecs") or not isinstance(replica_specs, Mapping):
            continue
        for rtype, rspec in sorted(((str(k), v) for k, v in replica_specs.items()), key=replica_order):
            replicas = _count(_map(rspec).get("replicas"), 1)
            size += replicas
            parts.append(f"{rtype} {replicas}")
    return size, f"{kind} {name}: " + " + ".join(parts)


def _template_pod(template: Mapping[str, Any], namespace: str, created: str) -> PodInfo | None:
    """The pod a template makes, gated by Troupe (a slot waits to be placed), or None when
    the template cannot be read."""
    meta = _map(template.get("metadata"))
    spec = dict(_map(template.get("spec")))
    spec["schedulingGates"] = [{"name": contract.GATE}]
    obj = {"metadata": {"name": "slot", "namespace": namespace, "creationTimestamp": created,
                        "labels": copy.copy(_map(meta.get("labels"))),
                        "annotations": copy.copy(_map(meta.get("annotations")))},
           "spec": spec}
    try:
        return PodInfo.from_object(obj)
    except (ObjectError, ValueError, TypeError, KeyError, RecursionError):
        return None


def _slot(base: PodInfo, name: str, uid: str, labels: Mapping[str, str], owner: Any) -> PodInfo:
    """``base`` as the pod of one rank: its name, uid, labels and controller owner."""
    merged = {**base.labels, **labels}
    rank = rank_key({"metadata": {"name": name, "labels": merged}})
    return replace(base, name=name, uid=uid, labels=merged, rank=rank, owner=owner)


def _job_slots(obj: Mapping[str, Any], name: str, namespace: str, created: str, uid: str) -> Iterator[PodInfo]:
    spec = _map(obj.get("spec"))
    base = _template_pod(_map(spec.get("template")), namespace, created)
    if base is None:
        return
    succeeded = _count(_map(obj.get("status")).get("succeeded"), 0)
    indexed = spec.get("completionMode") == "Indexed"
    owner = Owner("batch/v1", "Job", name, uid)
    for i in range(job_pods(spec, succeeded)):
        labels = {contract.JOB_COMPLETION_INDEX: str(i)} if indexed else {}
        yield _slot(base, f"{name}[{i}]", f"slot:{uid}:{i}", labels, owner)


def _jobset_slots(obj: Mapping[str, Any], name: str, namespace: str, created: str, uid: str) -> Iterator[PodInfo]:
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    attempt = str(_count(status.get("restarts"), 0))
    replicated = spec.get("replicatedJobs")
    global_index = 0
    for rj in replicated if isinstance(replicated, list) else []:
        rj = _map(rj)
        rj_name = str(rj.get("name") or "")
        job_spec = _map(_map(rj.get("template")).get("spec"))
        base = _template_pod(_map(job_spec.get("template")), namespace, created)
        pods = job_pods(job_spec)
        if pods == 0:  # no pods, however many Jobs: nothing to make one by one
            global_index += _count(rj.get("replicas"), 1)
            continue
        for j in range(_count(rj.get("replicas"), 1)):
            job = f"{name}-{rj_name}-{j}"
            for k in range(pods):
                if base is None:
                    return
                labels = {contract.JOBSET_NAME_LABEL: name, contract.JOBSET_RESTART_LABEL: attempt,
                          contract.JOBSET_GLOBAL_INDEX_LABEL: str(global_index), contract.JOB_COMPLETION_INDEX: str(k)}
                yield _slot(base, f"{job}[{k}]", f"slot:{uid}:{attempt}:{global_index}:{k}", labels,
                            Owner("batch/v1", "Job", job, f"slot:{uid}:{j}"))
            global_index += 1


def _kubeflow_slots(obj: Mapping[str, Any], name: str, namespace: str, created: str, uid: str,
                    api_version: str, kind: str) -> Iterator[PodInfo]:
    spec = _map(obj.get("spec"))
    owner = Owner(api_version, kind, name, uid)
    for key, replica_specs in sorted((k, v) for k, v in spec.items() if isinstance(k, str)):
        if not key.endswith("ReplicaSpecs") or not isinstance(replica_specs, Mapping):
            continue
        for rtype, rspec in sorted(((str(k), v) for k, v in replica_specs.items()), key=replica_order):
            base = _template_pod(_map(_map(rspec).get("template")), namespace, created)
            if base is None:
                return
            for i in range(_count(_map(rspec).get("replicas"), 1)):
                labels = {contract.KUBEFLOW_REPLICA_TYPE: rtype.lower(), contract.KUBEFLOW_REPLICA_INDEX: str(i),
                          contract.KUBEFLOW_JOB_NAME_LABEL: name}
                yield _slot(base, f"{name}[{rtype.lower()}-{i}]", f"slot:{uid}:{rtype}:{i}", labels, owner)


def slots(kind: str, obj: Mapping[str, Any]) -> tuple[PodInfo, ...]:
    """The slots of a workload object of ``kind`` (``Job``, ``JobSet``, ``PyTorchJob``), in
    rank order; ``()`` for another kind, a template that cannot be read, or more than
    :data:`MAX_SLOTS` members (counted first, :func:`members`)."""
    meta = _map(obj.get("metadata"))
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
    created, uid = str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or name)
    if not name or not 0 < members(kind, obj)[0] <= MAX_SLOTS:
        return ()
    if kind == "Job":
        made = list(_job_slots(obj, name, namespace, created, uid))
    elif kind == "JobSet":
        made = list(_jobset_slots(obj, name, namespace, created, uid))
    elif kind == "PyTorchJob":
        made = list(_kubeflow_slots(obj, name, namespace, created, uid, str(obj.get("apiVersion") or "kubeflow.org/v1"),
                                    kind))
    else:
        return ()
    return tuple(sorted(made, key=lambda p: p.rank))
