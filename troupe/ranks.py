"""Rank order: where a gang's members stand in it, read from the indexes their workload
controllers stamp (DESIGN.md "Topology", ``seeds/002``).

:func:`rank_key` sorts a gang's members; :func:`rank_problem` says why an index a pod
carries cannot be read (its gang is then held, docs/decisions/029).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from troupe.contract import (
    JOB_COMPLETION_INDEX,
    JOBSET_GLOBAL_INDEX_LABEL,
    KUBEFLOW_JOB_ROLE,
    KUBEFLOW_REPLICA_INDEX,
    KUBEFLOW_REPLICA_TYPE,
    LWS_WORKER_INDEX_LABEL,
    RAY_GROUP_LABEL,
    RAY_HOST_INDEX_LABEL,
    RAY_NODE_TYPE_LABEL,
    RAY_REPLICA_INDEX_LABEL,
    pod_meta,
)
from troupe.errors import quoted

_LEAD_REPLICA_TYPES = frozenset({"master", "chief", "launcher", "driver"})
_DECIMAL = re.compile(r"[0-9]{1,9}")
_NAME_SUFFIX = re.compile(r"(.*?)([0-9]{1,9})")


def _mapping_or_empty(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def rank_key(pod: Mapping[str, Any]) -> tuple[int, int, int, str, int, str]:
    """Sort key putting a gang's members in rank order (DESIGN.md "Topology", seeds/002).

    By ``batch.kubernetes.io/job-completion-index`` (label, else annotation), after the
    JobSet's ``jobset.sigs.k8s.io/job-global-index`` when there is one (replicated-job
    order, then job index); then ``training.kubeflow.org/replica-index`` (the master,
    chief or launcher before the workers of the same index; an MPI launcher, which carries
    no index, is rank 0 of its job); then the LeaderWorkerSet's
    ``leaderworkerset.sigs.k8s.io/worker-index`` (the leader is 0); then a Ray node's
    ``ray.io/node-type`` (the head first) and ``ray.io/group``, then its replica and host
    indexes when KubeRay writes them (else 0: then by name); then a numeric name suffix (``worker-2``
    before ``worker-10``), then the name. Returns ``(tier, major, index, prefix, suffix,
    name)``; pods with an index (tiers 0-2) sort before a Ray node (tier 3), and those before
    pods ranked by name (4, 5). A tier-3 rank's ``(tier, major, prefix)`` is its *family*
    (:func:`family`): the pods of one Ray group are interchangeable.
    """
    meta = pod_meta(pod)
    return rank_key_of(str(meta.get("name") or ""), _mapping_or_empty(meta.get("labels")),
                       _mapping_or_empty(meta.get("annotations")))


def rank_key_of(name: str, lab: Mapping[str, Any], ann: Mapping[str, Any]) -> tuple[int, int, int, str, int, str]:
    """:func:`rank_key` of a pod named ``name`` with labels ``lab`` and annotations
    ``ann``, already read from its object."""
    for tier, key in enumerate((JOB_COMPLETION_INDEX, KUBEFLOW_REPLICA_INDEX, LWS_WORKER_INDEX_LABEL)):
        raw = lab.get(key, ann.get(key))
        if isinstance(raw, str) and _DECIMAL.fullmatch(raw):
            major = 0
            if tier == 0:
                job = lab.get(JOBSET_GLOBAL_INDEX_LABEL)
                major = int(job) if isinstance(job, str) and _DECIMAL.fullmatch(job) else 0
            elif tier == 1:
                kind = lab.get(KUBEFLOW_REPLICA_TYPE)
                major = 0 if isinstance(kind, str) and kind.lower() in _LEAD_REPLICA_TYPES else 1
            return (tier, major, int(raw), "", 0, name)
    if lab.get(KUBEFLOW_JOB_ROLE) == "launcher":
        return (1, 0, 0, "", 0, name)
    node_type, group = lab.get(RAY_NODE_TYPE_LABEL), lab.get(RAY_GROUP_LABEL)
    if node_type in ("head", "worker") and isinstance(group, str):
        at = _index(lab.get(RAY_REPLICA_INDEX_LABEL)) * 10**9 + _index(lab.get(RAY_HOST_INDEX_LABEL))
        return (3, 0 if node_type == "head" else 1, 0, group, at, name)
    m = _NAME_SUFFIX.fullmatch(name)
    if m:
        return (4, 0, 0, m.group(1), int(m.group(2)), name)
    return (5, 0, 0, name, 0, name)


def _index(raw: Any) -> int:
    """A decimal index label's value, 0 when it is not one."""
    return int(raw) if isinstance(raw, str) and _DECIMAL.fullmatch(raw) else 0


def family(rank: tuple[int, int, int, str, int, str]) -> tuple[int, int, str] | None:
    """The members a rank is interchangeable with, ``(tier, major, prefix)``, for a Ray node
    (tier 3: the head, or a worker group): a slot of the family takes any pod of it. None
    for other ranks (an index names one slot, a name none)."""
    return (rank[0], rank[1], rank[3]) if rank[0] == 3 else None


#: The keys a rank index is read from (:func:`rank_key`), each a label first, else an annotation.
RANK_KEYS = (JOB_COMPLETION_INDEX, KUBEFLOW_REPLICA_INDEX, LWS_WORKER_INDEX_LABEL)


def rank_problem(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> str:
    """Why a pod's rank cannot be read, or ``""``: a rank key :func:`rank_key` reads
    (:data:`RANK_KEYS` in order, a label before the annotation of the same key, up to the
    first readable one, and with the completion index the JobSet's
    :data:`JOBSET_GLOBAL_INDEX_LABEL`) whose value is not an index of at most 9 ASCII
    digits. The message names the key and quotes the value
    (``label batch.kubernetes.io/job-completion-index: must be an index of at most 9
    digits, got '99999...' (5000 characters)``): the controllers that set these keys
    always write such an index, so another value is a tenant's, and its gang is held
    (docs/decisions/029-hostile-objects-hold-their-gang.md)."""
    for key in RANK_KEYS:
        where, raw = ("label", labels[key]) if key in labels else ("annotation", annotations.get(key))
        if raw is None:
            continue
        if not (isinstance(raw, str) and _DECIMAL.fullmatch(raw)):
            return f"{where} {key}: must be an index of at most 9 digits, got {quoted(str(raw))}"
        job = labels.get(JOBSET_GLOBAL_INDEX_LABEL) if key == JOB_COMPLETION_INDEX else None
        if job is not None and not (isinstance(job, str) and _DECIMAL.fullmatch(job)):
            return f"label {JOBSET_GLOBAL_INDEX_LABEL}: must be an index of at most 9 digits, got {quoted(str(job))}"
        return ""  # the key the rank is read from; the later ones are not read
    return ""
