"""The release threads (:class:`Waves`): the writes of a release or a rollback run
``releaseConcurrency`` at a time, each wave of that many started only once the leader's fence
is confirmed (docs/decisions/016-bounded-failure-detection.md); the evictions of a
preemption run on the same threads. Releases of several gangs are written at once, each
driven by a thread of its own (:meth:`Waves.start`) while the worker decides the next
gangs (docs/decisions/068-release-pipeline.md): their writes share the release threads and
the client's rate budget."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from reconciler.ports.base import Fence, LostLeadership

log = logging.getLogger("reconciler.daemon.controller")

T = TypeVar("T")
R = TypeVar("R")


def default_in_flight(concurrency: int) -> int:
    """How many releases are written at once for ``concurrency`` release threads: a quarter,
    at least 4 (each drives its members' writes on the shared release threads)."""
    return max(4, concurrency // 4)


class Waves:
    """``concurrency`` release threads, ``fence``, confirmed before each wave of writes, and
    ``in_flight`` driver threads, each writing one release at a time (:meth:`start`;
    default :func:`default_in_flight`)."""

    def __init__(self, concurrency: int, fence: Fence, in_flight: int | None = None) -> None:
        self.concurrency = concurrency
        self.fence = fence
        self.in_flight = in_flight or default_in_flight(concurrency)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="release")
        self._drivers = ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="release-driver")

    def start(self, job: Callable[[], R]) -> Future[R]:
        """Run ``job`` (one release: its writes, through :meth:`write`) on a driver thread;
        returns its future at once. Jobs beyond :attr:`in_flight` wait their turn in order."""
        return self._drivers.submit(job)

    def write(self, items: Sequence[T], write: Callable[[T], R], refused: Callable[[T, str], R]) -> list[R]:
        """``write`` each item on the release threads, :attr:`concurrency` in flight,
        confirming the fence before each wave of that many: wave ``k`` (items ``k*C`` to
        ``k*C+C-1``) is started only once the Lease has been read back with this replica as
        its holder. A wave starts as slots free up, not after the whole previous wave. Items
        not started because the fence refused get ``refused(item, why)``. Results in the
        order of ``items``."""
        slots = threading.Semaphore(self.concurrency)
        futures: list[Future[R]] = []
        results: list[R] = []
        why = ""
        for i, item in enumerate(items):
            if i % self.concurrency == 0:
                try:
                    self.fence.confirm()
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

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """``fn`` of each item on the release threads, all at once (no fence: the caller
        checks it); the results in the order of ``items``."""
        return self._pool.map(fn, items)

    def close(self) -> None:
        """Stop the threads (after the releases and writes in flight)."""
        self._drivers.shutdown(wait=True)
        self._pool.shutdown(wait=True)
