"""A memo bounded by what it holds: :class:`ChargedMemo`.

A process-wide memo keyed by what a tenant writes (its pods' annotations, its claims'
selectors) is filled by whoever makes the most distinct keys, and keeps them after the
objects are gone. Bounded by its count of entries, it holds that count times the largest
entry, which a tenant chooses (docs/decisions/063-memos-held-by-their-users.md); bounded
by a charge in bytes per entry, it holds at most its budget, whatever the entries are.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ChargedMemo(Generic[K, V]):
    """A least-recently-used memo whose entries together are charged at most ``budget``
    bytes: ``charge(key, value)`` estimates what one entry holds (its key's and value's
    memory, with the overhead of the entry), and the oldest entries are dropped until the
    sum is within the budget again. A value charged more than the whole budget is not kept.
    Safe to share between threads."""

    def __init__(self, budget: int, charge: Callable[[K, V], int]) -> None:
        self.budget = budget
        self._charge = charge
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        #: Bytes charged for the entries held now (at most :attr:`budget`).
        self.held = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` when it fits the budget (dropping the least recently
        used entries as needed); returns ``value`` either way."""
        cost = self._charge(key, value)
        if cost > self.budget:
            return value
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.held -= old[1]
            self._entries[key] = (value, cost)
            self.held += cost
            while self.held > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.held -= dropped
        return value

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self.held = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
