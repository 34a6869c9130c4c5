"""What ``benchmarks/scale.py`` prints, computed from what it measured: the blocks and
subblocks a Job's pods span, the fewest that can hold them, the ratios to the plain Job,
the lines printed per size and the markdown summary table. Pure: no client, no clock.

Node names are those of a devcluster ``FakeNodes`` topology group
(``<group>-b<i>-s<j>-h<k>``, :mod:`devtools.devcluster.nodes`): a node's subblock is its
name without the last ``-h<k>``, its block without the last two parts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: The Job as kube-scheduler alone places it, then the same Job as one gang in each
#: release mode (the value of ``troupe.io/release`` in its pod template).
PLAIN = "plain"
GANG_MODES = ("AsCreated", "WhenComplete")
MODES = (PLAIN, *GANG_MODES)


@dataclass(frozen=True)
class Run:
    """One measured Job.

    ``to_running``: seconds from the Job's creation to all its pods Running (watched).
    ``release``: seconds from the watch seeing the Job's N-th pod to it seeing the last
    one ungated (the release as docs/decisions/007 measures it); None for the plain Job.
    ``nodes``: the node of each pod, in no order.
    ``recreated``: how many pods beyond N the Job made before all N ran (a gang rolled back
    and recreated); 0 on a clean run.
    ``timeline``: each stage's seconds from the Job's creation (``benchmarks/timeline.py``).
    """

    to_running: float
    release: float | None
    nodes: tuple[str, ...]
    recreated: int = 0
    timeline: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SizeResult:
    """The runs of one size ``n`` (keyed by mode, in :data:`MODES` order) and the
    reconciler's peak resident memory (``VmHWM``, MiB) after the last of them."""

    n: int
    runs: Mapping[str, Run]
    reconciler_peak_mib: float


def subblock(node: str) -> str:
    """``gpu-b1-s3-h42`` -> ``gpu-b1-s3``."""
    return node.rsplit("-", 1)[0]


def block(node: str) -> str:
    """``gpu-b1-s3-h42`` -> ``gpu-b1``."""
    return node.rsplit("-", 2)[0]


def span(nodes: Iterable[str]) -> tuple[int, int]:
    """``(subblocks, blocks)``: how many distinct subblocks and blocks ``nodes`` are in."""
    listed = list(nodes)
    return len({subblock(node) for node in listed}), len({block(node) for node in listed})


def fewest_subblocks(n: int, hosts_per_subblock: int) -> int:
    """The fewest subblocks that can hold ``n`` whole-node pods: ``ceil(n / hosts)``.
    Raises ``ValueError`` when ``hosts_per_subblock`` is not positive."""
    if hosts_per_subblock <= 0:
        raise ValueError(f"hosts_per_subblock must be positive, not {hosts_per_subblock}")
    return math.ceil(n / hosts_per_subblock)


def ratio(result: SizeResult, mode: str) -> float | None:
    """``mode``'s seconds to Running over the plain Job's; None when either was not run."""
    run, plain = result.runs.get(mode), result.runs.get(PLAIN)
    if run is None or plain is None or plain.to_running <= 0:
        return None
    return run.to_running / plain.to_running


def span_text(run: Run) -> str:
    """``"7"``, or ``"7 (2 blocks)"`` when the pods are in more than one block."""
    subblocks, blocks = span(run.nodes)
    return f"{subblocks}" if blocks <= 1 else f"{subblocks} ({blocks} blocks)"


