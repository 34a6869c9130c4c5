"""The reconciler's own state, kept in a ConfigMap so that a new leader (or a restarted
replica) continues where the last one stopped: each gang's rollback backoff, the
releases it rolled back (docs/decisions/016-bounded-failure-detection.md) and the nodes it
avoids after kube-scheduler refused a member there (docs/decisions/032-scheduler-refusals.md).

:class:`StateStore` is the writer port that reads and writes it, over two primitives an
implementation provides (``_read_state``, ``_write_state``):
:class:`reconciler.kube.writer.state.KubeStateStore` against the API server,
:class:`reconciler.ports.fake.state.FakeStateStore` in memory.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Mapping

from reconciler.ports.base import Fenced

#: The most gangs the state ConfigMap records (about 150 bytes each: well under the API
#: server's 1 MiB object limit). Past it, entries go from the namespace that has the most,
#: those whose backoff ran out longest ago first.
MAX_STATE_ENTRIES = 4000
#: The most bytes of entries it records (an entry with avoided nodes takes up to about
#: 2 KB): past it too, entries go as above.
MAX_STATE_BYTES = 800_000

#: Nodes a gang avoids: node name -> (until, seconds since the epoch; kube-scheduler's reason).
Avoided = dict[str, tuple[float, str]]


def state_key(gang: str) -> str:
    """The state ConfigMap's data key of a gang (``gang-`` and a hash: a gang key's ``/`` and
    ``:`` may not be in a ConfigMap key)."""
    return "gang-" + hashlib.blake2b(gang.encode(), digest_size=10).hexdigest()


class StateStore(Fenced, abc.ABC):
    """Rollback backoffs in the state ConfigMap, one data key a gang (:func:`state_key`),
    each a JSON object ``{"gang", "timeouts", "notBefore", "releases", "avoid"}``
    (``avoid``: node -> ``[until, reason]``, absent when empty).

    The ConfigMap is read once (by :meth:`load_backoffs`, or the first save) and then kept
    as this store writes it: only the leader writes it, so a save costs one patch, not a
    read of up to :data:`MAX_STATE_BYTES` first; a write that fails forgets the copy (the
    next save reads it again)."""

    _copy: dict[str, str] | None = None

    def _state(self) -> dict[str, str]:
        """The ConfigMap's data as this store knows it (read once)."""
        if self._copy is None:
            self._copy = dict(self._read_state())
        return self._copy

    def _write(self, changes: Mapping[str, str | None]) -> None:
        """``_write_state(changes)``, and the same changes to the copy kept."""
        try:
            self._write_state(changes)
        except Exception:
            self._copy = None
            raise
        if self._copy is not None:
            for key, value in changes.items():
                if value is None:
                    self._copy.pop(key, None)
                else:
                    self._copy[key] = value

    @abc.abstractmethod
    def _read_state(self) -> dict[str, str]:
        """The data of the reconciler's state ConfigMap (``{}`` when it does not exist).
        Raises :class:`~reconciler.ports.base.WriteError` when it cannot be read."""

    @abc.abstractmethod
    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        """Merge ``changes`` into the state ConfigMap's data (None removes a key), creating
        it when absent. Raises :class:`~reconciler.ports.base.WriteError`."""

    def load_backoffs(self) -> dict[str, tuple[int, float, tuple[str, ...], Avoided]]:
        """The rollbacks a reconciler recorded (:meth:`save_backoff`): gang key ->
        ``(consecutive timeouts, not before (seconds since the epoch), releases rolled back,
        nodes avoided)``. Unreadable entries are skipped. Raises
        :class:`~reconciler.ports.base.WriteError` when the state cannot be read."""
        self._copy = None  # a new leader reads what the last one left
        out = {}
        for raw in self._state().values():
            try:
                entry = json.loads(raw)
                releases = tuple(str(r) for r in entry.get("releases", []))
                avoid = {str(node): (float(until), str(why)) for node, (until, why) in entry.get("avoid", {}).items()}
                out[str(entry["gang"])] = (int(entry["timeouts"]), float(entry["notBefore"]), releases, avoid)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return out

    def save_backoff(self, gang: str, timeouts: int, not_before: float, releases: tuple[str, ...] = (),
                     avoid: Avoided | None = None) -> None:
        """Record gang ``gang``'s rollback backoff, the releases it rolled back (their
        ``planned-at``, whose members must all go) and the nodes it avoids (``timeouts`` 0
        and no node avoided: forget it), so that a new leader keeps the same deadline,
        finishes a rollback cut short and plans off the same nodes. Raises
        :class:`~reconciler.ports.base.WriteError`."""
        self.fence.check()
        key = state_key(gang)
        if timeouts <= 0 and not avoid:
            if key in self._state():
                self._write({key: None})
            return
        entry: dict[str, object] = {"gang": gang, "timeouts": timeouts, "notBefore": round(not_before, 3),
                                    "releases": list(releases)}
        if avoid:
            entry["avoid"] = {node: [round(until, 3), why] for node, (until, why) in sorted(avoid.items())}
        value = json.dumps(entry, separators=(",", ":"))
        self._write({key: value, **dict.fromkeys(self._overflow(key, gang, len(value)), None)})

    def _overflow(self, adding: str, gang: str = "", size: int = 0) -> list[str]:
        """The keys to drop so that adding ``adding`` (``size`` bytes, gang ``gang``) keeps
        at most :data:`MAX_STATE_ENTRIES` entries and :data:`MAX_STATE_BYTES` bytes: each
        from the namespace that holds the most entries then (the one adding counted), so a
        tenant that rolls back many gangs evicts its own before another's; within it, the
        entry that runs out earliest (its ``notBefore`` or the last of its avoided nodes'
        ``until``; unreadable ones first, as a namespace of their own)
        (docs/decisions/049-hostile-tenants-third-round.md)."""
        current = self._state()
        others = [(k, v) for k, v in current.items() if k != adding]
        excess = len(others) + 1 - MAX_STATE_ENTRIES
        bytes_over = sum(len(k) + len(v) for k, v in others) + size - MAX_STATE_BYTES
        if excess <= 0 and bytes_over <= 0:
            return []
        by_namespace: dict[str, list[tuple[float, str, int]]] = {}
        for k, v in others:
            namespace, deadline = _parsed(v)
            by_namespace.setdefault(namespace, []).append((deadline, k, len(k) + len(v)))
        for entries in by_namespace.values():
            entries.sort(reverse=True)  # the earliest deadline last: popped first
        counts = {ns: len(entries) for ns, entries in by_namespace.items()}
        adding_namespace = gang.partition("/")[0]
        counts[adding_namespace] = counts.get(adding_namespace, 0) + 1
        dropped = []
        while (excess > 0 or bytes_over > 0) and any(by_namespace.values()):
            namespace = max((ns for ns, entries in by_namespace.items() if entries),
                            key=lambda ns: (ns == _UNREADABLE, counts[ns], ns))
            _, k, length = by_namespace[namespace].pop()
            counts[namespace] -= 1
            dropped.append(k)
            excess, bytes_over = excess - 1, bytes_over - length
        return dropped


#: The namespace :func:`_parsed` gives an entry it cannot read (evicted before any other).
_UNREADABLE = "\0unreadable"


def _parsed(raw: str) -> tuple[str, float]:
    """``(namespace of its gang, deadline)`` of an entry: when it runs out (its
    ``notBefore`` or the last of its avoided nodes' ``until``)."""
    try:
        entry = json.loads(raw)
        deadline = max([float(entry["notBefore"]), *(float(v[0]) for v in entry.get("avoid", {}).values())])
        return str(entry["gang"]).partition("/")[0], deadline
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return _UNREADABLE, float("-inf")
