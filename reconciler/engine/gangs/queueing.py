"""The queue of waiting gangs: their order, and what a gang ahead holds back from those behind.

Waiting gangs are tried in **queue order** (:func:`queue_order`): the highest priority first
(``spec.priority`` of the members), then the earliest creation of the gang's oldest member,
then the gang key. Two strategies, Kueue's (``queueingStrategy``;
https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy), choose what a
gang that does not fit does to those behind it:

- ``BestEffortFIFO`` (the default): nothing at first; smaller gangs behind it that fit are
  placed. Once it has waited ``headOfLineSeconds`` since it was complete (its newest
  member's creation), the capacity it needs is **held** for it (:func:`hold_for`): gangs
  behind it may not use the nodes of its target domain, so pods finishing there make room
  for it instead of for the next small gang. A large gang at the head does not starve.
- ``StrictFIFO``: a gang that does not fit blocks every gang behind it (they wait, phase
  ``Waiting``, rule ``Queued``).
- ``Backfill``: the first ``backfillReservations`` gangs that do not fit get a
  **reservation** at once: a hold whose ``start`` is the earliest time the gang can start
  on its nodes (:mod:`reconciler.engine.gangs.backfill`); a gang behind it may use those
  nodes only when its own limit ends it by then (:meth:`QueueView.blocking`).

Only gangs that could fit once capacity frees (placement code ``Unschedulable``, or a
preemptor waiting for its victims) hold or block; a gang that can never fit as it is
(``UnschedulableAndUnresolvable``), waits for members or is held never stands in the way.

:class:`QueueState` is what the reconciler and the simulator keep of the gangs ahead: the
simulator notes each decision in queue order, the reconciler each decision as it makes it
(and, on start, every waiting gang in queue order before it acts), so both give a gang the
same :class:`QueueView`. Pure: plain data in and out; ``docs/decisions/019-queue-order.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.engine.gangs.avoidance import Avoidance
from reconciler.engine.gangs.target import target_of
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from troupe.config import Config, PreemptionMode, QueueingStrategy

#: Sort key of a gang in the queue: ``(-priority, created (epoch seconds), key)``.
Order = tuple[int, float, str]


@dataclass(frozen=True)
class Policy:
    """The configuration a decision follows beyond the gang's own keys: the preemption mode
    (``gangPreemptionMode``), the queueing strategy, the head-of-line wait (seconds), the
    gang annotation prefix (how victims are grouped into gangs), the longest a nomination
    holds nodes (``nominationMaxSeconds``) and when a node that keeps failing members is
    avoided (:class:`~reconciler.engine.gangs.avoidance.Avoidance`), and how many waiting gangs
    get a reservation under ``Backfill`` (``backfillReservations``)."""

    preemption: PreemptionMode = "off"
    queueing: QueueingStrategy = "BestEffortFIFO"
    head_of_line_seconds: int = 300
    gang_prefix: str = "troupe.io/gang"
    nomination_max_seconds: int = 600
    avoidance: Avoidance = Avoidance()  # noqa: RUF009  Avoidance is frozen
    backfill_reservations: int = 2

    @classmethod
    def from_config(cls, config: Config) -> Policy:
        """The policy of a Troupe configuration."""
        return cls(config.gang_preemption_mode, config.queueing_strategy, config.head_of_line_seconds,
                   config.gang_annotation_prefix, config.nomination_max_seconds, Avoidance.from_config(config),
                   config.backfill_reservations)


def queue_order(key: str, priority: int, created: str) -> Order:
    """The gang's place in the queue: higher ``priority`` first, then earlier ``created``
    (RFC 3339; unreadable sorts last), then ``key`` (deterministic)."""
    at = epoch(created) if created else None
    return (-priority, at if at is not None else float("inf"), key)


def complete_since(members: Iterable[PodInfo]) -> float | None:
    """When the gang became complete, as far as the cluster says: its newest member's
    creation (seconds since the epoch), or None when no member has a readable one."""
    stamps = [t for p in members if p.creation_timestamp and (t := epoch(p.creation_timestamp)) is not None]
    return max(stamps) if stamps else None


@dataclass(frozen=True)
class Hold:
    """Capacity held for ``gang`` (queue order ``order``, priority ``priority``), waiting
    since ``since`` (seconds since the epoch): the node indices ``nodes`` of its target
    domain ``domain``, which no gang behind it may use. A ``reservation`` (``Backfill``)
    holds them from ``start`` (seconds since the epoch; None: not before some pod without
    a limit ends): a gang behind it that ends by then may use them; ``backfilled`` of them
    did (:func:`reconciler.engine.gangs.backfill.backfilled`). ``table`` is the node table
    of the snapshot it was decided on (:attr:`Snapshot.table <reconciler.engine.ledger.snapshot.Snapshot.table>`),
    whose indices ``nodes`` are: a reference, so the hold costs nothing more to make, and
    :meth:`node_names` names the right nodes on any later snapshot (nodes added or removed
    since renumber the indices)."""

    gang: str
    order: Order
    priority: int
    since: float
    nodes: frozenset[int]
    domain: str
    reservation: bool = False
    start: float | None = None
    #: How many gangs were backfilled onto a reservation's nodes (for its reason).
    backfilled: int = 0
    #: The node table ``nodes`` index (None: not known; the map then shows no node of it).
    table: NodeTable | None = field(default=None, compare=False, repr=False)

    def node_names(self) -> list[str]:
        """The names of the held nodes, sorted, read from :attr:`table` (the topology map:
        docs/decisions/079-reservation-at-earliest-start-and-backfill.md); empty when the
        table is not known."""
        if self.table is None:
            return []
        nodes = self.table.nodes
        return sorted(nodes[i].name for i in self.nodes if 0 <= i < len(nodes))

    def on(self, table: NodeTable) -> Hold:
        """This hold with its ``nodes`` as indices of ``table`` (a later snapshot's node
        table): itself when decided on that table (or on an unknown one), else the same
        nodes by name, those no longer there left out. Cost: one lookup per held node, only
        after the nodes changed."""
        if self.table is None or self.table is table:
            return self
        index = table.index
        names = self.table.nodes
        nodes = frozenset(j for i in self.nodes if 0 <= i < len(names) and (j := index.get(names[i].name)) is not None)
        return replace(self, nodes=nodes, table=table)

    def blocks(self, ends_at: float | None) -> bool:
        """Whether the nodes are closed to a gang behind that would end at ``ends_at``
        (seconds since the epoch; None: it has no limit): always for a plain hold and for a
        reservation whose start is not known; else unless the gang ends by its start."""
        if not self.reservation or ends_at is None or self.start is None:
            return True
        return ends_at > self.start


def hold_for(snapshot: Snapshot, members: Sequence[PodInfo], required_level: str | None) -> tuple[frozenset[int], str]:
    """The nodes to hold for a gang that waits at the head of the queue, and its domain.

    The target is a domain of the gang's required level, else of the lowest level at which
    an emptied domain would hold the whole gang; among those, the one with the most room
    for it now (then topology order). Held are the nodes of that domain that pass every
    member's filters. Members of several shapes are counted as their envelope (each
    resource's largest request, every filter): the search is :func:`target_of`'s, without
    slices. Empty when no domain could ever hold it."""
    target = target_of(snapshot, members, required_level)
    if target is None:
        return frozenset(), ""
    tree, d, eligible = snapshot.tree, target.depth, target.eligible
    now = tree.caps_by_depth(snapshot.capacity(target.requests, eligible))[d]
    j = max(target.fitting, key=lambda k: (now[k], -k))
    return frozenset(i for i in range(tree.lo[d][j], tree.hi[d][j]) if eligible[i]), target.name(snapshot, j)


@dataclass(frozen=True)
class QueueView:
    """What the gangs ahead of one gang mean for it: ``blocked_by`` (StrictFIFO: the first
    gang ahead that does not fit, described) and ``holds`` (BestEffortFIFO: capacity held
    for gangs ahead that waited too long)."""

    blocked_by: str = ""
    holds: tuple[Hold, ...] = ()

    def on(self, table: NodeTable) -> QueueView:
        """This view with every hold's nodes as indices of ``table`` (:meth:`Hold.on`): what
        a gang decided on a snapshot with other nodes than its holders' decisions reads."""
        if all(h.table is None or h.table is table for h in self.holds):
            return self
        return replace(self, holds=tuple(h.on(table) for h in self.holds))

    @property
    def held_nodes(self) -> frozenset[int]:
        """Every node index some gang ahead holds."""
        return frozenset().union(*(h.nodes for h in self.holds)) if self.holds else frozenset()

    @property
    def reservations(self) -> tuple[Hold, ...]:
        """The holds ahead that are reservations (``Backfill``)."""
        return tuple(h for h in self.holds if h.reservation)

    def blocking(self, ends_at: float | None) -> frozenset[int]:
        """The node indices closed to a gang that would end at ``ends_at`` (seconds since the
        epoch; None: it has no limit): those of every hold ahead that :meth:`Hold.blocks` it."""
        closed = [h.nodes for h in self.holds if h.blocks(ends_at)]
        return frozenset().union(*closed) if closed else frozenset()


