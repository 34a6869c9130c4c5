"""The workload kinds Troupe sizes gangs from: each kind's contract facts, in one place.

A kind is its API identity (``kind``, ``group``, ``version``, ``plural``: what list URLs,
RBAC rules and the chart's write policies name), how its pods are known for its own
(:attr:`Kind.owns_pods`), and the labels its controller puts on them (the one naming the
object, and those giving a pod's rank, read by :func:`troupe.ranks.rank_key`). Everything
else a kind needs (its members, slots, deadline, whether it is finished) is the engine's,
one module per kind (``reconciler/engine/model/kinds/``), registered against these facts
(docs/decisions/070-a-workload-kind-is-one-module.md; the shape is Kueue's
``pkg/controller/jobframework``: an integration registered once by its kind).

=================  ==========================  ===========================================
kind               its pods are known by       rank labels
=================  ==========================  ===========================================
Job                their controller (``batch``) ``batch.kubernetes.io/job-completion-index``
JobSet             their Jobs, and its labels  ``job-global-index``, then the completion index
LeaderWorkerSet    its labels (StatefulSets    ``leaderworkerset.sigs.k8s.io/worker-index``
                   own them)
PyTorchJob         their controller            ``training.kubeflow.org/replica-type``,
                   (``kubeflow.org``)          ``-replica-index``
MPIJob             their controller (workers)  ``training.kubeflow.org/replica-index``
(``v2beta1``)      and its launcher Job        (the launcher first)
RayCluster         their controller            ``ray.io/node-type`` (the head first),
(``ray.io``)                                   ``ray.io/group``
RayJob             its RayCluster's (the       (its RayCluster's)
                   cluster's gang)
=================  ==========================  ===========================================

Both deployables import this module; it does no I/O and imports nothing of the project but
plain values (the contract imports it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

# --- Labels the workloads' controllers put on their pods ---------------------------------
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_NAME_LABEL = "job-name"
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
#: Labels the JobSet controller (sigs.k8s.io/jobset) puts on its pods: the JobSet, the
#: index of the pod's Job across the replicated Jobs in spec order, and the restart count.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
JOBSET_RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
#: Labels the LeaderWorkerSet controller (sigs.k8s.io/lws) puts on its pods: the set, the
#: group, and the pod's index in its group (the leader is 0).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: The Kubeflow training operator's replica type label (``master``, ``worker``...).
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
#: The role label the MPI operator (github.com/kubeflow/mpi-operator, ``v2beta1``) puts on
#: its pods instead (``launcher``, ``worker``); it names the MPIJob by
#: :data:`KUBEFLOW_JOB_NAME_LABEL` and a worker's index by :data:`KUBEFLOW_REPLICA_INDEX`.
KUBEFLOW_JOB_ROLE = "training.kubeflow.org/job-role"
#: Labels KubeRay (github.com/ray-project/kuberay, ``ray-operator/controllers/ray/utils``)
#: puts on a RayCluster's pods: the cluster, the node type (``head``, ``worker``), the group
#: (``headgroup`` or the worker group's name), and with its ``RayMultiHostIndexing`` feature
#: a worker's replica index in its group and host index in its replica.
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_GROUP_LABEL = "ray.io/group"
RAY_REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"
RAY_HOST_INDEX_LABEL = "ray.io/replica-host-index"

OwnsPods = Literal["controller", "jobs", "labels", "workloads"]
"""How a kind's pods are known for its own: ``controller``, the pod's controlling owner is
the object (and for an MPIJob, its launcher's by the launcher Job it controls); ``jobs``,
through the batch/v1 Jobs it controls (and its labels, which name it); ``labels``, only by
its name label (the pods' controllers are another kind's); ``workloads``, through another
kind's object it controls, which makes the gang (a RayJob's RayCluster)."""


@dataclass(frozen=True)
class Kind:
    """A supported workload kind's contract facts: ``kind``, API ``group`` and ``version``,
    ``plural`` (the resource name: what RBAC rules and list URLs name), how its pods are
    known (``owns_pods``, :data:`OwnsPods`), the label naming the object on its pods
    (``name_label``, ``""`` for none) and the labels giving a pod's rank (``rank_labels``,
    most significant first).

    What the chart renders from it (``python -m devtools.chartkinds`` writes
    ``charts/troupe/templates/_registry.tpl`` and the kinds' rules of
    ``charts/troupe/files/reconciler-rules.yaml``;
    docs/decisions/071-the-chart-is-rendered-from-the-registries.md):
    ``verbs``, the reconciler's RBAC verbs on it (``list``, ``watch``; ``patch`` for a kind
    whose reservation it writes on the object, which the write policies then guard);
    ``templates_cel``, a CEL list of its pod templates (each a ``PodTemplateSpec`` map) over
    ``object``; ``pods_cel``, a CEL int, the pods the whole object runs at once, counted as
    the engine counts it (``reconciler/engine/model/kinds/``); ``pods_words``, that count in
    words for the gang-fits-workload policy's message."""

    kind: str
    group: str
    version: str
    plural: str
    owns_pods: OwnsPods = "controller"
    name_label: str = ""
    rank_labels: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("list", "watch")
    templates_cel: str = "[]"
    pods_cel: str = "0"
    pods_words: str = ""

    @property
    def api_version(self) -> str:
        """``group/version`` (``batch/v1``)."""
        return f"{self.group}/{self.version}"

    @property
    def crd(self) -> str:
        """The CustomResourceDefinition's name (``jobsets.jobset.x-k8s.io``)."""
        return f"{self.plural}.{self.group}"

    @property
    def custom(self) -> bool:
        """Whether it is a custom resource (its CRD may be absent): all but batch/v1 Job."""
        return self.group != "batch"


