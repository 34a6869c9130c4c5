"""Carrying out ``Reserve`` and ``DropReservation`` (:class:`Reservations`): a gang's
reservation written on its workload and removed from it
(docs/decisions/034-release-as-created.md); and the removal of a record from a workload
Troupe does not plan (:meth:`Reservations.remove_stray`,
docs/decisions/049-hostile-tenants-third-round.md)."""

from __future__ import annotations

import logging

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.handlers.done import Done
from reconciler.daemon.handlers.waves import Waves
from reconciler.daemon.memory import Memory
from reconciler.engine.decision.actions import DropReservation, Reserve
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.reservations import Record
from reconciler.ports.base import Conflict, Gone, WriteError
from reconciler.ports.workloads import WorkloadWrites
from troupe import contract

log = logging.getLogger("reconciler.daemon.controller")


class Reservations:
    """The handlers of ``Reserve`` and ``DropReservation``: the record and its Events written
    through ``workloads`` (a reservation on a release driver thread of ``waves``), each
    workload written fed back to ``cache``."""

    def __init__(self, cache: ClusterCache, workloads: WorkloadWrites, waves: Waves) -> None:
        self.cache = cache
        self.workloads = workloads
        self.waves = waves

    def reserve(self, gang: Gang, decision: Decision, action: Reserve, memory: Memory, now: float) -> Done:
        """Write the reservation on the workload (docs/decisions/034-release-as-created.md),
        signed with the cache's key for that workload's UID
        (docs/decisions/049-hostile-tenants-third-round.md): from then on its ranks' nodes are
        held. The cache holds the workload as carrying it at once, and the write goes out on
        a release driver thread while the worker decides on (docs/decisions/068-release-pipeline.md);
        the :class:`Done` of the write is ``pending``."""
        signed = self.cache.workloads.signed(action.workload, action.record)
        if signed is None:  # deleted since the decision: the next one says so
            return Done(note="reservation not written: the workload is gone", retry=True)
        record, uid = signed
        self.cache.workloads.assume_record(action.workload, record)
        return Done(pending=self.waves.start(lambda: self.write(gang, decision, action, record, uid)))

    def write(self, gang: Gang, decision: Decision, action: Reserve, record: Record, uid: str) -> Done:
        """Write ``record`` on the action's workload of UID ``uid``; tell the workload with the
        rule's Event, and look again at once: members already created are released by the
        next decision. A write that fails ends the cache's assumption of the record (a
        reservation is one annotation: the next decision writes it anew over whatever is
        there) and is retried."""
        try:
            self.cache.assume_workload(action.workload[0], self.workloads.set_reservation(action.workload, record, uid))
        except WriteError as e:  # LostLeadership included; Conflict: replaced by another UID. Nothing is reserved
            self.cache.workloads.forget_record(action.workload, record)
            log.warning("gang %s: reservation not written: %s", gang.key, e)
            return Done(note=f"reservation not written: {e}", retry=True)
        notice = decision.rule.notice
        if notice is not None:
            self.workloads.emit_event(action.workload, notice.kind, notice.reason, f"gang {gang.key}: {decision.reason}")
        log.info("gang %s: reserved %d node(s) on %s %s/%s", gang.key, len(action.record.nodes), *action.workload)
        return Done(requeue_after=0.0)

    def drop(self, gang: Gang, decision: Decision, action: DropReservation, memory: Memory, now: float) -> Done:
        """Remove the reservation from the workload, if it is still the one decided on;
        one already replaced or gone is left alone."""
        record = gang.reservation
        if record is None or record.planned_at != action.planned_at:
            return Done()
        try:
            self.cache.assume_workload(action.workload[0], self.workloads.drop_reservation(action.workload, record))
        except (Conflict, Gone):
            return Done()
        except WriteError as e:
            log.warning("gang %s: reservation not removed: %s", gang.key, e)
            return Done(note=f"reservation not removed: {e}", retry=True)
        if not action.complete:
            self.workloads.emit_event(action.workload, "Warning" if decision.rule.notice is None
                                      else decision.rule.notice.kind, "GangReservationDropped",
                                      f"gang {gang.key}: reservation of {action.planned_at} dropped: {action.why}")
        return Done()

    def remove_stray(self, workload: WorkloadKey) -> bool:
        """Remove the reservation annotation of ``workload`` if the cache still has it as a
        stray record (:meth:`~reconciler.daemon.cache.ClusterCache.stray_records`: a
        workload Troupe does not plan carries one, which holds nothing), and tell the
        workload with a ``ReservationRemoved`` Warning. Returns whether to try again (a
        refused write; a workload gone or replaced needs nothing)."""
        stray = self.cache.stray_record(workload)
        if stray is None:
            return False
        try:
            self.cache.assume_workload(workload[0], self.workloads.remove_stray_record(workload, stray.uid))
        except (Conflict, Gone):
            return False
        except WriteError as e:
            log.warning("%s %s/%s: stray reservation record not removed: %s", *workload, e)
            return True
        why = stray.record_error or "Troupe does not release this workload as created"
        self.workloads.emit_event(workload, "Warning", "ReservationRemoved",
                                  f"{contract.RESERVATION} removed: only Troupe writes it, on the workloads it "
                                  f"releases as created, and this one holds nothing ({why})")
        log.info("%s %s/%s: stray reservation record removed", *workload)
        return False
