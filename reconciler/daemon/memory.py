"""What the gang controller remembers of each gang between reconciles (:class:`Memory`), kept by
gang key in :class:`Memories`, which the controller and the handlers that change a gang's
memory (its rollbacks, the Events told once) share."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.selectors import NodeFilter


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
    #: What failed of the last release written for the gang (``1 of 4 write(s) failed
    #: (...)``), ``""``: none: a release decision says why it finishes a release.
    unwritten: str = ""

    def avoiding(self, now: float) -> dict[str, str]:
        """The nodes avoided at ``now``: node -> why."""
        return {node: why for node, (until, why) in (self.avoid or {}).items() if until > now}


class Memories:
    """Every gang's :class:`Memory`, by gang key. Thread-safe: the worker thread changes them
    while the probes' and the informers' threads read them (:meth:`phases`, :meth:`priority`,
    :meth:`status`, :meth:`waiting`). ``lock`` guards a memory's fields: whoever changes or
    reads several of them at once holds it (not while calling a method of this class)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_key: dict[str, Memory] = {}

    def get(self, key: str) -> Memory | None:
        """The memory of gang ``key``, None when nothing is remembered of it."""
        with self.lock:
            return self._by_key.get(key)

    def of(self, key: str) -> Memory:
        """The memory of gang ``key``, made empty when nothing was remembered of it."""
        with self.lock:
            memory = self._by_key.get(key)
            if memory is None:
                memory = self._by_key[key] = Memory()
            return memory

    def forget(self, key: str, now: float) -> Memory | None:
        """Drop the memory of gang ``key`` unless its rollback's backoff still runs at ``now``
        or it still avoids a node; returns the memory dropped (None: nothing dropped)."""
        with self.lock:
            memory = self._by_key.get(key)
            if memory is None or memory.not_before > now or memory.avoiding(now):
                return None
            del self._by_key[key]
            return memory

    def phases(self) -> dict[str, Phase]:
        """The last phase of every gang decided, by key."""
        with self.lock:
            return {k: m.phase for k, m in self._by_key.items() if m.phase is not None}

    def status(self) -> dict[str, tuple[Phase, str]]:
        """The last phase and reason of every gang decided, by key."""
        with self.lock:
            return {k: (m.phase, m.reason) for k, m in self._by_key.items() if m.phase is not None}

    def priority(self, key: str) -> int:
        """The priority of gang ``key`` at its last decision (0 when never decided)."""
        with self.lock:
            memory = self._by_key.get(key)
            return memory.priority if memory is not None else 0

    def waiting(self) -> list[tuple[str, tuple[NodeFilter, ...]]]:
        """The gangs that wait for room, each with its gated members' node filters."""
        with self.lock:
            return [(k, m.filters) for k, m in self._by_key.items() if m.waits_for_room]
