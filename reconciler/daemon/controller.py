"""The gang controller: the reconciler's interpreter of the engine's decisions.

One call of :meth:`GangController.reconcile` per gang key (from the work queue):

1. Build the gang from the cache (:func:`~reconciler.engine.gangs.gang.build_gang`) with the
   rollback backoff remembered for it (:mod:`reconciler.daemon.memory`), and take the
   snapshot of the worker's pass (:class:`~reconciler.daemon.cycle.Cycle`: one for the
   gangs of a pass, each release applied to it).
2. :func:`~reconciler.engine.decision.step.step`: decide, the same call the simulator makes,
   and note what the gang means for the queue behind it.
3. Check the move against the lifecycle (:func:`~reconciler.engine.gangs.lifecycle.move`):
   a move it refuses is logged with the gang, both phases and the observation, and
   nothing is written this time; a move it allows is logged with the rule that made it and
   the decision's reason (what was observed, :class:`~reconciler.engine.gangs.lifecycle.Transition`).
4. Tell: the members' ``troupe.io/Gang`` conditions (coalesced, :mod:`.conditions`) and
   the rule's Event: one per change of the gang on its lead member, or one per member
   concerned for a Warning about that member's own input (docs/decisions/025-actions.md;
   :class:`~reconciler.daemon.handlers.notices.Notices`).
5. Carry out each action of the decision (:mod:`reconciler.engine.decision.actions`) with its
   handler (:attr:`GangController.handlers`, one per action type; nothing here branches on
   a phase or a rule; the handlers are :mod:`reconciler.daemon.handlers`):

   - ``Release``: the members assumed in the cache, then one update per member (pin,
     annotations, gates removed), a plan first, the others in waves behind the leader's
     fence, on a release driver thread while the worker decides on
     (:class:`~reconciler.daemon.handlers.releases.Releases`, docs/decisions/068-release-pipeline.md);
   - ``RollBack``: delete the owned members of the timed-out release, tell the ownerless
     ones, back off (:class:`~reconciler.daemon.handlers.rollbacks.Rollbacks`);
   - ``Preempt``: write the nomination, taint its nodes, then evict the victims
     (:class:`~reconciler.daemon.handlers.preemptions.Preemptions`);
   - ``Reserve``/``DropReservation``: the reservation on the workload
     (:class:`~reconciler.daemon.handlers.reservations.Reservations`);
   - ``RecordNodeFailures``: the failures on their nodes
   - ``RequestCapacity``/``DropCapacityRequest``: the gang's ProvisioningRequest
     (:class:`~reconciler.daemon.handlers.failures.NodeFailures`);
   - ``Wait``/``Hold``: nothing beyond step 4; the record clean-ups remove what they name.

6. Keep the gang's Gang object in line (:class:`~reconciler.daemon.gangobjects.GangObjects`),
   and remove Troupe's taint from the nodes nothing needs it on any more
   (:class:`~reconciler.daemon.taints.NominatedTaints`).
7. Say when to look again: :attr:`Outcome.retry` asks the work queue for a rate-limited
   requeue (its per-key backoff is the one place where retries back off);
   :attr:`Outcome.requeue_after` the decision's own deadline (a timeout, the end of a
   settle period or of a backoff).

Troupe never binds and never writes ``spec.nodeName``: kube-scheduler stays the final
authority.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.cycle import Cycle
from reconciler.daemon.gangobjects import GangObjects
from reconciler.daemon.handlers import (
    CapacityRequests,
    Done,
    Handler,
    NodeFailures,
    Notices,
    Preemptions,
    Releases,
    Reservations,
    Rollbacks,
)
from reconciler.daemon.memory import Memories, Memory
from reconciler.daemon.taints import NominatedTaints
from reconciler.engine.decision import actions, gangobject
from reconciler.engine.decision.seen import Decision
from reconciler.engine.decision.step import step
from reconciler.engine.filters.profile import node_status
from reconciler.engine.gangs.capacity import ask_for, owner_of
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import IllegalTransition, Phase, move
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from reconciler.engine.model.nodes import NodeInfo

log = logging.getLogger(__name__)


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
    refused the move; nothing was written). ``pending``: the outcome once the writes that
    outlive the reconcile are done (a release written while the worker decides the next
    gangs, docs/decisions/068-release-pipeline.md); None when this is the outcome."""

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
    pending: Future[Outcome] | None = None