def _seconds(value: float | None, digits: int | None = None) -> str:
    """Seconds as text: two decimals under 10 s (a small gang's run is a tenth of a second,
    where one decimal would make 0.15 and 0.22 s read 0.1 and 0.2), else one."""
    if value is None:
        return "n/a"
    return f"{value:.{digits if digits is not None else 2 if value < 10 else 1}f}"


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def size_lines(result: SizeResult, hosts_per_subblock: int) -> list[str]:
    """The lines printed as soon as size ``result.n`` is measured: per mode the seconds to
    all Running, the ratio to plain, the release seconds and the subblocks spanned; then
    the fewest subblocks and the reconciler's peak memory."""
    lines = [f"N={result.n}"]
    for mode, run in result.runs.items():
        text = f"  {mode:<12} {_seconds(run.to_running):>7} s to all Running"
        if mode != PLAIN:
            text += f", {_ratio_text(ratio(result, mode))} of plain, release {_seconds(run.release, 2)} s"
        recreated = f" ({run.recreated} pods recreated: a rollback)" if run.recreated else ""
        lines.append(f"{text}, {span_text(run)} subblocks{recreated}")
    lines.append(f"  fewest subblocks that hold {result.n}: {fewest_subblocks(result.n, hosts_per_subblock)}; "
                 f"reconciler peak memory {result.reconciler_peak_mib:.0f} MiB")
    return lines


def summary_table(results: Sequence[SizeResult], modes: Sequence[str], hosts_per_subblock: int) -> str:
    """A markdown table, one row per size: seconds to all Running per mode, each gang
    mode's ratio to plain (when plain was run), each gang mode's release seconds, the
    subblocks per mode against the fewest, and the reconciler's peak memory. A time marked
    ``*`` (and a note under the table) is that of a run whose pods were recreated.

    ``modes``: the modes measured, a subsequence of :data:`MODES`.
    """
    gangs = [mode for mode in modes if mode != PLAIN]
    ratios = gangs if PLAIN in modes else []
    header = (["N"] + [f"{mode} s" for mode in modes] + [f"{mode}/plain" for mode in ratios]
              + [f"release {mode} s" for mode in gangs]
              + [f"subblocks {' / '.join(modes)} (fewest)", "reconciler peak MiB"])
    rows = []
    for result in results:
        runs = [result.runs[mode] for mode in modes]
        rows.append([str(result.n)] + [_seconds(run.to_running) + ("*" if run.recreated else "") for run in runs]
                    + [_ratio_text(ratio(result, mode)) for mode in ratios]
                    + [_seconds(result.runs[mode].release, 2) for mode in gangs]
                    + [f"{' / '.join(span_text(run) for run in runs)} "
                       f"({fewest_subblocks(result.n, hosts_per_subblock)})",
                       f"{result.reconciler_peak_mib:.0f}"])
    lines = [_row(header), _row(["---"] * len(header))] + [_row(row) for row in rows]
    if any(run.recreated for result in results for run in result.runs.values()):
        lines.append("\n\\* pods recreated on the way (a gang rolled back): not a clean run")
    return "\n".join(lines)


#: The most a gang released as created may take, as a multiple of the plain Job (issue 37).
GANG_TARGET = 1.1


def target_rows(results: Sequence[SizeResult], where: str) -> list[tuple[str, str, str, str, str]]:
    """The issue's target rows of the measured sizes, as ``benchmarks/scale_inprocess.py``'s
    table takes them (what, measured, baseline, ratio, target): each gang mode's seconds to
    all Running against the plain Job's in the same run; ``AsCreated`` within
    :data:`GANG_TARGET` of it. ``where``: the cluster, for the first column."""
    rows = []
    for result in results:
        plain = result.runs.get(PLAIN)
        for mode, run in result.runs.items():
            if mode == PLAIN:
                continue
            value = ratio(result, mode)
            target = "-" if mode != "AsCreated" or value is None else \
                f"< {GANG_TARGET:g}x: {'met' if value < GANG_TARGET else 'NOT met'}"
            rows.append((f"gang of {result.n} to all Running ({mode}, {span_text(run)} subblocks), {where}",
                         f"{_seconds(run.to_running)} s", f"{_seconds(plain.to_running if plain else None)} s (plain Job)",
                         _ratio_text(value), target))
    return rows


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
