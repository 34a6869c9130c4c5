"""The writer port: every write the reconciler makes to the cluster, at the level of intent.

:class:`PodWriter` joins three parts, each in its own module over its own primitives:
the pod intents (:mod:`~reconciler.daemon.writer.pods`: release a member, mark a member
disrupted and delete it, evict, remove a plan record, set a pod condition, emit an Event,
each building its own patch and handling conflicts), the SharedDeviceGroup writes
(:mod:`~reconciler.daemon.writer.groups`), Troupe's taint on nominated nodes
(:mod:`~reconciler.daemon.writer.nodes`), the Gang objects
(:mod:`~reconciler.daemon.writer.gangobjects`), a gang's reservation on its workload
(:mod:`~reconciler.daemon.writer.workloads`) and the state ConfigMap of rollback backoffs
(:mod:`~reconciler.daemon.writer.state`). Two classes implement the primitives:
:class:`reconciler.kube.KubeWriter` against a real API server, and
:class:`reconciler.daemon.writer.fake.FakeWriter` in memory for controller tests, with the
API server's rules that matter here (resourceVersion and UID preconditions, strategic
merge of annotations, ``nodeSelector`` and ``schedulingGates``, additions only to a gated
pod's node selection, PodDisruptionBudgets refusing evictions).

Every method may be called from several threads at once (a release writes its members in
parallel). Errors (:mod:`~reconciler.daemon.writer.base`): :class:`Conflict` (the object
changed in a way that forbids the write), :class:`Gone` (it no longer exists, or was
replaced by a pod of another UID), :class:`Refused` (an eviction a PodDisruptionBudget
forbids), :class:`LostLeadership` (this replica may no longer write: its :class:`Fence` is
closed), :class:`WriteError` (anything else); ``emit_event`` never raises.

Every write of an intent passes the writer's :attr:`PodWriter.fence` first (the leader's
Lease, docs/decisions/016-bounded-failure-detection.md); :class:`reconciler.kube.KubeWriter`
checks it again just before the request's bytes leave.
"""

from __future__ import annotations

from reconciler.daemon.writer.base import (
    UNFENCED,
    Conflict,
    Fence,
    Fenced,
    Gone,
    LostLeadership,
    Refused,
    Unfenced,
    WriteError,
)
from reconciler.daemon.writer.gangobjects import GangObjectWrites
from reconciler.daemon.writer.groups import GroupWrites
from reconciler.daemon.writer.nodes import NodeWrites
from reconciler.daemon.writer.pods import CONFLICT_RETRIES, PodIntents, release_patch
from reconciler.daemon.writer.state import StateStore, state_key
from reconciler.daemon.writer.workloads import WorkloadWrites
from reconciler.engine.model.keys import PodKey

__all__ = [
    "CONFLICT_RETRIES",
    "UNFENCED",
    "Conflict",
    "Fence",
    "Fenced",
    "GangObjectWrites",
    "Gone",
    "GroupWrites",
    "LostLeadership",
    "NodeWrites",
    "PodIntents",
    "PodKey",
    "PodWriter",
    "Refused",
    "StateStore",
    "Unfenced",
    "WorkloadWrites",
    "WriteError",
    "release_patch",
    "state_key",
]


class PodWriter(PodIntents, GroupWrites, NodeWrites, StateStore, WorkloadWrites, GangObjectWrites):
    """The whole port (module docstring): the pod intents over ``_get``, ``_patch``
    (strategic merge), ``_patch_status``, ``_delete`` (with a UID precondition),
    ``_evict`` and :meth:`emit_event`; the SharedDeviceGroup writes over ``_patch_group``;
    the rollback backoffs over ``_read_state`` and ``_write_state``; Troupe's taint on
    nominated nodes over ``_get_node`` and ``_patch_node`` (a JSON merge patch); the
    reservations over ``_patch_workload``; the Gang objects over ``_list_gang_objects``,
    ``_create_gang_object``, ``_patch_gang_object_status`` and ``_delete_gang_object``. ``fence`` is checked
    before every primitive write (:class:`Unfenced` unless set)."""
