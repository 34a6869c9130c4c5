"""``NodeVolumeLimits``, for bound CSI PersistentVolumes: the volumes attached to a node, per
CSI driver, stay within the count its CSINode allows (``spec.drivers[].allocatable.count``)
(``pkg/scheduler/framework/plugins/nodevolumelimits``; Kubernetes docs "Node-specific Volume
Limits"). Inline CSI volumes and unbound claims are not modeled (:mod:`.unmodeled`).

Reason: ``node(s) exceed max volume count`` (``Unschedulable``).
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.volumes import VolumeCatalog

MAX_VOLUMES = "node(s) exceed max volume count"

PLUGIN = Plugin("NodeVolumeLimits")
EXCEEDED = Status(Code.UNSCHEDULABLE, PLUGIN, (MAX_VOLUMES,))


def check(catalog: VolumeCatalog, node: str, attached: Iterable[tuple[str, str]],
          adding: Iterable[tuple[str, str]]) -> Status | None:
    """None unless attaching ``adding`` (``(driver, handle)``) to ``node``, which has
    ``attached``, goes over a driver's count in its CSINode (a node or driver without a
    CSINode count has no limit)."""
    limits = catalog.csinodes.get(node)
    if limits is None or not limits.limits:
        return None
    have = set(attached)
    new = {v for v in adding if v not in have}
    for driver, count in limits.limits.items():
        if sum(1 for d, _ in new if d == driver) and sum(1 for d, _ in have | new if d == driver) > count:
            return EXCEEDED
    return None


REGISTERED = Registered(PLUGIN, (MAX_VOLUMES,), "pkg/scheduler/framework/plugins/nodevolumelimits")
