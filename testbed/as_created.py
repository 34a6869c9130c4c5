"""Workloads released as created and the pods their controller makes, as plain objects
(docs/decisions/034-release-as-created.md)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from reconciler.engine.gangs.gang import Gang, build_gang
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.parts import SnapshotParts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.membership import group_by_gang, planned_gangs
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from troupe import contract
from troupe.config import Config

NAMESPACE = "ml"
UID = "uid-train"
#: The reservation key the tests' caches hold (:class:`~reconciler.daemon.cache.ClusterCache`):
#: the records :func:`job_object` carries are signed with it, as the reconciler signs its own.
RESERVATION_KEY = b"the test reconciler's reservation key"


def job_object(name: str, size: int, gpus: int = 8, annotations: dict[str, str] | None = None,
               indexed: bool = True, record: Record | None = None, suspend: bool = False,
               job_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch/v1 Job of ``size`` whole-node pods whose template opts into a gang of
    ``<prefix>-size: auto`` (plus ``annotations``), carrying ``record`` when given (signed
    with :data:`RESERVATION_KEY`)."""
    meta_annotations = dict(job_annotations or {})
    if record is not None:
        signed = record.signed(("Job", NAMESPACE, name), f"{UID}-{name}", RESERVATION_KEY)
        meta_annotations[contract.RESERVATION] = signed.encode()
    spec: dict[str, Any] = {
        "parallelism": size, "completions": size, "suspend": suspend,
        "template": {"metadata": {"labels": {"app": name},
                                  "annotations": {"troupe.io/gang-size": "auto", **(annotations or {})}},
                     "spec": {"containers": [{"name": "main", "resources": {"requests": {
                         "cpu": "1", "nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"{UID}-{name}", "generation": 1,
                         "creationTimestamp": "2027-01-15T08:00:00Z", "annotations": meta_annotations},
            "spec": spec}


def member_pod(job: dict[str, Any], index: int, gated: bool = True, node: str = "", planned_at: str = "",
               bound: bool = False, phase: str = "Pending", gpus: int | None = None,
               created: str = "2027-01-15T08:00:01Z") -> dict[str, Any]:
    """The pod the Job controller makes for completion index ``index`` (gated by the webhook
    unless ``gated`` is False; pinned to ``node`` and released at ``planned_at`` when given)."""
    template = copy.deepcopy(job["spec"]["template"])
    name = job["metadata"]["name"]
    meta = template["metadata"]
    meta.update({"name": f"{name}-{index}-x", "namespace": NAMESPACE, "uid": f"pod-{name}-{index}",
                 "creationTimestamp": created, "resourceVersion": "1",
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                      "uid": job["metadata"]["uid"], "controller": True}]})
    meta["labels"] = {**meta.get("labels", {}), contract.JOB_COMPLETION_INDEX: str(index), "job-name": name}
    spec = template["spec"]
    if gpus is not None:
        spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    if gated:
        spec["schedulingGates"] = [{"name": contract.GATE}]
    if node:
        meta["annotations"][contract.ASSIGNED_NODE] = node
        meta["annotations"][contract.PLANNED_AT] = planned_at
        meta["annotations"][contract.RELEASED_AT] = planned_at
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if bound:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def workloads_of(*jobs: dict[str, Any]) -> wl.Workloads:
    """The :class:`~reconciler.engine.model.workloads.Workloads` of these Job objects."""
    return wl.Workloads(wl.workloads_of("Job", jobs))


def snapshot_of(nodes: Sequence[NodeInfo], pods: Sequence[PodInfo], workloads: wl.Workloads) -> Snapshot:
    """The snapshot of parsed ``nodes`` and ``pods`` holding the reservations ``workloads``
    carry, made by the reconciler's builder (:func:`~reconciler.engine.ledger.builder.build_snapshot`)."""
    return build_snapshot(SnapshotParts(nodes, pods, workloads=workloads))


def gangs_of(snapshot: Snapshot, workloads: wl.Workloads, config: Config) -> dict[str, Gang]:
    """Every gang of the snapshot's pods and of the workloads released as created."""
    planned = planned_gangs(workloads, config)
    pods = group_by_gang(snapshot.pods.values(), config)
    return {key: build_gang(key, pods.get(key, []), config, {}, workloads, planned.get(key))
            for key in sorted({*pods, *planned})}
