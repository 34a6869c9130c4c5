"""Members grouped into *shapes*: equal requests and node filter, so that one capacity
per node counts them all (docs/decisions/001-placement-objective.md, "How it is computed");
several shapes are placed first as their *envelope*. Used by :mod:`.place`, :mod:`.shortfall`
and preemption's capacity model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.engine.filters.gang import GangFilters
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.selectors import NodeFilter


@dataclass
class Shape:
    """Members of equal ``requests`` (units, :mod:`reconciler.engine.model.resources`) and node filter ``flt``
    (and, given :class:`~reconciler.engine.filters.gang.GangFilters`, equal signature);
    ``members``: their positions in the sequence :func:`member_shapes` was given.
    ``eligible``: per node, whether it passes every filter but resources for them, when
    :func:`member_shapes` was given the gang's filters (else the snapshot's for ``flt``);
    ``one_per_node``: two of them never share a node."""

    requests: Mapping[str, int]
    flt: NodeFilter
    members: list[int]
    eligible: list[bool] | None = None
    one_per_node: bool = False


def member_shapes(order: Sequence[PodInfo], filters: GangFilters | None = None) -> tuple[list[Shape], list[int]]:
    """Shapes in order of their first member, and each member's shape index. With
    ``filters`` (none placed yet), each shape's :attr:`Shape.eligible` nodes also pass them."""
    by_key: dict[tuple[object, ...], int] = {}
    shapes: list[Shape] = []
    shape_of = []
    for i, pod in enumerate(order):
        key: tuple[object, ...] = (tuple(sorted(pod.requests.items())), pod.node_filter)
        if filters is not None:
            key += filters.signature(i)
        s = by_key.get(key)
        if s is None:
            s = by_key[key] = len(shapes)
            shapes.append(Shape(pod.requests, pod.node_filter, []))
            if filters is not None:
                shapes[s].eligible = filters.static(i, filters.snapshot.eligible(pod.node_filter))
                shapes[s].one_per_node = filters.one_per_node(i)
        shapes[s].members.append(i)
        shape_of.append(s)
    return shapes, shape_of


def eligible_nodes(snapshot: Snapshot, shape: Shape) -> list[bool]:
    """The nodes that pass every filter but resources for ``shape``."""
    return shape.eligible if shape.eligible is not None else snapshot.eligible(shape.flt)


def shape_capacity(snapshot: Snapshot, shape: Shape, eligible: Sequence[bool]) -> list[int]:
    """Per node: how many members of ``shape`` fit (at most one where they never share)."""
    caps = snapshot.capacity(shape.requests, eligible)
    return [min(cap, 1) for cap in caps] if shape.one_per_node else caps


def envelope(shapes: Sequence[Shape], eligible: Sequence[Sequence[bool]]) -> tuple[dict[str, int], list[bool]]:
    """The envelope of several shapes (module docstring): per resource the largest
    request of any shape (units, resources sorted by name), and per node whether it is
    eligible (``eligible``: per shape, per node index) for every shape."""
    names = sorted({r for s in shapes for r in s.requests})
    requests = {r: max(s.requests.get(r, 0) for s in shapes) for r in names}
    return requests, [all(t) for t in zip(*eligible, strict=True)]


