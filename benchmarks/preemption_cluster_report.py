"""What ``benchmarks/preemption_cluster.py`` prints, computed from what its watch received:
the preemptor's seconds to Running, the subblocks it spans, the victim Jobs disturbed and
those left partly running (a broken gang), and the preemptor's timeline by stage. Pure: no
client, no clock; each time is given (``time.monotonic()`` when the watch received the
event), pods are the plain JSON dicts of a raw watch.

A **victim** is a pod of another Job than the preemptor's that the watch first saw being
evicted (its ``DisruptionTarget`` condition true, or a ``deletionTimestamp``) at or after the
preemptor Job's creation: kube-scheduler's preemption and the Eviction API both set that
condition before the delete (KEP-3329, "Pod disruption conditions"). A victim Job is
**disturbed** when one of its pods is a victim, and **broken** (partly running) when it is
disturbed and some but not all of its pods run: the half-dead job that gang-aware
preemption exists to avoid (``seeds/003``, "atomic").

The preemptor's stages, seconds from its Job's creation (``STAGES``):

- ``first created`` / ``last created``: the watch first saw the first / the N-th member;
- ``first nominated`` / ``last nominated``: its nomination, first and last seen. Troupe's
  is one record, ``reconciler.troupe.io/nomination`` on the gang's first gated member,
  naming every member's node (docs/decisions/020-preemption-in-the-decision.md), so both
  are the same; kube-scheduler's is each pod's ``status.nominatedNodeName``;
- ``first node tainted`` / ``last node tainted``: the first / the last node seen with
  Troupe's taint of a nominated node, ``troupe.io/nominated``, written before the first
  eviction (docs/decisions/033-nominated-nodes-are-tainted.md; kube-scheduler's run has
  none);
- ``first eviction asked`` / ``last eviction asked``: the first / the last victim seen
  being evicted;
- ``first victim gone`` / ``last victim gone``: the first / the last victim seen terminal
  (phase ``Failed`` or ``Succeeded``) or deleted: what Troupe waits for before its release
  (rule ``AwaitingVictims``);
- ``first released`` / ``last released``: the first / the N-th member seen without
  Troupe's scheduling gate (gated members only: kube-scheduler's pods have none);
- ``first bound`` / ``last bound``, ``first Running`` / ``last Running``: the first /
  the N-th member seen with ``spec.nodeName``, in phase ``Running``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scale_report import fewest_subblocks, span
from timeline import first_last, stage_table

#: The two runs: kube-scheduler's own pod-by-pod preemption of Jobs without Troupe keys,
#: and Troupe's gang preemption of the same Jobs as gangs.
KUBE_SCHEDULER, TROUPE = "kube-scheduler", "troupe"
MODES = (KUBE_SCHEDULER, TROUPE)

#: The most Troupe's time to Running may take, as a multiple of kube-scheduler's (issue 45).
TARGET = 1.2

STAGES = ("first created", "last created", "first nominated", "last nominated", "first node tainted",
          "last node tainted", "first eviction asked", "last eviction asked", "first victim gone", "last victim gone", "first released", "last released",
          "first bound", "last bound", "first Running", "last Running")

DISRUPTION_TARGET = "DisruptionTarget"
TERMINAL = ("Failed", "Succeeded")


@dataclass
class PodRecord:
    """What the watch saw of one pod (by uid): its Job (label ``job-name``), and when it was
    first seen in each state (monotonic seconds, None: not seen so). ``gated``: seen with
    Troupe's gate once; ``node``: its ``spec.nodeName`` as last seen; ``active``: Running
    and not being deleted, as last seen."""

    job: str | None
    seen: float
    nominated: float | None = None
    evicting: float | None = None
    gone: float | None = None
    gated: bool = False
    released: float | None = None
    bound: float | None = None
    running: float | None = None
    node: str | None = None
    active: bool = False


def _is_evicting(pod: Mapping[str, Any]) -> bool:
    """Being deleted, or marked ``DisruptionTarget`` (the mark comes first)."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return True
    return any(c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or ())


