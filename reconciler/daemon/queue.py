"""A work queue of gang keys, with the guarantees of client-go's workqueue.

- A key waiting in the queue is held once, however often it is added (dedup).
- A key is processed by one worker at a time: one added while in flight is queued again
  when :meth:`WorkQueue.done` is called.
- :meth:`WorkQueue.add_after` delays a key (periodic re-checks); an earlier deadline
  replaces a later one.
- :meth:`WorkQueue.add_rate_limited` delays a key by its own exponential backoff (1 s
  doubling to 60 s per consecutive failure, as client-go's
  ``ItemExponentialFailureRateLimiter``); :meth:`WorkQueue.forget` resets it once the key
  succeeds. This is the one place where the reconciler's retries back off. A caller that
  :meth:`WorkQueue.add` s a key in backoff ends the backoff: it does so only for an event
  that can change the key's outcome (docs/decisions/019-queue-order.md).
- Ready keys are handed out by ``order(key) -> (priority, tenant)``: the highest priority
  first, and among equal priorities one tenant (namespace) after the other, first in first
  out within a tenant, so that many keys of one namespace (500 unschedulable one-pod
  gangs, say) do not make another namespace's key wait behind all of them (the fairness
  of API Priority and Fairness' shuffle-sharded queues, kept simple: round robin).

The clock is injected (a ``() -> float`` in seconds) so tests never sleep.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable

Order = Callable[[str], tuple[int, str]]
"""``key -> (priority, tenant)``: higher priority first; round robin across tenants."""


def _same(key: str) -> tuple[int, str]:
    return (0, "")


class ShutDown(Exception):
    """The queue was shut down: workers stop."""


#: Backoff of a failing key: seconds, doubling per consecutive failure, capped.
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


class WorkQueue:
    """A FIFO of unique keys plus a delay heap and per-key failure backoff. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 base_delay: float = BACKOFF_BASE_SECONDS, max_delay: float = BACKOFF_MAX_SECONDS,
                 order: Order = _same) -> None:
        self._clock = clock
        self._base, self._max = base_delay, max_delay
        self._order = order
        self._failures: dict[str, int] = {}
        self._cond = threading.Condition()
        #: priority -> tenant -> keys (FIFO); priority -> tenants in turn.
        self._ready: dict[int, dict[str, deque[str]]] = {}
        self._turns: dict[int, deque[str]] = {}
        self._count = 0
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._deadline: dict[str, float] = {}
        self._seq = 0
        self._shut = False

    def __len__(self) -> int:
        with self._cond:
            return self._count

    def add(self, key: str) -> None:
        """Queue ``key`` now (no-op if already queued; re-queued after done if in flight)."""
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: str) -> None:
        if self._shut:
            return
        self._deadline.pop(key, None)
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            priority, tenant = self._order(key)
            tenants = self._ready.setdefault(priority, {})
            if tenant not in tenants:
                tenants[tenant] = deque()
                self._turns.setdefault(priority, deque()).append(tenant)
            tenants[tenant].append(key)
            self._count += 1
            self._cond.notify()

    def _pop_locked(self) -> str:
        """The next ready key: highest priority, the tenant whose turn it is, its oldest key."""
        priority = max(self._ready)
        tenants, turns = self._ready[priority], self._turns[priority]
        tenant = turns.popleft()
        keys = tenants[tenant]
        key = keys.popleft()
        if keys:
            turns.append(tenant)
        else:
            del tenants[tenant]
            if not tenants:
                del self._ready[priority], self._turns[priority]
        self._count -= 1
        return key

    def add_after(self, key: str, delay_seconds: float) -> None:
        """Queue ``key`` after ``delay_seconds``; an earlier pending deadline wins."""
        if delay_seconds <= 0:
            self.add(key)
            return
        with self._cond:
            at = self._clock() + delay_seconds
            if self._deadline.get(key, float("inf")) <= at:
                return
            self._deadline[key] = at
            self._seq += 1
            heapq.heappush(self._delayed, (at, self._seq, key))
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        """Queue ``key`` after its backoff (``base * 2**failures``, capped) and count one
        more failure; returns the delay in seconds."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self._base * 2.0 ** failures, self._max))
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset ``key``'s failure count: its next :meth:`add_rate_limited` waits the base delay."""
        with self._cond:
            self._failures.pop(key, None)

    def _promote_locked(self) -> float | None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            at, _, key = heapq.heappop(self._delayed)
            if self._deadline.get(key) == at:
                del self._deadline[key]
                self._add_locked(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> str | None:
        """The next key, blocking up to ``timeout`` seconds (forever if None).

        Returns None on timeout; raises :class:`ShutDown` once the queue is shut down.
        The caller must call :meth:`done` with the key when finished.
        """
        end = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shut:
                    raise ShutDown()
                wait = self._promote_locked()
                if self._count:
                    key = self._pop_locked()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                if end is not None:
                    left = end - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def get_batch(self, limit: int, timeout: float | None = None) -> list[str]:
        """The next key, as :meth:`get` gives it (blocking up to ``timeout`` seconds), and
        the keys ready with it, up to ``limit`` in all, in the order :meth:`get` would give
        them: what one pass of the worker decides on one snapshot
        (docs/decisions/068-release-pipeline.md). ``[]`` on timeout; raises
        :class:`ShutDown` once the queue is shut down. The caller must call :meth:`done`
        with each key when finished with it."""
        first = self.get(timeout)
        if first is None:
            return []
        keys = [first]
        with self._cond:
            while len(keys) < limit and self._count and not self._shut:
                key = self._pop_locked()
                self._queued.discard(key)
                self._processing.add(key)
                keys.append(key)
        return keys

    def done(self, key: str) -> None:
        """Mark ``key`` finished; if it was added meanwhile, queue it again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def shutdown(self) -> None:
        """Wake every worker with :class:`ShutDown`."""
        with self._cond:
            self._shut = True
            self._cond.notify_all()
