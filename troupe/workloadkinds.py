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
=================  ==========================  ===========================================

Both deployables import this module; it does no I/O and imports nothing of the project but
plain values (the contract imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
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

OwnsPods = Literal["controller", "jobs", "labels"]
"""How a kind's pods are known for its own: ``controller``, the pod's controlling owner is
the object; ``jobs``, through the batch/v1 Jobs it controls (and its labels, which name
it); ``labels``, only by its name label (the pods' controllers are another kind's)."""


@dataclass(frozen=True)
class Kind:
    """A supported workload kind's contract facts: ``kind``, API ``group`` and ``version``,
    ``plural`` (the resource name: what RBAC rules and list URLs name), how its pods are
    known (``owns_pods``, :data:`OwnsPods`), the label naming the object on its pods
    (``name_label``, ``""`` for none) and the labels giving a pod's rank (``rank_labels``,
    most significant first)."""

    kind: str
    group: str
    version: str
    plural: str
    owns_pods: OwnsPods = "controller"
    name_label: str = ""
    rank_labels: tuple[str, ...] = ()

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


JOB = Kind("Job", "batch", "v1", "jobs", "controller", JOB_NAME_LABEL, (JOB_COMPLETION_INDEX,))
JOBSET = Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobs", JOBSET_NAME_LABEL,
              (JOBSET_GLOBAL_INDEX_LABEL, JOB_COMPLETION_INDEX))
LEADER_WORKER_SET = Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "labels",
                         LWS_NAME_LABEL, (LWS_WORKER_INDEX_LABEL,))
PYTORCH_JOB = Kind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "controller", KUBEFLOW_JOB_NAME_LABEL,
                   (KUBEFLOW_REPLICA_TYPE, KUBEFLOW_REPLICA_INDEX))

#: Every supported kind, in the order they are listed (and their informers started).
KINDS: tuple[Kind, ...] = (JOB, JOBSET, LEADER_WORKER_SET, PYTORCH_JOB)
#: The custom resources among them, whose CRD may be absent.
CUSTOM_KINDS: tuple[Kind, ...] = tuple(k for k in KINDS if k.custom)
#: Each supported kind by its ``kind``.
KIND_OF: Mapping[str, Kind] = {k.kind: k for k in KINDS}
#: Controller owners whose pods a namespace's ``troupe.io/gang-mode: auto`` makes gang
#: members, as ``(API group, kind)``: the kinds that control their pods (a JobSet's pods
#: are its Jobs').
POD_OWNERS: tuple[tuple[str, str], ...] = tuple((k.group, k.kind) for k in KINDS if k.owns_pods == "controller")
#: Labels that make a pod a workload's member whatever its controller (a LeaderWorkerSet's
#: pods are owned by StatefulSets).
MEMBER_LABELS: tuple[str, ...] = tuple(k.name_label for k in KINDS if k.owns_pods == "labels")