def _job_pods(spec: str) -> str:
    """CEL: the pods a Job's ``spec`` (a CEL expression of a JobSpec map) runs at once,
    ``min(parallelism, completions)`` with Kubernetes' defaults (parallelism 1, completions
    parallelism; https://kubernetes.io/docs/concepts/workloads/controllers/job/)."""
    return f"[{spec}.?parallelism.orValue(1), {spec}.?completions.orValue({spec}.?parallelism.orValue(1))].min()"


_PATCHED = ("list", "watch", "patch")

JOB = Kind("Job", "batch", "v1", "jobs", "controller", JOB_NAME_LABEL, (JOB_COMPLETION_INDEX,), _PATCHED,
           templates_cel="[object.spec.?template.orValue({})]", pods_cel=_job_pods("object.spec"),
           pods_words="min(spec.parallelism, spec.completions)")
JOBSET = Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobs", JOBSET_NAME_LABEL,
              (JOBSET_GLOBAL_INDEX_LABEL, JOB_COMPLETION_INDEX), _PATCHED,
              templates_cel="object.spec.?replicatedJobs.orValue([]).map(r, r.?template.?spec.?template.orValue({}))",
              pods_cel="object.spec.?replicatedJobs.orValue([]).map(r, r.?replicas.orValue(1) * "
                       f"{_job_pods('r.?template.?spec.orValue({})')}).sum()",
              pods_words="the sum over spec.replicatedJobs of replicas x min(parallelism, completions)")
LEADER_WORKER_SET = Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "labels",
                         LWS_NAME_LABEL, (LWS_WORKER_INDEX_LABEL,),
                         templates_cel="[object.spec.?leaderWorkerTemplate.?leaderTemplate.orValue({}), "
                                       "object.spec.?leaderWorkerTemplate.?workerTemplate.orValue({})]",
                         pods_cel="object.spec.?replicas.orValue(1) * object.spec.?leaderWorkerTemplate.?size.orValue(1)",
                         pods_words="spec.replicas x spec.leaderWorkerTemplate.size")
PYTORCH_JOB = Kind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "controller", KUBEFLOW_JOB_NAME_LABEL,
                   (KUBEFLOW_REPLICA_TYPE, KUBEFLOW_REPLICA_INDEX), _PATCHED,
                   templates_cel="object.spec.?pytorchReplicaSpecs.orValue({})"
                                 ".map(t, object.spec.pytorchReplicaSpecs[t].?template.orValue({}))",
                   pods_cel="object.spec.?pytorchReplicaSpecs.orValue({})"
                            ".map(t, object.spec.pytorchReplicaSpecs[t].?replicas.orValue(1)).sum()",
                   pods_words="the sum of spec.pytorchReplicaSpecs[*].replicas")

def _ray_workers(spec: str, field: str) -> str:
    """CEL: the workers a RayCluster ``spec`` (a CEL expression of a RayClusterSpec map) runs
    of each group, by ``field`` (``replicas``, ``maxReplicas``), as KubeRay counts them
    (``GetWorkerGroupDesiredReplicas``: 0 for a suspended group, else the count clamped to
    ``[minReplicas, maxReplicas]``, times ``numOfHosts``), summed; each group's product
    capped at 2**31-1 so that the sum cannot overflow."""
    lo, hi = "g.?minReplicas.orValue(0)", "g.?maxReplicas.orValue(2147483647)"
    value = {"replicas": f"g.?replicas.orValue({lo})", "maxReplicas": hi}[field]
    clamped = f"({lo} > {hi} ? {hi} : [[{value}, {lo}].max(), {hi}].min())"
    # dyn(): both branches of a CEL conditional, and the elements of a list, must have one
    # type to the API server's type checker, and the optional fields are dyn to it.
    return (f"{spec}.?workerGroupSpecs.orValue([]).map(g, g.?suspend.orValue(false) ? dyn(0) : "
            f"[{clamped} * g.?numOfHosts.orValue(1), dyn(2147483647)].min()).sum()")


