"""The PodDisruptionBudgets ``atomic`` preemption counts (:class:`BudgetIndex`), kept as
:class:`~reconciler.engine.model.budgets.Budget` values (selector and
``status.disruptionsAllowed``), not as objects
(docs/decisions/030-preemption-budgets-and-fences.md).

:class:`BudgetIndex` is the part of :class:`~reconciler.daemon.cache.ClusterCache` that
keeps them; the cache hands them to every snapshot it builds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from reconciler.daemon.cache.unreadable import Unreadable
from reconciler.daemon.cache.workloads import Obj, namespace_and_name
from reconciler.engine.model.budgets import Budget


class BudgetIndex:
    """PodDisruptionBudgets by ``(namespace, name)``. :attr:`version` counts changes (a
    snapshot built from an older version is stale). A budget that cannot be read is left
    out with one log line: the dry-run eviction before every real one is still the last
    check. Thread-safe; it takes no other lock while it holds its own."""

    def __init__(self, unreadable: Unreadable | None = None) -> None:
        self._unreadable = unreadable or Unreadable()
        self._lock = threading.Lock()
        self._budgets: dict[tuple[str, str], Budget] = {}
        self._values: tuple[int, tuple[Budget, ...]] | None = None
        self.version = 0

    def _parse(self, obj: Obj) -> Budget | None:
        """The budget, or None when it cannot be read (whatever reading it raised: it is
        logged once and counted, :mod:`.unreadable`)."""
        namespace, name = namespace_and_name(obj)
        return self._unreadable.read("poddisruptionbudget", f"{namespace}/{name}", Budget.from_object, obj)[0]

    def replace(self, items: Iterable[Obj]) -> None:
        """Replace every budget with a fresh list."""
        fresh = {namespace_and_name(obj): budget for obj in items if (budget := self._parse(obj)) is not None}
        with self._lock:
            if fresh != self._budgets:
                self._budgets = fresh
                self.version += 1

    def event(self, kind: str, obj: Obj) -> bool:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``); whether anything
        changed (a status written with the same count changes nothing)."""
        key = namespace_and_name(obj)
        budget = None if kind == "DELETED" else self._parse(obj)
        with self._lock:
            before = self._budgets.get(key)
            if budget is None:
                self._budgets.pop(key, None)
            else:
                self._budgets[key] = budget
            changed = self._budgets.get(key) != before
            if changed:
                self.version += 1
            return changed

    def values(self) -> tuple[int, tuple[Budget, ...]]:
        """``(version, every budget sorted by namespace and name)``, one consistent value."""
        with self._lock:
            if self._values is None or self._values[0] != self.version:
                self._values = (self.version, tuple(self._budgets[key] for key in sorted(self._budgets)))
            return self._values
