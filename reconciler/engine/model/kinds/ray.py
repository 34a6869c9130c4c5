"""A RayCluster and a RayJob as workloads (docs/decisions/075-ray-and-mpi-workloads.md).

A **RayCluster** (``ray.io/v1``, KubeRay) is one gang per cluster (its pods' controlling
owner), of its head and its worker groups counted as KubeRay counts them
(``ray-operator/controllers/ray/utils``: ``GetWorkerGroupDesiredReplicas``,
``CalculateMinReplicas``): a group's workers are ``replicas`` clamped to ``[minReplicas,
maxReplicas]`` (``maxReplicas`` when the minimum is above it; 0 when the group is
suspended), times ``numOfHosts``. Its minimum is the head and every group's ``minReplicas
x numOfHosts``: the cluster starts whole at its minimum, and the workers Ray's autoscaler
adds later (it raises ``replicas``) join the running gang next to it
(docs/decisions/038-minimum-size.md). Its slots are the head, then each group's workers in
spec order, labelled as KubeRay labels the pods (``ray.io/node-type``, ``ray.io/group``,
and the replica and host indexes of its ``RayMultiHostIndexing`` feature); KubeRay's pods
carry no index of their own, so a pod takes any free slot of its group
(:func:`troupe.ranks.family`).

A **RayJob** makes its cluster a RayCluster it controls, whose pods are that cluster's gang;
its submitter pod (a batch Job the RayJob controls, or a pod of its own) is outside the
gang. So a RayJob makes no gang and no slot: it is counted (``size``, ``most_pods``: its
``spec.rayClusterSpec``'s) for the gang-fits-workload policy and ``kubectl troupe plan``.
Neither kind has a deadline Troupe reads (a RayJob's ``activeDeadlineSeconds`` ends its
cluster, which then ends the gang).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds.base import WorkloadKind, as_map, count, slot, template_pod
from reconciler.engine.model.pods import Owner, PodInfo
from troupe.workloadkinds import RAY_CLUSTER, RAY_JOB

#: KubeRay's default ``maxReplicas`` (the CRD's ``+kubebuilder:default``).
UNBOUNDED = 2**31 - 1
#: The ``ray.io/group`` of a RayCluster's head.
HEAD_GROUP = "headgroup"


def group_workers(group: Mapping[str, Any], field: str = "replicas") -> int:
    """The workers one worker group of a RayClusterSpec runs, by ``field``: ``replicas``
    (what KubeRay makes now), ``minReplicas`` or ``maxReplicas``, clamped as KubeRay clamps
    them, times ``numOfHosts`` (default 1); 0 for a suspended group."""
    if group.get("suspend") is True:
        return 0
    low, high = count(group.get("minReplicas"), 0), count(group.get("maxReplicas"), UNBOUNDED)
    if field == "minReplicas":
        value = min(low, high)
    elif field == "maxReplicas" or low > high:
        value = high
    else:
        value = min(max(count(group.get("replicas"), low), low), high)
    return value * count(group.get("numOfHosts"), 1)


def worker_groups(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(group name, group spec)`` of each of ``spec.workerGroupSpecs``, in spec order."""
    groups = spec.get("workerGroupSpecs")
    out = []
    for group in groups if isinstance(groups, list) else []:
        group = as_map(group)
        out.append((str(group.get("groupName") or ""), group))
    return out


def cluster_size(spec: Mapping[str, Any], name: str, kind: str, field: str = "replicas") -> tuple[int, str]:
    """The pods a RayClusterSpec ``spec`` runs (the head and every group's workers by
    ``field``, :func:`group_workers`), and how, for reasons: ``(5, "RayCluster r: head 1 +
    gpu-group 4")``."""
    parts, size = ["head 1"], 1
    for group_name, group in worker_groups(spec):
        workers = group_workers(group, field)
        size += workers
        hosts = count(group.get("numOfHosts"), 1)
        parts.append(f"{group_name} {workers // hosts}x{hosts}" if hosts != 1 else f"{group_name} {workers}")
    what = {"replicas": "", "minReplicas": " (minReplicas)", "maxReplicas": " (maxReplicas)"}[field]
    return size, f"{kind} {name}{what}: " + " + ".join(parts)


class RayClusterKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a RayCluster."""

    facts = RAY_CLUSTER

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The head and every group's workers as KubeRay runs them now."""
        return cluster_size(as_map(obj.get("spec")), str(as_map(obj.get("metadata")).get("name") or ""), "RayCluster")

    def minimum(self, obj: Mapping[str, Any]) -> int | None:
        """The head and every group's ``minReplicas x numOfHosts``."""
        return cluster_size(as_map(obj.get("spec")), "", "RayCluster", "minReplicas")[0]

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The head and every group's ``maxReplicas x numOfHosts``."""
        return cluster_size(as_map(obj.get("spec")), str(as_map(obj.get("metadata")).get("name") or ""),
                            "RayCluster", "maxReplicas")

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """The head, then per worker group in spec order its workers, per replica and host."""
        spec = as_map(obj.get("spec"))
        owner = Owner(str(obj.get("apiVersion") or RAY_CLUSTER.api_version), RAY_CLUSTER.kind, name, uid)
        head = template_pod(as_map(as_map(spec.get("headGroupSpec")).get("template")), namespace, created)
        if head is None:
            return
        yield slot(head, f"{name}[head]", f"slot:{uid}:head",
                   {contract.RAY_CLUSTER_LABEL: name, contract.RAY_NODE_TYPE_LABEL: "head",
                    contract.RAY_GROUP_LABEL: HEAD_GROUP}, owner)
        for group_name, group in worker_groups(spec):
            base = template_pod(as_map(group.get("template")), namespace, created)
            if base is None:
                return
            hosts = count(group.get("numOfHosts"), 1)
            for i in range(group_workers(group)):
                replica, host = divmod(i, hosts)
                labels = {contract.RAY_CLUSTER_LABEL: name, contract.RAY_NODE_TYPE_LABEL: "worker",
                          contract.RAY_GROUP_LABEL: group_name, contract.RAY_REPLICA_INDEX_LABEL: str(replica),
                          contract.RAY_HOST_INDEX_LABEL: str(host)}
                yield slot(base, f"{name}[{group_name}-{i}]", f"slot:{uid}:{group_name}:{i}", labels, owner)

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``raycluster:<name>`` of the pod's controlling RayCluster."""
        owner = pod.owner
        if owner is None or owner.kind != RAY_CLUSTER.kind or owner.api_version.split("/", 1)[0] != RAY_CLUSTER.group:
            return None
        return f"raycluster:{owner.name}", (RAY_CLUSTER.kind, pod.namespace, owner.name)

    def deadline(self, spec: Mapping[str, Any]) -> Any:
        """None: a RayCluster has no deadline."""
        return None


class RayJobKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a RayJob: counted by its
    ``spec.rayClusterSpec`` (none with ``spec.clusterSelector``: it runs on a cluster that
    exists), making no gang of its own."""

    facts = RAY_JOB

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """Its cluster's head and workers as KubeRay runs them (0 without a cluster spec)."""
        return self._count(obj, "replicas")

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """Its cluster's head and every group's ``maxReplicas x numOfHosts``."""
        return self._count(obj, "maxReplicas")

    @staticmethod
    def _count(obj: Mapping[str, Any], field: str) -> tuple[int, str]:
        name = str(as_map(obj.get("metadata")).get("name") or "")
        cluster = as_map(obj.get("spec")).get("rayClusterSpec")
        if not isinstance(cluster, Mapping):
            return 0, f"RayJob {name}: no spec.rayClusterSpec (it runs on a cluster that exists)"
        return cluster_size(cluster, name, "RayJob", field)

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """None: its cluster's pods are the RayCluster's gang, its submitter's none of it."""
        return None

    def deadline(self, spec: Mapping[str, Any]) -> Any:
        """None: its ``activeDeadlineSeconds`` ends its cluster, whose gang then ends."""
        return None
