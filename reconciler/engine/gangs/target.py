"""The target of a waiting gang: the level and the domains where capacity is held or
reserved for it, shared by the head-of-line hold (:func:`reconciler.engine.gangs.queueing.hold_for`,
docs/decisions/019-queue-order.md) and the reservation at its earliest start
(:func:`reconciler.engine.gangs.backfill.earliest_start`,
docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

Members of several shapes count as their **envelope** (each resource's largest request,
every filter). The target depth is the gang's required level, else the lowest at which
an **emptied** domain (no pod using anything) would hold the whole gang. With slice layers
(docs/decisions/035-topology-layers.md) a domain holds the gang when it holds its slices:
its room is counted in units of the outermost layer below the target depth, as
:func:`reconciler.engine.placement.layers.unit_caps` counts them; layers at or above the
target depth are kept by the domain itself. Pure: plain data in and out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.layers import PLAIN, Layer, Layout, unit_caps


@dataclass(frozen=True)
class Target:
    """Where a waiting gang can go: ``requests`` (resource -> units, the members'
    envelope), ``eligible`` (per node index: passes every member's filters and is not
    taken), the target ``depth`` of the snapshot's tree, ``fitting`` (indices of the
    domains of that depth an emptied domain of which holds the gang, in topology order),
    ``layers`` (the slice layers below ``depth``, outermost first: room is counted in
    slices of the first, members when empty) and ``need`` (how many of those units the
    gang takes)."""

    requests: dict[str, int]
    eligible: list[bool]
    depth: int
    fitting: list[int]
    layers: tuple[Layer, ...]
    need: int

    def name(self, snapshot: Snapshot, j: int) -> str:
        """Domain ``j`` of the target depth as reasons name it:
        ``cloud.google.com/gce-topology-subblock=b0/s1``, ``the cluster`` at the root."""
        level = snapshot.levels.name_of(self.depth)
        return f"{level}={'/'.join(snapshot.tree.prefix[self.depth][j])}" if level else "the cluster"


def target_of(snapshot: Snapshot, members: Sequence[PodInfo], required_level: str | None,
              layout: Layout = PLAIN, taken: Iterable[int] = ()) -> Target | None:
    """The :class:`Target` of a gang of ``members`` (module docstring) whose slices are
    ``layout``'s, outside the node indices ``taken``; None when no domain of any allowed
    depth could ever hold it (or ``required_level`` is not a level of the snapshot)."""
    tree, levels = snapshot.tree, snapshot.levels
    names = sorted({r for p in members for r in p.requests})
    requests = {r: max(p.requests.get(r, 0) for p in members) for r in names}
    filters = list(dict.fromkeys(p.node_filter for p in members))
    eligible = [all(t) for t in zip(*(snapshot.eligible(f) for f in filters), strict=True)]
    for i in taken:
        eligible[i] = False
    member = tree.caps_by_depth(snapshot.empty().capacity(requests, eligible))
    units = unit_caps(tree, member, layout.layers) if layout.layers else []
    x = len(members)
    depths: Iterable[int]
    if required_level is not None:
        depth = levels.depth_of(required_level)
        depths = [depth] if depth is not None else []
    else:
        depths = range(tree.leaf_depth, -1, -1)
    for d in depths:
        k = next((k for k, layer in enumerate(layout.layers) if layer.depth > d), None)
        caps, need = (member[d], x) if k is None else (units[k][d], x // layout.layers[k].size)
        fitting = [j for j, c in enumerate(caps) if c >= need]
        if fitting:
            return Target(requests, eligible, d, fitting, layout.layers[k:] if k is not None else (), need)
    return None
