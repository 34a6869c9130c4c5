"""Troupe's placement engine: pure functions over plain data, no I/O, no clock, no client.

- :mod:`.quantity`: Kubernetes quantities, parsed exactly.
- :mod:`.resources`: what a pod requests and a node offers, in kube-scheduler's units.
- :mod:`.filters`: kube-scheduler's node filters for what Troupe models, with reasons.
- :mod:`.unmodeled`: what a pod asks of kube-scheduler that the engine does not model.
- :mod:`.refusals`: kube-scheduler's refusals of pinned members, and the nodes a gang avoids.
- :mod:`.podterms`: a pod's required (anti-)affinity, spread constraints, host ports, claims.
- :mod:`.volumes`: claims, volumes and CSINodes, and the volume filters.
- :mod:`.gangfilters` (with :mod:`.counters`): the filters that look at the pods around a
  member, counted per domain, the gang's own members included.
- :mod:`.nodetable`: what a snapshot derives from its nodes alone.
- :mod:`.topology`: levels, node paths, the immutable domain tree, the seed's cost.
- :mod:`.cluster`: :class:`NodeInfo` and :class:`PodInfo`, parsed from Kubernetes objects.
- :mod:`.records`: the plan and nomination records the reconciler keeps in annotations.
- :mod:`.snapshot`: :class:`Snapshot` of nodes and pods, free capacity, plans applied.
- :mod:`.selection`: choosing nodes inside one domain (greedy and exact).
- :mod:`.placement`: :func:`place_gang`, all members or none.

The objective and its trade-offs: ``docs/decisions/001-placement-objective.md``.
"""

from reconciler.engine.cluster import NodeInfo, PodInfo
from reconciler.engine.placement import Assignment, Code, DomainRef, PlacementResult, place_gang
from reconciler.engine.snapshot import Snapshot
from reconciler.engine.topology import TopologyLevels

__all__ = [
    "Assignment",
    "Code",
    "DomainRef",
    "NodeInfo",
    "PlacementResult",
    "PodInfo",
    "Snapshot",
    "TopologyLevels",
    "place_gang",
]
