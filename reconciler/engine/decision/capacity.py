"""A gang that does not fit asks for room with one ProvisioningRequest, waits on it, and is
placed whole on what it brings (docs/decisions/080-provisioning-requests.md).

The decision's placement path (:mod:`.decide`) calls :func:`ask` when the gang does not fit
for want of room (placement's ``shortfall``: ``Unschedulable``, or ``UnschedulableAndUnresolvable``
because the nodes there are could not hold it even empty: more nodes would help either way;
a request that cannot be read asks nothing) and preemption made no plan, or before preemption when the gang's
:class:`~reconciler.engine.gangs.capacity.Ask` does not prefer it. :func:`consumed` adds the
consume annotations to a release while the request is live, and :func:`done_with` says when
the request is deleted: the gang bound, or placed without it (its request had ended).

The gang's request is the one of its name (:func:`~reconciler.engine.gangs.capacity.request_name`)
owned by its :class:`~reconciler.engine.gangs.capacity.OwnerRef` and of its class; any
other object of that name (a tenant's forgery, a leftover of another class) is not consumed,
never deleted, and the gang says so. Its state is the gang's reason
(``ProvisioningRequest train-3f2a09c1: Accepted``); ``Failed``, ``BookingExpired`` and
``CapacityRevoked`` are replaced after the rollback's backoff, and so is a ``Provisioned``
one whose nodes, :data:`PROVISIONED_GRACE_SECONDS` after it was provisioned, still do not
take the gang (its required level not met, say): the reason says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.engine.decision.actions import (
    Action,
    ClearNominations,
    DropCapacityRequest,
    RequestCapacity,
    Status,
    Wait,
)
from reconciler.engine.decision.seen import Decision, Seen
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.capacity import Ask, Observed, pod_sets, request_name, retry_at
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.timestamps import epoch, rfc3339
from reconciler.engine.placement.place import PlacementResult
from troupe.provisioning import CLASS_POD_ANNOTATION, CONSUME_ANNOTATION, FAILED, PROVISIONED

#: How long after ``Provisioned`` the added nodes may take to be Ready and seen before the
#: gang concludes they do not take it (seconds): nodes join some time after the scale-up.
PROVISIONED_GRACE_SECONDS = 120.0


def owned(request: Observed | None, ask: Ask | None) -> bool:
    """Whether ``request`` is the gang's: owned by the gang's owner and of its class."""
    return (request is not None and ask is not None and ask.owner is not None
            and ask.owner.uid in request.owner_uids and request.class_name == ask.class_name)


def _state(request: Observed) -> str:
    """The request's state as the reason tells it: ``Accepted``, ``Failed: <message>``..."""
    state, condition = request.state()
    if state == FAILED and condition is not None and condition.message:
        return f"{state}: {condition.message}"
    return state


def _request(s: Seen, ask: Ask, attempt: int, replaces: Observed | None) -> RequestCapacity:
    assert ask.owner is not None
    return RequestCapacity(s.gang.key, s.gang.namespace, request_name(s.gang.key), ask.class_name,
                           dict(ask.parameters), pod_sets(s.gang.key, s.free), ask.owner, attempt,
                           replaces.uid if replaces is not None else "",
                           replaces.templates if replaces is not None else ())


def ask(s: Seen, result: PlacementResult, subject: str, wait: Wait, clear: tuple[PodKey, ...]) -> Decision | None:
    """The ``Provisioning`` decision of a gang that does not fit (``result``), or None when
    it asks nothing: it may not (no :class:`Ask`, no owner known yet), more nodes would not
    help (no ``shortfall``), or no member is free to place."""
    want, name = s.gang.capacity, request_name(s.gang.key)
    if want is None or want.owner is None or not result.shortfall or not s.free:
        return None
    found = s.gang.capacity_request
    actions: list[Action] = [wait, *([ClearNominations(clear)] if clear else [])]
    reasons: tuple[str, ...]
    recheck = None
    if found is not None and not owned(found, want):
        reasons = (f"ProvisioningRequest {name} is not this gang's (another owner or class): not consumed, "
                   f"no request made", result.reason)
        return s.made(lifecycle.PROVISIONING, actions, Status(reasons, result.code, subject), placement=result)
    if found is None:
        made = _request(s, want, 1, None)
        actions.insert(0, made)
        reasons = (f"ProvisioningRequest {name}: asked for {made.pods} pod(s) of {len(made.pod_sets)} shape(s) "
                   f"({want.class_name})", result.reason)
        return s.made(lifecycle.PROVISIONING, actions, Status(reasons, result.code, subject), placement=result)
    state, condition = found.state()
    since = condition.at if condition is not None else found.created
    stale = state == PROVISIONED and (at := epoch(since)) is not None and s.now >= at + PROVISIONED_GRACE_SECONDS
    if found.ended or stale:
        told = (f"ProvisioningRequest {name}: Provisioned, but the nodes it added do not take the gang"
                if stale else f"ProvisioningRequest {name}: {_state(found)}")
        if stale and (at := epoch(since)) is not None:
            since = rfc3339(at + PROVISIONED_GRACE_SECONDS)
        again = retry_at(found, since)
        if again is not None and again > s.now:
            reasons, recheck = (told, f"asking again in {again - s.now:.0f}s", result.reason), again
        else:
            actions.insert(0, _request(s, want, found.attempt + 1, found))
            reasons = (told, "asking again", result.reason)
        return s.made(lifecycle.PROVISIONING, actions, Status(reasons, result.code, subject), recheck_at=recheck,
                      placement=result)
    if state == PROVISIONED and (at := epoch(since)) is not None:
        recheck = at + PROVISIONED_GRACE_SECONDS
    reasons = (f"ProvisioningRequest {name}: {_state(found)}", result.reason)
    return s.made(lifecycle.PROVISIONING, actions, Status(reasons, result.code, subject), recheck_at=recheck,
                  placement=result)


def consumed(s: Seen) -> Mapping[str, str]:
    """The annotations a release adds to each member: the consume annotations while the
    gang's own request is live (not failed, expired or revoked: the nodes the gang is placed
    on are most likely the ones it brings, even before it says ``Provisioned``, and
    cluster-autoscaler then does not scale up for its members again), none otherwise."""
    found, want = s.gang.capacity_request, s.gang.capacity
    if not owned(found, want) or found is None or found.ended:
        return {}
    return {CONSUME_ANNOTATION: found.name, CLASS_POD_ANNOTATION: found.class_name}


def done_with(s: Seen, why: str) -> tuple[DropCapacityRequest, ...]:
    """The deletion of the gang's own request, ``why`` it goes (``()``: it has none)."""
    found = s.gang.capacity_request
    if found is None or not owned(found, s.gang.capacity):
        return ()
    return (DropCapacityRequest(found.namespace, found.name, found.uid, why, found.templates),)
