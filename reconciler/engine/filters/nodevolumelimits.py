"""``NodeVolumeLimits``, for bound CSI PersistentVolumes: the volumes attached to a node, per
CSI driver, stay within the count its CSINode allows (``spec.drivers[].allocatable.count``)
(``pkg/scheduler/framework/plugins/nodevolumelimits``; Kubernetes docs "Node-specific Volume
Limits"). Inline CSI volumes and unbound claims are not modeled (:mod:`.unmodeled`).

Its PreFilter state (:class:`AttachedVolumes`) keeps the volumes attached per node.

Reason: ``node(s) exceed max volume count`` (``Unschedulable``).
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.filters.status import (
    Code,
    Cycle,
    Plugin,
    PreFilterState,
    Registered,
    Status,
    tally,
)
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


class AttachedVolumes(PreFilterState):
    """Each member's bound CSI volumes (``(driver, handle)``), and per node index those of
    the pods there (those using nodes, then the members placed)."""

    __slots__ = ("attached", "catalog", "names", "used")

    def __init__(self, catalog: VolumeCatalog, attached: list[list[tuple[str, str]]], names: list[str]) -> None:
        self.catalog, self.attached, self.names = catalog, attached, names
        self.used: dict[int, list[tuple[str, str]]] = {}

    @classmethod
    def prefilter(cls, cycle: Cycle) -> AttachedVolumes | None:
        """None without a volume catalog or when no member mounts a bound CSI volume."""
        volumes = cycle.snapshot.volumes
        if volumes is None:
            return None
        attached = [volumes.attached(m.namespace, m.terms.claims) if m.terms is not None and m.terms.claims else []
                    for m in cycle.order]
        if not any(attached):
            return None
        state = cls(volumes, attached, [node.name for node in cycle.snapshot.nodes])
        for pod, i in cycle.existing:
            if pod.terms is not None and pod.terms.claims:
                tally(state.used.setdefault(i, []), volumes.attached(pod.namespace, pod.terms.claims), 1)
        return state

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m``'s volumes on node ``i``."""
        adding = self.attached[m]
        return check(self.catalog, self.names[i], self.used.get(i, ()), adding) if adding else None

    def add_pod(self, m: int, i: int) -> None:
        """Member ``m``'s volumes are attached to node ``i``."""
        if self.attached[m]:
            tally(self.used.setdefault(i, []), self.attached[m], 1)

    def remove_pod(self, m: int, i: int) -> None:
        """Member ``m``'s volumes are no longer attached to node ``i`` for it."""
        if self.attached[m]:
            tally(self.used.setdefault(i, []), self.attached[m], -1)


REGISTERED = Registered(PLUGIN, (MAX_VOLUMES,), "pkg/scheduler/framework/plugins/nodevolumelimits",
                        state=AttachedVolumes)
