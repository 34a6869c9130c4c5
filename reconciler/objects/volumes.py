"""The parsers shared by the reconciler's cache and the offline tools (``python -m
reconciler simulate``, ``kubectl troupe``) for what the volume filters, pod affinity's
namespace selectors and the spread defaults read: PersistentVolumeClaims,
PersistentVolumes, CSINodes (the engine's :mod:`reconciler.engine.model.volumes` values),
namespaces' labels, and the configured ``topologySpreadDefaultConstraints``.

Both build their :class:`~reconciler.engine.ledger.snapshot.Snapshot` with these, so a plan made
offline is the reconciler's (docs/decisions/031-kube-scheduler-filters.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reconciler.engine.model.fields import mapping, string_map
from reconciler.engine.model.podterms import DO_NOT_SCHEDULE, SpreadConstraint
from reconciler.engine.model.volumes import ClaimInfo, CSINodeInfo, VolumeInfo
from troupe.config import Config

Obj = Mapping[str, Any]


def namespace_labels(obj: Obj) -> Mapping[str, str]:
    """A Namespace's ``metadata.labels`` (label -> value; empty when absent). Raises
    :class:`~reconciler.engine.model.fields.ObjectError` naming the field when it is malformed."""
    return string_map(mapping(obj, "metadata", required=True), "labels", "metadata")


#: Per kind (as ``kind`` names it in an object): the parser of one object.
PARSERS: dict[str, Callable[[Obj], Any]] = {
    "PersistentVolumeClaim": ClaimInfo.from_object,
    "PersistentVolume": VolumeInfo.from_object,
    "CSINode": CSINodeInfo.from_object,
    "Namespace": namespace_labels,
}
#: The kinds whose objects make the :class:`~reconciler.engine.model.volumes.VolumeCatalog`.
VOLUME_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "CSINode")


def spread_defaults(config: Config) -> tuple[SpreadConstraint, ...]:
    """The configured ``topologySpreadDefaultConstraints`` that filter (``DoNotSchedule``),
    as the engine's constraints without a selector (the engine gives each pod its own,
    :func:`reconciler.engine.filters.podtopologyspread.default_constraints`). Source: kube-scheduler's
    PodTopologySpread plugin, ``defaultConstraints``."""
    return tuple(SpreadConstraint(c.topology_key, c.max_skew, None, c.min_domains, c.node_affinity_policy == "Honor",
                                  c.node_taints_policy == "Honor")
                 for c in config.topology_spread_default_constraints if c.when_unsatisfiable == DO_NOT_SCHEDULE)
