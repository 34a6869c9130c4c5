"""What one action's handler did (:class:`Done`), and the shape of a handler (:data:`Handler`)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from reconciler.daemon.memory import Memory
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang


@dataclass(frozen=True)
class Done:
    """What one action's handler did: ``note`` appended to the reason, ``retry``,
    ``requeue_after`` (seconds; replaces the decision's), and what the metrics count:
    ``released`` members written, ``rolled_back``, ``preempted`` (a new plan carried out),
    ``evicted`` evictions asked. ``pending``: what the handler still does after returning,
    the :class:`Done` it will give (a release written while the worker decides the next
    gangs, docs/decisions/068-release-pipeline.md); None when it is done."""

    pending: Future[Done] | None = None
    note: str = ""
    retry: bool = False
    requeue_after: float | None = None
    released: int = 0
    rolled_back: bool = False
    preempted: bool = False
    evicted: int = 0


Handler = Callable[[Gang, Decision, Any, Memory, float], Done]
"""A handler: ``(gang, decision, action, the gang's memory, now (seconds since the epoch))
-> what it did``; ``action`` is one of the decision's actions, of the type the handler is
registered for in the gang controller's table."""
