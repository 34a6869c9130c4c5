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

from collections.abc import Mapping
from typing import Any

from reconciler.engine.model.kinds import MODULE_OF
from reconciler.engine.model.kinds.base import MAX_SLOTS as MAX_SLOTS
from reconciler.engine.model.kinds.base import as_map
from reconciler.engine.model.kinds.base import job_pods as job_pods
from reconciler.engine.model.kinds.kubeflow import replica_order as replica_order
from reconciler.engine.model.pods import PodInfo


def members(kind: str, obj: Mapping[str, Any]) -> tuple[int, str]:
    """How many members a Job, JobSet or Kubeflow job object runs at once, counted with
    arithmetic from its counts (never one by one: a tenant writes them), and how, for
    reasons: ``(8, "JobSet train: driver 1x1 + workers 2x4")``: the kind's module's
    :meth:`~reconciler.engine.model.kinds.base.WorkloadKind.size`. A count that is missing or
    not an int32 takes the API's default (1). ``(0, ...)`` for another kind."""
    module = MODULE_OF.get(kind)
    if module is None:
        return 0, f"{kind} {as_map(obj.get('metadata')).get('name') or ''}: "
    return module.size(obj)


def slots(kind: str, obj: Mapping[str, Any]) -> tuple[PodInfo, ...]:
    """The slots of a workload object of ``kind`` (``Job``, ``JobSet``, ``PyTorchJob``), in
    rank order; ``()`` for another kind, a template that cannot be read, or more than
    :data:`MAX_SLOTS` members (counted first, :func:`members`)."""
    module = MODULE_OF.get(kind)
    meta = as_map(obj.get("metadata"))
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
    created, uid = str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or name)
    if module is None or not name or not 0 < members(kind, obj)[0] <= MAX_SLOTS:
        return ()
    return tuple(sorted(module.slots(obj, name, namespace, created, uid), key=lambda p: p.rank))
