"""A Kubeflow training job as a workload (docs/decisions/014-workload-gangs.md): one gang per
job (the pod's controller owner), of the sum of its replica specs' ``replicas`` (every
``*ReplicaSpecs`` of its spec, so one module serves each Kubeflow kind, a launcher-and-workers
MPIJob as a PyTorchJob); its slots per replica type (master, chief or launcher first), per
replica index, labelled ``training.kubeflow.org/replica-type``/``-replica-index``; its
deadline ``spec.runPolicy.activeDeadlineSeconds``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import troupe.contract as contract
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.kinds.base import WorkloadKind, as_map, count, slot, template_pod
from reconciler.engine.model.pods import Owner, PodInfo
from troupe.workloadkinds import PYTORCH_JOB, Kind


def replica_order(item: tuple[Any, Any]) -> tuple[bool, str]:
    """Replica types with the master (chief, launcher) first, then by name."""
    name = str(item[0])
    return (name.lower() not in ("master", "chief", "launcher"), name)


def _replica_specs(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(replica type, its spec)`` of every ``*ReplicaSpecs`` of ``spec``, in rank order."""
    for key, replica_specs in sorted((k, v) for k, v in spec.items() if isinstance(k, str)):
        if not key.endswith("ReplicaSpecs") or not isinstance(replica_specs, Mapping):
            continue
        for rtype, rspec in sorted(((str(k), v) for k, v in replica_specs.items()), key=replica_order):
            yield rtype, as_map(rspec)


class KubeflowKind(WorkloadKind):
    """:class:`~reconciler.engine.model.kinds.base.WorkloadKind` of a Kubeflow training job
    of ``facts`` (a PyTorchJob)."""

    def __init__(self, facts: Kind) -> None:
        self.facts = facts

    def size(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """The sum of its replica specs' ``replicas``."""
        name = str(as_map(obj.get("metadata")).get("name") or "")
        parts, size = [], 0
        for rtype, rspec in _replica_specs(as_map(obj.get("spec"))):
            replicas = count(rspec.get("replicas"), 1)
            size += replicas
            parts.append(f"{rtype} {replicas}")
        return size, f"{self.facts.kind} {name}: " + " + ".join(parts)

    def most_pods(self, obj: Mapping[str, Any]) -> tuple[int, str]:
        """As :meth:`size`: its counts read no status."""
        return self.size(obj)

    def slots(self, obj: Mapping[str, Any], name: str, namespace: str, created: str,
              uid: str) -> Iterator[PodInfo]:
        """Per replica type, per replica index."""
        owner = Owner(str(obj.get("apiVersion") or self.facts.api_version), self.facts.kind, name, uid)
        for rtype, rspec in _replica_specs(as_map(obj.get("spec"))):
            base = template_pod(as_map(rspec.get("template")), namespace, created)
            if base is None:
                return
            for i in range(count(rspec.get("replicas"), 1)):
                labels = {contract.KUBEFLOW_REPLICA_TYPE: rtype.lower(), contract.KUBEFLOW_REPLICA_INDEX: str(i),
                          contract.KUBEFLOW_JOB_NAME_LABEL: name}
                yield slot(base, f"{name}[{rtype.lower()}-{i}]", f"slot:{uid}:{rtype}:{i}", labels, owner)

    def gang_of(self, pod: PodInfo) -> tuple[str, WorkloadKey] | None:
        """``<kind, lowercased>:<name>`` of the pod's controlling job of this kind."""
        owner = pod.owner
        if owner is None or owner.kind != self.facts.kind or owner.api_version.split("/", 1)[0] != self.facts.group:
            return None
        return f"{owner.kind.lower()}:{owner.name}", (owner.kind, pod.namespace, owner.name)


PYTORCH = KubeflowKind(PYTORCH_JOB)
