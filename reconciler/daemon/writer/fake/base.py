"""What the in-memory fakes of the writer ports share: resourceVersions from one counter
(:class:`Versions`), as the API server's come from etcd's one revision for every kind, and
the Events they record (:class:`RecordedEvent`, one list for all kinds, in order)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.daemon.writer.base import Fence, LostLeadership
from reconciler.engine.model.keys import PodKey


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
