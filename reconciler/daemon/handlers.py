"""The reconciler's interpreter of the engine's actions: one handler per action type.

:class:`ActionHandlers` is the half of :class:`~reconciler.daemon.controller.GangController`
that writes: each handler carries out one action of :mod:`reconciler.engine.decision.actions` for
one gang and says what it did (:class:`Done`). The controller's table maps each action
type to its handler, so no code branches on a phase or a rule name
(docs/decisions/025-actions.md).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.groups import GroupController
from reconciler.daemon.metrics import NODE_AVOIDANCES, NODE_FAILURES_RECORDED
from reconciler.daemon.taints import NominatedTaints
from reconciler.daemon.writer import Writes
from reconciler.daemon.writer.base import Conflict, Gone, LostLeadership, Refused, WriteError
from reconciler.engine.decision.actions import (
    ClearNominations,
    ClearPlans,
    DropReservation,
    ForgetBackoff,
    MemberRelease,
    Preempt,
    RecordNodeFailures,
    Release,
    Reserve,
    RollBack,
    Wait,
)
from reconciler.engine.decision.conditions import released as released_condition
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs import nominated
from reconciler.engine.gangs.avoidance import Avoidance, NodeFailure, merged
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.gangs.refusals import AVOID_SECONDS
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo, node_failures
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Plan
from reconciler.engine.model.selectors import NodeFilter
from reconciler.engine.model.timestamps import rfc3339
from reconciler.engine.preemption import candidates as victim_gangs
from troupe import contract
from troupe.config import Config

log = logging.getLogger("reconciler.daemon.controller")

T = TypeVar("T")
R = TypeVar("R")

#: ``reason`` of the DisruptionTarget condition set on a member before a rollback deletes it.
DISRUPTION_REASON = "TroupeGangTimeout"
#: Backoff of a gang's next release after a timeout rollback: seconds, doubling, capped.
TIMEOUT_BACKOFF_BASE_SECONDS = 10.0
TIMEOUT_BACKOFF_MAX_SECONDS = 300.0


@dataclass(frozen=True)
class Done:
    """What one action's handler did: ``note`` appended to the reason, ``retry``,
    ``requeue_after`` (seconds; replaces the decision's), and what the metrics count:
    ``released`` members written, ``rolled_back``, ``preempted`` (a new plan carried out),
    ``evicted`` evictions asked."""

    note: str = ""
    retry: bool = False
    requeue_after: float | None = None
    released: int = 0
    rolled_back: bool = False
    preempted: bool = False
    evicted: int = 0


@dataclass
class Memory:
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
    #: Nodes the gang avoids: node -> (until, seconds since the epoch; kube-scheduler's
    #: reason), recorded with the backoff (docs/decisions/032-scheduler-refusals.md).
    avoid: dict[str, tuple[float, str]] | None = None

    def avoiding(self, now: float) -> dict[str, str]:
        """The nodes avoided at ``now``: node -> why."""
        return {node: why for node, (until, why) in (self.avoid or {}).items() if until > now}


class ActionHandlers:
    """The handlers, over the controller's cache, writer, condition sink, SharedDeviceGroup
    controller, release threads and configuration (set by its constructor)."""

    cache: ClusterCache
    writer: Writes
    config: Config
    policy: Policy
    conditions: ConditionSink
    groups: GroupController
    taints: NominatedTaints
    wall_clock: Callable[[], float]
    _pool: ThreadPoolExecutor
    _concurrency: int
    _lock: threading.Lock

    def _event_once(self, gang: Gang, pod: PodInfo, kind: str, reason: str, message: str) -> None:
        raise NotImplementedError  # the controller's (it remembers what was sent)

    def _nothing(self, gang: Gang, decision: Decision, action: Wait, memory: Memory, now: float) -> Done:
        """``Wait``/``Hold``: the members were told (:meth:`_tell`); nothing to write."""
        return Done()

    def _clear_nominations(self, gang: Gang, decision: Decision, action: ClearNominations, memory: Memory,
                           now: float) -> Done:
        by_key = {p.key: p for p in gang.members}
        for key in action.pods:
            pod = by_key.get(key)
            if pod is None or pod.nomination is None:
                continue
            try:
                self.cache.assume(self.writer.pods.clear_nomination(key))
            except WriteError as e:
                log.warning("gang %s: nomination on %s not removed: %s", gang.key, key, e)
        return Done()

    def _clear_plans(self, gang: Gang, decision: Decision, action: ClearPlans, memory: Memory, now: float) -> Done:
        for key in action.pods:
            try:
                self.writer.pods.clear_plan(key)
            except WriteError as e:  # LostLeadership included: the next leader clears it
                log.warning("gang %s: plan record of %s not removed: %s", gang.key, key, e)
        return Done()

    def _forget_backoff(self, gang: Gang, decision: Decision, action: ForgetBackoff, memory: Memory,
                        now: float) -> Done:
        if not memory.timeouts and not memory.avoid:
            return Done()
        # the gang runs whole: afresh, and every node it avoided may be tried again
        memory.timeouts, memory.not_before, memory.rolled_back, memory.avoid = 0, 0.0, (), None
        try:
            self.writer.state.save_backoff(gang.key, 0, 0.0)
        except WriteError as e:
            log.warning("gang %s: recorded backoff not cleared: %s", gang.key, e)
        return Done()

    def _reserve(self, gang: Gang, decision: Decision, action: Reserve, memory: Memory, now: float) -> Done:
        """Write the reservation on the workload (docs/decisions/034-release-as-created.md):
        from then on its ranks' nodes are held. Tell the workload with the rule's Event,
        and look again at once: members already created are released by the next decision."""
        try:
            self.cache.assume_workload(action.workload[0], self.writer.workloads.set_reservation(action.workload, action.record))
        except WriteError as e:  # LostLeadership included: nothing is reserved
            log.warning("gang %s: reservation not written: %s", gang.key, e)
            return Done(note=f"reservation not written: {e}", retry=True)
        notice = decision.rule.notice
        if notice is not None:
            self.writer.workloads.emit_event(action.workload, notice.kind, notice.reason,
                                            f"gang {gang.key}: {decision.reason}")
        log.info("gang %s: reserved %d node(s) on %s %s/%s", gang.key, len(action.record.nodes), *action.workload)
        return Done(requeue_after=0.0)

    def _drop_reservation(self, gang: Gang, decision: Decision, action: DropReservation, memory: Memory,
                          now: float) -> Done:
        """Remove the reservation from the workload, if it is still the one decided on;
        one already replaced or gone is left alone."""
        record = gang.reservation
        if record is None or record.planned_at != action.planned_at:
            return Done()
        try:
            self.cache.assume_workload(action.workload[0], self.writer.workloads.drop_reservation(action.workload, record))
        except (Conflict, Gone):
            return Done()
        except WriteError as e:
            log.warning("gang %s: reservation not removed: %s", gang.key, e)
            return Done(note=f"reservation not removed: {e}", retry=True)
        if not action.complete:
            self.writer.workloads.emit_event(action.workload, "Warning" if decision.rule.notice is None
                                            else decision.rule.notice.kind, "GangReservationDropped",
                                            f"gang {gang.key}: reservation of {action.planned_at} dropped: {action.why}")
        return Done()

    def _release(self, gang: Gang, decision: Decision, action: Release, memory: Memory, now: float) -> Done:
        """Release the action's members, then bring their SharedDeviceGroups' status in line,
        and tell the gang once (its lead: the first member released)."""
        gated: list[str] = []
        failed = self._release_members(gang, action, gated)
        groups = {h.group for h in action.bindings} | {g for m in action.members if (g := self._group_of(gang, m.pod))}
        for group in sorted(groups):
            self.groups.reconcile(group)  # its status follows its pods: Bound, with the node and IDs
        if failed:
            return Done(note=failed, retry=True)
        notice = decision.rule.notice
        lead = next((p for p in gang.members if action.members and p.key == action.members[0].pod), None)
        if notice is not None and lead is not None:
            message = _release_message(action, decision.reason)
            if gated:
                message += f"; still gated by {', '.join(sorted(set(gated)))}"
            self._event_once(gang, lead, notice.kind, notice.reason, message)
        return Done(released=len(action.members))

    @staticmethod
    def _group_of(gang: Gang, pod_key: str) -> str:
        return next((p.device_group for p in gang.members if p.key == pod_key), "")

    def _record_failures(self, gang: Gang, decision: Decision, action: RecordNodeFailures, memory: Memory,
                         now: float) -> Done:
        """Record each member failure on its node (:func:`reconciler.engine.gangs.avoidance.merged`;
        docs/decisions/041-failing-nodes.md). A node that becomes avoided by this write gets a
        Warning Event ``NodeAvoided`` and is counted in ``troupe_node_avoidances_total``. Best
        effort: a write that fails is logged, and the next decision asks again."""
        by_node: dict[str, list[NodeFailure]] = {}
        for failure in action.failures:
            by_node.setdefault(failure.node, []).append(failure)
        avoidance = Avoidance.from_config(self.config)
        for name, failures in sorted(by_node.items()):
            try:
                before, after = self.writer.nodes.record_failures(name, functools.partial(merged, failures=failures))
            except Gone:
                continue
            except WriteError as e:
                log.warning("node %s: member failures not recorded: %s", name, e)
                continue
            NODE_FAILURES_RECORDED.inc(len(failures))
            was, now_until = (avoidance.until(NodeInfo(name, failures=node_failures(raw))) for raw in (before, after))
            if now_until is not None and now_until > now and (was is None or was <= now):
                self.writer.nodes.emit_event(
                    name, "Warning", "NodeAvoided",
                    f"{len(failures)} gang member(s) failed here ({', '.join(f.pod for f in failures)}); "
                    f"{avoidance.threshold} within {avoidance.window}s: new gang placements avoid this node until "
                    f"{rfc3339(now_until)} unless nothing else fits")
                NODE_AVOIDANCES.inc()
        return Done()

    def _roll_back(self, gang: Gang, decision: Decision, action: RollBack, memory: Memory, now: float) -> Done:
        """Delete the owned members of the timed-out (or refused) release (their owner
        recreates them), tell the ownerless ones, and back off. The backoff is recorded
        (:meth:`~reconciler.daemon.writer.state.StateStore.save_backoff`) before any member is deleted, so a new leader keeps
        it even if this one dies mid-rollback. One Event (the rule's: ``GangTimedOut``,
        ``GangRefused``) tells the gang. A refusal does not back off: its nodes are
        recorded as avoided instead (:data:`~reconciler.engine.gangs.refusals.AVOID_SECONDS`),
        and the next plan differs (docs/decisions/032-scheduler-refusals.md)."""
        by_key = {p.key: p for p in gang.members}
        why, at = decision.reason, rfc3339(now)
        again = set(action.releases) <= set(memory.rolled_back)  # finishing a rollback cut short
        refused = bool(action.avoid)
        timeouts = memory.timeouts if again or refused else memory.timeouts + 1
        backoff = 0.0 if refused else float(min(TIMEOUT_BACKOFF_BASE_SECONDS * 2 ** (timeouts - 1),
                                                TIMEOUT_BACKOFF_MAX_SECONDS))
        not_before = memory.not_before if again or refused else now + backoff
        avoided = {node: entry for node, entry in (memory.avoid or {}).items() if entry[0] > now}
        avoid = {**avoided, **{r.node: (now + AVOID_SECONDS, r.describe()) for r in action.avoid if r.node not in avoided}}
        present = {p.planned_at or p.released_at for p in gang.members}
        releases = tuple(sorted({*action.releases, *(r for r in memory.rolled_back if r in present)}))
        if (action.delete and not again) or avoid != (memory.avoid or {}):
            try:
                self.writer.state.save_backoff(gang.key, timeouts, not_before, releases, avoid)
            except WriteError as e:
                log.warning("gang %s: rollback not recorded (a new leader would not know it): %s", gang.key, e)
        notice = decision.rule.notice
        if action.delete and notice is not None:
            self._event_once(gang, by_key[action.delete[0]], notice.kind, notice.reason,
                             f"{why}; deleting {len(action.delete)} member(s): their controller recreates them")

        def delete(key: PodKey) -> int:
            try:
                self.writer.pods.mark_disrupted_and_delete(key, by_key[key].uid, DISRUPTION_REASON,
                                                      f"Troupe: gang {gang.key} rolled back: {why}", at)
            except Gone:
                return 0
            except WriteError as e:
                log.warning("gang %s: rollback of %s failed: %s", gang.key, key, e)
                return 0
            return 1

        deleted = sum(self._in_waves(action.delete, delete, lambda _key, _why: 0))
        for key in action.keep:
            self._event_once(gang, by_key[key], "Warning", notice.reason if notice else "GangTimedOut",
                             f"{why}; not deleted: no controller owns this pod, delete it to retry the gang")
        detail = f"deleted {deleted} member(s)"
        if action.keep:
            detail += f"; ownerless, kept: {', '.join(sorted(k.name for k in action.keep))}"
        with self._lock:
            if action.delete:
                memory.timeouts, memory.not_before, memory.rolled_back = timeouts, not_before, releases
            memory.avoid = avoid or None
        if not deleted:
            return Done(note=detail, retry=bool(action.delete), rolled_back=True)
        return Done(note=f"{detail}; next release in {backoff:.0f}s at the earliest", requeue_after=backoff,
                     rolled_back=True)

    def _preempt(self, gang: Gang, decision: Decision, action: Preempt, memory: Memory, now: float) -> Done:
        """Write the nomination (it holds the gang's nodes from then on), taint its nodes
        (``troupe.io/nominated``: kube-scheduler keeps other controllers' pods off them,
        docs/decisions/033-nominated-nodes-are-tainted.md; not when a gated member lacks its
        toleration, admitted before the webhook gave it), then evict the victims through
        the Eviction API, at most ``releaseConcurrency`` at once. An
        eviction a PodDisruptionBudget refuses puts its gang on the nomination's refused
        list: the next decision plans without it, or waits."""
        nominee = next((p for p in gang.members if p.key == action.nominee), None)
        if nominee is None:
            return Done(retry=True)
        if nominee.nomination != action.nomination:
            try:
                self.cache.assume(self.writer.pods.set_nomination(nominee.key, action.nomination,
                                                             nominee.resource_version))
            except (Conflict, WriteError) as e:  # nothing evicted without the nomination written
                return Done(note=f"nomination not written: {e}", retry=True)
        lost = self.taints.add(action.nomination.nodes.values()) if nominated.tolerated_by(gang.members) else ""
        if lost:  # nothing evicted by a replica that may no longer write
            return Done(note=f"nominated nodes not tainted: {lost}", retry=True)
        notice = decision.rule.notice
        if action.plan is not None and notice is not None:  # one Event for the gang, on its lead (the nominee)
            self._event_once(gang, nominee, notice.kind, notice.reason, decision.reason)
        refused = self._evict(gang, action, decision.reason)
        preempted = action.plan is not None
        if not refused:
            return Done(preempted=preempted, evicted=len(action.evict))
        updated = replace(action.nomination, refused=tuple(sorted({*action.nomination.refused, *refused})))
        current = self.cache.pod(nominee.key)
        rv = str(contract.pod_meta(current).get("resourceVersion") or "") if current else nominee.resource_version
        try:
            self.cache.assume(self.writer.pods.set_nomination(nominee.key, updated, rv))
        except WriteError as e:
            log.warning("gang %s: refused gangs not recorded: %s", gang.key, e)
        return Done(note=f"eviction refused for {', '.join(refused)}", retry=True, evicted=len(action.evict))

    def _evict(self, gang: Gang, action: Preempt, reason: str) -> list[str]:
        """Evict the action's victims; returns the gangs whose eviction was refused. In
        ``atomic`` mode a victim gang goes whole or not at all: every pod of it is first
        asked about by a dry-run eviction, and a gang with one refusal is left untouched
        (the next plan chooses another); only then are the others evicted."""
        snapshot = self.cache.snapshot()
        gang_of = victim_gangs.gang_of_pod(snapshot, self.policy.gang_prefix)
        why = action.plan.reason if action.plan is not None else reason

        def gang_key(key: PodKey) -> str:
            pod = snapshot.pods[key]
            return gang_of.get(key, f"{pod.namespace}/pod:{pod.name}")

        def attempt(key: PodKey, write: Callable[[PodKey, str], None]) -> str:
            """``write`` one victim; returns its gang when a budget refused it, else ``""``."""
            pod = snapshot.pods.get(key)
            if pod is None:
                return ""
            try:
                write(key, pod.uid)
            except Refused as e:
                log.warning("gang %s: eviction of %s refused: %s", gang.key, key, e)
                return gang_key(key)
            except Gone:
                return ""
            except WriteError as e:
                log.warning("gang %s: eviction of %s failed: %s", gang.key, key, e)
                return ""
            return ""

        def evict(key: PodKey) -> str:
            refused = attempt(key, self.writer.pods.evict)
            if not refused and key in snapshot.pods:
                self.writer.pods.emit_event(key, snapshot.pods[key].uid or None, "Warning", "Preempted",
                                       f"evicted from node {snapshot.using(key) or '-'} by Troupe "
                                       f"({self.policy.preemption}) to make room for gang {gang.key} "
                                       f"(priority {gang.priority}): {why}")
            return refused

        victims = [k for k in action.evict if k in snapshot.pods]
        refused: set[str] = set()
        if self.policy.preemption == "atomic":
            refused = {g for g in self._pool.map(lambda k: attempt(k, self.writer.pods.may_evict), victims) if g}
            victims = [k for k in victims if gang_key(k) not in refused]
        refused |= {g for g in self._pool.map(evict, victims) if g}
        if action.evict:
            log.info("gang %s: evicting %d pod(s) of %s: %s", gang.key, len(victims),
                     ", ".join(action.plan.gangs) if action.plan else "its victims", reason)
        return sorted(refused)

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
                    self.writer.pods.fence.confirm()
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

    def _release_one(self, gang: Gang, m: MemberRelease, pod: PodInfo, plan: Plan | None, gated: list[str],
                     note: str = "") -> str:
        """Release one member; returns ``""`` or what failed. Its condition says where it
        went (and ``note``); other components' gates still on it are added to ``gated``."""
        gates = [g for g in pod.gates if contract.is_troupe_gate(g)]
        try:
            done = self.writer.pods.release_member(m, gates, rfc3339(self.wall_clock()), plan)
        except Gone:
            return ""  # deleted meanwhile: the gang is decided again without it
        except LostLeadership as e:
            return f"{m.pod}: {e}"
        except (Conflict, WriteError) as e:
            log.warning("gang %s: release of %s failed: %s", gang.key, m.pod, e)
            return f"{m.pod}: {e}"
        self.cache.assume(done)
        others = [g for g in contract.pod_gates(done) if not contract.is_troupe_gate(g)]
        gated.extend(others)
        self.conditions.want(m.pod, pod.uid, released_condition(m, max(gang.size or 0, len(gang.members)), note))
        return ""

    def _release_members(self, gang: Gang, action: Release, gated: list[str]) -> str:
        """Write ``action``'s members; returns ``""`` or a summary of what failed (the
        failed members keep their reserved nodes and are retried)."""
        by_key = {p.key: p for p in gang.members}
        members = list(action.members)
        started = time.monotonic()
        if action.plan is not None and members:
            first = members.pop(0)
            try:
                self.writer.pods.fence.confirm()
            except LostLeadership as e:
                return f"release not started: {e}"
            error = self._release_one(gang, first, by_key[first.pod], action.plan, gated, action.note)
            if error:  # the plan was not recorded: nothing is committed, decide again later
                return f"release not started: {error}"
        results = self._in_waves(members, lambda m: self._release_one(gang, m, by_key[m.pod], None, gated, action.note),
                                 lambda m, why: f"{m.pod}: not written: {why}")
        failed = [r for r in results if r]
        if not failed:
            took = time.monotonic() - started
            log.info("gang %s: released %d member(s) in %.2fs (%d writes in flight)", gang.key, len(action.members),
                     took, min(self.config.release_concurrency, len(action.members)))
            return ""
        return f"{len(failed)} of {len(action.members)} write(s) failed, retried on their reserved nodes: {failed[0]}"



def _release_message(action: Release, reason: str) -> str:
    """The one Event of a release: how many members onto how many nodes, the ranks, and the
    decision's reason (``released 4 member(s) (ranks 0-3) onto 2 node(s): ...``)."""
    ranks = sorted(m.rank for m in action.members)
    span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    nodes = sorted({m.node for m in action.members})
    where = f"node {nodes[0]}" if len(nodes) == 1 else f"{len(nodes)} nodes"
    return f"released {len(action.members)} member(s) ({span}) onto {where}: {reason}"
