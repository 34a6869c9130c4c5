"""The writer port of workload objects (Jobs, JobSets, PyTorchJobs...): a gang's
reservation, written and removed (docs/decisions/034-release-as-created.md), and the Events
about a workload.

:class:`WorkloadWrites` makes them over one primitive an implementation provides
(``_patch_workload``) and :meth:`~WorkloadWrites.emit_event`:
:class:`reconciler.kube.writer.workloads.KubeWorkloadWrites` against the API server,
:class:`reconciler.ports.fake.workloads.FakeWorkloadWrites` in memory. The record is
written with a JSON merge patch of the one annotation (a Job's status changes all the
time; a precondition on its resourceVersion would refuse most writes for nothing, and only
the leader writes the annotation). It is removed with a JSON patch that first tests the
value is the record the decision saw, so a newer reservation is never removed by a
decision about an older one.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.reservations import Record
from reconciler.ports.base import Fenced
from troupe import contract


def _pointer(key: str) -> str:
    """The JSON pointer of annotation ``key`` (RFC 6901 escapes)."""
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


class WorkloadWrites(Fenced, abc.ABC):
    """A gang's reservation on its workload, and the workload's Events (module docstring)."""

    @abc.abstractmethod
    def _patch_workload(self, workload: WorkloadKey, patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Apply ``patch`` to the workload (a mapping: a JSON merge patch; a list: a JSON
        patch); returns the object. Raises :class:`~reconciler.ports.base.Conflict`
        (a JSON patch's ``test`` failed), :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError`."""

    @abc.abstractmethod
    def emit_event(self, workload: WorkloadKey, kind: str, reason: str, message: str) -> None:
        """Record an Event (``kind`` ``Normal`` or ``Warning``) on the workload; best effort,
        never raises."""

    def set_reservation(self, workload: WorkloadKey, record: Record, uid: str) -> dict[str, Any]:
        """Write ``record`` (signed: :meth:`Record.signed
        <reconciler.engine.model.reservations.Record.signed>`) as the workload's
        ``reconciler.troupe.io/reservation`` if the workload's UID is still ``uid`` (the
        patch carries ``metadata.uid``, which kube-apiserver refuses with 409 Conflict on an
        object of another UID: a record is never written on a workload it was not signed
        for); returns the object. Raises :class:`~reconciler.ports.base.LostLeadership`
        and as ``_patch_workload``."""
        self.fence.check()
        return self._patch_workload(workload, {"metadata": {"uid": uid, "annotations": {contract.RESERVATION: record.encode()}}})

    def remove_stray_record(self, workload: WorkloadKey, uid: str) -> dict[str, Any]:
        """Remove the workload's ``reconciler.troupe.io/reservation``, whatever it says, if
        the workload's UID is still ``uid``: a workload Troupe does not plan, on which it
        never writes one (docs/decisions/049-hostile-tenants-third-round.md); returns the
        object. Raises as :meth:`set_reservation`."""
        self.fence.check()
        return self._patch_workload(workload, {"metadata": {"uid": uid, "annotations": {contract.RESERVATION: None}}})

    def drop_reservation(self, workload: WorkloadKey, record: Record) -> dict[str, Any]:
        """Remove the workload's reservation if it is still ``record``; returns the object.
        Raises :class:`~reconciler.ports.base.Conflict` when it is not (another
        reservation, or none), and as :meth:`set_reservation`."""
        self.fence.check()
        path = _pointer(contract.RESERVATION)
        return self._patch_workload(workload, [{"op": "test", "path": path, "value": record.encode()},
                                               {"op": "remove", "path": path}])
