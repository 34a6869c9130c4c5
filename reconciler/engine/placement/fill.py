"""The member-by-member fill: each member, in rank order, on the first node of a domain
where it fits, the gang's pod filters (:class:`~reconciler.engine.filters.gang.GangFilters`) checked with
the members placed so far counted.

:func:`reconciler.engine.placement.place.place_gang` uses it for gangs of several shapes and
for gangs whose members need the pod filters (:func:`reconciler.engine.filters.gang.needed`); the per-domain
shortfall (:mod:`.shortfall`) uses it, ``partial``, to count how many members of such a
gang placement could put in each domain.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.filters.gang import GangFilters
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo


def fill(
    snapshot: Snapshot, order: Sequence[PodInfo], shape_of: Sequence[int], eligible: Sequence[Sequence[bool]],
    usable: Sequence[int], filters: GangFilters | None = None, *, partial: bool = False,
) -> list[int] | None:
    """Each member of ``order`` (rank order; :meth:`GangFilters.fill_order` with
    ``filters``) on the node of the previous one if it fits there, else on the next node of
    ``usable`` (node indexes, wrapping around) that is ``eligible`` for its shape
    (``shape_of[m]``) and has its requests free, and that ``filters`` admit. Returns the
    node index of each member in rank order, or None when one fits nowhere; with
    ``partial``, a member that fits nowhere is skipped (its node is -1) and the fill goes on.
    ``filters`` is left with no member placed."""
    free: dict[int, dict[str, int]] = {}
    out = [-1] * len(order)
    pos = 0
    try:
        for m in (filters.fill_order() if filters is not None else range(len(order))):
            pod, ok = order[m], eligible[shape_of[m]]
            for step in range(len(usable)):
                i = usable[(pos + step) % len(usable)]
                if not ok[i]:
                    continue
                f = free.get(i)
                if f is None:
                    f = free[i] = snapshot.free(i)
                if all(f.get(r, 0) >= q for r, q in pod.requests.items() if q > 0) and (
                        filters is None or filters.admits(m, i)):
                    for r, q in pod.requests.items():
                        f[r] = f.get(r, 0) - q
                    if filters is not None:
                        filters.place(m, i)
                    out[m] = i
                    pos = (pos + step) % len(usable)
                    break
            else:
                if partial:
                    continue
                if filters is not None:
                    filters.note_refusal(m, [i for i in usable if ok[i]])
                return None
    finally:
        if filters is not None:
            filters.rollback()
    return out
