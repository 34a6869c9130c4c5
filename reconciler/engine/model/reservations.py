"""Reservations: a gang's nodes held from its workload's pod template before its pods exist
(docs/decisions/034-release-as-created.md).

A gang released *as created* is placed on its slots (:mod:`.templates`) as soon as its
workload is seen, and the placement is written on the workload object
(:data:`troupe.contract.RESERVATION`, a :class:`Record`) before any member is released.
From then on, in every snapshot (:class:`~reconciler.engine.ledger.snapshot.Snapshot`), the node
of every rank holds that rank's requests until the member of that rank is released there:
the member then uses the node itself, and the slot nothing (:func:`fill`). Each member is
released onto its rank's node as it is created (:func:`assign`).

Which member takes which slot: the slot of the same rank (the same completion, global or
replica index, :func:`troupe.ranks.rank_key`); members of a workload whose pods carry
no index (a Job that is not Indexed) take the free slots in order, and those of a family
of interchangeable pods (a Ray group's, :func:`troupe.ranks.family`) the free slots of
their family. A released member of the reservation (its ``planned-at`` is the record's)
fills its own rank's slot, else a free slot of its family on the node it is pinned to.

A record holds other tenants' capacity, so only one the reconciler wrote may: the
reconciler signs each record it writes with a key only it holds (an HMAC-SHA256 over the
workload's kind, namespace, name and UID and the record, :func:`sign`), and reads only the
records whose signature verifies (:func:`authentic`); the chart also refuses
``reconciler.troupe.io/*`` on workloads from anyone else
(docs/decisions/049-hostile-tenants-third-round.md). A record copied onto another workload
does not verify there (its UID differs).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.engine.model.keys import WorkloadKey
from reconciler.engine.model.pods import PodInfo
from troupe.ranks import family

#: Nodes a record may name at most (an annotation value stays well under the API's 256 KiB).
MAX_NODES = 10_000


@dataclass(frozen=True)
class Record:
    """A reservation as the workload object carries it: the ``gang`` it is for (the id
    after ``namespace/``), when it was planned (``planned_at``, RFC 3339 with
    milliseconds: the ``planned-at`` of every member released from it) and the node of
    every rank (``nodes[i]``: rank ``i``'s)."""

    gang: str
    planned_at: str
    nodes: tuple[str, ...]
    #: The reconciler's signature the annotation carries (``sig``, hex), ``""`` without one;
    #: not part of what the record says (:func:`authentic` checks it).
    signature: str = field(default="", compare=False)

    def encode(self) -> str:
        """The annotation value: compact JSON, ``{"gang":..,"nodes":[..],"plannedAt":..}``,
        with ``"sig"`` when the record is signed (:meth:`signed`)."""
        data: dict[str, object] = {"gang": self.gang, "plannedAt": self.planned_at, "nodes": list(self.nodes)}
        if self.signature:
            data["sig"] = self.signature
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def signed(self, workload: WorkloadKey, uid: str, key: bytes) -> Record:
        """This record with the reconciler's signature for the workload ``workload`` of UID
        ``uid`` under ``key`` (:func:`sign`): what the reconciler writes."""
        return replace(self, signature=sign(self, workload, uid, key))

    @classmethod
    def decode(cls, raw: str) -> Record | None:
        """The record in an annotation value, or None when it is not one (only the
        reconciler writes it; an unreadable value reserves nothing)."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        gang, at, nodes = data.get("gang"), data.get("plannedAt"), data.get("nodes")
        if not isinstance(gang, str) or not isinstance(at, str) or not isinstance(nodes, list):
            return None
        if len(nodes) > MAX_NODES or not all(isinstance(n, str) and n for n in nodes):
            return None
        signature = data.get("sig")
        return cls(gang, at, tuple(nodes), signature if isinstance(signature, str) else "")


def sign(record: Record, workload: WorkloadKey, uid: str, key: bytes) -> str:
    """The signature of ``record`` on the workload ``workload`` of UID ``uid`` (hex
    HMAC-SHA256 under ``key``, over the workload's identity and the record's own
    encoding): what the reconciler writes with it (module docstring)."""
    message = "\n".join((*workload, uid, replace(record, signature="").encode())).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def authentic(record: Record, workload: WorkloadKey, uid: str, key: bytes) -> bool:
    """Whether ``record``'s signature is the reconciler's for this workload (:func:`sign`),
    compared in constant time."""
    return bool(record.signature) and hmac.compare_digest(record.signature, sign(record, workload, uid, key))


@dataclass(frozen=True)
class Reservation:
    """A record and what the snapshot needs to count it: the ``namespace`` and
    ``workload`` whose members fill it, and its ``slots`` (rank ``i``'s requests are
    ``slots[i].requests``; a record longer than the slots counts the last slot's)."""

    namespace: str
    workload: WorkloadKey
    record: Record
    slots: tuple[PodInfo, ...]

    @property
    def prefix(self) -> str:
        """What the keys of its ranks' holdings start with (:meth:`holding`)."""
        return f"reservation:{self.namespace}/{self.record.gang}#"

    def holding(self, rank: int) -> str:
        """The key under which rank ``rank``'s slot uses its node in a snapshot (no pod key
        has a ``:`` before its ``/``)."""
        return f"{self.prefix}{rank}"

    def requests(self, rank: int) -> Mapping[str, int]:
        """What rank ``rank``'s slot holds on its node, in units."""
        return self.slots[min(rank, len(self.slots) - 1)].requests if self.slots else {}


def _identity(pod: PodInfo) -> tuple[object, ...] | None:
    """The index part of a rank (tier, major, index) when the pod carries an index."""
    return tuple(pod.rank[:3]) if pod.rank and pod.rank[0] < 3 else None


def _family(pod: PodInfo | None) -> tuple[int, int, str] | None:
    """The family of a pod's rank (:func:`troupe.ranks.family`), None without one."""
    return family(pod.rank) if pod is not None and pod.rank else None


def fill(record: Record, slots: Sequence[PodInfo], released: Iterable[PodInfo]) -> dict[int, PodInfo]:
    """Rank -> the released member of the reservation that fills its slot: ``released``
    are members whose ``planned-at`` is ``record.planned_at``, active or Succeeded (a
    Failed or deleted member's slot is held again for its replacement). Each fills the
    slot of its own rank when that slot's node is the node it is pinned to, else a free
    slot on that node; a member on a node of no free slot fills nothing."""
    by_identity = {ident: i for i, s in enumerate(slots[:len(record.nodes)]) if (ident := _identity(s)) is not None}
    filled: dict[int, PodInfo] = {}
    rest: list[PodInfo] = []
    for pod in released:
        node = pod.node_name or pod.assigned_node
        ident = _identity(pod)
        i = by_identity.get(ident) if ident is not None else None
        if i is not None and i not in filled and record.nodes[i] == node:
            filled[i] = pod
        else:
            rest.append(pod)
    for pod in rest:
        node, kin = pod.node_name or pod.assigned_node, _family(pod)
        i = next((i for i, n in enumerate(record.nodes) if n == node and i not in filled
                  and _family(slots[i] if i < len(slots) else None) == kin), None)
        if i is not None:
            filled[i] = pod
    return filled


def assign(record: Record, slots: Sequence[PodInfo], filled: Mapping[int, PodInfo],
           gated: Iterable[PodInfo]) -> tuple[list[tuple[PodInfo, int]], list[PodInfo]]:
    """Which free slot each gated member takes: ``(pairs of (member, rank), members
    without a free slot)``. A member with an index takes its own rank's slot (none when it
    is filled or the record has no such rank); a member without one the first free slot
    of its family (:func:`troupe.ranks.family`; for most pods none) without an index
    owner, in rank order."""
    ranks = len(record.nodes)
    by_identity = {ident: i for i, s in enumerate(slots[:ranks]) if (ident := _identity(s)) is not None}
    taken = set(filled)
    pairs: list[tuple[PodInfo, int]] = []
    without: list[PodInfo] = []
    loose: list[PodInfo] = []
    for pod in gated:
        ident = _identity(pod)
        if ident is None:
            loose.append(pod)
            continue
        i = by_identity.get(ident)
        if i is None or i in taken:
            without.append(pod)
        else:
            taken.add(i)
            pairs.append((pod, i))
    free: dict[tuple[int, int, str] | None, list[int]] = {}
    for i in range(ranks):
        if i not in taken and (i >= len(slots) or _identity(slots[i]) is None):
            free.setdefault(_family(slots[i] if i < len(slots) else None), []).append(i)
    for kin in free:
        free[kin].reverse()
    for pod in loose:
        mine = free.get(_family(pod))
        if not mine:
            without.append(pod)
        else:
            pairs.append((pod, mine.pop()))
    return pairs, without
