"""Who may be evicted to make room for a gang: the candidate victim gangs of a snapshot.

DESIGN.md "Gang-aware preemption": candidates are running (or released) pods of strictly
lower priority than the preemptor, grouped by gang (a pod outside any gang is a gang of
one, ``namespace/pod:<name>``), never terminal pods, never the preemptor's own gang.
Here, :func:`~reconciler.engine.preemption.candidate_gangs` grouped as
:func:`~reconciler.engine.gang.gang_key` groups Troupe's pods, once per snapshot
(:meth:`Snapshot.memo`); the filters per preemptor.
"""

from __future__ import annotations

from functools import lru_cache

from reconciler.engine.gang import gang_key
from reconciler.engine.preemption import VictimGang, candidate_gangs
from reconciler.engine.snapshot import Snapshot
from troupe.config import Config

#: A priority above every pod's (``spec.priority`` is an int32).
_ANY = 1 << 32


@lru_cache(maxsize=8)
def _config(prefix: str) -> Config:
    return Config(gang_annotation_prefix=prefix)


def victim_gangs(snapshot: Snapshot, prefix: str) -> dict[str, VictimGang]:
    """Every gang of ``snapshot`` with a pod that could be evicted, by gang key (gang
    annotations of ``prefix``; :func:`~reconciler.engine.preemption.candidate_gangs` at
    any priority), made once per snapshot."""
    config = _config(prefix)
    return snapshot.memo(f"victim-gangs:{prefix}", lambda: {
        g.key: g for g in candidate_gangs(snapshot, lambda p: gang_key(p, config), below=_ANY)})


def gang_of_pod(snapshot: Snapshot, prefix: str) -> dict[str, str]:
    """Pod key -> the key of its victim gang, for every pod of :func:`victim_gangs`."""
    return snapshot.memo(f"victim-of:{prefix}", lambda: {
        p.key: k for k, g in victim_gangs(snapshot, prefix).items() for p in g.pods})


def candidates(snapshot: Snapshot, prefix: str, preemptor: str, priority: int,
               refused: frozenset[str] = frozenset()) -> list[VictimGang]:
    """The gangs ``preemptor`` (a gang key, of ``priority``) may evict: strictly lower
    priority, not itself, not one whose eviction was refused (``refused``)."""
    return [g for k, g in victim_gangs(snapshot, prefix).items()
            if g.priority < priority and k != preemptor and k not in refused and g.pods]


def leaving(snapshot: Snapshot) -> list[str]:
    """Keys of the pods being deleted that still use a node: room that is being freed."""
    return snapshot.memo("leaving", lambda: [p.key for p in snapshot.pods.values()
                                             if p.deleting and not p.terminal and snapshot.using(p.key) is not None])