@dataclass(frozen=True)
class _Entry:
    key: str
    order: Order
    what: str
    hold: Hold | None


def gang_of_namespace(key: str, namespace: str) -> str:
    """How a gang of key ``key`` is named to a gang of ``namespace``: ``gang <key>`` in the
    same namespace, else ``a gang of another namespace``: nothing the reconciler writes in
    one namespace names another's objects (docs/decisions/064-preemption-names-no-other-tenant.md)."""
    return f"gang {key}" if key.partition("/")[0] == namespace else "a gang of another namespace"


class QueueState:
    """The gangs that stand in the way of those behind them (module docstring), by key.

    :meth:`note` records a gang's latest decision (``standing``: it does not fit but
    could, or it waits for its victims; ``hold``: capacity held for it); :meth:`view`
    gives a gang what the gangs ahead of it hold or block; :meth:`forget` drops a gang
    that is gone. One worker decides at a time; :meth:`holds` may be read from another
    thread (the reconciler's topology map, on its HTTP server's thread): a lock guards
    the entries, held only to change or copy them.
    """

    def __init__(self, strategy: QueueingStrategy = "BestEffortFIFO") -> None:
        self.strategy = strategy
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def note(self, key: str, order: Order, standing: bool, what: str = "", hold: Hold | None = None) -> bool:
        """Record gang ``key``'s decision (``what``: how it stands, for the reasons of the
        gangs behind it, its key left out: ``priority 5, waiting 3m``); returns True when
        what it means for the gangs behind it changed (they may need deciding again)."""
        entry = _Entry(key, order, what, hold) if standing else None
        with self._lock:
            before = self._entries.get(key)
            if entry is None:
                self._entries.pop(key, None)
            else:
                self._entries[key] = entry
        return _effect(before) != _effect(entry)

    def forget(self, key: str) -> bool:
        """Drop gang ``key``; True when it stood in the way of others."""
        with self._lock:
            return self._entries.pop(key, None) is not None

    def view(self, order: Order, namespace: str) -> QueueView:
        """What the gangs ahead of a gang of queue order ``order`` and of ``namespace`` mean
        for it; the gang blocking it is named only when it is of that namespace
        (:func:`gang_of_namespace`)."""
        with self._lock:
            entries = list(self._entries.values())
        ahead = sorted((e for e in entries if e.order < order), key=lambda e: e.order)
        if not ahead:
            return QueueView()
        if self.strategy == "StrictFIFO":
            first = ahead[0]
            return QueueView(blocked_by=f"{gang_of_namespace(first.key, namespace)} ({first.what})")
        return QueueView(holds=tuple(e.hold for e in ahead if e.hold is not None))

    def holds(self) -> Mapping[str, Hold]:
        """Every hold, by the key of the gang it is held for: a copy, safe to read from
        another thread while the worker notes decisions (holds are immutable)."""
        with self._lock:
            entries = list(self._entries.items())
        return {k: e.hold for k, e in entries if e.hold is not None}


def _effect(entry: _Entry | None) -> tuple[object, ...] | None:
    hold = entry.hold if entry is not None else None
    return None if entry is None else (entry.order, hold.nodes if hold else None, hold.start if hold else None)
