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

from collections.abc import Iterable, Mapping, Sequence

from reconciler.engine.filters.status import Code, MemberClaimChecks, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
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


class ZoneChecks(MemberClaimChecks):
    """:func:`check` for each member that mounts claims, on each node asked, worked out once."""

    __slots__ = ()

    def check(self, namespace: str, claims: Sequence[str], node: NodeInfo) -> Status | None:
        """The module's :func:`check` of the claims' bound volumes on ``node``'s labels."""
        return check(self.catalog, namespace, claims, node.labels)


REGISTERED = Registered(PLUGIN, (VOLUME_ZONE,), "pkg/scheduler/framework/plugins/volumezone", state=ZoneChecks)
