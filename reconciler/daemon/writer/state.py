"""The reconciler's own state, kept in a ConfigMap so that a new leader (or a restarted
replica) continues where the last one stopped: each gang's rollback backoff and the
releases it rolled back (docs/decisions/016-bounded-failure-detection.md).

:class:`StateStore` is the part of :class:`reconciler.daemon.writer.PodWriter` that reads
and writes it, over two primitives a subclass provides (``_read_state``, ``_write_state``).
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Mapping

from reconciler.daemon.writer.base import Fenced

#: The most gangs the state ConfigMap records (about 150 bytes each: well under the API
#: server's 1 MiB object limit). Past it, the entries whose backoff ran out longest ago go.
MAX_STATE_ENTRIES = 4000


def state_key(gang: str) -> str:
    """The state ConfigMap's data key of a gang (``gang-`` and a hash: a gang key's ``/`` and
    ``:`` may not be in a ConfigMap key)."""
    return "gang-" + hashlib.blake2b(gang.encode(), digest_size=10).hexdigest()


class StateStore(Fenced, abc.ABC):
    """Rollback backoffs in the state ConfigMap, one data key a gang (:func:`state_key`),
    each a JSON object ``{"gang", "timeouts", "notBefore", "releases"}``."""

    @abc.abstractmethod
    def _read_state(self) -> dict[str, str]:
        """The data of the reconciler's state ConfigMap (``{}`` when it does not exist).
        Raises :class:`~reconciler.daemon.writer.base.WriteError` when it cannot be read."""

    @abc.abstractmethod
    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        """Merge ``changes`` into the state ConfigMap's data (None removes a key), creating
        it when absent. Raises :class:`~reconciler.daemon.writer.base.WriteError`."""

    def load_backoffs(self) -> dict[str, tuple[int, float, tuple[str, ...]]]:
        """The rollbacks a reconciler recorded (:meth:`save_backoff`): gang key ->
        ``(consecutive timeouts, not before (seconds since the epoch), releases rolled back)``.
        Unreadable entries are skipped. Raises
        :class:`~reconciler.daemon.writer.base.WriteError` when the state cannot be read."""
        out = {}
        for raw in self._read_state().values():
            try:
                entry = json.loads(raw)
                releases = tuple(str(r) for r in entry.get("releases", []))
                out[str(entry["gang"])] = (int(entry["timeouts"]), float(entry["notBefore"]), releases)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return out

    def save_backoff(self, gang: str, timeouts: int, not_before: float, releases: tuple[str, ...] = ()) -> None:
        """Record gang ``gang``'s rollback backoff and the releases it rolled back (their
        ``planned-at``, whose members must all go) (``timeouts`` 0: forget it), so that a new
        leader keeps the same deadline and finishes a rollback cut short. Raises
        :class:`~reconciler.daemon.writer.base.WriteError`."""
        self.fence.check()
        key = state_key(gang)
        if timeouts <= 0:
            self._write_state({key: None})
            return
        value = json.dumps(
            {"gang": gang, "timeouts": timeouts, "notBefore": round(not_before, 3), "releases": list(releases)},
            separators=(",", ":"))
        self._write_state({key: value, **dict.fromkeys(self._overflow(key), None)})

    def _overflow(self, adding: str) -> list[str]:
        """The keys to drop so that adding ``adding`` keeps at most :data:`MAX_STATE_ENTRIES`:
        the entries with the earliest ``notBefore`` (unreadable ones first)."""
        current = self._read_state()
        excess = len(current) + (adding not in current) - MAX_STATE_ENTRIES
        if excess <= 0:
            return []

        def deadline(item: tuple[str, str]) -> float:
            try:
                return float(json.loads(item[1])["notBefore"])
            except (ValueError, KeyError, TypeError):
                return float("-inf")

        return [k for k, _ in sorted(((k, v) for k, v in current.items() if k != adding), key=deadline)[:excess]]
