"""What ``benchmarks/throughput.py`` prints, computed from what it measured: each mode's pods
Running per second, a gang's seconds from its first member's creation to its last member
Running (median and p90), the creation rate, the gangs placed over more than one subblock,
the ratios to kube-scheduler alone and the markdown table. Pure: no client, no clock.

Pods are named ``<gang>-<member>`` (``g12-3``: member 3 of gang ``g12``) in every mode, the
plain one included, so that the same pods are grouped the same way whoever placed them.
Node names are those of a devcluster ``FakeNodes`` topology group: a node's subblock is its
name without the last ``-h<k>`` (:func:`scale_report.subblock`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scale_report import subblock
from stream_report import percentile

#: The same pods placed by kube-scheduler alone (no gang keys), as gangs of Troupe (its
#: webhook and reconciler running), and as gangs of kube-scheduler's own gang plugin
#: (``scheduling.k8s.io`` PodGroups, Troupe off).
PLAIN, TROUPE, NATIVE = "plain", "troupe", "native"
MODES = (PLAIN, TROUPE, NATIVE)
#: Who places each mode's pods, for the table's header.
PLACED_BY = {PLAIN: "kube-scheduler alone (the same pods, no gang keys)", TROUPE: "Troupe",
             NATIVE: "kube-scheduler's own gang plugin (Troupe off)"}
#: The least share of kube-scheduler alone's pods per second Troupe's must reach (issue 45).
TARGET = 0.9


def gang_of(pod: str) -> str:
    """``g12-3`` -> ``g12``: the gang of a pod named ``<gang>-<member>``."""
    return pod.rsplit("-", 1)[0]


@dataclass(frozen=True)
class ModeRun:
    """One mode's run, every time in seconds from the first create call sent.

    ``created``: pod name -> when its create call was sent, for every pod created;
    ``created_by``: when the last create call was answered; ``running``: pod name -> when
    the watch first saw it Running (pods never seen Running are absent); ``nodes``: pod name
    -> its node, for pods seen bound; ``threads``: the client threads that created the pods;
    ``reconciler_peak_mib``: the reconciler's peak resident memory since it started
    (``VmHWM``), None when Troupe was not running; ``failed_creates``: create calls refused
    for good (their pods are not in ``created``).
    """

    mode: str
    created: Mapping[str, float]
    created_by: float
    running: Mapping[str, float]
    nodes: Mapping[str, str]
    threads: int = 1
    reconciler_peak_mib: float | None = None
    failed_creates: int = 0

    def gangs(self) -> dict[str, list[str]]:
        """Gang -> its created members' names."""
        found: dict[str, list[str]] = {}
        for pod in self.created:
            found.setdefault(gang_of(pod), []).append(pod)
        return found

    @property
    def pods_per_second(self) -> float | None:
        """Pods Running over the seconds from the first creation to the last Running; None
        when no pod ran."""
        if not self.running or not self.created:
            return None
        elapsed = max(self.running.values()) - min(self.created.values())
        return len(self.running) / elapsed if elapsed > 0 else None

    @property
    def creation_rate(self) -> float | None:
        """Pods created per second, from the first create call sent to the last answered;
        None when none was."""
        return len(self.created) / self.created_by if self.created and self.created_by > 0 else None

    def gang_seconds(self) -> list[float]:
        """Each gang's seconds from its first member's creation to its last member Running,
        for the gangs whose every created member ran."""
        seconds = []
        for members in self.gangs().values():
            if all(pod in self.running for pod in members):
                seconds.append(max(self.running[p] for p in members) - min(self.created[p] for p in members))
        return seconds

    def gang_stat(self, q: float) -> float | None:
        """The ``q``-th percentile (nearest rank) of :meth:`gang_seconds`; None when no gang
        ran whole."""
        seconds = self.gang_seconds()
        return percentile(seconds, q) if seconds else None

    @property
    def spanning(self) -> int:
        """Gangs whose bound members are in more than one subblock."""
        return sum(1 for members in self.gangs().values()
                   if len({subblock(self.nodes[p]) for p in members if p in self.nodes}) > 1)


def ratio(run: ModeRun | None, plain: ModeRun | None) -> float | None:
    """``run``'s pods per second over ``plain``'s; None when either is missing or did not run."""
    a = run.pods_per_second if run else None
    b = plain.pods_per_second if plain else None
    return None if a is None or b is None else a / b


