"""Carrying out a ``Release`` (:class:`Releases`): one update per member (pin, annotations,
gates removed). A plan of several members goes first, on its first member, in that member's
update; then the others in parallel, at most ``releaseConcurrency`` in flight. A write that
fails leaves its member gated with its node reserved by the plan: the next reconcile
finishes the release (docs/decisions/007-release-writes.md). The fence is confirmed (the
Lease read back) before the first write and before each wave of ``releaseConcurrency``
writes (docs/decisions/016-bounded-failure-detection.md).

The writes do not hold the worker: the members are assumed in the cache as their writes
will leave them the moment the release is decided (:meth:`~reconciler.daemon.cache.ClusterCache.assume_release`),
then written on a release driver thread (:meth:`~.waves.Waves.start`) while the worker
decides the next gangs; each member's assumption ends when its written pod reaches the
cache, at once when its write is refused, or after a while when the write's outcome is
unknown (docs/decisions/068-release-pipeline.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.devicegroups import DeviceGroupController
from reconciler.daemon.handlers.done import Done
from reconciler.daemon.handlers.notices import Notices
from reconciler.daemon.handlers.waves import Waves
from reconciler.daemon.memory import Memories, Memory
from reconciler.engine.decision.actions import MemberRelease, Release
from reconciler.engine.decision.conditions import released as released_condition
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Plan
from reconciler.engine.model.timestamps import rfc3339
from reconciler.ports.base import Conflict, Gone, LostLeadership, Unsure, WriteError
from reconciler.ports.pods import PodWrites
from troupe import contract

log = logging.getLogger("reconciler.daemon.controller")


class Releases:
    """The ``Release`` handler: writes through ``pods`` on ``waves``, each member assumed in
    ``cache`` until its write is settled, each member written fed back to ``cache`` and given
    its condition through ``conditions``; then the members' SharedDeviceGroups brought in
    line (``groups``) and the gang told once (``notices``); what failed is remembered in
    ``memories``. ``wall_clock`` gives seconds since the epoch (``released-at``)."""

    def __init__(self, cache: ClusterCache, pods: PodWrites, waves: Waves, conditions: ConditionSink,
                 groups: DeviceGroupController, notices: Notices, wall_clock: Callable[[], float],
                 memories: Memories) -> None:
        self.cache, self.pods, self.waves, self.conditions = cache, pods, waves, conditions
        self.groups, self.notices, self.wall_clock, self.memories = groups, notices, wall_clock, memories

    def release(self, gang: Gang, decision: Decision, action: Release, memory: Memory, now: float) -> Done:
        """Assume the action's members in the cache as their writes will leave them, then
        write them on a release driver thread (module docstring); returns at once, with the
        :class:`Done` of the writes ``pending``."""
        by_key = {p.key: p for p in gang.members}
        stamp = rfc3339(now)
        self.cache.assume_release(m.applied(by_key[m.pod], stamp, action.plan if i == 0 else None)
                                  for i, m in enumerate(action.members) if m.pod in by_key)
        return Done(pending=self.waves.start(lambda: self.write(gang, decision, action, memory)))

    def write(self, gang: Gang, decision: Decision, action: Release, memory: Memory) -> Done:
        """Write the action's members, then bring their SharedDeviceGroups' status in line,
        and tell the gang once (its lead: the first member released). What failed is
        remembered (``memory.unwritten``) for the decision that finishes the release. Every
        member's assumption is settled when this returns or raises: a member whose write's
        outcome is unknown keeps it for a while (:meth:`~reconciler.daemon.cache.ClusterCache.assumed_unknown`)."""
        gated: list[str] = []
        try:
            failed, unwritten = self._release_members(gang, action, gated)
        finally:  # whatever is still assumed now: written or not, nobody knows (an error, a 5xx)
            self.cache.assumed_unknown(m.pod for m in action.members)
        with self.memories.lock:
            memory.unwritten = unwritten
        groups = {h.group for h in action.bindings} | {g for m in action.members if (g := _group_of(gang, m.pod))}
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
            self.notices.event_once(gang, lead, notice.kind, notice.reason, message)
        return Done(released=len(action.members))

    def _release_one(self, gang: Gang, m: MemberRelease, pod: PodInfo, plan: Plan | None, gated: list[str],
                     note: str = "") -> str:
        """Release one member; returns ``""`` or what failed. Its condition says where it
        went (and ``note``); other components' gates still on it are added to ``gated``."""
        gates = [g for g in pod.gates if contract.is_troupe_gate(g)]
        try:
            done = self.pods.release_member(m, gates, rfc3339(self.wall_clock()), plan)
        except Gone:
            self.cache.forget_assumed((m.pod,))
            return ""  # deleted meanwhile: the gang is decided again without it
        except LostLeadership as e:
            self.cache.forget_assumed((m.pod,))  # refused before it was sent
            return f"{m.pod}: {e}"
        except Unsure as e:  # it may have been applied: assumed a while longer (write())
            log.warning("gang %s: release of %s failed: %s", gang.key, m.pod, e)
            return f"{m.pod}: {e}"
        except (Conflict, WriteError) as e:
            self.cache.forget_assumed((m.pod,))
            log.warning("gang %s: release of %s failed: %s", gang.key, m.pod, e)
            return f"{m.pod}: {e}"
        self.cache.assume(done)
        others = [g for g in contract.pod_gates(done) if not contract.is_troupe_gate(g)]
        gated.extend(others)
        self.conditions.want(m.pod, pod.uid, released_condition(m, max(gang.size or 0, len(gang.members)), note))
        return ""

    def _release_members(self, gang: Gang, action: Release, gated: list[str]) -> tuple[str, str]:
        """Write ``action``'s members; returns ``("", "")``, or a summary of what failed (the
        failed members keep their reserved nodes and are retried) and, when some members
        were committed, what the next decision finishes the release after (``1 of 4
        write(s) failed (<the first error>)``; ``""`` when the release did not start)."""
        by_key = {p.key: p for p in gang.members}
        members = list(action.members)
        started = time.monotonic()
        if action.plan is not None and members:
            first = members.pop(0)
            try:
                self.pods.fence.confirm()
            except LostLeadership as e:
                self.cache.forget_assumed(m.pod for m in action.members)
                return f"release not started: {e}", ""
            error = self._release_one(gang, first, by_key[first.pod], action.plan, gated, action.note)
            if error:  # the plan was not recorded (or may not have been): nothing else is written
                if first.pod not in self.cache.assumed_keys(m.pod for m in action.members):
                    self.cache.forget_assumed(m.pod for m in members)  # refused for sure: nothing is committed
                return f"release not started: {error}", ""
        results = self.waves.write(members, lambda m: self._release_one(gang, m, by_key[m.pod], None, gated,
                                                                        action.note),
                                   lambda m, why: self._not_started(m, why))
        failed = [r for r in results if r]
        if not failed:
            took = time.monotonic() - started
            log.info("gang %s: released %d member(s) in %.2fs (%d writes in flight)", gang.key, len(action.members),
                     took, min(self.waves.concurrency, len(action.members)))
            return "", ""
        count = f"{len(failed)} of {len(action.members)} write(s) failed"
        return f"{count}, retried on their reserved nodes: {failed[0]}", f"{count} ({failed[0]})"


    def _not_started(self, m: MemberRelease, why: str) -> str:
        """A member whose write the fence kept from starting: nothing was sent."""
        self.cache.forget_assumed((m.pod,))
        return f"{m.pod}: not written: {why}"


def _group_of(gang: Gang, pod_key: str) -> str:
    """The SharedDeviceGroup of member ``pod_key`` (``""``: none)."""
    return next((p.device_group for p in gang.members if p.key == pod_key), "")


def _release_message(action: Release, reason: str) -> str:
    """The one Event of a release: how many members onto how many nodes, the ranks, and the
    decision's reason (``released 4 member(s) (ranks 0-3) onto 2 node(s): ...``)."""
    ranks = sorted(m.rank for m in action.members)
    span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    nodes = sorted({m.node for m in action.members})
    where = f"node {nodes[0]}" if len(nodes) == 1 else f"{len(nodes)} nodes"
    return f"released {len(action.members)} member(s) ({span}) onto {where}: {reason}"