#: A RayCluster's pod templates: the head's, then each worker group's.
_RAY_TEMPLATES = ("[{spec}.?headGroupSpec.?template.orValue({{}})] + "
                  "{spec}.?workerGroupSpecs.orValue([]).map(g, g.?template.orValue({{}}))")
#: What ``kubectl troupe`` and the gang-fits policy say they count of a RayCluster.
_RAY_WORDS = ("1 head + the sum over spec.workerGroupSpecs of maxReplicas x numOfHosts "
              "(suspended groups: 0)")

RAY_CLUSTER = Kind("RayCluster", "ray.io", "v1", "rayclusters", "controller", RAY_CLUSTER_LABEL,
                   (RAY_NODE_TYPE_LABEL, RAY_GROUP_LABEL), _PATCHED,
                   templates_cel=_RAY_TEMPLATES.format(spec="object.spec"),
                   pods_cel=f"dyn(1) + {_ray_workers('object.spec', 'maxReplicas')}",
                   pods_words=_RAY_WORDS)
RAY_JOB = Kind("RayJob", "ray.io", "v1", "rayjobs", "workloads", RAY_CLUSTER_LABEL,
               (RAY_NODE_TYPE_LABEL, RAY_GROUP_LABEL),
               templates_cel=_RAY_TEMPLATES.format(spec="object.spec.?rayClusterSpec.orValue({})"),
               pods_cel="object.spec.?rayClusterSpec.hasValue() ? dyn(1) + "
                        f"{_ray_workers('object.spec.rayClusterSpec', 'maxReplicas')} : dyn(0)",
               pods_words=f"of spec.rayClusterSpec: {_RAY_WORDS}")
MPI_JOB = Kind("MPIJob", "kubeflow.org", "v2beta1", "mpijobs", "controller", KUBEFLOW_JOB_NAME_LABEL,
               (KUBEFLOW_REPLICA_INDEX,), _PATCHED,
               templates_cel="object.spec.?mpiReplicaSpecs.orValue({})"
                             ".map(t, object.spec.mpiReplicaSpecs[t].?template.orValue({}))",
               pods_cel="object.spec.?mpiReplicaSpecs.orValue({})"
                        ".map(t, object.spec.mpiReplicaSpecs[t].?replicas.orValue(1)).sum()",
               pods_words="the sum of spec.mpiReplicaSpecs[*].replicas")


def pod_owners(kinds: Sequence[Kind]) -> tuple[tuple[str, str], ...]:
    """``(API group, kind)`` of each of ``kinds`` that controls its pods (``owns_pods``
    ``controller``)."""
    return tuple((k.group, k.kind) for k in kinds if k.owns_pods == "controller")


def member_labels(kinds: Sequence[Kind]) -> tuple[str, ...]:
    """The name labels of ``kinds`` known by their labels only (``owns_pods`` ``labels``)."""
    return tuple(k.name_label for k in kinds if k.owns_pods == "labels")


#: Every supported kind, in the order they are listed (and their informers started).
KINDS: tuple[Kind, ...] = (JOB, JOBSET, LEADER_WORKER_SET, PYTORCH_JOB, MPI_JOB, RAY_CLUSTER, RAY_JOB)
#: The custom resources among them, whose CRD may be absent.
CUSTOM_KINDS: tuple[Kind, ...] = tuple(k for k in KINDS if k.custom)
#: Each supported kind by its ``kind``.
KIND_OF: Mapping[str, Kind] = {k.kind: k for k in KINDS}
#: Controller owners whose pods a namespace's ``troupe.io/gang-mode: auto`` makes gang
#: members, as ``(API group, kind)``: the kinds that control their pods (a JobSet's pods
#: are its Jobs').
POD_OWNERS: tuple[tuple[str, str], ...] = pod_owners(KINDS)
#: Labels that make a pod a workload's member whatever its controller (a LeaderWorkerSet's
#: pods are owned by StatefulSets).
MEMBER_LABELS: tuple[str, ...] = member_labels(KINDS)
