"""An MPIJob (``kubeflow.org/v2beta1``, github.com/kubeflow/mpi-operator) as a workload
(docs/decisions/075-ray-and-mpi-workloads.md): one gang per job, of its launcher and its
workers (the sum of ``spec.mpiReplicaSpecs``' ``replicas``, default 1).

The MPI operator (``pkg/controller/mpi_job_controller.go``) creates each worker as a pod the
MPIJob controls, named ``<job>-worker-<i>`` and labelled ``training.kubeflow.org/job-name``,
``job-role: worker`` and ``replica-index: i`` (``i+1`` with ``runLauncherAsWorker``), and
the launcher as a batch/v1 Job ``<job>-launcher`` the MPIJob controls, whose pod is
labelled ``job-role: launcher`` (and ``replica-index: 0`` with ``runLauncherAsWorker``). So
a pod is the job's member when the MPIJob controls it, or when it is the launcher: its
labels name the job and the Job controlling it is that job's launcher Job. Ranks: the
launcher first, then the workers by index (:func:`troupe.ranks.rank_key`). The launcher may
be created only once the workers are ready (``launcherCreationPolicy:
WaitForWorkersReady``): a gang released as created releases each member as it comes, so
that order holds too. Deadline: ``spec.runPolicy.activeDeadlineSeconds``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds.base import WorkloadKind, as_map, count, slot, template_pod
from reconciler.engine.model.pods import Owner, PodInfo
from troupe.workloadkinds import JOB, MPI_JOB

#: The suffix of the launcher Job's name (``<job>-launcher``).
LAUNCHER_SUFFIX = "-launcher"
#: The replica types of ``spec.mpiReplicaSpecs``.
LAUNCHER, WORKER = "Launcher", "Worker"


def replica_counts(spec: Mapping[str, Any]) -> tuple[int, int]:
    """``(launchers, workers)`` of an MPIJobSpec: each replica spec's ``replicas``, default 1
    (a missing replica spec: 0)."""
    specs = as_map(spec.get("mpiReplicaSpecs"))
    return tuple(count(as_map(specs[t]).get("replicas"), 1) if t in specs else 0  # type: ignore[return-value]
                 for t in (LAUNCHER, WORKER))


class MPIJobKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of an MPIJob."""

    facts = MPI_JOB

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """Its launcher and workers."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        launchers, workers = replica_counts(as_map(obj.get("spec")))
        return launchers + workers, f"MPIJob {name}: launcher {launchers} + workers {workers}"

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """As :meth:`size`: its counts read no status."""
        return self.size(obj)

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """The launcher, then the workers by index, labelled as the MPI operator labels them."""
        spec = as_map(obj.get("spec"))
        specs = as_map(spec.get("mpiReplicaSpecs"))
        launchers, workers = replica_counts(spec)
        shift = 1 if spec.get("runLauncherAsWorker") is True else 0
        owner = Owner(str(obj.get("apiVersion") or MPI_JOB.api_version), MPI_JOB.kind, name, uid)
        for rtype, n in ((LAUNCHER, launchers), (WORKER, workers)):
            base = template_pod(as_map(as_map(specs.get(rtype)).get("template")), namespace, created)
            if base is None:
                return
            for i in range(n):
                labels = {contract.KUBEFLOW_JOB_NAME_LABEL: name, contract.KUBEFLOW_JOB_ROLE: rtype.lower()}
                if rtype == WORKER:
                    labels[contract.KUBEFLOW_REPLICA_INDEX] = str(i + shift)
                elif shift:
                    labels[contract.KUBEFLOW_REPLICA_INDEX] = "0"
                yield slot(base, f"{name}[{rtype.lower()}-{i}]", f"slot:{uid}:{rtype}:{i}", labels, owner)

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``mpijob:<name>`` of a worker the MPIJob controls, or of the launcher, whose Job
        ``<name>-launcher`` controls it and whose labels name the job."""
        owner = pod.owner
        if owner is None:
            return None
        group = owner.api_version.split("/", 1)[0]
        if owner.kind == MPI_JOB.kind and group == MPI_JOB.group:
            return f"mpijob:{owner.name}", (MPI_JOB.kind, pod.namespace, owner.name)
        job = pod.labels.get(contract.KUBEFLOW_JOB_NAME_LABEL)
        if (owner.kind == JOB.kind and group == JOB.group and pod.labels.get(contract.KUBEFLOW_JOB_ROLE) == "launcher"
                and job and owner.name == job + LAUNCHER_SUFFIX):
            return f"mpijob:{job}", (MPI_JOB.kind, pod.namespace, job)
        return None
