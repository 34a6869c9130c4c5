"""``queueingStrategy: Backfill``: a reservation at a waiting gang's earliest start, and
backfill that never delays it (docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

The first gangs in queue order that do not fit (``backfillReservations`` of them) each get a
**reservation** at once: a domain and the earliest time the gang can start there
(:func:`earliest_start`), from the expected ends of the pods that run there
(:mod:`reconciler.engine.model.limits`) and the gang's required level, slices and exclusive
level (docs/decisions/035-topology-layers.md). A gang behind it
may use the reserved nodes only when its own limit ends it by the reservation's start
(:func:`run_end`; EASY backfill, as Slurm's ``sched/backfill``): a gang without a limit
never does, nor any gang while the start is not known. Nothing is remembered: each decision computes the reservation again from the
cluster, so a takeover keeps it and a pod that runs past its limit moves it (an overdue pod
counts as ending now: nothing may backfill in front of it).

Each reservation costs one pass over the events of the pods on its candidate domains,
at most :data:`MAX_EVENTS` of them (the earliest first). Pure: plain data in and out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.queueing import QueueView, gang_of_namespace
from reconciler.engine.gangs.target import Target, target_of
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyTree
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.limits import expected_end, gang_end, pod_limit
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch, rfc3339
from reconciler.engine.placement.layers import PLAIN, Layout, exclusive_holders

#: The most pod ends one reservation looks at (the earliest first): the bound of its cost.
#: A gang that needs more of them to end than this waits without a start time.
MAX_EVENTS = 4096


@dataclass(frozen=True)
class Start:
    """Where and when a waiting gang can start: the node indices ``nodes`` of domain
    ``domain`` (``cloud.google.com/gce-topology-subblock=b0/s1``), from ``at`` (seconds since the
    epoch; None: not before some pod without a limit ends)."""

    nodes: frozenset[int]
    domain: str
    at: float | None


def run_end(gang: Gang, snapshot: Snapshot, now: float) -> float | None:
    """When ``gang`` would end if it started at ``now`` (seconds since the epoch): its last
    member's expected end under the limits its members (or, for a gang released as
    created, its slots) carry and its workload's deadline; None when some member has no
    limit (it runs "until it ends")."""
    pods: Sequence[PodInfo] = gang.slots if gang.as_created else gang.members
    limits = []
    for pod in pods:
        limit = snapshot.limits.get(pod.key)
        if limit is None or gang.as_created:
            deadline = pod.spec_values.deadline_seconds if pod.spec_values is not None else None
            limit = pod_limit(deadline, pod.labels, "", gang.ends_at)
        limits.append(limit)
    return gang_end(limits, now)


def closed_to(gang: Gang, snapshot: Snapshot, now: float, queue: QueueView) -> frozenset[int]:
    """The node indices the gangs ahead in ``queue`` close to ``gang`` at ``now``: every
    held node, less the reserved ones it would leave by their start (:meth:`QueueView.blocking`
    with :func:`run_end`). Its limits are read only when some gang ahead holds a reservation."""
    if not queue.reservations:
        return queue.held_nodes
    return queue.blocking(run_end(gang, snapshot, now))


def backfill_note(gang: Gang, snapshot: Snapshot, now: float, queue: QueueView, nodes: Iterable[str]) -> str:
    """What a placement on ``nodes`` (node names) says when it takes nodes reserved for a gang
    ahead in ``queue``: ``backfilled onto 1 node(s) reserved for gang ml/big from 12:04:00;
    it ends by 12:03:10`` (each reservation it uses), ``""`` when it takes none. A gang of
    another namespace is not named (:func:`~reconciler.engine.gangs.queueing.gang_of_namespace`)."""
    taken = {snapshot.index[n] for n in nodes if n in snapshot.index}
    used = [(h, len(h.nodes & taken)) for h in queue.reservations if h.nodes & taken]
    if not used:
        return ""
    end = run_end(gang, snapshot, now)
    parts = [f"backfilled onto {n} node(s) reserved for {gang_of_namespace(h.gang, gang.namespace)}"
             + (f" from {rfc3339(h.start)[11:19]}" if h.start is not None else "") for h, n in used]
    return "; ".join(parts) + (f"; it ends by {rfc3339(end)[11:19]}" if end is not None else "")


def backfilled(snapshot: Snapshot, nodes: frozenset[int], since: float) -> int:
    """How many gangs were backfilled onto ``nodes`` (node indices reserved for a gang
    complete since ``since``, seconds since the epoch): the releases (their ``planned-at``)
    of the active pods there that Troupe released after it; nothing remembered."""
    releases = set()
    for key, pod in snapshot.pods.items():
        if pod.active and pod.planned_at and snapshot.node_index_of(key) in nodes:
            at = epoch(pod.planned_at)
            if at is not None and at > since:
                releases.add(pod.planned_at)
    return len(releases)


def earliest_start(snapshot: Snapshot, members: Sequence[PodInfo], required_level: str | None, now: float,
                   taken: Iterable[int] = (), layout: Layout = PLAIN) -> Start | None:
    """The earliest :class:`Start` of a gang of ``members`` at ``now``, its nodes outside
    ``taken`` (nodes reserved for gangs ahead), ``layout`` its slices and exclusive level
    (:func:`reconciler.engine.placement.layers.layout_of` of the gang's request).

    The target level and domains are :func:`~reconciler.engine.gangs.target.target_of`'s:
    the gang's required level, else the lowest at which an emptied domain would hold the
    whole gang, members counted as their envelope and, with slice layers below that level,
    room counted in whole slices of the outermost of them (docs/decisions/035-topology-layers.md).
    Each pod on a candidate node frees its requests at its expected end (an overdue pod or
    one being deleted at ``now``, a pod without a limit never). A domain the gang may not use
    for exclusivity (:func:`~reconciler.engine.placement.layers.exclusive_holders`) counts
    as no room until every pod that keeps it out has ended (never when one has no limit).
    The start is the first time some domain holds every member, the domain with the most
    room then (then topology order). When none does within :data:`MAX_EVENTS`, the domain
    with the most room once every limited pod ended, start None. None when no domain
    outside ``taken`` could ever hold the gang."""
    target = target_of(snapshot, members, required_level, layout, taken)
    if target is None:
        return None
    opens: dict[int, float | None] = {}
    if snapshot.exclusive or layout.exclusive is not None:
        opens = _closed(snapshot, exclusive_holders(snapshot, layout, members), now)
    return _first_start(snapshot, target, now, opens)


def _end(snapshot: Snapshot, key: PodKey, now: float) -> float | None:
    """When pod ``key`` frees its node (seconds since the epoch, no earlier than ``now``;
    None: never)."""
    end = now if snapshot.pods[key].deleting else expected_end(snapshot.limits.get(key), now)
    return None if end is None else max(end, now)


def _closed(snapshot: Snapshot, holders: dict[tuple[int, int], list[PodKey]], now: float) -> dict[int, float | None]:
    """Node index -> when the domains that keep the gang out of it open (the last end of
    the pods there that keep it out; None: never), for every node of those domains."""
    tree = snapshot.tree
    opens: dict[int, float | None] = {}
    for (depth, j), keys in holders.items():
        ends = [_end(snapshot, key, now) for key in keys]
        at = None if None in ends else max(e for e in ends if e is not None)
        for i in range(tree.lo[depth][j], tree.hi[depth][j]):
            before = opens.get(i, now)
            opens[i] = None if at is None or before is None else max(before, at)
    return opens


def _first_start(snapshot: Snapshot, target: Target, now: float, opens: dict[int, float | None]) -> Start:
    """The walk of :func:`earliest_start` over the pod ends (and the exclusive domains'
    openings, ``opens``) of the fitting domains of the target."""
    tree, d, x = snapshot.tree, target.depth, target.need
    domain_of: dict[int, int] = {}
    for j in target.fitting:
        for i in range(tree.lo[d][j], tree.hi[d][j]):
            if target.eligible[i]:
                domain_of[i] = j
    wanted = {r: units for r, units in target.requests.items() if units > 0}
    cols = {r: snapshot.free_units(r) for r in wanted}  # copies: freed units are added to them
    closed = {i for i in opens if i in domain_of}
    events = _events(snapshot, domain_of, now, opens, closed)
    # The room each domain has once every pod with a limit ended: one that would not hold
    # the gang even then is not walked.
    final = {r: list(col) for r, col in cols.items()}
    for _, i, _, freed in events:
        if freed is not None:
            for r in wanted:
                final[r][i] += freed.requests.get(r, 0)
    ever = {i: 0 if i in closed and opens[i] is None else _fits(final, wanted, i) for i in domain_of}
    last = _Room(tree, domain_of, target, ever).room
    if not any(c >= x for c in last.values()):
        j = max(target.fitting, key=lambda k: (last[k], -k))
        return _start(snapshot, target, j, domain_of, None)
    live = {j for j, c in last.items() if c >= x}
    domain_of = {i: j for i, j in domain_of.items() if j in live}
    events = [e for e in events if e[1] in domain_of]
    counter = _Room(tree, domain_of, target, {i: 0 if i in closed else _fits(cols, wanted, i) for i in domain_of})
    room = counter.room
    best = _best(room, room, x)
    if best is not None:
        return _start(snapshot, target, best, domain_of, now)
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    changed: set[int] = set()
    cap, plain = counter.cap, not target.layers
    for n, (when, i, _, pod) in enumerate(events[:MAX_EVENTS]):
        if pod is None:
            closed.discard(i)
        else:
            for r in wanted:
                cols[r][i] += pod.requests.get(r, 0)
        c = 0 if i in closed else _fits(cols, wanted, i)
        j = domain_of[i]
        if plain:
            room[j] += c - cap[i]
            cap[i] = c
        else:
            counter.set(i, c)
        changed.add(j)
        if n + 1 < len(events) and events[n + 1][0] == when:
            continue  # every pod that ends at the same time first
        best = _best(room, changed, x)
        if best is not None:
            return _start(snapshot, target, best, domain_of, when)
        changed.clear()
    j = max(live, key=lambda k: (room[k], -k))  # more ends than MAX_EVENTS before it
    return _start(snapshot, target, j, domain_of, None)


def _events(snapshot: Snapshot, domain_of: dict[int, int], now: float, opens: dict[int, float | None],
            closed: set[int]) -> list[tuple[float, int, str, PodInfo | None]]:
    """``(when, node, pod key, pod)`` of every pod end on the nodes of ``domain_of``, and
    ``(when, node, "", None)`` of every ``closed`` node's opening (the exclusive domains'),
    unsorted; those that never come left out."""
    events: list[tuple[float, int, str, PodInfo | None]] = []
    limits = snapshot.limits
    for key, info in snapshot.pods.items():
        node = snapshot.node_index_of(key)
        if node is None or node not in domain_of:
            continue
        end = now if info.deleting else expected_end(limits.get(key), now)  # _end, inline: once a pod
        if end is not None:
            events.append((max(end, now), node, key, info))
    events += [(at, i, "", None) for i in closed if (at := opens[i]) is not None]
    return events


class _Room:
    """The room of each domain of ``domain_of`` (node index -> domain of the target depth)
    in the target's units, from each node's ``cap`` (members that fit): their sum, or with
    slice layers below the target depth, each domain of a layer's level holding
    ``floor(inner units / ratio)`` (:func:`reconciler.engine.placement.layers.unit_caps`),
    kept as one node's cap changes by recounting only the domains that hold it."""

    def __init__(self, tree: TopologyTree, domain_of: dict[int, int], target: Target, cap: dict[int, int]) -> None:
        self.domain_of, self.layers = domain_of, target.layers
        self.room = dict.fromkeys(set(domain_of.values()), 0)
        self.cap = dict.fromkeys(domain_of, 0)
        sizes = [layer.size for layer in self.layers]
        self.ratios = [a // b for a, b in pairwise(sizes)] + sizes[-1:]
        self.at = [tree.domain_of[layer.depth] for layer in self.layers]
        self.inner: list[dict[int, int]] = [{} for _ in self.layers]
        if self.layers:
            for i, c in cap.items():
                self.set(i, c)
            return
        room = self.room
        for i, c in cap.items():  # members: the plain sum, as fast as the walk needs
            room[domain_of[i]] += c
        self.cap = dict(cap)

    def set(self, i: int, c: int) -> None:
        """Node ``i`` now holds ``c`` members."""
        delta, self.cap[i] = c - self.cap[i], c
        for k in range(len(self.layers) - 1, -1, -1):
            if not delta:
                return
            domain, ratio = self.at[k][i], self.ratios[k]
            old = self.inner[k].get(domain, 0)
            self.inner[k][domain] = old + delta
            delta = (old + delta) // ratio - old // ratio
        self.room[self.domain_of[i]] += delta


def _fits(cols: dict[str, list[int]], requests: dict[str, int], i: int) -> int:
    """How many pods of ``requests`` fit in the free units ``cols`` of node ``i``."""
    counts = [cols[r][i] // units if cols[r][i] > 0 else 0 for r, units in requests.items()]
    return min(counts) if counts else 1 << 30


def _best(room: dict[int, int], among: Iterable[int], x: int) -> int | None:
    """The domain of ``among`` with the most ``room`` that holds ``x``, None when none does."""
    ready = [j for j in among if room[j] >= x]
    return max(ready, key=lambda k: (room[k], -k)) if ready else None


def _start(snapshot: Snapshot, target: Target, j: int, domain_of: dict[int, int], at: float | None) -> Start:
    return Start(frozenset(i for i, k in domain_of.items() if k == j), target.name(snapshot, j), at)
