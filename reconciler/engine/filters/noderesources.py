"""``NodeResourcesFit``: the node has free every resource the pod requests, ``pods`` (its
pod-count limit) included (``pkg/scheduler/framework/plugins/noderesources``, ``fit.go``;
Kubernetes docs "Resource Management for Pods and Containers"). Requests are computed as
kube-scheduler computes them (:mod:`reconciler.engine.model.resources`); DRA claims are
counted here as units (:mod:`.dynamicresources`).

Reasons: one per resource short, ``insufficient nvidia.com/gpu`` and ``too many pods``,
listed as kube-scheduler lists resources (:func:`~reconciler.engine.model.resources.resource_order`:
cpu, memory, ephemeral-storage, pods, then the others by name). ``Unschedulable`` (freeing
room helps), or ``UnschedulableAndUnresolvable`` when a claim pinned to another node is
short (:func:`.dynamicresources.pinned`).
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.engine.filters import dynamicresources
from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.resources import PODS, resource_order

TOO_MANY_PODS = "too many pods"
#: The words before the resource's name in this plugin's reason.
INSUFFICIENT = "insufficient"


def reason(resource: str) -> str:
    """The reason for ``resource`` short: ``insufficient <resource>``, ``too many pods``."""
    return TOO_MANY_PODS if resource == PODS else f"{INSUFFICIENT} {resource}"


def _by_resource(text: str) -> tuple[int, str]:
    return resource_order(PODS if text == TOO_MANY_PODS else text.removeprefix(f"{INSUFFICIENT} "))


PLUGIN = Plugin("NodeResourcesFit")
#: Statuses by the resources short, made once each.
_statuses: dict[tuple[str, ...], Status] = {}


def short(free: Mapping[str, int], requests: Mapping[str, int]) -> list[str]:
    """The requested resources (units) ``free`` has too little of, in
    :func:`~reconciler.engine.model.resources.resource_order` (empty: it fits)."""
    return [name for name in sorted(requests, key=resource_order)
            if requests[name] > 0 and requests[name] > free.get(name, 0)]


def insufficient(free: Mapping[str, int], requests: Mapping[str, int]) -> list[str]:
    """The reasons for every resource short (empty: it fits)."""
    return [reason(name) for name in short(free, requests)]


def check(free: Mapping[str, int], requests: Mapping[str, int]) -> Status | None:
    """None when ``requests`` fit in ``free``; else one status naming every resource short."""
    names = short(free, requests)
    if not names:
        return None
    key = tuple(names)
    found = _statuses.get(key)
    if found is None:
        code = Code.UNRESOLVABLE if any(dynamicresources.pinned(name) for name in names) else Code.UNSCHEDULABLE
        found = _statuses[key] = Status(code, PLUGIN, tuple(reason(name) for name in names))
    return found


REGISTERED = Registered(PLUGIN, (), "pkg/scheduler/framework/plugins/noderesources", _by_resource)
