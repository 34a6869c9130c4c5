"""Carrying out ``RequestCapacity`` and ``DropCapacityRequest`` (:class:`CapacityRequests`):
a gang's ProvisioningRequest and its PodTemplates made and deleted, the owner told with an
Event, each counted (docs/decisions/080-provisioning-requests.md)."""

from __future__ import annotations

import logging

from prometheus_client import Counter

from reconciler.daemon.handlers.done import Done
from reconciler.daemon.memory import Memory
from reconciler.engine.decision.actions import DropCapacityRequest, RequestCapacity
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Gone, WriteError
from reconciler.ports.capacity import CapacityWrites

log = logging.getLogger("reconciler.daemon.controller")

#: Requests made and deleted, and writes of them that failed (``created``, ``deleted``, ``failed``).
PROVISIONING_REQUESTS = Counter("troupe_provisioning_requests_total",
                                "ProvisioningRequests the reconciler made for gangs, deleted, or failed to write.",
                                ["result"])


class CapacityRequests:
    """The handlers of ``RequestCapacity`` and ``DropCapacityRequest``, writing through
    ``writes``; the Events go on the request's owner (the gang's workload or Gang object)."""

    def __init__(self, writes: CapacityWrites) -> None:
        self.writes = writes

    def request(self, gang: Gang, decision: Decision, action: RequestCapacity, memory: Memory, now: float) -> Done:
        """Make the gang's request (replacing the one it names); tell its owner. A write that
        fails is retried (the work queue's backoff); a request already made is not made twice."""
        try:
            made = self.writes.request(action)
        except Gone as e:  # a member gone, or the ProvisioningRequest API not served
            PROVISIONING_REQUESTS.labels("failed").inc()
            log.warning("gang %s: ProvisioningRequest %s not made: %s", gang.key, action.name, e)
            return Done(note=f"ProvisioningRequest {action.name} not made: {e}", retry=True)
        except WriteError as e:
            PROVISIONING_REQUESTS.labels("failed").inc()
            log.warning("gang %s: ProvisioningRequest %s not made: %s", gang.key, action.name, e)
            return Done(note=f"ProvisioningRequest {action.name} not made: {e}", retry=True)
        if made:
            PROVISIONING_REQUESTS.labels("created").inc()
            owner = action.owner
            self.writes.emit_event(PodKey(action.namespace, owner.name), owner.api_version, owner.kind, "Normal",
                                   "ProvisioningRequested",
                                   f"gang {gang.key}: ProvisioningRequest {action.name} ({action.class_name}) for "
                                   f"{action.pods} pod(s), attempt {action.attempt}")
            log.info("gang %s: ProvisioningRequest %s made (%s, %d pod(s), attempt %d)", gang.key, action.name,
                     action.class_name, action.pods, action.attempt)
        return Done()

    def drop(self, gang: Gang, decision: Decision, action: DropCapacityRequest, memory: Memory, now: float) -> Done:
        """Delete the gang's request and its templates; a failure is retried."""
        try:
            self.writes.drop(action)
        except WriteError as e:
            PROVISIONING_REQUESTS.labels("failed").inc()
            return Done(note=f"ProvisioningRequest {action.name} not deleted: {e}", retry=True)
        PROVISIONING_REQUESTS.labels("deleted").inc()
        log.info("gang %s: ProvisioningRequest %s deleted: %s", gang.key, action.name, action.why)
        return Done()
