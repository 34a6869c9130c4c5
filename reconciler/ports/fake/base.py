"""What the in-memory fakes of the writer ports share: resourceVersions from one counter
(:class:`Versions`), as the API server's come from etcd's one revision for every kind, the
Events they record (:class:`RecordedEvent`, one list for all kinds, in order), and what each
keeps of its objects (:class:`FakeStore`)."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from reconciler.engine.model.keys import PodKey
from reconciler.ports.base import UNFENCED, Fence, Gone, LostLeadership, WriteError

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class RecordedEvent:
    """An Event a fake recorded: about ``regarding`` (namespace and name; the namespace is
    ``""`` for a node), an object of ``object_kind`` (``Pod``, ``Node``, a workload's kind),
    of ``kind`` ``Normal`` or ``Warning``."""

    regarding: PodKey
    kind: str
    reason: str
    message: str
    object_kind: str = "Pod"


class Versions:
    """The next resourceVersion (``"1000"``, ``"1001"``...), one counter for every fake that
    shares it. Thread-safe (``itertools.count`` is)."""

    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)

    def next(self) -> str:
        """A new resourceVersion, higher than every one before it."""
        return str(next(self._next))

    def stamped(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A deep copy of ``obj`` with a new resourceVersion: an object as a fake stores it
        when a test adds it."""
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("metadata", {})["resourceVersion"] = self.next()
        return stored


def record_event(events: list[RecordedEvent], fence: Fence, event: RecordedEvent) -> None:
    """Append ``event`` to ``events`` unless ``fence`` refuses (an Event is a write too: a
    replica that is not the leader sends none); never raises."""
    try:
        fence.check()
    except LostLeadership:
        return
    events.append(event)  # one append: atomic, whichever thread


def _open() -> threading.Event:
    opened = threading.Event()
    opened.set()
    return opened


@dataclass
class FakeStore(Generic[K]):
    """What a fake keeps of the objects of its kind: ``objects`` by key, the ``fence`` its
    port's intents pass, the ``versions`` it shares with the other fakes, ``fail`` (an
    object's name -> the error its next writes raise, for fault tests) and the lock that
    makes it thread-safe. ``gate``: while it is clear, every write waits on its way to the
    "API server" (as behind the client's rate limit), and checks ``fence`` again once let
    through, as the real writer's socket does (docs/decisions/016-bounded-failure-detection.md):
    what a test of writes in flight holds them with."""

    fence: Fence = UNFENCED
    versions: Versions = field(default_factory=Versions)
    objects: dict[K, dict[str, Any]] = field(default_factory=dict)
    fail: dict[str, WriteError] = field(default_factory=dict)
    gate: threading.Event = field(default_factory=_open)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def _store(self, key: K, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``obj`` under ``key`` with a new resourceVersion; returns a copy."""
        with self._lock:
            stored = self.objects[key] = self.versions.stamped(obj)
            return copy.deepcopy(stored)

    def _admit(self) -> None:
        """A write on its way: wait while ``gate`` is clear, then check ``fence`` again (the
        socket's check). Called before the store's lock is taken. Raises
        :class:`LostLeadership`."""
        if not self.gate.is_set():
            self.gate.wait()
            self.fence.check()

    def _writable(self, key: K, name: str, missing: str) -> dict[str, Any]:
        """The stored object under ``key`` (not a copy), for a write: raises the error
        ``fail`` holds for ``name`` first, then :class:`Gone` saying ``missing`` when there
        is no such object."""
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            obj = self.objects.get(key)
            if obj is None:
                raise Gone(missing)
            return obj

    def _read(self, key: K, missing: str) -> dict[str, Any]:
        """A copy of the object under ``key``. Raises :class:`Gone` saying ``missing``."""
        with self._lock:
            if key not in self.objects:
                raise Gone(missing)
            return copy.deepcopy(self.objects[key])
