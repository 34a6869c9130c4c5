"""The reconciler's decision loop (:class:`GangWorker`): its one worker thread takes the
ready keys from the work queue in passes, reconciles SharedDeviceGroups and stray records
one at a time and decides the gangs of a pass on one snapshot, hands each gang's key back to
the queue once its writes are done, and makes each reconcile's outcome metrics and logs
(docs/decisions/068-release-pipeline.md). :class:`~reconciler.run.reconciler.Reconciler`
wires it to the informers, the cache and the controllers."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from prometheus_client import Counter, Gauge, Histogram

from reconciler.daemon import metrics
from reconciler.daemon.cache import ClusterCache, group_of_key, workload_of_key
from reconciler.daemon.controller import Outcome
from reconciler.daemon.cycle import Cycle
from reconciler.daemon.queue import ShutDown, WorkQueue
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import queue_order
from reconciler.run.controllers import Controllers
from troupe.config import Config

log = logging.getLogger("reconciler")

RECONCILES = Counter("troupe_reconciles_total", "Gang reconciles, by resulting phase.", ["phase"])
RECONCILE_ERRORS = Counter("troupe_reconcile_errors_total", "Reconciles that raised an unexpected error.")
PREEMPTIONS = Counter("troupe_preemptions_total", "Preemption plans carried out (nominations written), by mode.",
                      ["mode"])
EVICTIONS = Counter("troupe_preemption_victims_total", "Victim pods evicted for preemptors (eviction requested).")
REFUSED_MOVES = Counter("troupe_lifecycle_refused_moves_total",
                        "Phase moves the gang lifecycle refused (nothing was written; should stay 0).")
RECONCILE_SECONDS = Histogram(
    "troupe_reconcile_duration_seconds", "Time to reconcile one gang (decision and writes), seconds.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
GANGS = Gauge("troupe_gangs", "Gangs known to the reconciler, by phase.", ["phase"])
CYCLE_GANGS_DECIDED = Histogram(
    "troupe_cycle_gangs", "Gangs decided in one pass of the worker, on one snapshot (docs/decisions/068).",
    buckets=(1, 2, 4, 8, 16, 32, 64))
CYCLE_SNAPSHOTS = Counter("troupe_cycle_snapshots_total",
                          "Snapshots the worker's passes took from the cache (the others applied each release in place).")
ASSUMED = Gauge("troupe_assumed_members", "Members of releases decided whose writes the cache has not seen land "
                "(in flight, or of unknown outcome for a while).")
QUEUE_DEPTH = Gauge("troupe_workqueue_depth", "Gang keys waiting in the work queue.")

#: Keys taken from the work queue in one pass of the worker, at most: the gangs among them
#: are decided on one snapshot (docs/decisions/068-release-pipeline.md). A gang of higher
#: priority that becomes ready meanwhile waits for the pass to end.
CYCLE_GANGS = 32


class GangWorker:
    """The worker thread's loop (:meth:`_work`) over what the reconciler that inherits it
    holds: its ``config``, monotonic ``clock`` (seconds), ``cache``, work ``queue``,
    ``controllers`` and ``gang_metrics``. ``_busy`` is the key being reconciled and since
    when (the health check reads it); ``_finishing`` serialises the end of reconciles, on
    the worker or on a release thread."""

    config: Config
    clock: Callable[[], float]
    cache: ClusterCache
    queue: WorkQueue
    controllers: Controllers
    gang_metrics: metrics.GangMetrics
    _stop: threading.Event
    _busy: tuple[str, float] | None
    _finishing: threading.Lock

    def _enqueue(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add(key)


    def _work(self) -> None:
        """Take the ready keys in passes (:data:`CYCLE_GANGS` at most): SharedDeviceGroups and
        stray records first, one at a time, then the gangs as one cycle
        (:meth:`_decide_cycle`)."""
        while not self._stop.is_set():
            try:
                keys = self.queue.get_batch(CYCLE_GANGS)
            except ShutDown:
                return
            gangs = []
            for key in keys:
                if group_of_key(key) is None and workload_of_key(key) is None:
                    gangs.append(key)
                    continue
                self._busy = (key, self.clock())
                start = time.perf_counter()
                try:
                    self._reconcile_other(key)
                except Exception:
                    RECONCILE_ERRORS.inc()
                    delay = self.queue.add_rate_limited(key)
                    log.exception("%s: reconcile failed; retrying in %.0fs", key, delay)
                finally:
                    self._busy = None
                    RECONCILE_SECONDS.observe(time.perf_counter() - start)
                    self.queue.done(key)
            if gangs:
                self._decide_cycle(gangs)
            self._update_gauges()

    def _reconcile_other(self, key: str) -> None:
        """A SharedDeviceGroup's key or a stray record's: reconciled now, retried with the
        queue's backoff when a write failed."""
        group, stray = group_of_key(key), workload_of_key(key)
        retry = self.controllers.reservations.remove_stray(stray) if stray is not None \
            else self.controllers.groups.reconcile(group) if group is not None else False
        if retry:
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)

    def _decide_cycle(self, keys: list[str]) -> None:
        """Decide gangs ``keys`` in queue order (the highest priority first, then the
        earliest creation) on one snapshot (:class:`~reconciler.daemon.cycle.Cycle`): each
        release is applied to it before the next gang is decided and written on the release
        threads meanwhile; a gang's key stays in the queue's hands until its writes are done
        (docs/decisions/068-release-pipeline.md)."""
        gangs = self.controllers.gangs
        order = {}
        for key in keys:
            gang = gangs.gang(key)
            order[key] = (-1, "", key) if gang is None else queue_order(gang.key, gang.priority, gang.created)
        cycle = Cycle(self.cache)
        for key in sorted(keys, key=order.__getitem__):
            self._busy = (key, self.clock())
            start = time.perf_counter()
            try:
                outcome = gangs.reconcile(key, cycle, wait=False)
            except Exception:  # noqa: BLE001  counted, logged and retried (_failed)
                self._failed(key, start)
                continue
            finally:
                self._busy = None
            if outcome is not None and outcome.pending is not None:
                outcome.pending.add_done_callback(functools.partial(self._written, key, start))
            else:
                self._finish(key, outcome, start)
        CYCLE_GANGS_DECIDED.observe(len(keys))
        CYCLE_SNAPSHOTS.inc(cycle.taken)

    def _written(self, key: str, start: float, pending: Future[Outcome]) -> None:
        """A gang's writes are done (on a release thread): finish its reconcile."""
        try:
            outcome = pending.result()
        except Exception:  # noqa: BLE001  counted, logged and retried (_failed)
            self._failed(key, start)
            return
        self._finish(key, outcome, start)

    def _failed(self, key: str, start: float) -> None:
        """A reconcile of gang ``key`` raised: count it, retry with the queue's backoff."""
        with self._finishing:
            RECONCILE_ERRORS.inc()
            delay = self.queue.add_rate_limited(key)
            log.exception("gang %s: reconcile failed; retrying in %.0fs", key, delay)
            RECONCILE_SECONDS.observe(time.perf_counter() - start)
            self.queue.done(key)

    def _finish(self, key: str, outcome: Outcome | None, start: float) -> None:
        """Count a gang's reconcile and queue it again as its outcome asks, then hand its key
        back to the queue. Called by the worker, or by a release thread once the gang's
        writes are done: one at a time."""
        with self._finishing:
            try:
                if outcome is None:
                    self.gang_metrics.forget(key)
                    self.queue.forget(key)
                    return
                self.gang_metrics.observe(key, outcome, functools.partial(self.cache.gang, key), time.time())
                RECONCILES.labels(outcome.phase.value).inc()
                if outcome.preempted and not outcome.retry:
                    PREEMPTIONS.labels(self.config.gang_preemption_mode).inc()
                EVICTIONS.inc(outcome.evicted)
                if outcome.refused_move:
                    REFUSED_MOVES.inc()
                if outcome.retry:
                    self.queue.add_rate_limited(key)
                else:
                    self.queue.forget(key)
                if outcome.requeue_after is not None:
                    self.queue.add_after(key, outcome.requeue_after)
                if outcome.others:  # it started or stopped holding or blocking the gangs behind it
                    self._enqueue(k for k in self.controllers.gangs.helped_by(None) if k != key)
            finally:
                RECONCILE_SECONDS.observe(time.perf_counter() - start)
                self.queue.done(key)

    def _update_gauges(self) -> None:
        counts: dict[str, int] = {}
        for phase in self.controllers.gangs.phases().values():
            counts[phase.value] = counts.get(phase.value, 0) + 1
        for phase in Phase:
            GANGS.labels(phase.value).set(counts.get(phase.value, 0))
        QUEUE_DEPTH.set(len(self.queue))
        ASSUMED.set(self.cache.assumed_count())

