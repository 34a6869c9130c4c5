"""RFC 3339 timestamps, the form the API server and the reconciler's annotations give time
in, to and from seconds since the epoch (floats, UTC). Pure: the clock reaches the engine
only as ``now`` arguments, never through this module."""

from __future__ import annotations

import datetime as dt


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 in UTC with milliseconds
    (``2026-11-22T10:00:00.000+00:00``): the form of ``planned-at`` and ``released-at``."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")


def epoch(timestamp: str) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch, or None when unreadable."""
    try:
        return dt.datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None
