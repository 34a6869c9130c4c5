"""The kinds a snapshot holds and the one command that takes it: what the simulator and
``kubectl troupe --snapshot`` read (:mod:`reconciler.tools.simulate`), named once so that the
README, ``simulate --help`` and ``kubectl troupe --help`` give the same command
(docs/decisions/037-operating.md)."""

from __future__ import annotations

from reconciler.engine.ledger.parts import KINDS
from reconciler.engine.model import workloads as wl
from troupe.podgroups import GROUP_APIS

__all__ = ["CONFIG_KIND", "KINDS", "NOT_IN_SNAPSHOT", "SKIPPED_KINDS", "SNAPSHOT_COMMAND", "SNAPSHOT_NOTE", "SNAPSHOT_RESOURCES"]

#: Kinds a snapshot may hold that the simulator does not read (``kubectl troupe plan`` reads them).
SKIPPED_KINDS = ("PriorityClass",)
#: The kind of Troupe's configuration, which a snapshot holds when it is appended to it
#: (``kubectl get configmap troupe-config -n troupe-system -o json >> snapshot.json``):
#: ``kubectl troupe --snapshot`` decides with it; the simulator passes over it (its ``--config``).
CONFIG_KIND = "ConfigMap"
#: Every kind Troupe reads, by the resource name ``kubectl get`` takes: the one snapshot
#: command (:data:`SNAPSHOT_COMMAND`) that the simulator and ``kubectl troupe`` both read whole.
SNAPSHOT_RESOURCES = {
    "Node": "nodes", "Pod": "pods", "Job": "jobs", **{k.kind: k.plural for k in wl.CUSTOM_KINDS},
    # The owners Volcano reads its groups' minimum from (docs/decisions/065-adopted-pods-join-their-peers-groups.md).
    "ReplicaSet": "replicasets", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets",
    "SharedDeviceGroup": "shareddevicegroups", "PodDisruptionBudget": "poddisruptionbudgets",
    "PersistentVolumeClaim": "persistentvolumeclaims", "PersistentVolume": "persistentvolumes",
    "CSINode": "csinodes", "Namespace": "namespaces", "PriorityClass": "priorityclasses",
    "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses", "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    # Four APIs serve a kind PodGroup: each named with its group (docs/decisions/056-pod-groups.md).
    "PodGroup": ",".join(f"{api.plural}.{api.group}" for api in GROUP_APIS),
}
#: The snapshot command: what the README, ``simulate --help`` and ``kubectl troupe --help`` give.
SNAPSHOT_COMMAND = f"kubectl get {','.join(SNAPSHOT_RESOURCES.values())} -A -o json > snapshot.json"
#: What to leave out of :data:`SNAPSHOT_COMMAND` on a cluster without some of its custom resources.
SNAPSHOT_NOTE = ("kubectl refuses a resource type the cluster does not serve: leave out jobsets, "
                 "leaderworkersets, pytorchjobs or shareddevicegroups when their CRD is not installed, and the "
                 "four resource.k8s.io kinds before Kubernetes 1.34, and each podgroups.<group> whose API is not "
                 "served (scheduling.k8s.io's needs its v1beta1 on, Kubernetes 1.37; the others their CRD)")
#: Why a SharedDeviceGroup that pods of a snapshot join is not there (no object of that name).
NOT_IN_SNAPSHOT = "not in the snapshot (take it with the command of --help, which lists shareddevicegroups)"
