"""A preemptor gang's nomination as a decision reads it: who carries it, when it runs out,
and what the room held for the gangs ahead in the queue says (docs/decisions/020-preemption-in-the-decision.md,
019-queue-order.md). Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.engine.gangs.clocks import jitter
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.queueing import QueueView, gang_of_namespace
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Nomination
from reconciler.engine.model.timestamps import epoch


def nomination_of(gang: Gang) -> tuple[PodKey | None, Nomination | None]:
    """The first gated member in rank order (who carries the gang's nomination; None when
    none is gated) and the latest nomination a gated member carries (None without one)."""
    gated = [p for p in gang.members if p.gated]
    noms = sorted((p.nomination for p in gated if p.nomination is not None), key=lambda n: n.at)
    return (gated[0].key if gated else None), (noms[-1] if noms else None)


def nomination_deadline(gang: Gang, nom: Nomination, snapshot: Snapshot, cap: int) -> float:
    """When a nomination runs out (seconds since the epoch): its time, plus the gang's
    timeout and jitter, plus the longest grace period of its victims still there (the
    Eviction API gives each its own), but never more than ``cap`` seconds after it was
    made (``nominationMaxSeconds``: a victim's owner sets its grace period)."""
    start = epoch(nom.at)
    if start is None:
        return 0.0
    grace = max((p.grace_seconds for p in by_uid(snapshot, nom.victims)), default=0)
    return start + min(gang.timeout_seconds + jitter(gang, nom.at) + grace, cap)


def by_uid(snapshot: Snapshot, uids: Iterable[str]) -> list[PodInfo]:
    """The pods of ``snapshot`` with these UIDs (a nomination's victims or refusals), in the
    order given; a UID no pod of the snapshot has is left out (the pod is gone, or the
    reader may not see it). The index is made once per snapshot."""
    index = snapshot.memo("pods-by-uid", lambda: {p.uid: p for p in snapshot.pods.values() if p.uid})
    return [p for uid in uids if (p := index.get(uid)) is not None]


def held_note(queue: QueueView, held: frozenset[int], namespace: str) -> str:
    """The part of a reason that says ``held`` node indices are held for the gangs ahead in
    ``queue`` (``""`` when none is), for a gang of ``namespace``: the first of them named
    only when it is of that namespace (:func:`~reconciler.engine.gangs.queueing.gang_of_namespace`)."""
    if not held:
        return ""
    first = min(queue.holds, key=lambda h: h.order)
    who = gang_of_namespace(first.gang, namespace).removeprefix("gang ")
    return (f"; {len(held)} node(s) held for {len(queue.holds)} gang(s) ahead in the queue "
            f"({who}, priority {first.priority}, in {first.domain})")