def _number(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def mode_lines(run: ModeRun) -> list[str]:
    """What is printed as soon as ``run`` is measured: pods and gangs Running, pods per
    second, a gang's median and p90, the creation rate, the gangs over more than one
    subblock and the reconciler's peak memory."""
    gangs, whole = run.gangs(), len(run.gang_seconds())
    peak = "not running" if run.reconciler_peak_mib is None else f"{run.reconciler_peak_mib:.0f} MiB"
    last = max(run.running.values()) if run.running else None
    lines = [
        f"{run.mode}: {len(run.running)} of {len(run.created)} pods Running ({whole} of {len(gangs)} gangs whole), "
        f"the last {_number(last, unit=' s')} after the first creation: {_number(run.pods_per_second)} pods/s",
        f"  a gang from its first member's creation to its last Running: median {_number(run.gang_stat(50), 2)} s, "
        f"p90 {_number(run.gang_stat(90), 2)} s",
        f"  created at {_number(run.creation_rate, 0)} pods/s ({len(run.created)} in {run.created_by:.1f} s, "
        f"{run.threads} client threads)" + (f", {run.failed_creates} creates refused" if run.failed_creates else ""),
        f"  {run.spanning} gangs over more than one subblock; reconciler peak memory {peak}",
    ]
    return lines


def verdict_lines(runs: Mapping[str, ModeRun]) -> list[str]:
    """The ratios troupe/plain and native/plain of the pods per second (Troupe's against
    :data:`TARGET`) and whether Troupe is ahead of the native gang plugin, for the modes
    measured; the gangs of either gang mode over more than one subblock (each must be 0)."""
    plain, troupe, native = runs.get(PLAIN), runs.get(TROUPE), runs.get(NATIVE)
    lines = []
    if troupe and plain:
        value = ratio(troupe, plain)
        met = value is not None and value >= TARGET
        lines.append(f"troupe / plain: {_number(value, 2, 'x')} pods/s (target at least {TARGET:g}x: "
                     f"{'met' if met else 'NOT met'})")
    if native and plain:
        lines.append(f"native / plain: {_number(ratio(native, plain), 2, 'x')} pods/s")
    if troupe and native:
        a, b = troupe.pods_per_second, native.pods_per_second
        ahead = a is not None and (b is None or a > b)
        lines.append(f"troupe ahead of native: {'yes' if ahead else 'no'} ({_number(a)} against {_number(b)} pods/s)")
    for run in (troupe, native):
        if run and run.spanning:
            lines.append(f"{run.mode}: {run.spanning} gangs over more than one subblock (must be 0)")
    return lines


def summary_table(runs: Mapping[str, ModeRun], scenario: str) -> str:
    """A markdown table to paste in docs/guide/results.md: a column per mode of
    :data:`MODES` (``-`` where not measured), headed by ``scenario`` and who placed the
    pods; rows: pods Running per second (each gang mode's ratio to plain in brackets), a
    gang's median / p90, the creation rate, the gangs whole and over more than one
    subblock, and the reconciler's peak memory."""
    plain = runs.get(PLAIN)

    def rate(run: ModeRun) -> str:
        text = _number(run.pods_per_second)
        return text if run.mode == PLAIN or plain is None else f"{text} ({_number(ratio(run, plain), 2)})"

    measures: list[tuple[str, Callable[[ModeRun], str]]] = [
        ("pods Running per second, first creation to last Running", rate),
        ("a gang's time from its first member's creation to its last Running, median / 90th percentile",
         lambda run: f"{_number(run.gang_stat(50))} s / {_number(run.gang_stat(90))} s"),
        ("pods created per second (client threads)",
         lambda run: f"{_number(run.creation_rate, 0)} ({run.threads})"),
        ("gangs all Running / over more than one subblock",
         lambda run: f"{len(run.gang_seconds())} of {len(run.gangs())} / {run.spanning}"),
        ("reconciler peak memory",
         lambda run: "-" if run.reconciler_peak_mib is None else f"{run.reconciler_peak_mib:.0f} MiB"),
    ]
    header = [scenario, *(PLACED_BY[mode] for mode in MODES)]
    rows = [[what, *(value(runs[mode]) if mode in runs else "-" for mode in MODES)] for what, value in measures]
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def shape_text(gangs: int, members: int, requests: Mapping[str, str], nodes: int,
               topology: Sequence[int]) -> str:
    """The scenario in words, for the table's corner and the title: ``500 gangs of 4 pods
    asking nvidia.com/gpu 2, 2,048 kwok nodes (4x8x64), each gang required in one
    subblock``."""
    asking = ", ".join(f"{name} {value}" for name, value in requests.items())
    return (f"{gangs} gangs of {members} pods asking {asking}, {nodes:,} kwok nodes "
            f"({'x'.join(str(part) for part in topology)}), each gang required in one subblock")
