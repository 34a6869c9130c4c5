"""Tombstones: the resourceVersion at which each object was deleted, so that an object a
write of ours returned before the deletion (an assume that lost the race with the watch)
does not bring it back into the cache. Not thread-safe: the cache calls it under its lock."""

from __future__ import annotations


class Tombstones:
    """Deletions by ``(kind, name)`` key, the oldest dropped first past ``limit``."""

    #: Tombstones kept at most by default.
    LIMIT = 50_000

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._gone: dict[tuple[str, str], int] = {}

    def bury(self, key: tuple[str, str], rv: int | None) -> None:
        """Record that ``key`` was deleted at resourceVersion ``rv`` (nothing when None)."""
        if rv is None:
            return
        self._gone.pop(key, None)
        self._gone[key] = rv
        while len(self._gone) > self.limit:
            del self._gone[next(iter(self._gone))]

    def buried(self, key: tuple[str, str], rv: int | None) -> bool:
        """Whether an object at ``rv`` is older than its recorded deletion (a stale write
        result); a newer one (the object created again) lifts the tombstone."""
        gone = self._gone.get(key)
        if gone is None:
            return False
        if rv is not None and rv <= gone:
            return True
        del self._gone[key]
        return False
