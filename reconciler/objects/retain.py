"""What the reconciler's cache keeps of each kind of object: the retain policy.

Objects arrive from the API server whole: a pod of an indexed Job is about 6.9 KB of JSON,
a third of it ``managedFields``, most of the rest volumes, env, probes and container
statuses that no decision reads. 20,000 such pods take 701 MiB as Python dicts; what
Troupe reads of them takes a fraction (docs/decisions/017-cache-memory.md). So every
object is cut down as it arrives, before the cache stores it, to the fields listed here,
the way client-go informers take a ``TransformFunc`` that drops ``managedFields``.

A policy is a tree (:data:`Keep`): a key mapped to ``True`` keeps its whole value; mapped
to a tree, keeps those keys of the mapping below it (of each mapping, for a list of
them); :class:`AllBut` keeps every key of a mapping except those it names. Keys absent
from the object stay absent. The result is a :class:`Retained` dict, so the cache can tell
an object already cut down from one that is whole (a write's response, say).

To cache a new kind: declare its policy here with every field any reader of the cache
uses (the engine's parser, the controller, the writers, the debug endpoints), cut its
objects with :func:`retain` in the informer's ``transform`` and wherever the cache
stores one, and add it to ``tests/reconciler/objects/test_retain.py``, which checks that what a
reader gets from a retained object is what it gets from the whole one. A field not listed
is gone: a reader that needs one more adds it here, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

from troupe import contract


class AllBut(frozenset[str]):
    """Keep every key of a mapping but these."""


Keep = Mapping[str, Union[bool, "Keep", AllBut]]
"""A retain policy: see the module docstring."""


class Retained(dict[str, Any]):
    """An object cut down by :func:`retain` (a plain dict otherwise)."""


#: Annotations no reader wants and that can be large (kubectl's copy of the whole object).
BULKY_ANNOTATIONS = AllBut({"kubectl.kubernetes.io/last-applied-configuration"})

_OBJECT_META: dict[str, Any] = {
    "name": True, "namespace": True, "uid": True, "resourceVersion": True, "generation": True,
    "creationTimestamp": True, "deletionTimestamp": True, "labels": True, "annotations": BULKY_ANNOTATIONS,
    "ownerReferences": True,
}

#: Of a container's ports, only a host port's (``NodePorts``).
_CONTAINER: dict[str, Any] = {"name": True, "resources": True, "restartPolicy": True,
                              "ports": {"hostPort": True, "hostIP": True, "protocol": True}}
#: Of a volume, its name, the claim it mounts, and which inline kind it is (an empty
#: mapping for each: their contents are not read).
_VOLUME: dict[str, Any] = {"name": True, "persistentVolumeClaim": {"claimName": True}, "ephemeral": {},
                           "gcePersistentDisk": {}, "awsElasticBlockStore": {}, "rbd": {}, "iscsi": {}, "csi": {}}

#: Pods: identity and owners; labels and annotations (gang, topology, device-group and rank
#: keys, the reconciler's decisions); the pod group it names (``schedulingGroup``,
#: docs/decisions/056-pod-groups.md); what placement filters on (node selection, node and
#: pod affinity, topology spread, tolerations, gates, priority, host ports, the claims its
#: volumes mount, resource claims) and counts (container, init-container and pod-level
#: requests, overhead); where it runs, when it started and how long it may run (its own
#: time limit, docs/decisions/079-reservation-at-earliest-start-and-backfill.md), and whether it has ended.
POD: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": _OBJECT_META,
    "spec": {
        "nodeName": True, "nodeSelector": True, "affinity": True, "tolerations": True,
        "schedulingGates": True, "schedulingGroup": True, "priority": True, "priorityClassName": True, "preemptionPolicy": True,
        "schedulerName": True,  # a second scheduler's pod: what kubectl troupe says of it (decision 065)
        "overhead": True, "resources": True, "containers": _CONTAINER, "initContainers": _CONTAINER,
        "terminationGracePeriodSeconds": True,  # how long a preemption victim may take to go
        # what the filters read that kube-scheduler's default profile applies (reconciler.engine.model.podterms)
        "topologySpreadConstraints": True, "volumes": _VOLUME, "resourceClaims": {"name": True, "resourceClaimName": True, "resourceClaimTemplateName": True},
        # the pod's own time limit, from its start: when it is expected to end (decision 079)
        "activeDeadlineSeconds": True,
    },
    "status": {"phase": True, "conditions": {"type": True, "status": True, "reason": True, "message": True},
               "resourceClaimStatuses": True, "startTime": True},
}

#: Nodes: name and labels (topology levels, hostname, device-sharing mode); taints and
#: cordon; allocatable resources; the conditions' type, status and last transition (how
#: long a node has been NotReady: docs/decisions/040-failure-policy.md); the member failures
#: Troupe recorded on it (docs/decisions/041-failing-nodes.md). Not kept: other
#: annotations, images, addresses, node info, volumes, capacity, heartbeats.
NODE: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "creationTimestamp": True,
                 "deletionTimestamp": True, "labels": True, "annotations": {contract.NODE_FAILURES: True}},
    "spec": {"taints": True, "unschedulable": True},
    "status": {"allocatable": True, "conditions": {"type": True, "status": True, "lastTransitionTime": True}},
}

#: Jobs: identity, the annotations a workload may carry (topology, release mode, the
#: reservation), the sizes a gang takes from its Job (parallelism capped by the completions
#: still to go), whether it still runs pods (suspended, finished, past its deadline:
#: ``activeDeadlineSeconds`` from ``status.startTime``, decision 067), and what of its pod
#: template a member's slot is made of (docs/decisions/034-release-as-created.md).
JOB: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True, "labels": True,
                 "annotations": BULKY_ANNOTATIONS, "generation": True, "creationTimestamp": True,
                 "deletionTimestamp": True, "ownerReferences": True},
    "spec": {"parallelism": True, "completions": True, "completionMode": True, "suspend": True,
             "activeDeadlineSeconds": True,
             "template": {"metadata": {"labels": True, "annotations": BULKY_ANNOTATIONS},
                          "spec": POD["spec"]}},
    "status": {"succeeded": True, "startTime": True, "conditions": {"type": True, "status": True}},
}

#: SharedDeviceGroups: small objects, kept whole but for the server's bookkeeping.
DEVICE_GROUP: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "generation": True, "creationTimestamp": True,
                 "deletionTimestamp": True, "labels": True, "finalizers": True},
    "spec": True,
    "status": True,
}


#: PodDisruptionBudgets: which pods they cover (namespace, selector) and how many of them
#: may go now (``status.disruptionsAllowed``): what atomic preemption counts.
BUDGET: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True},
    "spec": {"selector": True},
    "status": {"disruptionsAllowed": True},
}

#: PersistentVolumeClaims: which volume each is bound to and its access modes.
CLAIM: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True},
    "spec": {"volumeName": True, "accessModes": True},
}

#: PersistentVolumes: zone labels, required node affinity, CSI driver and handle.
VOLUME: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "labels": True},
    "spec": {"nodeAffinity": True, "csi": {"driver": True, "volumeHandle": True}},
}

#: CSINodes: each driver's attach limit.
CSI_NODE: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True},
    "spec": {"drivers": {"name": True, "allocatable": True}},
}

#: Namespaces: their labels (``namespaceSelector`` of pod affinity terms).
NAMESPACE: Keep = {
    "apiVersion": True, "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "labels": True},
}


def _cut(value: Any, policy: bool | Keep | AllBut) -> Any:
    if policy is True:
        return value
    if isinstance(value, list):
        return [_cut(v, policy) for v in value]
    if not isinstance(value, Mapping):
        return value
    if isinstance(policy, AllBut):
        return {k: v for k, v in value.items() if k not in policy}
    assert isinstance(policy, Mapping)
    return {k: value[k] if sub is True else _cut(value[k], sub) for k, sub in policy.items() if k in value}


def retain(policy: Keep, obj: Mapping[str, Any]) -> Retained:
    """What ``policy`` keeps of ``obj`` (API JSON, camelCase), as a new :class:`Retained`
    dict sharing the kept values with ``obj``. An object already retained is returned as
    it is."""
    if isinstance(obj, Retained):
        return obj
    return Retained(_cut(obj, policy))
