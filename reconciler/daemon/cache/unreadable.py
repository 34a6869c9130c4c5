"""The objects the cache could not read, each kept to itself
(docs/decisions/029-hostile-objects-hold-their-gang.md).

Whatever reading one object raises (an :class:`~reconciler.engine.model.fields.ObjectError`
naming a field, or any other exception: a ``ValueError`` from a number past Python's
4,300 digits, a ``RecursionError`` from JSON nested too deep, a ``TypeError`` or
``KeyError`` from a shape no reader expected) stays with that object: :meth:`Unreadable.read`
returns no value and why, the cache keeps the object as unreadable, and every other
object, the list that brought it and the informer's sync go on. Each object is logged
once per reason (not again for every version that fails the same way) and counted
(``troupe_unreadable_objects_total``, by kind, through the ``on_unreadable`` hook the
daemon wires to :mod:`reconciler.daemon.metrics`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from reconciler.engine.model.fields import ObjectError
from troupe.errors import MAX_QUOTED

log = logging.getLogger("reconciler.daemon.cache")

T = TypeVar("T")
#: Longest reason kept or logged, in characters (an exception may quote a whole value).
MAX_REASON = 4 * MAX_QUOTED


def describe(error: BaseException) -> str:
    """One line saying what ``error`` is: an :class:`ObjectError`'s own message (it names
    the field), else the exception's type and message; cut to :data:`MAX_REASON`
    characters. Never raises (a message that cannot be made gives the type alone)."""
    try:
        text = str(error) if isinstance(error, ObjectError) else f"{type(error).__name__}: {error}"
    except Exception:  # noqa: BLE001  an exception whose message cannot be made (a huge int in it, say)
        text = type(error).__name__
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + f"... ({len(text)} characters)"


class Unreadable:
    """Why each object that could not be read was not, by ``(kind, name)``; thread-safe.

    ``on_unreadable(kind)`` is called once for each object newly found unreadable, or
    unreadable for a new reason (the same moments it is logged). At most :attr:`LIMIT`
    objects are remembered (the oldest are forgotten first: one may then be logged
    again)."""

    LIMIT = 50_000

    def __init__(self, on_unreadable: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._why: dict[tuple[str, str], str] = {}
        self._on_unreadable = on_unreadable

    def read(self, kind: str, name: str, parse: Callable[[Any], T], obj: Any,
             fallback: Callable[[Any, str], T] | None = None) -> tuple[T | None, str]:
        """``(parse(obj), "")``, or ``(fallback(obj, why), why)`` when it raised (any
        ``Exception``); without a ``fallback``, or when the fallback raises too, ``(None, why)``."""
        try:
            value = parse(obj)
        except Exception as error:  # noqa: BLE001  one object's error is that object's, whatever it is
            why = describe(error)
            self.record(kind, name, why)
            if fallback is not None:
                with contextlib.suppress(Exception):
                    return fallback(obj, why), why
            return None, why
        if self._why:
            self.forget(kind, name)
        return value, ""

    def record(self, kind: str, name: str, why: str) -> None:
        """Note that object ``name`` of ``kind`` cannot be read, because ``why``: logged
        and counted unless that was already known."""
        with self._lock:
            if self._why.get((kind, name)) == why:
                return
            self._why.pop((kind, name), None)
            self._why[(kind, name)] = why
            while len(self._why) > self.LIMIT:
                del self._why[next(iter(self._why))]
        log.warning("%s %s cannot be read, left out of plans: %s", kind, name, why)
        if self._on_unreadable is not None:
            self._on_unreadable(kind)

    def forget(self, kind: str, name: str) -> None:
        """``name`` was read (or deleted): a later failure is news again."""
        with self._lock:
            self._why.pop((kind, name), None)

    def why(self, kind: str, name: str) -> str:
        """Why object ``name`` of ``kind`` could not be read, or ``""``."""
        with self._lock:
            return self._why.get((kind, name), "")

    def count(self) -> int:
        """How many objects are remembered as unreadable."""
        with self._lock:
            return len(self._why)
