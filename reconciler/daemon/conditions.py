"""Writing the ``troupe.io/Gang`` pod condition: coalesced, a little late, off the hot path.

The engine says which condition each member should carry
(:func:`reconciler.engine.decision.conditions.conditions`); :class:`ConditionSink` writes the ones
that differ from what the pod carries, through ``pods/status``. Writes wait ``delay``
seconds and only the latest wanted condition of a pod is written, so a gang that forms
and is released within the delay costs no condition writes at all, and one whose count
changes with every new member (``3 of 512 members present``, ``4 of 512``...) costs one
write per member, not one per member per arrival. A member released before its first
condition was written gets none (``Released`` is written only over a waiting condition).
Writes never delay a release: they run on the sink's own thread, through the pods' writer
port (its rate limit and its fence). An Event may ride on a condition: it is sent when (and
only when) that condition is written, with its message, so what ``kubectl describe pod``
lists under Events follows the condition's numbers.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.engine.decision.conditions import RELEASED, GangCondition
from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import Gone, WriteError
from reconciler.ports.pods import PodWrites
from troupe import contract

log = logging.getLogger(__name__)

#: Seconds a wanted condition waits before it is written (a newer one replaces it).
DELAY_SECONDS = 1.0


@dataclass
class _Want:
    uid: str
    condition: GangCondition
    due: float
    event: tuple[str, str] | None = None
    on_change_only: bool = False


class ConditionSink:
    """Pending condition writes by pod, made through ``pods``; see the module docstring.

    ``current(ref)`` gives the condition the pod carries now, ``(status, reason,
    message)`` or None (the cache's view), and None for a pod that is gone. ``clock`` is
    monotonic seconds; ``wall`` gives the RFC 3339 time written as ``lastTransitionTime``.
    Thread-safe; :meth:`flush` does the writes (called by :meth:`run`'s thread, or by
    tests)."""

    def __init__(self, pods: PodWrites, current: Callable[[PodKey], tuple[str, str, str] | bool | None],
                 delay: float = DELAY_SECONDS, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], str] | None = None) -> None:
        self.pods, self.current, self.delay, self.clock = pods, current, delay, clock
        self.wall = wall or (lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        self._lock = threading.Lock()
        self._pending: dict[PodKey, _Want] = {}
        #: Conditions written since start, and writes that failed.
        self.written = 0
        self.failed = 0

    def want(self, ref: PodKey, uid: str, condition: GangCondition, event: tuple[str, str] | None = None,
             on_change_only: bool = False) -> None:
        """Ask for ``condition`` on the pod (written after the delay unless replaced) and,
        with ``event`` (``(kind, reason)``), an Event carrying the condition's message sent
        when it is written (with ``on_change_only``, only when the pod's condition had
        another reason): an Event follows the condition it explains, coalesced alike."""
        with self._lock:
            pending = self._pending.get(ref)
            if pending is not None and (pending.condition, pending.event) == (condition, event):
                return
            due = pending.due if pending is not None else self.clock() + self.delay
            self._pending[ref] = _Want(uid, condition, due, event, on_change_only)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self, everything: bool = False) -> int:
        """Write the conditions that are due (all of them with ``everything``); returns how
        many were written."""
        now = self.clock()
        with self._lock:
            due = [(r, w) for r, w in self._pending.items() if everything or w.due <= now]
            for ref, _ in due:
                del self._pending[ref]
        written = 0
        for ref, want in due:
            have = self.current(ref)
            if have is False:
                continue  # the pod is gone
            wanted = want.condition
            if have == wanted.as_tuple():
                continue
            if wanted.reason == RELEASED and have is None and not wanted.notable:
                continue  # never shown waiting: nothing to correct (unless it has news)
            condition = {"type": contract.GANG_CONDITION, "status": wanted.status, "reason": wanted.reason,
                         "message": wanted.message}
            if not isinstance(have, tuple) or have[0] != wanted.status:
                condition["lastTransitionTime"] = self.wall()
            try:
                self.pods.set_pod_condition(ref, condition)
            except Gone:
                continue
            except WriteError as e:
                self.failed += 1
                log.debug("condition of pod %s not written: %s", ref, e)
                continue
            written += 1
            same_reason = isinstance(have, tuple) and have[1] == wanted.reason
            if want.event is not None and not (want.on_change_only and same_reason):
                kind, reason = want.event
                self.pods.emit_event(ref, want.uid or None, kind, reason, wanted.message)
        self.written += written
        return written

    def run(self, stop: threading.Event, interval: float = 0.25) -> None:
        """Flush every ``interval`` seconds until ``stop`` is set (a thread's target)."""
        while not stop.wait(interval):
            try:
                self.flush()
            except Exception:
                log.exception("writing pod conditions failed")
