"""The gang controller: from the cached members of one gang to a decision and its writes.

One call of :meth:`GangController.reconcile` per gang key (from the work queue):

1. Observe: active members (not terminal, not deleting); gated ones are to be placed.
2. Check the gang contract (DESIGN.md "Gangs"): members that disagree on size, timeout or
   topology request are held, each with a Warning Event naming the keys.
3. Wait for ``size`` active members (all-or-nothing). A gang already released that gets
   a replacement member releases that member on its own.
4. Plan with the engine on a snapshot of the cache: where each gated member goes.
5. Write: pin every member (annotations + ``kubernetes.io/hostname`` added to
   ``spec.nodeSelector``, which only narrows the pod's node selection, as KEP-3838 allows
   for gated pods), then remove Troupe's gates from every member. Other components'
   gates stay. Each write carries the resourceVersion; a conflict re-reads the pod.
6. Time out: released members not all bound within the gang's timeout (+ jitter) roll the
   gang back (``docs/decisions/005-gang-timeout.md``).

Troupe never binds and never writes ``spec.nodeName``: kube-scheduler stays the final
authority.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reconciler.cache import ClusterCache, is_active, is_gated
from reconciler.engine.fields import ObjectError
from reconciler.engine.placement import Code, PlacementResult, place_gang
from reconciler.engine.snapshot import NodeInfo, PodInfo, Snapshot
from reconciler.engine.topology import TopologyLevels
from reconciler.lifecycle import GangState, Phase
from reconciler.writer import Conflict, Gone, PodRef, WriteError, Writer
from troupe import contract
from troupe.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

Obj = Mapping[str, Any]

#: Backoff of an unschedulable gang or a failed write: seconds, doubling, capped.
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
#: Writes retried on conflict, each after a fresh read.
CONFLICT_RETRIES = 3
#: ``reason`` of the DisruptionTarget condition set on a member before a rollback deletes it.
DISRUPTION_REASON = "TroupeGangTimeout"
#: Backoff of a gang's next release after a timeout rollback: seconds, doubling, capped.
TIMEOUT_BACKOFF_BASE_SECONDS = 10.0
TIMEOUT_BACKOFF_MAX_SECONDS = 300.0


class ParseMemo(Generic[T]):
    """The engine's parsed form of each cached object, kept while the object is the same.

    Parsing is most of the cost of a snapshot (about 40 us a node, 90 us a pod), and
    between two reconciles few objects change. The cache never changes an object in
    place (an update replaces the dict), so object identity says "unchanged" exactly.
    An object that does not parse is left out, with one log line per version: one odd
    node (say, one still registering, without ``status.allocatable``) must not stop
    every plan.
    """

    def __init__(self, kind: str, parse: Callable[[Obj], T]) -> None:
        self.kind = kind
        self._parse = parse
        self._memo: dict[int, tuple[Obj, T | None]] = {}

    def parse(self, objs: Sequence[Obj]) -> list[T]:
        """The parsed objects, in the order given, malformed ones left out."""
        memo: dict[int, tuple[Obj, T | None]] = {}
        out: list[T] = []
        for obj in objs:
            hit = self._memo.get(id(obj))
            if hit is not None and hit[0] is obj:
                info = hit[1]
            else:
                try:
                    info = self._parse(obj)
                except ObjectError as e:
                    meta = contract.pod_meta(obj)
                    log.warning("%s %s/%s left out of placement: %s", self.kind, meta.get("namespace", ""), meta.get("name"), e)
                    info = None
            memo[id(obj)] = (obj, info)
            if info is not None:
                out.append(info)
        self._memo = memo
        return out


def _controller_of(pod: Obj) -> Mapping[str, Any] | None:
    """The pod's controlling owner reference (``controller: true``), or None."""
    owners = contract.pod_meta(pod).get("ownerReferences") or []
    return next((o for o in owners if isinstance(o, Mapping) and o.get("controller")), None)


