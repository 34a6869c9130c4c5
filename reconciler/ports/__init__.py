"""The writer ports: every write the reconciler makes to the cluster, at the level of intent,
one port per kind of object, each in its own module over its own primitives:

- :class:`~reconciler.ports.pods.PodWrites`: release a member, write or clear a
  nomination, clear a plan record, mark a member disrupted and delete it, evict, set a pod
  condition, emit an Event about a pod;
- :class:`~reconciler.ports.nodes.NodeWrites`: Troupe's taint on nominated nodes,
  the record of the members that failed on a node, Events about a node;
- :class:`~reconciler.ports.workloads.WorkloadWrites`: a gang's reservation on its
  Job, JobSet or PyTorchJob, Events about a workload;
- :class:`~reconciler.ports.gangobjects.GangObjectWrites`: the Gang objects;
- :class:`~reconciler.ports.devicegroups.DeviceGroupWrites`: a SharedDeviceGroup's status and
  finalizer;
- :class:`~reconciler.ports.state.StateStore`: the state ConfigMap of rollback
  backoffs;
- :class:`~reconciler.ports.capacity.CapacityWrites`: a gang's ProvisioningRequest and its
  PodTemplates.

Each port has two implementations: one against a real API server in
:mod:`reconciler.kube.writer`, one in memory for controller tests beside it in
:mod:`reconciler.ports.fake`, with the API server's rules that matter here
(resourceVersion and UID preconditions, strategic merge of annotations, ``nodeSelector`` and
``schedulingGates``, additions only to a gated pod's node selection, PodDisruptionBudgets
refusing evictions, a JSON patch's ``test``, names taken, a ConfigMap's keys and size). A
controller is given only the ports it writes through; :class:`Writes` holds the seven side by
side for the composition root (:mod:`reconciler.run.controllers`).

Every method may be called from several threads at once (a release writes its members in
parallel). Errors (:mod:`~reconciler.ports.base`): :class:`Conflict` (the object
changed in a way that forbids the write), :class:`Gone` (it no longer exists, or was
replaced by one of another UID), :class:`Refused` (an eviction a PodDisruptionBudget
forbids), :class:`LostLeadership` (this replica may no longer write: its :class:`Fence` is
closed), :class:`Unsure` (no answer says whether it was applied: a timeout, a 5xx),
:class:`WriteError` (anything else); ``emit_event`` never raises.

Every write of an intent passes the port's ``fence`` first (the leader's Lease,
docs/decisions/016-bounded-failure-detection.md); the implementations of
:mod:`reconciler.kube.writer` check it again just before the request's bytes leave.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.ports.base import (
    UNFENCED,
    Conflict,
    Fence,
    Fenced,
    Gone,
    LostLeadership,
    Refused,
    Unfenced,
    Unsure,
    WriteError,
)
from reconciler.ports.capacity import CapacityWrites
from reconciler.ports.devicegroups import DeviceGroupWrites
from reconciler.ports.gangobjects import GangObjectWrites
from reconciler.ports.nodes import NodeWrites
from reconciler.ports.pods import CONFLICT_RETRIES, PodWrites, release_patch
from reconciler.ports.state import StateStore, state_key
from reconciler.ports.workloads import WorkloadWrites

__all__ = [
    "CONFLICT_RETRIES",
    "UNFENCED",
    "CapacityWrites",
    "Conflict",
    "DeviceGroupWrites",
    "Fence",
    "Fenced",
    "GangObjectWrites",
    "Gone",
    "LostLeadership",
    "NodeWrites",
    "PodWrites",
    "Refused",
    "StateStore",
    "Unfenced",
    "Unsure",
    "WorkloadWrites",
    "WriteError",
    "Writes",
    "release_patch",
    "state_key",
]


class Writes(Protocol):
    """The seven ports side by side, all passing one ``fence`` (the leader's Lease;
    :data:`UNFENCED` without one): what the composition root
    (:func:`reconciler.run.controllers.compose`) hands out, each controller getting only the
    ports it writes through. :class:`reconciler.kube.writer.KubeWrites` and
    :class:`reconciler.ports.fake.FakeCluster` are two; each types its ports as
    these."""

    pods: PodWrites
    nodes: NodeWrites
    workloads: WorkloadWrites
    gang_objects: GangObjectWrites
    groups: DeviceGroupWrites
    state: StateStore
    capacity: CapacityWrites
    fence: Fence

    def close(self) -> None:
        """Send what is still queued (the Events), for a few seconds at most, then stop."""
