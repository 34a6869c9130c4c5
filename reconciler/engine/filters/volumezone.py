"""``VolumeZone``: a bound volume's zone and region labels (``topology.kubernetes.io/zone``,
``/region`` and their ``failure-domain.beta`` forms; a value may list zones joined by
``__``) match the node's, for a node that carries one of those labels
(``pkg/scheduler/framework/plugins/volumezone``; Kubernetes docs "Running in multiple
zones").

It counts no pods; its state for a gang (:class:`ZoneChecks`) keeps each member's result
per node, since several fills ask again.

Reason: ``node(s) had no available volume zone`` (``UnschedulableAndUnresolvable``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.engine.filters.status import Code, Cycle, Plugin, PreFilterState, Registered, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.volumes import ZONE_LABELS, VolumeCatalog

VOLUME_ZONE = "node(s) had no available volume zone"

PLUGIN = Plugin("VolumeZone")
NO_ZONE = Status(Code.UNRESOLVABLE, PLUGIN, (VOLUME_ZONE,))


def check(catalog: VolumeCatalog, namespace: str, claims: Iterable[str], labels: Mapping[str, str]) -> Status | None:
    """None when the node (its ``labels``) has no zone label, or every existing bound
    volume of ``claims`` is in the node's zone and region."""
    if not any(key in labels for key in ZONE_LABELS):
        return None
    for _, volume in catalog.bound(namespace, claims):
        if volume is not None and any(labels.get(key) not in zones for key, zones in volume.zones.items()):
            return NO_ZONE
    return None


class ZoneChecks(PreFilterState):
    """:func:`check` for each member that mounts claims, on each node asked, worked out once."""

    __slots__ = ("catalog", "known", "order", "snapshot")

    def __init__(self, catalog: VolumeCatalog, snapshot: Snapshot, order: list[PodInfo]) -> None:
        self.catalog, self.snapshot, self.order = catalog, snapshot, order
        self.known: dict[tuple[int, int], Status | None] = {}

    @classmethod
    def prefilter(cls, cycle: Cycle) -> ZoneChecks | None:
        """None without a volume catalog or when no member mounts a claim."""
        volumes = cycle.snapshot.volumes
        if volumes is None or not any(m.terms is not None and m.terms.claims for m in cycle.order):
            return None
        return cls(volumes, cycle.snapshot, list(cycle.order))

    def filter(self, m: int, i: int) -> Status | None:
        """Member ``m``'s bound volumes on node ``i``."""
        pod = self.order[m]
        if pod.terms is None or not pod.terms.claims:
            return None
        key = (m, i)
        if key not in self.known:
            self.known[key] = check(self.catalog, pod.namespace, pod.terms.claims, self.snapshot.nodes[i].labels)
        return self.known[key]


REGISTERED = Registered(PLUGIN, (VOLUME_ZONE,), "pkg/scheduler/framework/plugins/volumezone", state=ZoneChecks)
