"""The gang controller: the reconciler's interpreter of the engine's decisions.

One call of :meth:`GangController.reconcile` per gang key (from the work queue):

1. Build the gang from the cache (:func:`~reconciler.engine.gangs.gang.build_gang`) with the
   rollback backoff remembered for it, and take the cache's snapshot.
2. :func:`~reconciler.engine.decision.decide.step`: decide, the same call the simulator makes,
   and note what the gang means for the queue behind it.
3. Check the move against the lifecycle (:func:`~reconciler.engine.gangs.lifecycle.check_move`):
   a move it refuses is logged with the gang, both phases and the observation, and
   nothing is written this time.
4. Tell: the members' ``troupe.io/Gang`` conditions (coalesced, :mod:`.conditions`) and
   the rule's Event: one per change of the gang on its lead member, or one per member
   concerned for a Warning about that member's own input (docs/decisions/025-actions.md).
5. Carry out each action of the decision (:mod:`reconciler.engine.decision.actions`) with its
   handler (:attr:`GangController._handlers`, one per action type; nothing here branches
   on a phase or a rule):

   - ``Release``: one update per member (pin, annotations, gates removed). A plan of
     several members goes first, on its first member, in that member's update; then the
     others in parallel, at most ``releaseConcurrency`` in flight. A write that fails
     leaves its member gated with its node reserved by the plan: the next reconcile
     finishes the release (docs/decisions/007-release-writes.md). The writer's fence is
     confirmed (the Lease read back) before the first write and before each wave of
     ``releaseConcurrency`` writes (docs/decisions/016-bounded-failure-detection.md);
   - ``RollBack``: mark the owned members of the timed-out release ``DisruptionTarget``
     and delete them (their controller recreates them, gated again); tell the ownerless
     ones with an Event; remember a backoff (10 s doubling to 5 min) for the next
     release (docs/decisions/005-gang-timeout.md);
   - ``Preempt``: write the nomination, then evict the victims;
   - ``Wait``/``Hold``: nothing beyond step 4; the record clean-ups remove what they name.

6. Say when to look again: :attr:`Outcome.retry` asks the work queue for a rate-limited
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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.conditions import DELAY_SECONDS as CONDITION_DELAY_SECONDS
from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.gangobjects import GangObjects
from reconciler.daemon.groups import GroupController
from reconciler.daemon.handlers import (
    ActionHandlers,
    Done,
    Memory,
)
from reconciler.daemon.taints import NominatedTaints
from reconciler.daemon.writer import WriteError, Writes
from reconciler.engine.decision import actions, gangobject
from reconciler.engine.decision.conditions import MAX_MESSAGE
from reconciler.engine.decision.conditions import conditions as gang_conditions
from reconciler.engine.decision.seen import Decision
from reconciler.engine.decision.step import step
from reconciler.engine.filters.node import static_reason
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Audience, IllegalTransition, Phase, check_move
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import rfc3339
from troupe.config import Config

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")



@dataclass(frozen=True)
class Outcome:
    """What a reconcile did: the decision's ``phase`` and ``reason`` (plus what failed),
    ``retry`` when the work queue should back off and try again (a gang that does not
    fit, a write that failed), ``requeue_after`` seconds when the decision changes by
    itself (None: only when something changes), and the ``decision``. ``others``: what
    the gang means for the gangs behind it in the queue changed (it started or stopped
    holding or blocking): they may need deciding again. What was carried out, for the
    metrics: ``released`` members written (every write of the release succeeded),
    ``rolled_back`` (a rollback started), ``preempted`` (a new preemption plan whose
    nomination was written), ``evicted`` evictions asked, ``refused_move`` (the lifecycle
    refused the move; nothing was written)."""

    phase: Phase
    reason: str
    requeue_after: float | None = None
    retry: bool = False
    decision: Decision | None = None
    others: bool = False
    released: int = 0
    rolled_back: bool = False
    preempted: bool = False
    evicted: int = 0
    refused_move: bool = False


Handler = Callable[[Gang, Decision, Any, Memory, float], Done]


class GangController(ActionHandlers):
    """Decides and acts for one gang at a time; see the module docstring.

    ``wall_clock`` returns seconds since the epoch: the ``now`` of every decision (the
    timestamps it writes and reads survive a restart). ``release_concurrency`` defaults
    to the configuration's ``releaseConcurrency``; ``condition_delay`` (seconds) is how
    long a member's new condition waits to be written (:mod:`reconciler.daemon.conditions`).
    ``writer`` holds the writer ports, each part given the ones it writes through. Tests pass a
    fake clock and a :class:`~reconciler.daemon.writer.fake.FakeCluster`.
    """

    def __init__(
        self,
        cache: ClusterCache,
        writer: Writes,
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
        self.conditions = ConditionSink(writer.pods, self._current_condition, delay=condition_delay,
                                        wall=lambda: rfc3339(self.wall_clock()))
        #: One Gang object per gang, written coalesced (the caller runs :meth:`GangObjects.run`
        #: on a thread, or flushes it; docs/decisions/043-gang-objects.md).
        self.gang_objects = GangObjects(writer.gang_objects, config.gang_objects, budget=config.kube_api_qps / 5,
                                        wall=wall_clock)
        #: The SharedDeviceGroups' finalizers and status (their own work-queue keys).
        self.groups = GroupController(cache, writer.groups, wall_clock)
        #: Troupe's taint on nominated nodes (docs/decisions/033-nominated-nodes-are-tainted.md).
        self.taints = NominatedTaints(cache, writer.nodes, config.nomination_max_seconds, wall_clock)
        self.policy = Policy.from_config(config)
        #: The gangs that hold or block those behind them in the queue (docs/decisions/019).
        self.queue = QueueState(config.queueing_strategy)
        self._memory: dict[str, Memory] = {}
        self._lock = threading.Lock()
        workers = release_concurrency or config.release_concurrency
        self._concurrency = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="release")
        #: Moves the lifecycle refused since start (a metric: it should stay 0).
        self.illegal_moves = 0
        #: The interpreter: one handler per action type (a missing one fails loudly).
        self._handlers: Mapping[type, Handler] = {
            actions.Wait: self._nothing, actions.Hold: self._nothing, actions.Release: self._release,
            actions.RollBack: self._roll_back, actions.Preempt: self._preempt,
            actions.ClearNominations: self._clear_nominations, actions.ClearPlans: self._clear_plans,
            actions.ForgetBackoff: self._forget_backoff, actions.Reserve: self._reserve,
            actions.DropReservation: self._drop_reservation, actions.RecordNodeFailures: self._record_failures,
        }

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
        backoff still runs or it still avoids a node kube-scheduler refused (its owner may
        be recreating the members); a recorded backoff goes from the state ConfigMap with
        it (best effort: :meth:`load_state` prunes what is left)."""
        self.queue.forget(key)
        with self._lock:
            memory = self._memory.get(key)
            now = self.wall_clock()
            if memory is None or memory.not_before > now or memory.avoiding(now):
                return
            del self._memory[key]
        if memory.timeouts or memory.avoid:
            try:
                self.writer.state.save_backoff(key, 0, 0.0)
            except WriteError as e:
                log.warning("gang %s: recorded backoff of a gone gang not removed: %s", key, e)

    # --- the decision ----------------------------------------------------------------
    def gang(self, key: str) -> Gang | None:
        """Gang ``key`` as the next decision sees it (with its remembered backoff)."""
        gang = self.cache.gang(key)
        if gang is None:
            return None
        with self._lock:
            memory = self._memory.get(key)
        if memory is None or not (memory.timeouts or memory.avoid):
            return gang
        return replace(gang, timeouts=memory.timeouts, not_before=memory.not_before, rolled_back=memory.rolled_back,
                       avoid=memory.avoiding(self.wall_clock()))

    def reconcile(self, key: str) -> Outcome | None:
        """Reconcile gang ``key``; returns the outcome, or None when the gang is gone.
        Then remove Troupe's taint from the nodes no nomination or unbound release needs
        any more (:meth:`NominatedTaints.sweep`; nothing to do, and no write, when no node
        carries it)."""
        try:
            return self._reconcile(key)
        finally:
            self.taints.sweep()

    def _reconcile(self, key: str) -> Outcome | None:
        gang = self.gang(key)
        if gang is None:
            self.forget(key)
            self.gang_objects.gone(key)
            return None
        now = self.wall_clock()
        t0 = time.monotonic()
        snapshot = self.cache.snapshot()
        turn = step(gang, snapshot, now, self.policy, self.queue)
        decision, effect = turn.decision, turn.effect
        took_ms = (time.monotonic() - t0) * 1000
        with self._lock:
            memory = self._memory.setdefault(key, Memory())
            old = memory.phase
            memory.phase, memory.reason, memory.priority = decision.phase, decision.reason, gang.priority
            memory.waits_for_room = decision.rule.waits_for_room
            memory.filters = tuple(dict.fromkeys(p.node_filter for p in gang.members if p.gated))
        try:
            why = check_move(key, old, decision.phase, decision.observation)
        except IllegalTransition as e:
            self.illegal_moves += 1
            log.error("%s; nothing written this time", e)
            return Outcome(decision.phase, f"refused: {e}", retry=True, decision=decision, refused_move=True)
        if old is not decision.phase:
            log.info("gang %s: %s -> %s (%s): %s [decided in %.0f ms]", key, old.value if old else "(new)",
                     decision.phase.value, why or decision.rule.name, decision.reason, took_ms)
        if turn.others and effect.hold is not None:
            log.info("gang %s: waited %ds at the head of the queue: %d node(s) of %s held for it", key,
                     int(now - effect.hold.since), len(effect.hold.nodes), effect.hold.domain)
        outcome = self._act(gang, decision, memory, now)
        if gang.members:  # a gang reserved from its workload before its pods exist gets its object (and owners) with them
            self.gang_objects.want(key, gangobject.object_name(gang), gang.name, gangobject.owner_references(gang),
                                   gangobject.gang_status(gang, decision, snapshot))
        if effect.recheck_at is not None:
            wait = max(effect.recheck_at - now, 0.0)
            outcome = replace(outcome, requeue_after=wait if outcome.requeue_after is None else min(wait, outcome.requeue_after))
        return replace(outcome, others=True) if turn.others else outcome

    def load_state(self) -> int:
        """Read back the rollback backoffs recorded by this or an earlier leader (a failover
        keeps every deadline); returns how many are kept. Called once the cache has synced:
        an entry is pruned from the record when nothing is left for it to do, that is its
        backoff has run out and its gang has no pod left (nothing to finish deleting, and
        no member for the backoff to hold back), or it ran out an hour ago and names no
        release still to finish; in both cases only once no node it avoids is avoided any
        more."""
        try:
            found = self.writer.state.load_backoffs()
        except WriteError as e:
            log.warning("recorded backoffs not read (gangs that timed out may be retried early): %s", e)
            return 0
        now = self.wall_clock()
        stale = {key for key, (_, not_before, releases, avoid) in found.items()
                 if not_before <= now and all(until <= now for until, _ in avoid.values())
                 and (self.cache.gang(key) is None or (not_before < now - 3600 and not releases))}
        with self._lock:
            for key, (timeouts, not_before, releases, avoid) in found.items():
                if key not in stale:
                    memory = self._memory.setdefault(key, Memory())
                    memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
                    memory.avoid = avoid or None
        for key in sorted(stale):
            try:
                self.writer.state.save_backoff(key, 0, 0.0)
            except WriteError as e:
                log.warning("stale recorded backoffs not pruned: %s", e)
                break
        return len(found) - len(stale)

    def warm_queue(self) -> int:
        """Decide every waiting gang once, in queue order, without acting: what a reconciler
        that starts (or takes over) must know of the gangs ahead of each before it acts, so
        that it holds and blocks as the one before it did. Returns how many were decided."""
        snapshot = self.cache.snapshot()
        now = self.wall_clock()
        gangs = [g for k in self.cache.pending_gangs() if (g := self.gang(k)) is not None]
        for gang in sorted(gangs, key=lambda g: queue_order(g.key, g.priority, g.created)):
            step(gang, snapshot, now, self.policy, self.queue)
        return len(gangs)

    def _current_condition(self, ref: PodKey) -> tuple[str, str, str] | bool | None:
        info = self.cache.pod_info(ref)
        return False if info is None else info.condition

    def _act(self, gang: Gang, decision: Decision, memory: Memory, now: float) -> Outcome:
        """Tell the members, then carry out each action with its handler."""
        self._tell(gang, decision)
        requeue = None if decision.recheck_at is None else max(decision.recheck_at - now, 0.0)
        done = [self._handlers[type(action)](gang, decision, action, memory, now) for action in decision.actions]
        reason = "; ".join([decision.reason, *(d.note for d in done if d.note)])
        overrides = [d.requeue_after for d in done if d.requeue_after is not None]
        return Outcome(decision.phase, reason, overrides[0] if overrides else requeue,
                       retry=decision.rule.retry or any(d.retry for d in done), decision=decision,
                       released=sum(d.released for d in done), rolled_back=any(d.rolled_back for d in done),
                       preempted=any(d.preempted for d in done), evicted=sum(d.evicted for d in done))

    # --- telling: conditions and Events ---------------------------------------------------
    def _tell(self, gang: Gang, decision: Decision) -> None:
        """Each waiting member's condition and, written with it, the rule's Event: on each
        member concerned (``Audience.EACH``) or on the gang's lead member, the first one
        concerned in rank order (``Audience.GANG``). The condition sink writes a condition
        only when it differs from what the pod carries, coalesced (:mod:`.conditions`), and
        the Event goes with that write, so the Event a member shows follows its condition's
        numbers and a new leader, which reads the conditions back, repeats none. A release
        tells as each member is written."""
        if decision.find(actions.Release) is not None:
            return
        by_key = {p.key: p for p in gang.members}
        wanted = gang_conditions(gang, decision)
        preempt = decision.find(actions.Preempt)
        # A new preemption is news the moment it is carried out: its handler sends the Event.
        notice = decision.rule.notice if preempt is None or preempt.plan is None else None
        lead = next(iter(wanted), None)
        for key, condition in wanted.items():
            told = notice is not None and (notice.audience is Audience.EACH or key == lead)
            event = (notice.kind, notice.reason) if notice is not None and told else None
            self.conditions.want(key, by_key[key].uid, condition, event,
                                 notice is not None and notice.on_change_only)

    def _event_once(self, gang: Gang, pod: PodInfo, kind: str, reason: str, message: str) -> None:
        """Emit an Event about ``pod`` (the handlers' way to tell: a release, a rollback)
        unless it was told already: as its ``troupe.io/Gang`` condition's message (any
        replica), or by this replica (remembered per pod and Event reason)."""
        if pod.condition is not None and pod.condition[2] == message[:MAX_MESSAGE]:
            return
        with self._lock:
            memory = self._memory.setdefault(gang.key, Memory())
            sent = memory.events = memory.events or {}
            if sent.get((pod.key, reason)) == message:
                return
            sent[(pod.key, reason)] = message
        self.writer.pods.emit_event(pod.key, pod.uid or None, kind, reason, message)
