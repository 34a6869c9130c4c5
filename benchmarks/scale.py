"""Scale benchmark: an indexed Job of N whole-node pods, plain and as one gang in each
release mode, on the local control plane with 2,048 kwok nodes (4 blocks x 8 subblocks x
64 hosts, 8 GPUs each).

    .venv/bin/python benchmarks/scale.py [--sizes 64,256,512,1024]
        [--modes plain,AsCreated,WhenComplete] [--component-qps QPS [--component-burst B]]
        [--release-concurrency C] [--run-dir DIR] [--topology BxSxH] [--only inprocess|cluster]
        [--runs R]

For each N, in the same run and on the same cluster, one after the other (each Job's
namespace deleted, and its pods gone, before the next):

- **plain**: the Job without Troupe keys (kube-scheduler alone places the pods);
- **AsCreated**: the same Job with ``troupe.io/gang-name``/``-size: N``,
  ``troupe.io/topology-preferred-level: <subblock>`` and ``troupe.io/release: AsCreated``
  in its pod template (the gang's nodes reserved from the template, each member released
  as it is created);
- **WhenComplete**: the same with ``troupe.io/release: WhenComplete`` (released once all
  N members exist).

Printed per N, as soon as it is measured: seconds from Job creation to all N pods Running
(watched) for each mode, the ratios AsCreated/plain and WhenComplete/plain, seconds of the
release (from the watch seeing the N-th member to it seeing the last member ungated), the
subblocks the pods span against the fewest that can hold N (64 hosts each), and the
reconciler's peak resident memory (``VmHWM``, since it started). At the end, the same as a
markdown table to paste in a note. Target (issue 24): AsCreated within 1.1x of plain at
every size, on the fewest subblocks; WhenComplete no slower than before.

**The timeline by stage** (issue 37: find the gang's fixed costs). Printed per N after its
lines, and for every N at the end: the seconds from the Job's creation to each stage, the
plain Job and each gang mode side by side and each gang mode's difference to the plain
Job: the reservation written on the Job and the release's ``planned-at`` (the reconciler's
first visible effects; its receipt of the Job event is not observable from outside), the
first and the last member created, ungated (gangs only), bound and Running, each the
moment the benchmark's watch received it (``benchmarks/timeline.py``). ``--runs R``
measures each size and mode R times, the modes taking turns, and prints the median run's
times and each stage's median (the issue's targets are the median of 3).

**The floor.** kube-controller-manager (the Job controller creates pods at its client
rate: 20 per second by default) and kube-scheduler (binds at 50 per second) bound every
contender alike; the default run keeps their defaults. ``--component-qps QPS`` (and
``--component-burst``, default 2 x QPS) starts both with ``--kube-api-qps``/
``--kube-api-burst`` raised, which shows Troupe's own share. ``make bench-scale`` runs the
benchmark twice, two invocations each on a cluster of its own: first with the components'
default rates, then with ``--component-qps 500 --component-burst 1000``.

**Every target in one table.** Before the control plane starts, the first invocation
measures the rows that need none (``benchmarks/scale_inprocess.py``: the reconciler's
memory at 8,192 nodes + 100,000 pods and 4,096 + 20,000, a 1,024-member decision with two
slice layers and its release, ``kubectl troupe plan``/``status`` on a snapshot file of that
size); it ends with one table of every target of issue 37, each against its baseline in
the same run. ``--only inprocess`` (``make bench-scale SCALE=inprocess``, about 15 minutes)
measures those rows alone; ``--only cluster`` the timelines alone (the second invocation).

This is a benchmark, not a test: it prints numbers. After the control plane is built
(``python -m devtools.devcluster build``), on two cores shared with other work: sizes
64-512 took about 8 minutes at the default rates and 9 with raised rates (the cluster
starts in 1-3 minutes; deleting a Job's pods takes as long as running them); 1,024 alone
took 8.5 minutes at the default rates, so ``make bench-scale`` takes about 30. On a busy
machine kwok renews the 2,048 nodes' leases late and some go NotReady: a warning line says
so, and such numbers are not comparable.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane
from kubernetes import client
from scale_inprocess import ROWS, SCALES
from scale_inprocess import measure as measure_inprocess
from scale_inprocess import table as targets_table
from scale_report import MODES, PLAIN, Run, SizeResult, size_lines, summary_table, target_rows
from timeline import PodMarks, median_timeline, stage_table, stages

from devtools.devcluster.cluster import Cluster
from devtools.devcluster.stack import Stack
from troupe.contract import PLANNED_AT, RESERVATION

SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
TROUPE_GATE = "troupe.io/placement"


def indexed_job(name: str, n: int, annotations: dict[str, str], gpus: int) -> dict[str, Any]:
    """An indexed Job of ``n`` pods asking ``gpus`` GPUs each, ``annotations`` on its pod
    template."""
    gpu = str(gpus)
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
            # A gang rolled back (a reserved node lost, say) is deleted for the Job to recreate:
            # not a failure (docs/contract.md, KEP-3329). The same for every mode.
            "podFailurePolicy": {"rules": [{"action": "Ignore",
                                            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "train", "image": "trainer:latest",
                                         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpu},
                                                       "limits": {"nvidia.com/gpu": gpu}}}]},
            },
        },
    }


def job(name: str, n: int, mode: str) -> dict[str, Any]:
    """An indexed Job of ``n`` pods of 8 GPUs each (whole nodes): plain, or as one gang
    released in ``mode`` (``AsCreated`` or ``WhenComplete``, the ``troupe.io/release`` key)."""
    annotations = {} if mode == PLAIN else {
        "troupe.io/gang-name": name, "troupe.io/gang-size": str(n),
        "troupe.io/topology-preferred-level": SUBBLOCK_LABEL, "troupe.io/release": mode}
    return indexed_job(name, n, annotations, gpus=8)


def _rfc3339(value: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time such as ``2026-11-27T20:31:26.123Z``;
    None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def measure(api: Any, namespace: str, name: str, n: int, mode: str, timeout: float = 600.0) -> Run:
    """Create the Job (``mode``: plain or a release mode) and watch its pods until all ``n``
    are Running (a pod being deleted does not count); returns the seconds to Running, of
    the release, the pods' nodes, how many pods beyond ``n`` the Job made on the way and
    the timeline by stage (``benchmarks/timeline.py``: when the watch received each pod's
    creation, gate removal, binding and Running, and the Job's reservation annotation).
    The watches are resumed from a fresh list when the API server drops them."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    seen: dict[str, Any] = {}
    uids: set[str] = set()
    marks: dict[str, float] = {}
    pods: dict[str, PodMarks] = {}  # by uid, received times (monotonic) until the end
    planned: list[float] = []  # the members' planned-at, seconds since the epoch
    reservation: list[float] = []
    done, stop = threading.Event(), threading.Event()
    errors: list[str] = []

    def mark(pod: Any, now: float) -> None:
        uid = pod.metadata.uid
        uids.add(uid)
        m = pods.setdefault(uid, PodMarks(created=now))
        if m.ungated is None and mode != PLAIN and not any(
                g.name == TROUPE_GATE for g in pod.spec.scheduling_gates or ()):
            m.ungated = now
        if m.bound is None and pod.spec.node_name:
            m.bound = now
        if m.running is None and pod.status.phase == "Running":
            m.running = now
        at = _rfc3339((pod.metadata.annotations or {}).get(PLANNED_AT))
        if at is not None and not planned:
            planned.append(at)
        elif at is not None and at < planned[0]:
            planned[0] = at

    def note(now: float) -> None:
        if "complete" not in marks and len(seen) >= n:
            marks["complete"] = now
        if "ungated" not in marks and len(seen) >= n and not any(
                any(g.name == TROUPE_GATE for g in p.spec.scheduling_gates or ()) for p in seen.values()):
            marks["ungated"] = now
        if sum(1 for p in seen.values() if p.status.phase == "Running" and not p.metadata.deletion_timestamp) >= n:
            marks["running"] = now
            done.set()
            stop.set()

    def pods_listed(items: list[Any], now: float) -> None:
        seen.clear()
        seen.update({p.metadata.name: p for p in items})
        for pod in items:
            mark(pod, now)
        note(now)

    def pod_event(kind: str, pod: Any, now: float) -> None:
        if kind == "DELETED":
            seen.pop(pod.metadata.name, None)
        else:
            seen[pod.metadata.name] = pod
            mark(pod, now)
        note(now)

    def job_seen(job_object: Any, now: float) -> None:
        if not reservation and RESERVATION in (job_object.metadata.annotations or {}):
            reservation.append(now)

    threads = [
        threading.Thread(target=control_plane.follow, daemon=True, args=(
            core.list_namespaced_pod, namespace, pods_listed, pod_event, stop, errors),
            kwargs={"label_selector": f"job-name={name}"}),
        threading.Thread(target=control_plane.follow, daemon=True, args=(
            batch.list_namespaced_job, namespace, lambda items, now: [job_seen(j, now) for j in items],
            lambda kind, j, now: job_seen(j, now), stop, errors),
            kwargs={"field_selector": f"metadata.name={name}"}),
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    t0, wall0 = time.monotonic(), time.time()
    batch.create_namespaced_job(namespace, job(name, n, mode))
    finished = done.wait(timeout)
    stop.set()
    if not finished:
        running = sum(1 for p in seen.values() if p.status.phase == "Running")
        raise RuntimeError(f"{name}: {running} of {n} pods Running after {timeout:.0f}s; watch errors: {errors[-3:]}")
    gang = mode != PLAIN
    release = marks["ungated"] - marks["complete"] if gang and "ungated" in marks and "complete" in marks else None

    def since(value: float | None) -> float | None:
        return None if value is None else value - t0

    relative = [PodMarks(since(m.created), since(m.ungated), since(m.bound), since(m.running)) for m in pods.values()]
    timeline = stages(relative, n, reservation=since(reservation[0]) if reservation else None,
                      planned=planned[0] - wall0 if planned else None)
    return Run(marks["running"] - t0, release, tuple(p.spec.node_name for p in seen.values()), len(uids) - n, timeline)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring); exits 2 on an unknown mode."""
    p = control_plane.parser(__doc__)
    p.add_argument("--sizes", default="64,256,512,1024", help="gang sizes N, comma-separated (default %(default)s)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="which of plain, AsCreated, WhenComplete to run, comma-separated (default all)")
    control_plane.add_flags(p, f"{control_plane.BLOCKS}x{control_plane.SUBBLOCKS}x{control_plane.HOSTS}",
                            "; a small cluster, e.g. 1x2x64, shows a small gang's fixed costs at little load")
    p.add_argument("--release-concurrency", type=int, default=None, metavar="C",
                   help="the reconciler's releaseConcurrency (default: the built-in default)")
    p.add_argument("--only", choices=("inprocess", "cluster"), default=None,
                   help="only the in-process rows (benchmarks/scale_inprocess.py: no control plane), or only "
                        "the control plane's timelines (default: both, then one table of every target)")
    p.add_argument("--runs", type=int, default=1, metavar="R",
                   help="measure each size and mode R times (the modes taking turns) and print the median "
                        "(default %(default)s; the issue's targets are the median of 3)")
    args = p.parse_args(argv)
    modes = control_plane.parse_modes(p, args.modes, MODES)
    args.modes = [mode for mode in MODES if mode in modes]
    args.sizes = [int(size) for size in args.sizes.split(",")]
    control_plane.check_positive(p, args, ("runs",))
    control_plane.check_flags(p, args)
    return args


def median_run(runs: list[Run]) -> Run:
    """The run of the median seconds to Running (the lower middle one of an even count),
    its timeline replaced by the median of every run's, stage by stage."""
    middle = sorted(runs, key=lambda run: run.to_running)[(len(runs) - 1) // 2]
    return replace(middle, timeline=median_timeline([run.timeline for run in runs]))


def measure_sizes(cluster: Cluster, stack: Stack, sizes: list[int], modes: list[str],
                  hosts: int = control_plane.HOSTS, repeat: int = 1) -> list[SizeResult]:
    """Each size in turn, each mode of it in turn (``repeat`` times over, the modes taking
    turns), each Job in a namespace of its own, deleted with its pods (and the pods gone)
    before the next; a size's lines and its timeline by stage (the median of the runs)
    printed once measured."""
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    pid = stack.process("troupe-reconciler").popen.pid
    results = []
    for n in sizes:
        measured: dict[str, list[Run]] = {mode: [] for mode in modes}
        for attempt in range(repeat):
            for mode in modes:
                suffix = "" if repeat == 1 else f"-{attempt + 1}"
                namespace = f"bench-{mode.lower()}-{n}{suffix}"
                control_plane.warn_not_ready(core, f"N={n} {mode}")
                core.create_namespace({"metadata": {"name": namespace}})
                print(f"N={n} {mode}{suffix}...", file=sys.stderr)
                name = f"{mode.lower()}-{n}"
                run = measure(api, namespace, name, n, mode)
                measured[mode].append(run)
                print(f"  {run.to_running:.2f}s to all Running", file=sys.stderr)
                cleared = time.monotonic()
                control_plane.clear(api, namespace, name)
                print(f"  its pods deleted in {time.monotonic() - cleared:.1f}s", file=sys.stderr)
                stack.check()
        runs = {mode: median_run(measured[mode]) for mode in modes}
        results.append(SizeResult(n, runs, control_plane.rss_peak_mib(pid)))
        print("\n".join(size_lines(results[-1], hosts)), flush=True)
        print(f"\nN={n}: seconds from the Job's creation to each stage, as the watch received it"
              f"{'' if repeat == 1 else f' (median of {repeat} runs)'}:\n", flush=True)
        print(timeline_text(runs) + "\n", flush=True)
    return results


def timeline_text(runs: dict[str, Run]) -> str:
    """The timeline table of one size's runs (``benchmarks/timeline.py``)."""
    plain = runs.get(PLAIN)
    return stage_table(plain.timeline if plain else None,
                       {mode: run.timeline for mode, run in runs.items() if mode != PLAIN})


def main() -> int:
    args = parse_args()
    inprocess = [] if args.only == "cluster" else measure_inprocess(SCALES, ROWS, repeat=1)
    if args.only == "inprocess":
        print(targets_table(inprocess))
        return 0
    rate = control_plane.client_rate(args)
    blocks, subblocks, hosts = args.topology
    title = (f"{blocks * subblocks * hosts} kwok nodes ({blocks} blocks x {subblocks} subblocks x {hosts} hosts, "
             f"8 GPUs), indexed Job of N whole-node pods; {control_plane.rates_text(rate)}")
    config = "" if args.release_concurrency is None else f"releaseConcurrency: {args.release_concurrency}\n"
    began = time.monotonic()
    with control_plane.started(args, config, "troupe-bench-scale-") as (cluster, stack):
        print(title, flush=True)
        results = measure_sizes(cluster, stack, args.sizes, args.modes, hosts, args.runs)
    print(f"\n{title}; {time.monotonic() - began:.0f} s in all\n")
    print(summary_table(results, args.modes, hosts))
    for result in results:
        print(f"\nN={result.n}, seconds from the Job's creation to each stage:\n")
        print(timeline_text(dict(result.runs)))
    where = f"{blocks * subblocks * hosts:,} kwok nodes" + ("" if rate is None else f", components at {rate.qps:g} qps")
    print("\nEvery target of issue 37 measured in this run:\n")
    print(targets_table(inprocess + target_rows(results, where)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
