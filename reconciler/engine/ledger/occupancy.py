"""Who holds what in the topology: the tree ``kubectl troupe topology`` prints.

Blocks > subblocks > hosts > nodes (the configured levels, highest first), each domain
with the allocatable and free units of one resource (``nvidia.com/gpu`` by default: whole
devices) over its nodes, and each node with the gangs whose pods use it. What uses a node
is the snapshot's own accounting (:meth:`Snapshot.using`): bound pods, members the
reconciler committed (pinned, or named by a release's plan record) and nodes a preemptor's
nomination holds, so a node reserved for a gang that has not started yet shows that gang.
A SharedDeviceGroup's devices show as ``group:<name>``.

Pure: a snapshot and a pod -> gang mapping in, plain values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey


@dataclass(frozen=True)
class NodeUsage:
    """One node: ``name``, ``allocatable`` and ``free`` units of the resource (``free`` may
    be negative when overcommitted), whether it is ``ready`` and ``cordoned``, ``holders``:
    ``(gang or group, units of the resource it uses here, pods)`` sorted by name, and
    ``others``: pods outside any gang that use it."""

    name: str
    allocatable: int
    free: int
    ready: bool
    cordoned: bool
    holders: tuple[tuple[str, int, int], ...]
    others: int
    #: Why new placements avoid it after repeated member failures (``""``: they do not;
    #: docs/decisions/041-failing-nodes.md).
    avoided: str = ""


@dataclass(frozen=True)
class DomainUsage:
    """One domain: its ``level`` (a node label key), ``name`` (the label value), the sums
    over its nodes, and either ``children`` (domains of the next level) or ``nodes``."""

    level: str
    name: str
    allocatable: int
    free: int
    children: tuple[DomainUsage, ...] = ()
    nodes: tuple[NodeUsage, ...] = field(default_factory=tuple)


def occupancy(snapshot: Snapshot, gang_of: Mapping[PodKey, str], resource: str = "nvidia.com/gpu",
              avoided: Mapping[str, str] | None = None) -> DomainUsage:
    """The whole topology as a tree rooted at the cluster (level ``""``); ``avoided``: node
    name -> why new placements avoid it.

    ``gang_of``: pod key (``namespace/name``) -> the key of the gang it belongs to; pods
    absent from it count in ``others``. ``resource``: whose units are summed. A domain's
    ``free`` counts only nodes a pod could be scheduled to (Ready, not cordoned), and a
    node's free units below zero as zero."""
    tree, levels = snapshot.tree, snapshot.levels
    holders: dict[int, dict[str, list[int]]] = {}
    others: dict[int, int] = {}
    for key in snapshot.pods:
        i = snapshot.node_index_of(key)
        if i is None:
            continue
        owner = gang_of.get(key)
        if owner is None:
            others[i] = others.get(i, 0) + 1
            continue
        used = snapshot.pods[key].requests.get(resource, 0)
        entry = holders.setdefault(i, {}).setdefault(owner, [0, 0])
        entry[0] += used
        entry[1] += 1
    for name, holding in snapshot.devices.holdings.items():
        i = snapshot.index.get(holding.node)
        if i is not None:
            entry = holders.setdefault(i, {}).setdefault(f"group:{name}", [0, 0])
            entry[0] += len(holding.devices.get(resource, ()))
    free = snapshot.free_units(resource)
    nodes = [
        NodeUsage(n.name, n.allocatable.get(resource, 0), free[i], n.ready, n.unschedulable,
                  tuple((g, u, c) for g, (u, c) in sorted(holders.get(i, {}).items())), others.get(i, 0),
                  (avoided or {}).get(n.name, ""))
        for i, n in enumerate(snapshot.nodes)
    ]

    def build(depth: int, j: int) -> DomainUsage:
        lo, hi = tree.lo[depth][j], tree.hi[depth][j]
        alloc = sum(nodes[i].allocatable for i in range(lo, hi))
        spare = sum(max(nodes[i].free, 0) for i in range(lo, hi) if nodes[i].ready and not nodes[i].cordoned)
        name = tree.prefix[depth][j][-1] if depth else "cluster"
        if depth + 1 == tree.leaf_depth:
            return DomainUsage(levels.name_of(depth), name, alloc, spare, nodes=tuple(nodes[lo:hi]))
        return DomainUsage(levels.name_of(depth), name, alloc, spare,
                           tuple(build(depth + 1, c) for c in tree.children(depth, j)))

    return build(0, 0)
