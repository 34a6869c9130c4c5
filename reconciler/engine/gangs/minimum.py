"""The first release of a gang with a minimum size (``<prefix>-min-size``,
docs/decisions/038-minimum-size.md): when its present members do not all fit, the first
``min_size`` of them in rank order are placed. Pure: plain data in, a placement out.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.devicegroups import DevicePlacement, place_with_devices


def at_minimum(gang: Gang, free: Sequence[PodInfo], view: Snapshot, near: Sequence[str]) -> DevicePlacement | None:
    """The placement of the first ``gang.min_size`` of ``free`` (the gang's gated members
    with no node yet, in rank order) on ``view``, for a gang with a minimum size of which
    nothing is released yet and more than the minimum is present; None when the gang has
    no minimum below what is present, or when the minimum does not fit either."""
    minimum = gang.min_size
    if minimum is None or len(free) <= minimum:
        return None
    found = place_with_devices(view, free[:minimum], gang.topology, near=near)
    return found if found.result.placed else None