class RunWatch:
    """Folds the events of a watch on the namespace's pods (plain JSON dicts) into a
    :class:`PodRecord` per pod and those of a watch on the nodes into when each was first
    seen with Troupe's taint ``taint`` (:attr:`tainted`), and notes the moment the preemptor Job (``preemptor``, its
    ``job-name``) first has ``size`` members Running and not being deleted: then
    :attr:`running_at` (monotonic seconds), :attr:`running_nodes` (its members' nodes) and
    :attr:`jobs_running_then` (every Job's pods Running at that moment) are set and
    :attr:`done` is set. ``gate``: Troupe's scheduling gate; ``nomination``: the annotation
    of Troupe's nomination. Thread-safe: the watch thread feeds it, the benchmark reads it.
    """

    def __init__(self, preemptor: str, size: int, gate: str, nomination: str, taint: str) -> None:
        self.preemptor, self.size, self.gate, self.nomination, self.taint = preemptor, size, gate, nomination, taint
        self.pods: dict[str, PodRecord] = {}
        self.tainted: dict[str, float] = {}  # node -> first seen with the taint (monotonic)
        self.running_at: float | None = None
        self.running_nodes: tuple[str, ...] = ()
        self.jobs_running_then: dict[str, int] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def listed(self, items: Iterable[Mapping[str, Any]], now: float) -> None:
        """A fresh list of the namespace's pods at ``now``: pods no longer listed are gone."""
        items = list(items)
        listed = {pod["metadata"]["uid"] for pod in items}
        with self.lock:
            for uid, record in self.pods.items():
                if uid not in listed:
                    self._gone(record, now)
        for pod in items:
            self.event("ADDED", pod, now)

    @staticmethod
    def _gone(record: PodRecord, now: float) -> None:
        record.active = False
        if record.gone is None:
            record.gone = now

    def event(self, kind: str, pod: Mapping[str, Any], now: float) -> None:
        """One watch event (``kind``: ADDED, MODIFIED, DELETED) received at ``now``."""
        meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
        with self.lock:
            record = self.pods.setdefault(meta["uid"], PodRecord((meta.get("labels") or {}).get("job-name"), now))
            if kind == "DELETED":
                self._gone(record, now)
            else:
                self._mark(record, meta, spec, status, _is_evicting(pod), now)
            self._check_running(now)

    def nodes_listed(self, items: Iterable[Mapping[str, Any]], now: float) -> None:
        """A fresh list of the nodes at ``now``."""
        for node in items:
            self.node_event("ADDED", node, now)

    def node_event(self, kind: str, node: Mapping[str, Any], now: float) -> None:
        """One event of the watch on the nodes, received at ``now``."""
        taints = node.get("spec", {}).get("taints") or ()
        if kind != "DELETED" and any(t.get("key") == self.taint for t in taints):
            with self.lock:
                self.tainted.setdefault(node["metadata"]["name"], now)

    def _mark(self, record: PodRecord, meta: Mapping[str, Any], spec: Mapping[str, Any],
              status: Mapping[str, Any], evicting: bool, now: float) -> None:
        gated = any(g.get("name") == self.gate for g in spec.get("schedulingGates") or ())
        record.gated = record.gated or gated
        if record.released is None and record.gated and not gated:
            record.released = now
        if record.nominated is None and (status.get("nominatedNodeName")
                                         or self.nomination in (meta.get("annotations") or {})):
            record.nominated = now
        if record.evicting is None and evicting:
            record.evicting = now
        phase = status.get("phase")
        if record.gone is None and phase in TERMINAL:
            record.gone = now
        record.node = spec.get("nodeName") or record.node
        if record.bound is None and record.node:
            record.bound = now
        if record.running is None and phase == "Running":
            record.running = now
        record.active = phase == "Running" and not meta.get("deletionTimestamp")

    def _check_running(self, now: float) -> None:
        if self.running_at is not None:
            return
        members = [r for r in self.pods.values() if r.job == self.preemptor and r.active]
        if len(members) >= self.size:
            self.running_at = now
            self.running_nodes = tuple(r.node for r in members if r.node)
            self.jobs_running_then = self._jobs_running()
            self.done.set()

    def _jobs_running(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.pods.values():
            if record.job is not None and record.active:
                counts[record.job] = counts.get(record.job, 0) + 1
        return counts

    def jobs_running(self) -> dict[str, int]:
        """Each Job's pods Running and not being deleted now (Jobs with none are absent)."""
        with self.lock:
            return self._jobs_running()

    def active(self) -> int:
        """How many pods run now (Running and not being deleted)."""
        with self.lock:
            return sum(1 for record in self.pods.values() if record.active)


@dataclass(frozen=True)
class Outcome:
    """One run's result (``mode``: one of :data:`MODES`).

    ``to_running``: seconds from the preemptor Job's creation to all its members Running
    (None: not in the time given). ``nodes``: its members' nodes then. ``victims``: the
    victim pods' Jobs, one entry per pod evicted. ``broken_at_running`` / ``broken_at_end``:
    the disturbed Jobs partly running when the preemptor was all Running / at the end of
    the run. ``jobs``: how many victim Jobs there were to disturb. ``timeline``: each stage
    of :data:`STAGES`, seconds from the preemptor's creation.
    """

    mode: str
    to_running: float | None
    nodes: tuple[str, ...]
    victims: tuple[str, ...]
    broken_at_running: tuple[str, ...]
    broken_at_end: tuple[str, ...]
    jobs: int
    timeline: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def disturbed(self) -> tuple[str, ...]:
        """The victim Jobs that lost a pod, sorted."""
        return tuple(sorted(set(self.victims)))


def broken(disturbed: Iterable[str], running: Mapping[str, int], size: int) -> tuple[str, ...]:
    """The Jobs of ``disturbed`` with some but not all of their ``size`` pods running
    (``running``: Job -> pods Running), sorted."""
    return tuple(sorted(job for job in set(disturbed) if 0 < running.get(job, 0) < size))


def _first_and_max(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    seen = [value for value in values if value is not None]
    return (min(seen), max(seen)) if seen else (None, None)


def preemptor_stages(members: Sequence[PodRecord], victims: Sequence[PodRecord], n: int, start: float,
                     tainted: Iterable[float] = ()) -> dict[str, float | None]:
    """The timeline of :data:`STAGES` from the preemptor's ``members`` (``n`` of them are
    wanted: a member recreated on the way counts as one more, the last of a state is the
    ``n``-th seen in it), its ``victims`` and when nodes were first seen tainted
    (``tainted``: those before ``start`` are left out), seconds from ``start`` (the
    preemptor Job's creation, monotonic). Raises ``ValueError`` when ``n`` is not
    positive."""
    if n <= 0:
        raise ValueError(f"n must be positive, not {n}")

    def since(values: Iterable[float | None]) -> list[float | None]:
        return [None if value is None else value - start for value in values]

    pairs = {
        "created": first_last(since(m.seen for m in members), n),
        "nominated": _first_and_max(since(m.nominated for m in members)),
        "node tainted": _first_and_max(since(t for t in tainted if t >= start)),
        "eviction asked": _first_and_max(since(v.evicting for v in victims)),
        "victim gone": _first_and_max(since(v.gone for v in victims)),
        "released": first_last(since(m.released for m in members), n),
        "bound": first_last(since(m.bound for m in members), n),
        "Running": first_last(since(m.running for m in members), n),
    }
    timeline: dict[str, float | None] = {}
    for state, (first, last) in pairs.items():
        timeline[f"first {state}"], timeline[f"last {state}"] = first, last
    return {stage: timeline[stage] for stage in STAGES}


def outcome(watch: RunWatch, mode: str, start: float, jobs: int, victim_size: int) -> Outcome:
    """The run's :class:`Outcome` from ``watch`` now (the end of the run): ``start`` is the
    preemptor Job's creation (monotonic), ``jobs`` the victim Jobs there were, of
    ``victim_size`` pods each. A pod of another Job first seen evicted before ``start`` (a
    rollback while the cluster filled) is no victim."""
    with watch.lock:
        records = list(watch.pods.values())
        running_at, nodes, then = watch.running_at, watch.running_nodes, dict(watch.jobs_running_then)
        tainted = list(watch.tainted.values())
    now = watch.jobs_running()
    members = [r for r in records if r.job == watch.preemptor]
    victims = [r for r in records if r.job != watch.preemptor and r.evicting is not None and r.evicting >= start]
    jobs_hit = [str(r.job) for r in victims]
    return Outcome(mode, None if running_at is None else running_at - start, nodes, tuple(sorted(jobs_hit)),
                   broken(jobs_hit, then, victim_size) if running_at is not None else (),
                   broken(jobs_hit, now, victim_size), jobs,
                   preemptor_stages(members, victims, watch.size, start, tainted))


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def ratio(outcomes: Sequence[Outcome]) -> float | None:
    """Troupe's seconds to Running over kube-scheduler's; None unless both got there."""
    by_mode = {o.mode: o.to_running for o in outcomes}
    ours, theirs = by_mode.get(TROUPE), by_mode.get(KUBE_SCHEDULER)
    return None if ours is None or theirs is None or theirs <= 0 else ours / theirs


def mode_line(o: Outcome, hosts_per_subblock: int) -> str:
    """The line printed as soon as a run is measured."""
    subblocks, blocks = span(o.nodes) if o.nodes else (0, 0)
    where = f"{subblocks} subblock(s)" + (f" in {blocks} blocks" if blocks > 1 else "")
    fewest = fewest_subblocks(len(o.nodes), hosts_per_subblock) if o.nodes else 0
    return (f"  {o.mode:<15} {_s(o.to_running)} s to all Running, {where} (fewest {fewest}); "
            f"{len(o.victims)} pods of {len(o.disturbed)} of {o.jobs} victim Jobs evicted; "
            f"{len(o.broken_at_running)} left partly running when the preemptor ran, {len(o.broken_at_end)} at the end")


def summary_table(outcomes: Sequence[Outcome], n: int, hosts_per_subblock: int, settle: float) -> str:
    """A markdown table, one column per run (in :data:`MODES` order): seconds to all ``n``
    members Running, the subblocks spanned against the fewest that hold ``n`` whole-node
    pods, the victim Jobs broken (partly running) when the preemptor ran and ``settle``
    seconds later, the victim Jobs disturbed, the victim pods; then Troupe over
    kube-scheduler against :data:`TARGET` and Troupe's broken gangs against 0."""
    ordered = sorted(outcomes, key=lambda o: MODES.index(o.mode))
    rows: list[list[str]] = [["", *(o.mode for o in ordered)]]
    rows.append(["---"] * len(rows[0]))
    rows.append([f"seconds from the preemptor's creation to all {n} Running", *(_s(o.to_running) for o in ordered)])
    rows.append([f"subblocks spanned (fewest: {fewest_subblocks(n, hosts_per_subblock)})",
                 *(str(span(o.nodes)[0]) if o.nodes else "n/a" for o in ordered)])
    rows.append(["victim Jobs left partly running when the preemptor ran",
                 *(f"{len(o.broken_at_running)} of {o.jobs}" if o.to_running is not None else "n/a" for o in ordered)])
    rows.append([f"the same {settle:g} s later", *(f"{len(o.broken_at_end)} of {o.jobs}" for o in ordered)])
    rows.append(["victim Jobs disturbed (a pod evicted)", *(f"{len(o.disturbed)} of {o.jobs}" for o in ordered)])
    rows.append(["victim pods evicted", *(str(len(o.victims)) for o in ordered)])
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    value = ratio(ordered)
    if value is not None:
        lines.append(f"\ntroupe / kube-scheduler: {value:.2f}x "
                     f"(target within {TARGET:g}x: {'met' if value <= TARGET else 'NOT met'})")
    for o in ordered:
        if o.mode == TROUPE:
            worst = max(len(o.broken_at_running), len(o.broken_at_end))
            lines.append(f"troupe's victim gangs left partly running: {worst} (target 0: {'met' if worst == 0 else 'NOT met'})")
    return "\n".join(lines)


def timeline_text(outcomes: Sequence[Outcome]) -> str:
    """The preemptor's timeline by stage, kube-scheduler's run and Troupe's side by side
    with the difference (``benchmarks/timeline.py``'s table over :data:`STAGES`)."""
    by_mode = {o.mode: o.timeline for o in outcomes}
    return stage_table(by_mode.get(KUBE_SCHEDULER), {TROUPE: by_mode[TROUPE]} if TROUPE in by_mode else {},
                       names=STAGES, base=KUBE_SCHEDULER)
