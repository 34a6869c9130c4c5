"""The reconciler's handlers of the engine's actions, one class per concern, each given the
writer ports and the collaborators it uses (composed in :mod:`reconciler.run.controllers`):

- :class:`~reconciler.daemon.handlers.releases.Releases`: ``Release``;
- :class:`~reconciler.daemon.handlers.rollbacks.Rollbacks`: ``RollBack``, ``ClearPlans``,
  ``ForgetBackoff``, and the backoffs a new leader reads back;
- :class:`~reconciler.daemon.handlers.preemptions.Preemptions`: ``Preempt``,
  ``ClearNominations``;
- :class:`~reconciler.daemon.handlers.reservations.Reservations`: ``Reserve``,
  ``DropReservation``;
- :class:`~reconciler.daemon.handlers.failures.NodeFailures`: ``RecordNodeFailures``;
- :class:`~reconciler.daemon.handlers.capacity.CapacityRequests`: ``RequestCapacity``,
  ``DropCapacityRequest``;

over what they share: :class:`~reconciler.daemon.handlers.notices.Notices` (the members'
conditions and the Events told once), :class:`~reconciler.daemon.handlers.waves.Waves` (the
release threads and the fence's waves) and :class:`~reconciler.daemon.handlers.done.Done`
(what a handler did). Each handler carries out one action of
:mod:`reconciler.engine.decision.actions` for one gang; the gang controller's table maps each
action type to its handler (:class:`reconciler.daemon.controller.GangController`), so no code
branches on a phase or a rule name (docs/decisions/025-actions.md).
"""

from __future__ import annotations

from reconciler.daemon.handlers.capacity import CapacityRequests
from reconciler.daemon.handlers.done import Done, Handler
from reconciler.daemon.handlers.failures import NodeFailures
from reconciler.daemon.handlers.notices import Notices
from reconciler.daemon.handlers.preemptions import Preemptions
from reconciler.daemon.handlers.releases import Releases
from reconciler.daemon.handlers.reservations import Reservations
from reconciler.daemon.handlers.rollbacks import Rollbacks
from reconciler.daemon.handlers.waves import Waves

__all__ = ["CapacityRequests", "Done", "Handler", "NodeFailures", "Notices", "Preemptions", "Releases", "Reservations", "Rollbacks",
           "Waves"]
