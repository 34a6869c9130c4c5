"""What ``benchmarks/stream.py`` prints, computed from what it measured: percentiles of the
seconds from each Job's creation to all its pods Running, the gang/plain ratios, and how
often the queue order was broken. Pure: no client, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The most the gangs' median and p99 may take, as a multiple of the plain Jobs' (issue 37).
TARGET = 1.1


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by the nearest-rank method (the smallest value
    with at least ``q`` % of the values at or below it: p50 of 1..100 is 50, p99 is 99, p100
    the maximum). Raises ``ValueError`` on no values or ``q`` outside (0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], not {q}")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def inversions(created: Sequence[float], running: Sequence[float | None]) -> int:
    """How many pairs of Jobs reached all Running out of their creation order: ``i`` created
    before ``j`` (``created[i] < created[j]``) and ``running[j] < running[i]`` (strictly; a
    tie is no inversion). A Job never Running (None) counts as Running after every Job that
    did: each one created after it and Running is an inversion.

    The queue order of docs/decisions/019-queue-order.md is priority, then the creation of
    the gang's oldest member, then the key; every Job here has the same priority, so its
    order is the creation order. Counted by merge sort, O(n log n). Raises ``ValueError``
    when the sequences differ in length."""
    if len(created) != len(running):
        raise ValueError(f"created has {len(created)} Jobs, running {len(running)}")
    order = sorted(range(len(created)), key=lambda i: created[i])
    keys = [math.inf if (value := running[i]) is None else value for i in order]
    return _count(keys)[1]


def _count(keys: list[float]) -> tuple[list[float], int]:
    """``keys`` sorted and its count of pairs ``i < j`` with ``keys[j] < keys[i]``."""
    if len(keys) <= 1:
        return keys, 0
    middle = len(keys) // 2
    left, a = _count(keys[:middle])
    right, b = _count(keys[middle:])
    merged: list[float] = []
    count, i, j = a + b, 0, 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            merged.append(right[j])
            count += len(left) - i
            j += 1
        else:
            merged.append(left[i])
            i += 1
    merged += left[i:] + right[j:]
    return merged, count


@dataclass(frozen=True)
class StreamResult:
    """One stream of Jobs of one mode (``plain`` or ``gang``).

    ``created``: each Job's creation (seconds from the stream's start, when the create call
    was sent); ``running``: the seconds from the stream's start to the watch seeing all its
    pods Running (None: not all Running by the end); ``complete``: the seconds from the
    stream's start to the watch seeing all its pods created (the Job controller's share,
    and for a gang the webhook's), when measured. Indexed alike, one entry per Job.
    """

    mode: str
    created: tuple[float, ...]
    running: tuple[float | None, ...]
    complete: tuple[float | None, ...] = ()

    @property
    def to_running(self) -> list[float]:
        """Each Job's seconds from its creation to all its pods Running (Jobs that got there)."""
        return [r - c for c, r in zip(self.created, self.running, strict=True) if r is not None]

    @property
    def all_running(self) -> int:
        """How many Jobs had all their pods Running."""
        return sum(1 for r in self.running if r is not None)

    def split(self, q: float) -> tuple[float | None, float | None]:
        """The ``q``-th percentile of the seconds from each Job's creation to all its pods
        created, and of those from all created to all Running (Jobs that got there); Nones
        when :attr:`complete` was not measured."""
        created, running = [], []
        for c, done, r in zip(self.created, self.complete, self.running, strict=False):
            if done is not None:
                created.append(done - c)
                if r is not None:
                    running.append(r - done)
        return (percentile(created, q) if created else None, percentile(running, q) if running else None)

    def stat(self, q: float) -> float | None:
        """The ``q``-th percentile of :attr:`to_running`; None when no Job got there."""
        values = self.to_running
        return percentile(values, q) if values else None

    @property
    def inversions(self) -> int:
        """Pairs of Jobs Running out of creation order (:func:`inversions`)."""
        return inversions(self.created, self.running)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def ratio(gang: StreamResult, plain: StreamResult, q: float) -> float | None:
    """The gangs' ``q``-th percentile over the plain Jobs'; None when either is missing."""
    a, b = gang.stat(q), plain.stat(q)
    return None if a is None or b is None or b <= 0 else a / b


def summary_table(results: Sequence[StreamResult]) -> str:
    """A markdown table, one row per mode: Jobs Running of those created, the seconds from
    creation to all Running (median, p99, max), the median split into creation to all pods
    created and all created to all Running (:meth:`StreamResult.split`), the inversions of the creation order and
    the pairs they are out of; then, when both ``plain`` and ``gang`` were run, a row of
    the ratios gang/plain at the median and p99 against :data:`TARGET`."""
    header = ["mode", "all Running", "median s", "p99 s", "max s", "median to all created s",
              "median all created to Running s", "queue-order inversions (of pairs)", "created over s"]
    rows = []
    for result in results:
        count = len(result.created)
        span = (max(result.created) - min(result.created)) if result.created else 0.0
        to_created, to_running = result.split(50)
        rows.append([result.mode, f"{result.all_running} of {count}", _s(result.stat(50)), _s(result.stat(99)),
                     _s(result.stat(100)), _s(to_created), _s(to_running),
                     f"{result.inversions} ({count * (count - 1) // 2})", f"{span:.1f}"])
    by_mode = {result.mode: result for result in results}
    if "gang" in by_mode and "plain" in by_mode:
        gang, plain = by_mode["gang"], by_mode["plain"]
        cells = []
        for q in (50, 99):
            value = ratio(gang, plain, q)
            cells.append("n/a" if value is None else
                         f"{value:.2f}x ({'within' if value <= TARGET else 'NOT within'} {TARGET:g}x)")
        rows.append(["gang / plain", "", cells[0], cells[1], "", "", "", "", ""])
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
