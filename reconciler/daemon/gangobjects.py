"""Keeping one ``gangs.troupe.io`` object per gang: coalesced, at most one write a second
per gang, within a share of the reconciler's API budget (docs/decisions/043-gang-objects.md).

The controller says, after each decision, what a gang's object should say
(:meth:`GangObjects.want`, from :func:`reconciler.engine.decision.gangobject.gang_status`) and when a
gang is gone (:meth:`GangObjects.gone`); :meth:`GangObjects.flush`, on its own thread, makes
the writes:

- only the latest wanted status of a gang is written, and a gang's object is written at
  most once per ``interval`` seconds (1): a gang whose count changes with every new member
  costs a write a second, not one per member;
- a status equal to the one the object has (times aside) is not written;
- at most ``budget`` writes a second in all (a fifth of ``kubeAPIQPS``): releases, which
  share the writer ports' rate limit, never wait behind a flood of status writes; the gangs
  that waited longest go first;
- the object is created on its first write (name from
  :func:`~reconciler.engine.decision.gangobject.object_name`, owned by the members' workload
  objects), its status then set through the status subresource; a write that finds it gone
  makes it again; a gang with no pod left has its object deleted.

A new leader lists the objects once (:meth:`GangObjects.load`) so it rewrites none that is
current, and after its cache has synced deletes those of gangs that no longer exist
(:meth:`GangObjects.sweep`). With ``gangObjects: false`` nothing is made, and the objects a
previous configuration left are deleted by the sweep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.engine.decision.gangobject import same_status, with_times
from reconciler.ports.base import Conflict, Gone, LostLeadership, WriteError
from reconciler.ports.gangobjects import GangObjectWrites
from troupe import contract

log = logging.getLogger(__name__)

#: The annotation that ties an object to its gang's key (``namespace/id``).
KEY_ANNOTATION = contract.GANG_KEY_ANNOTATION
#: Seconds between two writes of one gang's object.
INTERVAL_SECONDS = 1.0
#: Seconds before a gang whose object's name another gang's object holds tries again: a
#: name is taken only by a collision or a left-over object, which takes longer than a
#: second to clear (docs/decisions/049-hostile-tenants-third-round.md).
TAKEN_BACKOFF_SECONDS = 60.0


class NameTaken(Conflict):
    """Another gang's object holds the name this gang's object should have."""


@dataclass
class _Want:
    namespace: str
    name: str
    gang_name: str
    owners: list[dict[str, Any]]
    status: dict[str, Any]
    due: float


@dataclass
class _Object:
    name: str
    uid: str
    status: Mapping[str, Any] | None


class GangObjects:
    """The Gang objects' writes; see the module docstring.

    ``writer``: the Gang objects' writer port (its fence and rate limit). ``enabled``: the
    configuration's ``gangObjects``. ``budget``: writes per second at most (creates,
    status writes and deletes together). ``clock``: monotonic seconds; ``wall``: seconds
    since the epoch (the times written). Thread-safe."""

    def __init__(self, writer: GangObjectWrites, enabled: bool = True, budget: float = 20.0,
                 interval: float = INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.writer, self.enabled, self.budget, self.interval = writer, enabled, max(budget, 1.0), interval
        self.clock, self.wall = clock, wall
        self._lock = threading.Lock()
        self._wanted: dict[str, _Want] = {}
        self._objects: dict[str, _Object] = {}
        self._last: dict[str, float] = {}
        self._gone: dict[str, str] = {}  # key -> namespace of an object to delete
        self._credit = self.budget
        self._refilled = clock()
        #: Writes made since start (creates, status writes, deletes) and writes that failed.
        self.written = 0
        self.failed = 0

    # --- what the controller says ----------------------------------------------------------
    def want(self, key: str, name: str, gang_name: str, owners: list[dict[str, Any]],
             status: Mapping[str, Any] | None) -> None:
        """Gang ``key`` (``namespace/id``) should have object ``name`` owned by ``owners``
        with ``status`` (conditions without times); None: leave the object as it is (its
        members ended)."""
        if not self.enabled or status is None:
            return
        namespace = key.partition("/")[0]
        now = self.clock()
        with self._lock:
            self._gone.pop(key, None)
            have = self._objects.get(key)
            if have is not None and have.name == name and same_status(have.status, status):
                self._wanted.pop(key, None)
                return
            pending = self._wanted.get(key)
            due = pending.due if pending is not None else max(now, self._last.get(key, -1e18) + self.interval)
            self._wanted[key] = _Want(namespace, name, gang_name, owners, dict(status), due)

    def gone(self, key: str) -> None:
        """Gang ``key`` has no pod left: delete its object (if it has one)."""
        with self._lock:
            self._wanted.pop(key, None)
            if key in self._objects:
                self._gone[key] = key.partition("/")[0]

    def __len__(self) -> int:
        with self._lock:
            return len(self._wanted) + len(self._gone)

    # --- a leader's start ------------------------------------------------------------------
    def load(self) -> int:
        """Read every Gang object once: what each says, so none is rewritten needlessly.
        Returns how many were read (0 when they cannot be listed: writes then find out)."""
        try:
            items = self.writer.list_gang_objects()
        except Gone:
            self.enabled = False
            log.warning("no Gang objects: the API server does not serve gangs.troupe.io (install the chart's CRDs)")
            return 0
        except WriteError as e:
            log.warning("gang objects not listed (each is rewritten once): %s", e)
            return 0
        with self._lock:
            for obj in items:
                meta = obj.get("metadata") or {}
                key = (meta.get("annotations") or {}).get(KEY_ANNOTATION)
                if isinstance(key, str) and key.partition("/")[0] == meta.get("namespace"):
                    self._objects[key] = _Object(str(meta.get("name")), str(meta.get("uid", "")), obj.get("status"))
        return len(items)

    def sweep(self, live: Iterable[str]) -> int:
        """Delete (on the next flushes) the objects of gangs not in ``live`` (the gang keys
        of the synced cache), and every object when disabled; returns how many."""
        keep = set(live) if self.enabled else set()
        with self._lock:
            stale = [k for k in self._objects if k not in keep]
            for key in stale:
                self._wanted.pop(key, None)
                self._gone[key] = key.partition("/")[0]
        return len(stale)

    # --- the writes --------------------------------------------------------------------------
    def _take(self, now: float) -> bool:
        self._credit = min(self.budget, self._credit + max(now - self._refilled, 0.0) * self.budget)
        self._refilled = now
        if self._credit < 1.0:
            return False
        self._credit -= 1.0
        return True

    def flush(self, everything: bool = False) -> int:
        """Make the writes that are due, within the budget (all of them, and no budget,
        with ``everything``); returns how many were made."""
        now = self.clock()
        with self._lock:
            deletes = sorted(self._gone.items())
            due = sorted(((k, w) for k, w in self._wanted.items() if everything or w.due <= now), key=lambda kw: kw[1].due)
        made = 0
        for key, namespace in deletes:
            if not everything and not self._take(self.clock()):
                return made
            made += self._delete(key, namespace)
        for key, want in due:
            if not everything and not self._take(self.clock()):
                break
            made += self._write(key, want)
        self.written += made
        return made

    def _delete(self, key: str, namespace: str) -> int:
        with self._lock:
            if self._gone.pop(key, None) is None:
                return 0
            have = self._objects.pop(key, None)
            self._last.pop(key, None)
        if have is None:
            return 0
        try:
            self.writer.delete_gang_object(namespace, have.name, have.uid)
        except Gone:
            return 0
        except WriteError as e:
            self.failed += 1
            log.debug("gang object %s/%s not deleted: %s", namespace, have.name, e)
            with self._lock:  # tried again on the next flush, unless the gang came back
                if key not in self._wanted:
                    self._objects[key] = have
                    self._gone[key] = namespace
            if isinstance(e, LostLeadership):
                raise
            return 0
        return 1

    def _write(self, key: str, want: _Want) -> int:
        with self._lock:
            if self._wanted.get(key) is not want:
                return 0  # replaced meanwhile: the newer one goes on its own turn
            del self._wanted[key]
            have = self._objects.get(key)
            self._last[key] = self.clock()
        previous = list((have.status or {}).get("conditions") or []) if have is not None else []
        status = with_times(want.status, previous, self.wall())
        try:
            if have is None or have.name != want.name:
                have = self._create(key, want)
            obj = self.writer.set_gang_object_status(want.namespace, want.name, status)
        except WriteError as e:  # Gone, Conflict, LostLeadership too: the status is wanted again
            self.failed += 1
            taken = isinstance(e, NameTaken)
            (log.warning if taken else log.debug)("gang object %s/%s not written: %s", want.namespace, want.name, e)
            with self._lock:
                if isinstance(e, Gone):
                    self._objects.pop(key, None)  # made again on the retry
                wait = TAKEN_BACKOFF_SECONDS if taken else self.interval
                self._wanted.setdefault(key, _Want(want.namespace, want.name, want.gang_name, want.owners,
                                                   want.status, self.clock() + wait))
            if isinstance(e, LostLeadership):
                raise
            return 0
        with self._lock:
            self._objects[key] = _Object(want.name, str((obj.get("metadata") or {}).get("uid", have.uid)), status)
        return 1

    def _create(self, key: str, want: _Want) -> _Object:
        """Create the object, or adopt the one of that name already there when it is this
        gang's (one GET of that object: a conflict never costs a list of every namespace's
        objects). Raises :class:`NameTaken` when the name belongs to another gang's object,
        :class:`Conflict` when the object went between the create and the read (tried
        again), and as the writer port."""
        body = {"metadata": {"name": want.name, "labels": {"app.kubernetes.io/managed-by": "troupe"},
                             "annotations": {KEY_ANNOTATION: key}, "ownerReferences": want.owners},
                "spec": {"gangName": want.gang_name}}
        try:
            obj = self.writer.create_gang_object(want.namespace, body)
        except Conflict as e:
            try:
                found = self.writer.get_gang_object(want.namespace, want.name)
            except Gone:
                raise e from None
            meta = found.get("metadata") or {}
            holder = (meta.get("annotations") or {}).get(KEY_ANNOTATION)
            if holder != key:
                raise NameTaken(f"gang object {want.namespace}/{want.name} is gang {holder!r}'s; "
                                f"tried again in {TAKEN_BACKOFF_SECONDS:.0f}s") from None
            return _Object(want.name, str(meta.get("uid", "")), found.get("status"))
        return _Object(want.name, str((obj.get("metadata") or {}).get("uid", "")), None)

    def run(self, stop: threading.Event, interval: float = 0.25) -> None:
        """Flush every ``interval`` seconds until ``stop`` is set (a thread's target)."""
        while not stop.wait(interval):
            try:
                self.flush()
            except LostLeadership:
                continue  # not the leader (any more): the wanted writes wait, the next leader lists the objects
            except Exception:
                log.exception("writing gang objects failed")