T = TypeVar("T")
U = TypeVar("U")


def then(future: Future[T], fn: Callable[[T], U]) -> Future[U]:
    """A future of ``fn`` of ``future``'s result (its exception, if it raised or ``fn`` does)."""
    out: Future[U] = Future()

    def done(f: Future[T]) -> None:
        try:
            out.set_result(fn(f.result()))
        except BaseException as e:  # noqa: BLE001  handed to whoever waits on ``out``
            out.set_exception(e)

    future.add_done_callback(done)
    return out


def all_of(futures: Sequence[Future[T]]) -> Future[list[T]]:
    """A future of every result of ``futures``, in order (the first exception, if one raised)."""
    out: Future[list[T]] = Future()
    left = [len(futures)]

    def done(_f: Future[T]) -> None:
        left[0] -= 1
        if left[0]:
            return
        try:
            out.set_result([f.result() for f in futures])
        except BaseException as e:  # noqa: BLE001
            out.set_exception(e)

    if not futures:
        out.set_result([])
    for f in futures:
        f.add_done_callback(done)
    return out


def _nothing(gang: Gang, decision: Decision, action: actions.Wait | actions.Hold, memory: Memory,
             now: float) -> Done:
    """``Wait``/``Hold``: the members were told (:meth:`Notices.tell`); nothing to write."""
    return Done()