@dataclass(frozen=True)
class Timeout:
    """The clock of a gang's released but unbound members: ``seconds`` (effective timeout)
    plus ``jitter`` (seconds) from their release; ``left`` seconds remain (<= 0: expired);
    ``unbound`` members are still waiting to be bound."""

    seconds: int
    jitter: float
    left: float
    unbound: int


@dataclass(frozen=True)
class Outcome:
    """What a reconcile decided: the gang's phase, why, and when to look again (seconds,
    None = only when something changes)."""

    phase: Phase
    reason: str
    requeue_after: float | None = None


class GangController:
    """Decides and writes for one gang at a time; see the module docstring.

    ``clock`` returns monotonic seconds (settle periods, backoffs); ``wall_clock`` returns
    seconds since the epoch (the ``released-at`` stamp that gang timeouts run from, which
    must survive a restart). Tests pass fakes of both.
    """

    def __init__(
        self,
        cache: ClusterCache,
        writer: Writer,
        config: Config,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.levels = TopologyLevels.from_config(config)
        self._nodes: ParseMemo[NodeInfo] = ParseMemo("node", NodeInfo.from_object)
        self._pods: ParseMemo[PodInfo] = ParseMemo("pod", PodInfo.from_object)
        self.states: dict[str, GangState] = {}
        #: gang key -> (pod, reason) -> last message sent, so an Event is not repeated.
        self._events_sent: dict[str, dict[tuple[PodRef, str], str]] = {}
        self._first_seen: dict[str, tuple[int, float]] = {}

    # --- helpers ---------------------------------------------------------------------
    def _state(self, key: str) -> GangState:
        return self.states.setdefault(key, GangState(key))

    def _event_once(self, key: str, pod: Obj, kind: str, reason: str, message: str) -> None:
        """Emit an Event unless this pod already got the same reason and message."""
        ref = PodRef.of(pod)
        sent = self._events_sent.setdefault(key, {})
        if sent.get((ref, reason)) == message:
            return
        sent[(ref, reason)] = message
        self.writer.emit_event(ref, contract.pod_meta(pod).get("uid"), kind, reason, message)

    def _backoff(self, state: GangState) -> float:
        state.attempts += 1
        return float(min(BACKOFF_BASE_SECONDS * 2 ** (state.attempts - 1), BACKOFF_MAX_SECONDS))

    def _finish(self, state: GangState, phase: Phase, reason: str, requeue: float | None = None) -> Outcome:
        state.move(phase, reason)
        return Outcome(phase, reason, requeue)

    def forget(self, key: str) -> None:
        """Drop what is remembered of a gang that has no members left."""
        self.states.pop(key, None)
        self._first_seen.pop(key, None)
        self._events_sent.pop(key, None)

    # --- the decision ----------------------------------------------------------------
    def reconcile(self, key: str) -> Outcome | None:
        """Reconcile gang ``key``; returns the outcome, or None when the gang is gone."""
        members = self.cache.members(key)
        if not members:
            state = self.states.get(key)
            if state is None or state.not_before <= self.clock():
                self.forget(key)  # a gang rolled back keeps its backoff while its owner recreates it
            return None
        state = self._state(key)
        active = [p for p in members if is_active(p)]
        gated = sorted((p for p in active if is_gated(p)), key=contract.rank_key)
        timeout = self._timeout(key, active)
        if timeout is not None and timeout.left <= 0:
            return self._roll_back(key, state, active, timeout)
        outcome = self._decide(key, state, active, gated)
        if timeout is not None:  # look again when the released members' time runs out
            left = timeout.left if outcome.requeue_after is None else min(timeout.left, outcome.requeue_after)
            outcome = Outcome(outcome.phase, outcome.reason, left)
        return outcome

    def _decide(self, key: str, state: GangState, active: list[Obj], gated: list[Obj]) -> Outcome:
        if not gated:
            if not active:
                return self._finish(state, Phase.WAITING, "no active members")
            unbound = [p for p in active if not (p.get("spec") or {}).get("nodeName")]
            if not unbound:
                state.attempts = state.timeouts = 0
                return self._finish(state, Phase.RELEASED, f"all {len(active)} active members released and bound")
            return self._finish(state, Phase.RELEASED, f"{len(active) - len(unbound)} of {len(active)} members bound")

        if state.not_before > self.clock():
            left = state.not_before - self.clock()
            return self._finish(state, Phase.WAITING, f"backing off after {state.timeouts} timeout(s): {left:.0f}s left", left)

        groups = sorted({g for g in map(contract.device_group, gated) if g})
        if groups:
            # DESIGN.md: a device-group pod stays gated until its device IDs are written.
            # Allocation is not in this version: hold rather than start containers without them.
            why = (f"member(s) of SharedDeviceGroup {', '.join(groups)} stay gated: "
                   "device allocation is not available in this version of the reconciler")
            for pod in gated:
                self._event_once(key, pod, "Warning", "SharedDeviceGroupPending", why)
            return self._finish(state, Phase.HELD, why)

        held = self._disagreement(active)
        if held:
            for pod in gated:
                self._event_once(key, pod, "Warning", "GangSpecMismatch", held)
            return self._finish(state, Phase.HELD, held)

        size, wait_reason, recheck = self._size(key, active)
        if size is None or len(active) < size:
            return self._finish(state, Phase.WAITING, wait_reason, recheck)

        released = [p for p in active if not is_gated(p)]
        request = contract.parse_topology_request(gated[0], self.config)
        result = self._plan(gated, request)
        if not result.placed:
            for pod in gated:
                self._event_once(key, pod, "Warning", "GangUnschedulable", result.reason)
            return self._finish(state, Phase.UNSCHEDULABLE, result.reason, self._backoff(state))

        what = "replacement member(s)" if released else "gang"
        state.move(Phase.RELEASING, f"placing {what}: {len(gated)} of {len(active)} members")
        nodes = {PodRef(*a.pod_key.split("/", 1)): a.node for a in result.assignments}
        ranks = {PodRef(*a.pod_key.split("/", 1)): a.rank for a in result.assignments}
        try:
            self._release(key, gated, nodes, ranks)
        except (Conflict, Gone, WriteError) as e:
            log.warning("gang %s: release interrupted: %s", key, e)
            return self._finish(state, Phase.RELEASING, f"release interrupted: {e}", self._backoff(state))
        state.attempts = 0
        placements = ", ".join(f"{PodRef.of(p).name}->{nodes[PodRef.of(p)]}" for p in gated)
        return self._finish(state, Phase.RELEASED, f"released {len(gated)} member(s) in {result.domain}: {placements}")

    # --- timeouts and rollback (DESIGN.md "Gangs": timeout) ------------------------------
    def _timeout(self, key: str, active: Sequence[Obj]) -> Timeout | None:
        """The clock of released members that are not bound yet, or None when there are none.

        The timeout runs from the earliest ``released-at`` among them, for the gang's
        effective timeout (stamped by the webhook; the default for GKE auto-gangs) plus a
        jitter drawn from ``[0, gangScheduleTimeoutJitterSeconds]``, fixed per gang and
        release so that a restart computes the same deadline (seeds/001).
        """
        stamps: list[float] = []
        for pod in active:
            ann = contract.pod_annotations(pod)
            if is_gated(pod) or (pod.get("spec") or {}).get("nodeName") or contract.RELEASED_AT not in ann:
                continue
            try:
                stamps.append(dt.datetime.fromisoformat(str(ann[contract.RELEASED_AT])).timestamp())
            except ValueError:
                log.warning("gang %s: unreadable %s %r", key, contract.RELEASED_AT, ann[contract.RELEASED_AT])
        if not stamps:
            return None
        keys = contract.GangKeys.for_prefix(self.config.gang_annotation_prefix)
        raw = contract.pod_annotations(active[0]).get(keys.timeout)
        try:
            seconds = contract.effective_timeout(raw if isinstance(raw, str) else None, self.config, keys.timeout)
        except contract.ContractError:
            seconds = self.config.gang_schedule_default_timeout_seconds
        released = min(stamps)
        jitter = random.Random(f"{key}@{released}").uniform(0, self.config.gang_schedule_timeout_jitter_seconds)
        return Timeout(seconds, jitter, released + seconds + jitter - self.wall_clock(), len(stamps))

    def _roll_back(self, key: str, state: GangState, active: Sequence[Obj], timeout: Timeout) -> Outcome:
        """Delete the members a controller owns (it recreates them, gated again); never
        delete an ownerless pod, tell it with an Event instead. The next release of the
        gang backs off (10 s doubling to 5 min)."""
        why = (f"{timeout.unbound} released member(s) not bound within {timeout.seconds}s "
               f"(+{timeout.jitter:.0f}s jitter)")
        deleted, kept = 0, []
        for pod in active:
            if not _controller_of(pod):
                kept.append(PodRef.of(pod).name)
                self._event_once(key, pod, "Warning", "GangTimedOut",
                                 f"{why}; not deleted: no controller owns this pod, delete it to retry the gang")
                continue
            self._event_once(key, pod, "Warning", "GangTimedOut", f"{why}; deleting it: its controller recreates it")
            ref = PodRef.of(pod)
            try:
                # KEP-3329: a DisruptionTarget condition lets a Job's podFailurePolicy ignore
                # this deletion instead of counting it against backoffLimit.
                self.writer.add_pod_condition(ref, {
                    "type": "DisruptionTarget", "status": "True", "reason": DISRUPTION_REASON,
                    "message": f"Troupe: gang {key} rolled back: {why}",
                    "lastTransitionTime": dt.datetime.fromtimestamp(self.wall_clock(), dt.UTC).isoformat(timespec="seconds"),
                })
                self.writer.delete_pod(ref, str(contract.pod_meta(pod).get("uid")))
                deleted += 1
            except Gone:
                pass
        state.timeouts += 1
        backoff = float(min(TIMEOUT_BACKOFF_BASE_SECONDS * 2 ** (state.timeouts - 1), TIMEOUT_BACKOFF_MAX_SECONDS))
        state.not_before = self.clock() + backoff
        detail = f"deleted {deleted} member(s)" + (f"; ownerless, kept: {', '.join(sorted(kept))}" if kept else "")
        return self._finish(state, Phase.ROLLED_BACK, f"{why}; {detail}; next release in {backoff:.0f}s at the earliest", backoff)

    def _plan(self, gated: Sequence[Obj], request: contract.TopologyRequest) -> PlacementResult:
        """Ask the engine where the gated members go, on a snapshot of the whole cache
        (pods released or bound count where they run)."""
        nodes, pods = self.cache.objects()
        snapshot = Snapshot(self._nodes.parse(nodes), self._pods.parse(pods), self.levels)
        members = [snapshot.pods[str(PodRef.of(p))] for p in gated if str(PodRef.of(p)) in snapshot.pods]
        if len(members) < len(gated):
            return PlacementResult(False, [], Code.UNRESOLVABLE, "a member's spec cannot be read (see the reconciler's log)")
        return place_gang(snapshot, members, request.required_level, request.preferred_level)

    def _disagreement(self, active: Sequence[Obj]) -> str:
        """A message naming the keys the members disagree on, or "" when they agree."""
        specs: dict[str, set[str]] = {}
        keys = contract.GangKeys.for_prefix(self.config.gang_annotation_prefix)
        for pod in active:
            ann = contract.pod_annotations(pod)
            for k in (keys.size, keys.timeout, contract.TOPOLOGY_REQUIRED_LEVEL, contract.TOPOLOGY_PREFERRED_LEVEL):
                specs.setdefault(k, set()).add(str(ann.get(k, "<unset>")))
        differing = [f"{k}: {', '.join(sorted(v))}" for k, v in specs.items() if len(v) > 1]
        if not differing:
            return ""
        return "members disagree on " + "; ".join(differing) + " (held until they agree)"

    def _size(self, key: str, active: Sequence[Obj]) -> tuple[int | None, str, float | None]:
        """The gang's size, the waiting reason, and when to look again.

        Troupe gangs state their size. A GKE auto-gang (``seeds/002``) owned by a Job has
        the Job's ``parallelism``; any other has the pods present once no new member has
        appeared for ``autoGangSettleSeconds`` (DESIGN.md "Topology").
        """
        spec = contract.parse_gang(active[0], self.config)
        if spec is not None:
            return spec.size, f"{len(active)} of {spec.size} members present", None
        owner = _controller_of(active[0])
        if owner is not None and owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch/"):
            ns = str(contract.pod_meta(active[0]).get("namespace") or "default")
            job = self.cache.job(ns, str(owner.get("name")))
            if job is not None:
                parallelism = (job.get("spec") or {}).get("parallelism")
                size = parallelism if isinstance(parallelism, int) and parallelism > 0 else 1
                return size, f"{len(active)} of {size} members present (Job {owner.get('name')} parallelism)", None
        count, since = self._first_seen.get(key, (-1, 0.0))
        now = self.clock()
        if count != len(active):
            self._first_seen[key] = (len(active), now)
            since = now
        settle = float(self.config.auto_gang_settle_seconds)
        if now - since >= settle:
            return len(active), "", None
        left = settle - (now - since)
        return None, f"{len(active)} members present, settling for {left:.0f}s more", left

    # --- the writes ------------------------------------------------------------------
    def _write(self, pod: Obj, make_patch: Callable[[Obj], dict[str, Any] | None]) -> Obj:
        """Apply ``make_patch(pod)`` (None = nothing to do) with a resourceVersion
        precondition; on conflict read the pod again and retry, at most
        :data:`CONFLICT_RETRIES` times."""
        ref = PodRef.of(pod)
        current: Obj = pod
        for attempt in range(CONFLICT_RETRIES + 1):
            patch = make_patch(current)
            if patch is None:
                return current
            patch.setdefault("metadata", {})["resourceVersion"] = contract.pod_meta(current).get("resourceVersion")
            try:
                updated = self.writer.patch_pod(ref, patch)
            except Conflict:
                if attempt == CONFLICT_RETRIES:
                    raise
                current = self.writer.read_pod(ref)
                continue
            self.cache.assume(updated)
            return updated
        raise AssertionError("unreachable")

    def _release(self, key: str, gated: Sequence[Obj], nodes: Mapping[PodRef, str], ranks: Mapping[PodRef, int]) -> None:
        pinned: list[Obj] = []
        for pod in gated:
            node, rank = nodes[PodRef.of(pod)], ranks[PodRef.of(pod)]

            def pin(current: Obj, node: str = node, rank: int = rank) -> dict[str, Any] | None:
                ann = contract.pod_annotations(current)
                selector = (current.get("spec") or {}).get("nodeSelector") or {}
                if selector.get(contract.HOSTNAME_LABEL) == node and ann.get(contract.ASSIGNED_NODE) == node:
                    return None
                if not is_gated(current):
                    raise Conflict(f"pod {PodRef.of(current)} was ungated by someone else")
                released_at = dt.datetime.fromtimestamp(self.wall_clock(), dt.UTC).isoformat(timespec="seconds")
                return {
                    "metadata": {"annotations": {
                        contract.ASSIGNED_NODE: node, contract.ASSIGNED_RANK: str(rank), contract.RELEASED_AT: released_at,
                    }},
                    "spec": {"nodeSelector": {contract.HOSTNAME_LABEL: node}},
                }

            pinned.append(self._write(pod, pin))
        for pod in pinned:

            def ungate(current: Obj) -> dict[str, Any] | None:
                ours = [g for g in contract.pod_gates(current) if contract.is_troupe_gate(g)]
                if not ours:
                    return None
                return {"spec": {"schedulingGates": [{"$patch": "delete", "name": g} for g in ours]}}

            done = self._write(pod, ungate)
            node = nodes[PodRef.of(pod)]
            log.info("released pod %s to node %s (rank %d)", PodRef.of(pod), node, ranks[PodRef.of(pod)])
            others = [g for g in contract.pod_gates(done) if not contract.is_troupe_gate(g)]
            extra = f"; still gated by {', '.join(others)}" if others else ""
            self._event_once(key, done, "Normal", "GangReleased", f"placed on node {node} (rank {ranks[PodRef.of(pod)]}){extra}")
