"""A Job's timeline split by stage, as ``benchmarks/scale.py`` prints it for the plain Job
and the gang side by side (issue 37: find the gang's fixed costs). Pure: no client, no
clock; the times are seconds from the Job's creation, taken by the benchmark when its
watch received each event (a pod's ``creationTimestamp`` has a resolution of one second,
too coarse for stages a few hundred milliseconds apart).

The stages, in the order a gang goes through them:

- ``reservation on the Job``: the watch on the Job first saw the annotation
  ``reconciler.troupe.io/reservation`` (troupe/contract.py ``RESERVATION``: a gang released
  as created, docs/decisions/034-release-as-created.md). The reconciler's receipt of the Job
  event is not observable from outside it; this write is its first visible effect.
- ``planned``: the release's ``reconciler.troupe.io/planned-at`` on its members (RFC 3339
  with milliseconds, written by the reconciler's clock: the same host's clock as the
  benchmark's on the local control plane), the earliest of them;
- ``first created`` / ``last created``: the watch first saw the first / the last of the N
  members;
- ``first ungated`` / ``last ungated``: it first saw a member without the
  ``troupe.io/placement`` scheduling gate (a gang's members only: the plain Job has none);
- ``first bound`` / ``last bound``: it first saw a member with ``spec.nodeName``;
- ``first Running`` / ``last Running``: it first saw a member in phase ``Running``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

RESERVATION = "reservation on the Job"
PLANNED = "planned"
STAGES = (RESERVATION, PLANNED, "first created", "last created", "first ungated", "last ungated",
          "first bound", "last bound", "first Running", "last Running")

#: A timeline: each stage's seconds from the Job's creation, None when not seen.
Timeline = Mapping[str, float | None]


@dataclass
class PodMarks:
    """When the watch first saw one member in each state, seconds from the Job's creation
    (None: not seen in that state). ``ungated`` stays None for a pod never gated."""

    created: float | None = None
    ungated: float | None = None
    bound: float | None = None
    running: float | None = None


def first_last(values: Iterable[float | None], n: int) -> tuple[float | None, float | None]:
    """The earliest and the ``n``-th earliest of ``values`` (None values ignored); the
    second is None when fewer than ``n`` were seen."""
    seen = sorted(value for value in values if value is not None)
    if not seen:
        return None, None
    return seen[0], seen[n - 1] if len(seen) >= n else None


def stages(pods: Iterable[PodMarks], n: int, reservation: float | None = None,
           planned: float | None = None) -> dict[str, float | None]:
    """The timeline of a Job of ``n`` members from its pods' marks (a pod deleted on the
    way and recreated counts as one more pod: the last of a state is the ``n``-th seen in
    it) and the two workload stages. Returns every stage of :data:`STAGES`, in that order.
    Raises ``ValueError`` when ``n`` is not positive."""
    if n <= 0:
        raise ValueError(f"n must be positive, not {n}")
    marks = list(pods)
    timeline: dict[str, float | None] = {RESERVATION: reservation, PLANNED: planned}
    for state in ("created", "ungated", "bound", "running"):
        first, last = first_last((getattr(pod, state) for pod in marks), n)
        label = "Running" if state == "running" else state
        timeline[f"first {label}"], timeline[f"last {label}"] = first, last
    return {stage: timeline[stage] for stage in STAGES}


def median_timeline(runs: Sequence[Timeline]) -> dict[str, float | None]:
    """Each stage's median over ``runs`` (the runs where it was seen; None if in none)."""
    medians: dict[str, float | None] = {}
    for stage in STAGES:
        values = [value for run in runs if (value := run.get(stage)) is not None]
        medians[stage] = statistics.median(values) if values else None
    return medians


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def stage_table(plain: Timeline | None, gangs: Mapping[str, Timeline], names: Sequence[str] = STAGES,
                base: str = "plain") -> str:
    """A markdown table, one row per stage seen in any mode: the plain Job's seconds from
    creation, each gang mode's (``gangs``: mode -> timeline), and each gang mode's
    difference to the plain Job (``+`` when the gang is later), so the costs the gang adds
    stand out stage by stage. ``-`` where a stage was not seen (or not run). ``names``: the
    stages, in order (default :data:`STAGES`); ``base``: what the first column of times
    is called (the baseline ``plain`` stands for)."""
    header = ["stage", f"{base} s"] + [f"{mode} s" for mode in gangs]
    if plain is not None:
        header += [f"{mode} - {base} s" for mode in gangs]
    rows = []
    for stage in names:
        values = [plain.get(stage) if plain is not None else None] + [t.get(stage) for t in gangs.values()]
        if all(value is None for value in values):
            continue
        row = [stage] + [_cell(value) for value in values]
        if plain is not None:
            base = plain.get(stage)
            row += ["-" if base is None or (v := t.get(stage)) is None else f"{v - base:+.2f}"
                    for t in gangs.values()]
        rows.append(row)
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