class GangController:
    """Decides and acts for one gang per call (a release's writes may outlive it:
    :attr:`Outcome.pending`); see the module docstring.

    Over ``cache`` (the gangs, the snapshot) and ``memories`` (what is remembered of each
    gang), it decides with ``policy`` and ``queue`` (the gangs that hold or block those
    behind them, docs/decisions/019-queue-order.md), tells through ``notices``, and hands
    each action to its handler: ``releases``, ``rollbacks``, ``preemptions``,
    ``reservations``, ``failures``, ``capacity``. After each decision it keeps the gang's object through
    ``gang_objects`` and sweeps Troupe's taint through ``taints``. ``wall_clock`` returns
    seconds since the epoch: the ``now`` of every decision (the timestamps it writes and
    reads survive a restart). :func:`reconciler.run.controllers.compose` makes one.
    """

    def __init__(self, *, cache: ClusterCache, memories: Memories, policy: Policy, queue: QueueState,
                 notices: Notices, releases: Releases, rollbacks: Rollbacks, preemptions: Preemptions,
                 reservations: Reservations, failures: NodeFailures, taints: NominatedTaints,
                 gang_objects: GangObjects, capacity: CapacityRequests,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.cache, self.memories, self.policy, self.queue = cache, memories, policy, queue
        self.notices, self.rollbacks, self.taints, self.gang_objects = notices, rollbacks, taints, gang_objects
        self.wall_clock = wall_clock
        #: Moves the lifecycle refused since start (a metric: it should stay 0).
        self.illegal_moves = 0
        #: The interpreter: one handler per action type (a missing one fails loudly).
        self.handlers: Mapping[type, Handler] = {
            actions.Wait: _nothing, actions.Hold: _nothing, actions.Release: releases.release,
            actions.RollBack: rollbacks.roll_back, actions.ClearPlans: rollbacks.clear_plans,
            actions.ForgetBackoff: rollbacks.forget_backoff, actions.Preempt: preemptions.preempt,
            actions.ClearNominations: preemptions.clear_nominations, actions.Reserve: reservations.reserve,
            actions.DropReservation: reservations.drop, actions.RecordNodeFailures: failures.record,
            actions.RequestCapacity: capacity.request, actions.DropCapacityRequest: capacity.drop,
        }

    def phases(self) -> dict[str, Phase]:
        """The last phase of every gang seen, by key."""
        return self.memories.phases()

    def phase(self, key: str) -> Phase | None:
        """The phase of gang ``key`` at its last decision (None when never decided)."""
        memory = self.memories.get(key)
        return None if memory is None else memory.phase

    def priority(self, key: str) -> int:
        """The priority of gang ``key`` at its last decision (0 when never decided)."""
        return self.memories.priority(key)

    def status(self) -> dict[str, tuple[Phase, str]]:
        """The last phase and reason of every gang seen, by key."""
        return self.memories.status()

    def helped_by(self, node: NodeInfo | None) -> list[str]:
        """The gangs waiting for room that a change on ``node`` could help: some gated
        member may run there (Ready, schedulable, taints tolerated, node selection
        matched). None (a change not tied to one node): every gang waiting for room."""
        waiting = self.memories.waiting()
        if node is None:
            return [k for k, _ in waiting]
        return [k for k, filters in waiting
                if any(node_status(f, node) is None for f in filters)]

    def forget(self, key: str) -> None:
        """Drop what is remembered of a gang that has no pod left, unless a rollback's
        backoff still runs or it still avoids a node kube-scheduler refused (its owner may
        be recreating the members); a recorded backoff goes from the state ConfigMap with
        it (best effort: :meth:`~.handlers.rollbacks.Rollbacks.restore` prunes what is left)."""
        self.queue.forget(key)
        memory = self.memories.forget(key, self.wall_clock())
        if memory is not None and (memory.timeouts or memory.avoid):
            self.rollbacks.erase(key)

    # --- the decision ----------------------------------------------------------------
    def gang(self, key: str) -> Gang | None:
        """Gang ``key`` as the next decision sees it (with its remembered backoff, and what
        failed of the release last written for it)."""
        gang = self.cache.gang(key)
        if gang is None:
            return None
        gang = self._with_capacity(gang)
        memory = self.memories.get(key)
        if memory is None:
            return gang
        if memory.unwritten:
            gang = replace(gang, unwritten=memory.unwritten)
        if not (memory.timeouts or memory.avoid):
            return gang
        return replace(gang, timeouts=memory.timeouts, not_before=memory.not_before, rolled_back=memory.rolled_back,
                       avoid=memory.avoiding(self.wall_clock()))

    def _with_capacity(self, gang: Gang) -> Gang:
        """``gang`` with whether it may ask for room (the ``provisioning`` key and its
        namespace's labels, owned by its members' owner) and its request, when the key is
        on (docs/decisions/080-provisioning-requests.md)."""
        provisioning = self.cache.config.provisioning
        if provisioning is None:
            return gang
        labels = self.cache.volumes.view()[2].get(gang.namespace, {})
        want = ask_for(provisioning, labels, owner_of(gang.members))
        return replace(gang, capacity=want, capacity_request=self.cache.capacity.of(gang.key) if want else None)

    def reconcile(self, key: str, cycle: Cycle | None = None, wait: bool = True) -> Outcome | None:
        """Reconcile gang ``key``; returns the outcome, or None when the gang is gone.
        Then remove Troupe's taint from the nodes no nomination or unbound release needs
        any more (:meth:`NominatedTaints.sweep`; nothing to do, and no write, when no node
        carries it). ``cycle``: the worker's pass this decision belongs to, whose snapshot
        it is made on (:mod:`reconciler.daemon.cycle`; None: a cycle of its own). With
        ``wait`` False, a release's writes go on after the call returns, and the outcome's
        :attr:`Outcome.pending` gives the outcome once they are done
        (docs/decisions/068-release-pipeline.md); the caller must not decide the gang again
        before. With ``wait`` (the default) the call returns that outcome."""
        try:
            outcome = self._reconcile(key, cycle or Cycle(self.cache))
        finally:
            self.taints.sweep()
        if wait and outcome is not None and outcome.pending is not None:
            return outcome.pending.result()
        return outcome

    def _reconcile(self, key: str, cycle: Cycle) -> Outcome | None:
        gang = self.gang(key)
        if gang is None:
            self.forget(key)
            self.gang_objects.gone(key)
            return None
        now = self.wall_clock()
        t0 = time.monotonic()
        snapshot = cycle.snapshot_for(gang)
        turn = step(gang, snapshot, now, self.policy, self.queue)
        cycle.decided(turn.decision)
        decision, effect = turn.decision, turn.effect
        took_ms = (time.monotonic() - t0) * 1000
        memory = self.memories.of(key)
        with self.memories.lock:
            old = memory.phase
            memory.phase, memory.reason, memory.priority = decision.phase, decision.reason, gang.priority
            memory.waits_for_room = decision.rule.waits_for_room
            memory.filters = tuple(dict.fromkeys(p.node_filter for p in gang.members if p.gated))
            if decision.phase not in (Phase.PLACED, Phase.RELEASING):  # no release of it is under way
                memory.unwritten = ""
        try:
            moved = move(key, old, decision.rule, decision.observation, decision.reason)
        except IllegalTransition as e:
            self.illegal_moves += 1
            log.error("%s; nothing written this time", e)
            return Outcome(decision.phase, f"refused: {e}", retry=True, decision=decision, refused_move=True)
        if moved is not None:
            log.info("gang %s: %s [decided in %.0f ms]", key, moved.describe(), took_ms,
                     extra={"fields": moved.fields()})
        if turn.others and effect.hold is not None:
            log.info("gang %s: waited %ds at the head of the queue: %d node(s) of %s held for it", key,
                     int(now - effect.hold.since), len(effect.hold.nodes), effect.hold.domain)
        outcome = self._act(gang, decision, memory, now)
        if gang.members:  # a gang reserved from its workload before its pods exist gets its object (and owners) with them
            self.gang_objects.want(key, gangobject.object_name(gang), gang.name, gangobject.owner_references(gang),
                                   gangobject.gang_status(gang, decision, snapshot))

        def queued(o: Outcome) -> Outcome:
            if effect.recheck_at is not None:
                wait = max(effect.recheck_at - now, 0.0)
                o = replace(o, requeue_after=wait if o.requeue_after is None else min(wait, o.requeue_after))
            return replace(o, others=True) if turn.others else o

        if outcome.pending is not None:
            return replace(outcome, pending=then(outcome.pending, queued))
        return queued(outcome)

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

    def _act(self, gang: Gang, decision: Decision, memory: Memory, now: float) -> Outcome:
        """Tell the members, then carry out each action with its handler; the outcome is
        :attr:`Outcome.pending` while a handler's writes go on."""
        self.notices.tell(gang, decision)
        requeue = None if decision.recheck_at is None else max(decision.recheck_at - now, 0.0)
        done = [self.handlers[type(action)](gang, decision, action, memory, now) for action in decision.actions]
        pending = [d.pending for d in done if d.pending is not None]
        if not pending:
            return self._outcome(decision, requeue, done)
        finished = all_of(pending)
        return Outcome(decision.phase, decision.reason, requeue, decision=decision, pending=then(
            finished, lambda results: self._outcome(decision, requeue, _settled(done, results))))

    @staticmethod
    def _outcome(decision: Decision, requeue: float | None, done: Sequence[Done]) -> Outcome:
        """The outcome of ``decision`` once every handler is ``done``."""
        reason = "; ".join([decision.reason, *(d.note for d in done if d.note)])
        overrides = [d.requeue_after for d in done if d.requeue_after is not None]
        return Outcome(decision.phase, reason, overrides[0] if overrides else requeue,
                       retry=decision.rule.retry or any(d.retry for d in done), decision=decision,
                       released=sum(d.released for d in done), rolled_back=any(d.rolled_back for d in done),
                       preempted=any(d.preempted for d in done), evicted=sum(d.evicted for d in done))


def _settled(done: Sequence[Done], results: Sequence[Done]) -> list[Done]:
    """``done`` with each pending entry replaced by its result, in order (``results``: the
    results of the pending entries, in order)."""
    left = iter(results)
    return [next(left) if d.pending is not None else d for d in done]
