"""The gang controller: the engine's decision for one gang, carried out.

One call of :meth:`GangController.reconcile` per gang key (from the work queue):

1. Build the gang from the cache (:func:`~reconciler.engine.gang.build_gang`) with the
   rollback backoff remembered for it, and take the cache's snapshot.
2. Decide: :func:`~reconciler.engine.decision.decide`, the same call the simulator makes.
3. Check the move against the lifecycle (:func:`~reconciler.engine.lifecycle.check_move`):
   a move it refuses is logged with the gang, both phases and the observation, and
   nothing is written this time.
4. Act on the decision, through the :class:`~reconciler.daemon.writer.PodWriter` port:

   - ``Placed``/``Releasing``: release the members, one update each (pin, annotations,
     gates removed). A plan of several members goes first, on its first member, in that
     member's update; then the others in parallel, at most ``releaseConcurrency`` in
     flight. A write that fails leaves its member gated with its node reserved by the
     plan: the next reconcile finishes the release (docs/decisions/007-release-writes.md).
     The writer's fence is confirmed (the Lease read back) before the first write and
     before each wave of ``releaseConcurrency`` writes: a replica that lost the Lease
     starts no more of them (docs/decisions/016-bounded-failure-detection.md);
   - ``RolledBack``: mark the owned members of the timed-out release ``DisruptionTarget``
     and delete them (their controller recreates them, gated again); tell the ownerless
     ones with an Event; remember a backoff (10 s doubling to 5 min) for the next
     release (docs/decisions/005-gang-timeout.md);
   - ``Held``/``Unschedulable``: a Warning Event on each gated member, once per message.

5. Say when to look again: :attr:`Outcome.retry` asks the work queue for a rate-limited
   requeue (its per-key backoff is the one place where retries back off);
   :attr:`Outcome.requeue_after` the decision's own deadline (a timeout, the end of a
   settle period or of a backoff).

Troupe never binds and never writes ``spec.nodeName``: kube-scheduler stays the final
authority.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.conditions import DELAY_SECONDS as CONDITION_DELAY_SECONDS
from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.writer import (
    Conflict,
    Gone,
    LostLeadership,
    PodRef,
    PodWriter,
    Refused,
    WriteError,
)
from reconciler.engine.allocation import GroupView, group_view
from reconciler.engine.cluster import NodeInfo, PodInfo
from reconciler.engine.conditions import MAX_MESSAGE
from reconciler.engine.conditions import conditions as gang_conditions
from reconciler.engine.conditions import released as released_condition
from reconciler.engine.decision import Decision, MemberRelease, decide, queue_effect
from reconciler.engine.devices import DeviceGroup
from reconciler.engine.filters import NodeFilter, static_reason
from reconciler.engine.gang import Gang
from reconciler.engine.lifecycle import IllegalTransition, Phase, check_move
from reconciler.engine.preemption import candidates as victim_gangs
from reconciler.engine.queueing import Policy, QueueState, queue_order
from reconciler.engine.records import Plan
from reconciler.engine.timestamps import rfc3339
from troupe import contract
from troupe.config import Config

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: ``reason`` of the DisruptionTarget condition set on a member before a rollback deletes it.
DISRUPTION_REASON = "TroupeGangTimeout"
#: Backoff of a gang's next release after a timeout rollback: seconds, doubling, capped.
TIMEOUT_BACKOFF_BASE_SECONDS = 10.0
TIMEOUT_BACKOFF_MAX_SECONDS = 300.0


@dataclass(frozen=True)
class Outcome:
    """What a reconcile did: the decision's ``phase`` and ``reason`` (plus what failed),
    ``retry`` when the work queue should back off and try again (a gang that does not
    fit, a write that failed), ``requeue_after`` seconds when the decision changes by
    itself (None: only when something changes), and the ``decision``. ``others``: what
    the gang means for the gangs behind it in the queue changed (it started or stopped
    holding or blocking): they may need deciding again."""

    phase: Phase
    reason: str
    requeue_after: float | None = None
    retry: bool = False
    decision: Decision | None = None
    others: bool = False


@dataclass
class _Memory:
    """What the controller remembers of a gang between reconciles: the last phase (for
    the lifecycle's move check), consecutive rollbacks and the time before which it may
    not be released again (seconds since the epoch), and the Events sent."""

    phase: Phase | None = None
    reason: str = ""
    timeouts: int = 0
    not_before: float = 0.0
    events: dict[tuple[str, str], str] | None = None
    priority: int = 0
    #: Releases rolled back whose owned members must still all be deleted (planned-at).
    rolled_back: tuple[str, ...] = ()
    #: The gang waits for room (Unschedulable, a preemptor awaiting its victims, queued
    #: behind a gang that does): only then can another pod's or a node's change help it.
    #: ``filters``: its gated members' node filters, to tell which nodes could.
    waits_for_room: bool = False
    filters: tuple[NodeFilter, ...] = ()


class GangController:
    """Decides and acts for one gang at a time; see the module docstring.

    ``wall_clock`` returns seconds since the epoch: the ``now`` of every decision (the
    timestamps it writes and reads survive a restart). ``release_concurrency`` defaults
    to the configuration's ``releaseConcurrency``; ``condition_delay`` (seconds) is how
    long a member's new condition waits to be written (:mod:`reconciler.daemon.conditions`).
    Tests pass a fake clock and a :class:`~reconciler.daemon.writer.FakeWriter`.
    """

    def __init__(
        self,
        cache: ClusterCache,
        writer: PodWriter,
        config: Config,
        wall_clock: Callable[[], float] = time.time,
        release_concurrency: int | None = None,
        condition_delay: float = CONDITION_DELAY_SECONDS,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.config = config
        self.wall_clock = wall_clock
        #: The members' ``troupe.io/Gang`` conditions, written coalesced and late (the
        #: caller runs :meth:`ConditionSink.run` on a thread, or flushes it).
        self.conditions = ConditionSink(writer, self._current_condition, delay=condition_delay,
                                        wall=lambda: rfc3339(self.wall_clock()))
        self.policy = Policy.from_config(config)
        #: The gangs that hold or block those behind them in the queue (docs/decisions/019).
        self.queue = QueueState(config.queueing_strategy)
        self._memory: dict[str, _Memory] = {}
        self._lock = threading.Lock()
        workers = release_concurrency or config.release_concurrency
        self._concurrency = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="release")
        #: Moves the lifecycle refused since start (a metric: it should stay 0).
        self.illegal_moves = 0

    def close(self) -> None:
        """Stop the release threads (after the writes in flight)."""
        self._pool.shutdown(wait=True)

    def phases(self) -> dict[str, Phase]:
        """The last phase of every gang seen, by key."""
        with self._lock:
            return {k: m.phase for k, m in self._memory.items() if m.phase is not None}

    def priority(self, key: str) -> int:
        """The priority of gang ``key`` at its last decision (0 when never decided)."""
        with self._lock:
            memory = self._memory.get(key)
            return memory.priority if memory is not None else 0

    def helped_by(self, node: NodeInfo | None) -> list[str]:
        """The gangs waiting for room that a change on ``node`` could help: some gated
        member may run there (Ready, schedulable, taints tolerated, node selection
        matched). None (a change not tied to one node): every gang waiting for room."""
        with self._lock:
            waiting = [(k, m.filters) for k, m in self._memory.items() if m.waits_for_room]
        if node is None:
            return [k for k, _ in waiting]
        return [k for k, filters in waiting
                if any(static_reason(f, node.name, node.labels, node.taints, node.ready, node.unschedulable) is None
                       for f in filters)]

    def status(self) -> dict[str, tuple[Phase, str]]:
        """The last phase and reason of every gang seen, by key."""
        with self._lock:
            return {k: (m.phase, m.reason) for k, m in self._memory.items() if m.phase is not None}

    def forget(self, key: str) -> None:
        """Drop what is remembered of a gang that has no pod left, unless a rollback's
        backoff still runs (its owner may be recreating the members)."""
        self.queue.forget(key)
        with self._lock:
            memory = self._memory.get(key)
            if memory is not None and memory.not_before <= self.wall_clock():
                del self._memory[key]

    # --- the decision ----------------------------------------------------------------
    def gang(self, key: str) -> Gang | None:
        """Gang ``key`` as the next decision sees it (with its remembered backoff)."""
        gang = self.cache.gang(key)
        if gang is None:
            return None
        with self._lock:
            memory = self._memory.get(key)
        if memory is None or not memory.timeouts:
            return gang
        return replace(gang, timeouts=memory.timeouts, not_before=memory.not_before, rolled_back=memory.rolled_back)

    def reconcile(self, key: str) -> Outcome | None:
        """Reconcile gang ``key``; returns the outcome, or None when the gang is gone."""
        gang = self.gang(key)
        if gang is None:
            self.forget(key)
            return None
        now = self.wall_clock()
        t0 = time.monotonic()
        snapshot = self.cache.snapshot()
        order = queue_order(gang.key, gang.priority, gang.created)
        decision = decide(gang, snapshot, now, self.policy, self.queue.view(order))
        effect = queue_effect(gang, decision, snapshot, self.policy, now)
        others = self.queue.note(key, order, effect.standing, effect.what, effect.hold)
        took_ms = (time.monotonic() - t0) * 1000
        with self._lock:
            memory = self._memory.setdefault(key, _Memory())
            old = memory.phase
            memory.phase, memory.reason, memory.priority = decision.phase, decision.reason, gang.priority
            memory.waits_for_room = decision.phase in (Phase.UNSCHEDULABLE, Phase.PREEMPTING) or decision.rule == "Queued"
            memory.filters = tuple(dict.fromkeys(p.node_filter for p in gang.members if p.gated))
        try:
            why = check_move(key, old, decision.phase, decision.observation)
        except IllegalTransition as e:
            self.illegal_moves += 1
            log.error("%s; nothing written this time", e)
            return Outcome(decision.phase, f"refused: {e}", retry=True, decision=decision)
        if old is not decision.phase:
            log.info("gang %s: %s -> %s (%s): %s [decided in %.0f ms]", key, old.value if old else "(new)",
                     decision.phase.value, why or decision.rule, decision.reason, took_ms)
        if others and effect.hold is not None:
            log.info("gang %s: waited %ds at the head of the queue: %d node(s) of %s held for it", key,
                     int(now - effect.hold.since), len(effect.hold.nodes), effect.hold.domain)
        outcome = self._act(gang, decision, memory, now)
        if effect.recheck_at is not None:
            wait = max(effect.recheck_at - now, 0.0)
            outcome = replace(outcome, requeue_after=wait if outcome.requeue_after is None else min(wait, outcome.requeue_after))
        return replace(outcome, others=others) if others else outcome

    def load_state(self) -> int:
        """Read back the rollback backoffs recorded by this or an earlier leader (a failover
        keeps every deadline); returns how many. Backoffs that ran out an hour ago or more
        are dropped from the record."""
        try:
            found = self.writer.load_backoffs()
        except WriteError as e:
            log.warning("recorded backoffs not read (gangs that timed out may be retried early): %s", e)
            return 0
        now = self.wall_clock()
        with self._lock:
            for key, (timeouts, not_before, releases) in found.items():
                if not_before < now - 3600 and not releases:
                    continue
                memory = self._memory.setdefault(key, _Memory())
                memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
        for key, (_, not_before, releases) in found.items():
            if not_before < now - 3600 and not releases:
                try:
                    self.writer.save_backoff(key, 0, 0.0)
                except WriteError:
                    break
        return sum(1 for _, nb, rel in found.values() if nb >= now - 3600 or rel)

    def warm_queue(self) -> int:
        """Decide every waiting gang once, in queue order, without acting: what a reconciler
        that starts (or takes over) must know of the gangs ahead of each before it acts, so
        that it holds and blocks as the one before it did. Returns how many were decided."""
        snapshot = self.cache.snapshot()
        now = self.wall_clock()
        gangs = [g for k in self.cache.pending_gangs() if (g := self.gang(k)) is not None]
        for gang in sorted(gangs, key=lambda g: queue_order(g.key, g.priority, g.created)):
            order = queue_order(gang.key, gang.priority, gang.created)
            decision = decide(gang, snapshot, now, self.policy, self.queue.view(order))
            effect = queue_effect(gang, decision, snapshot, self.policy, now)
            self.queue.note(gang.key, order, effect.standing, effect.what, effect.hold)
        return len(gangs)

    def _current_condition(self, ref: PodRef) -> tuple[str, str, str] | bool | None:
        info = self.cache.pod_info(ref)
        return False if info is None else info.condition

    def _act(self, gang: Gang, decision: Decision, memory: _Memory, now: float) -> Outcome:
        requeue = None if decision.recheck_at is None else max(decision.recheck_at - now, 0.0)
        if not decision.release:  # a release's members get theirs as each is written
            by_key = {p.key: p for p in gang.members}
            for key, condition in gang_conditions(gang, decision).items():
                pod = by_key[key]
                self.conditions.want(PodRef.parse(key), pod.uid, condition)
                if decision.event is not None and decision.phase in (Phase.WAITING, Phase.BACKING_OFF):
                    self._event_on_transition(gang, pod, decision.event, condition.reason, condition.message)
        phase, reason = decision.phase, decision.reason
        if phase in (Phase.PLACED, Phase.RELEASING):
            failed = self._release(gang, decision)
            for group in sorted({h.group for h in decision.bindings} | {p for m in decision.release
                                                                        if (p := self._group_of(gang, m.pod))}):
                self.reconcile_group(group)  # its status follows its pods: Bound, with the node and IDs
            if failed:
                return Outcome(phase, f"{reason}; {failed}", requeue, retry=True, decision=decision)
            return Outcome(phase, reason, requeue, decision=decision)
        if phase is Phase.ROLLED_BACK:
            return self._roll_back(gang, decision, memory, now)
        self._clear_nominations(gang, decision)
        if phase is Phase.PREEMPTING:
            return self._preempt(gang, decision, requeue)
        if phase in (Phase.HELD, Phase.UNSCHEDULABLE):
            self._notify(gang, decision, decision.notify, reason)
        if phase is Phase.RELEASED and memory.timeouts and decision.observation.bound == decision.observation.active == (
                decision.observation.size or 0):
            memory.timeouts, memory.not_before, memory.rolled_back = 0, 0.0, ()  # the gang runs whole: afresh
            try:
                self.writer.save_backoff(gang.key, 0, 0.0)
            except WriteError as e:
                log.warning("gang %s: recorded backoff not cleared: %s", gang.key, e)
        return Outcome(phase, reason, requeue, retry=phase is Phase.UNSCHEDULABLE, decision=decision)

    # --- preemption ----------------------------------------------------------------------
    def _clear_nominations(self, gang: Gang, decision: Decision) -> None:
        by_key = {p.key: p for p in gang.members}
        for key in decision.clear_nomination:
            pod = by_key.get(key)
            if pod is None or pod.nomination is None:
                continue
            try:
                self.cache.assume(self.writer.clear_nomination(PodRef.parse(key)))
            except WriteError as e:
                log.warning("gang %s: nomination on %s not removed: %s", gang.key, key, e)

    def _preempt(self, gang: Gang, decision: Decision, requeue: float | None) -> Outcome:
        """Write the nomination (it holds the gang's nodes from then on), then evict the
        victims through the Eviction API, at most ``releaseConcurrency`` at once. An
        eviction a PodDisruptionBudget refuses puts its gang on the nomination's refused
        list: the next decision plans without it, or waits."""
        by_key = {p.key: p for p in gang.members}
        nominee = by_key.get(decision.nominee)
        nomination = decision.nomination
        if nominee is None or nomination is None:
            return Outcome(decision.phase, decision.reason, requeue, retry=True, decision=decision)
        if nominee.nomination != nomination:
            try:
                self.cache.assume(self.writer.set_nomination(PodRef.parse(nominee.key), nomination,
                                                             nominee.resource_version))
            except (Conflict, WriteError) as e:  # nothing evicted without the nomination written
                return Outcome(decision.phase, f"{decision.reason}; nomination not written: {e}", requeue, retry=True,
                               decision=decision)
        snapshot = self.cache.snapshot()
        gang_of = victim_gangs.gang_of_pod(snapshot, self.policy.gang_prefix)
        why = decision.preemption.reason if decision.preemption is not None else decision.reason

        def evict(key: str) -> str:
            pod = snapshot.pods.get(key)
            if pod is None:
                return ""
            try:
                self.writer.evict(PodRef.parse(key), pod.uid)
            except Refused as e:
                log.warning("gang %s: eviction of %s refused: %s", gang.key, key, e)
                return gang_of.get(key, f"{pod.namespace}/pod:{pod.name}")
            except Gone:
                return ""
            except WriteError as e:
                log.warning("gang %s: eviction of %s failed: %s", gang.key, key, e)
                return ""
            node = snapshot.using(key) or "-"
            self.writer.emit_event(PodRef.parse(key), pod.uid or None, "Warning", "Preempted",
                                   f"evicted from node {node} by Troupe ({self.policy.preemption}) to make room for "
                                   f"gang {gang.key} (priority {gang.priority}): {why}")
            return ""

        refused = sorted({g for g in self._pool.map(evict, decision.victims) if g})
        if decision.victims:
            log.info("gang %s: evicting %d pod(s) of %s: %s", gang.key, len(decision.victims),
                     ", ".join(decision.preemption.gangs) if decision.preemption else "its victims", decision.reason)
        self._notify(gang, decision, decision.notify, decision.reason)
        if refused:
            updated = replace(nomination, refused=tuple(sorted({*nomination.refused, *refused})))
            current = self.cache.pod(PodRef.parse(nominee.key))
            rv = str(contract.pod_meta(current).get("resourceVersion") or "") if current else nominee.resource_version
            try:
                self.cache.assume(self.writer.set_nomination(PodRef.parse(nominee.key), updated, rv))
            except WriteError as e:
                log.warning("gang %s: refused gangs not recorded: %s", gang.key, e)
            return Outcome(decision.phase, f"{decision.reason}; eviction refused for {', '.join(refused)}", requeue,
                           retry=True, decision=decision)
        return Outcome(decision.phase, decision.reason, requeue, decision=decision)

    # --- SharedDeviceGroups ------------------------------------------------------------
    @staticmethod
    def _group_of(gang: Gang, pod_key: str) -> str:
        return next((p.device_group for p in gang.members if p.key == pod_key), "")

    def reconcile_group(self, name: str) -> bool:
        """Bring SharedDeviceGroup ``name`` in line with the cluster; returns True when it
        should be retried (a write failed). Keeps Troupe's finalizer on a live group; on a
        group being deleted, removes it once none of its pods runs (gated pods never ran;
        a pod being deleted still runs until it is gone), which frees its devices; writes
        its status (phase, nodeName, selectedDevices and the ``Allocated`` condition) when
        it differs from :func:`~reconciler.engine.allocation.group_view`."""
        found = self.cache.group(name)
        if found is None:
            return False
        obj, info = found
        if not isinstance(info, DeviceGroup):
            return False  # unreadable: its pods are held with the reason; nothing to write
        try:
            if info.deleting:
                running = [p.key for p in self.cache.group_pods(name) if not p.terminal and not p.gated]
                if contract.DEVICE_GROUP_FINALIZER in info.finalizers and not running:
                    rest = [f for f in info.finalizers if f != contract.DEVICE_GROUP_FINALIZER]
                    written = self.writer.set_group_finalizers(name, rest, info.resource_version)
                    # Without finalizers a group being deleted is gone: so it is for the cache.
                    self.cache.group_event("MODIFIED" if rest else "DELETED", written)
                    log.info("SharedDeviceGroup %s deleted: no pod of it runs; its devices are free", name)
                return False
            if contract.DEVICE_GROUP_FINALIZER not in info.finalizers:
                obj = self.writer.set_group_finalizers(
                    name, [*info.finalizers, contract.DEVICE_GROUP_FINALIZER], info.resource_version)
                self.cache.assume_group(obj)
            view = group_view(self.cache.snapshot(), info, self.cache.group_pods(name))
            status = _group_status(view, obj.get("status") or {}, rfc3339(self.wall_clock()))
            if status is not None:
                self.cache.assume_group(self.writer.set_group_status(name, status))
                log.info("SharedDeviceGroup %s: %s (%s: %s)", name, view.phase, view.reason, view.message)
        except Gone:
            return False
        except WriteError as e:  # Conflict included: decided again on a fresh read
            log.warning("SharedDeviceGroup %s: %s", name, e)
            return True
        return False

    # --- events ----------------------------------------------------------------------
    def _event_once(self, gang: Gang, pod: PodInfo, kind: str, reason: str, message: str) -> None:
        """Emit an Event unless this pod already got the same reason and message: from this
        replica (remembered), or as its ``troupe.io/Gang`` condition (any replica: so a new
        leader does not repeat what the old one told)."""
        if pod.condition is not None and pod.condition[2] == message[:MAX_MESSAGE]:
            return
        with self._lock:
            memory = self._memory.setdefault(gang.key, _Memory())
            sent = memory.events = memory.events or {}
            if sent.get((pod.key, reason)) == message:
                return
            sent[(pod.key, reason)] = message
        self.writer.emit_event(PodRef.parse(pod.key), pod.uid or None, kind, reason, message)

    def _event_on_transition(self, gang: Gang, pod: PodInfo, event: tuple[str, str], reason: str, message: str) -> None:
        """An Event when the member's condition moves to ``reason`` (not at every new count
        of a waiting gang): judged by the condition the pod carries, so a new leader does not
        repeat it, and by what this replica already sent."""
        if pod.condition is not None and pod.condition[1] == reason:
            return
        kind, name = event
        with self._lock:
            memory = self._memory.setdefault(gang.key, _Memory())
            sent = memory.events = memory.events or {}
            if (pod.key, name) in sent:
                return
            sent[(pod.key, name)] = message
        self.writer.emit_event(PodRef.parse(pod.key), pod.uid or None, kind, name, message)

    def _notify(self, gang: Gang, decision: Decision, keys: Sequence[str], message: str) -> None:
        if decision.event is None:
            return
        kind, reason = decision.event
        by_key = {p.key: p for p in gang.members}
        for key in keys:
            if key in by_key:
                self._event_once(gang, by_key[key], kind, reason, message)

    # --- the writes ------------------------------------------------------------------
    def _in_waves(self, items: Sequence[T], write: Callable[[T], R], refused: Callable[[T, str], R]) -> list[R]:
        """``write`` each item on the release threads, ``releaseConcurrency`` in flight,
        confirming the writer's fence before each wave of that many: wave ``k`` (items
        ``k*C`` to ``k*C+C-1``) is started only once the Lease has been read back with
        this replica as its holder. A wave starts as slots free up, not after the whole
        previous wave. Items not started because the fence refused get ``refused(item,
        why)``. Results in the order of ``items``."""
        slots = threading.Semaphore(self._concurrency)
        futures: list[Future[R]] = []
        results: list[R] = []
        why = ""
        for i, item in enumerate(items):
            if i % self._concurrency == 0:
                try:
                    self.writer.fence.confirm()
                except LostLeadership as e:
                    why = str(e)
                    break
            slots.acquire()
            future = self._pool.submit(write, item)
            future.add_done_callback(lambda _f: slots.release())
            futures.append(future)
        results = [f.result() for f in futures]
        if why:
            log.warning("%d write(s) not started: %s", len(items) - len(futures), why)
            results += [refused(item, why) for item in items[len(futures):]]
        return results

    def _release_one(self, gang: Gang, m: MemberRelease, pod: PodInfo, plan: Plan | None) -> str:
        """Release one member; returns ``""`` or what failed."""
        gates = [g for g in pod.gates if contract.is_troupe_gate(g)]
        try:
            done = self.writer.release_member(m, gates, rfc3339(self.wall_clock()), plan)
        except Gone:
            return ""  # deleted meanwhile: the gang is decided again without it
        except LostLeadership as e:
            return f"{m.pod}: {e}"
        except (Conflict, WriteError) as e:
            log.warning("gang %s: release of %s failed: %s", gang.key, m.pod, e)
            return f"{m.pod}: {e}"
        self.cache.assume(done)
        others = [g for g in contract.pod_gates(done) if not contract.is_troupe_gate(g)]
        extra = f"; still gated by {', '.join(others)}" if others else ""
        self._event_once(gang, pod, "Normal", "GangReleased", f"placed on node {m.node} (rank {m.rank}){extra}")
        self.conditions.want(PodRef.parse(m.pod), pod.uid, released_condition(m, len(gang.members)))
        return ""

    def _release(self, gang: Gang, decision: Decision) -> str:
        """Release ``decision.release``; returns ``""`` or a summary of what failed (the
        failed members keep their reserved nodes and are retried)."""
        by_key = {p.key: p for p in gang.members}
        members = list(decision.release)
        failed: list[str] = []
        started = time.monotonic()
        if decision.plan is not None and members:
            first = members.pop(0)
            try:
                self.writer.fence.confirm()
            except LostLeadership as e:
                return f"release not started: {e}"
            error = self._release_one(gang, first, by_key[first.pod], decision.plan)
            if error:  # the plan was not recorded: nothing is committed, decide again later
                return f"release not started: {error}"
        results = self._in_waves(members, lambda m: self._release_one(gang, m, by_key[m.pod], None),
                                 lambda m, why: f"{m.pod}: not written: {why}")
        failed = [r for r in results if r]
        if not failed:
            took = time.monotonic() - started
            log.info("gang %s: released %d member(s) in %.2fs (%d writes in flight)", gang.key, len(decision.release),
                     took, min(self.config.release_concurrency, len(decision.release)))
            return ""
        return f"{len(failed)} of {len(decision.release)} write(s) failed, retried on their reserved nodes: {failed[0]}"

    def _roll_back(self, gang: Gang, decision: Decision, memory: _Memory, now: float) -> Outcome:
        """Delete the owned members of the timed-out release (their owner recreates them),
        tell the ownerless ones, drop a surviving plan record, and back off. The backoff is
        recorded (:meth:`PodWriter.save_backoff`) before any member is deleted, so a new
        leader keeps it even if this one dies mid-rollback."""
        by_key = {p.key: p for p in gang.members}
        why, at = decision.reason, rfc3339(now)
        again = set(decision.rolled_back) <= set(memory.rolled_back)  # finishing a rollback cut short
        timeouts = memory.timeouts if again else memory.timeouts + 1
        backoff = float(min(TIMEOUT_BACKOFF_BASE_SECONDS * 2 ** (timeouts - 1), TIMEOUT_BACKOFF_MAX_SECONDS))
        not_before = memory.not_before if again else now + backoff
        present = {p.planned_at or p.released_at for p in gang.members}
        releases = tuple(sorted({*decision.rolled_back, *(r for r in memory.rolled_back if r in present)}))
        if decision.rollback and not again:
            try:
                self.writer.save_backoff(gang.key, timeouts, not_before, releases)
            except WriteError as e:
                log.warning("gang %s: rollback not recorded (a new leader would not know it): %s", gang.key, e)

        def delete(key: str) -> int:
            pod = by_key[key]
            self._event_once(gang, pod, "Warning", "GangTimedOut", f"{why}; deleting it: its controller recreates it")
            try:
                self.writer.mark_disrupted_and_delete(PodRef.parse(key), pod.uid, DISRUPTION_REASON,
                                                      f"Troupe: gang {gang.key} rolled back: {why}", at)
            except Gone:
                return 0
            except WriteError as e:
                log.warning("gang %s: rollback of %s failed: %s", gang.key, key, e)
                return 0
            return 1

        deleted = sum(self._in_waves(decision.rollback, delete, lambda _key, _why: 0))
        for key in decision.kept:
            self._event_once(gang, by_key[key], "Warning", "GangTimedOut",
                             f"{why}; not deleted: no controller owns this pod, delete it to retry the gang")
        for key in decision.clear_plan:
            try:
                self.writer.clear_plan(PodRef.parse(key))
            except WriteError as e:  # LostLeadership included: the next leader clears it
                log.warning("gang %s: plan record of %s not removed: %s", gang.key, key, e)
        detail = f"deleted {deleted} member(s)"
        if decision.kept:
            detail += f"; ownerless, kept: {', '.join(sorted(PodRef.parse(k).name for k in decision.kept))}"
        if decision.rollback:
            with self._lock:
                memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
        if not deleted:
            return Outcome(Phase.ROLLED_BACK, f"{why}; {detail}", None, retry=bool(decision.rollback), decision=decision)
        return Outcome(Phase.ROLLED_BACK, f"{why}; {detail}; next release in {backoff:.0f}s at the earliest",
                       backoff, decision=decision)


#: The condition type of a SharedDeviceGroup's status that says whether it holds devices.
GROUP_CONDITION = "Allocated"


def _group_status(view: GroupView, current: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The status to write for ``view`` given the ``current`` one, or None when they agree.
    The condition's ``lastTransitionTime`` moves only when its status flips."""
    want = view.status()
    condition = {"type": GROUP_CONDITION, "status": "True" if view.phase == "Bound" else "False",
                 "reason": view.reason, "message": view.message[:1024]}
    old = next((c for c in current.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") == GROUP_CONDITION),
               None)
    same_fields = all(current.get(k) == v for k, v in want.items()) and set(want) == {
        k for k in ("phase", "nodeName", "selectedDevices") if k in current}
    if same_fields and old is not None and all(old.get(k) == v for k, v in condition.items()):
        return None
    keep = old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime")
    condition["lastTransitionTime"] = keep or now
    others = [c for c in current.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != GROUP_CONDITION]
    return {**want, "conditions": [*others, condition]}
