"""Stream benchmark: G gangs of M members arriving evenly over S seconds, as indexed Jobs,
against the same count of plain Jobs in the same run (issue 37: "many gangs at once").

    .venv/bin/python benchmarks/stream.py [--gangs 2000] [--members 8] [--seconds 60]
        [--topology 4x8x64] [--modes plain,gang] [--component-qps QPS [--component-burst B]]
        [--timeout S] [--run-dir DIR]

On the local control plane with kwok nodes of 8 GPUs (``--topology`` blocks x subblocks x
hosts; 2,048 nodes by default), one stream of each mode, one after the other, each on a
clean cluster (the previous stream's Jobs deleted and their pods gone):

- **plain**: G indexed Jobs of M pods of one GPU each, without Troupe keys;
- **gang**: the same Jobs, each pod template with ``troupe.io/gang-name: <the Job's name>``
  and ``troupe.io/gang-size: M`` (released as the default ``releaseMode`` says: as created).

The Jobs are created at an even pace, the i-th at ``i x S / G`` seconds (four client
threads, so a slow create does not delay the next). By default 16,000 pods of one GPU fill
16,000 of the 16,384 GPUs: every Job fits at once, none waits for another to finish (kwok
pods run until deleted).

Printed for each mode: how many Jobs got all their pods Running, the seconds from each
Job's creation (when its create call was sent) to the watch seeing all its pods Running
(median, p99, max), the median split into the Job's creation to all its pods created (the
Job controller's share, and for a gang the webhook's) and from there to all Running, and
the queue-order inversions: pairs of Jobs that reached Running out
of their creation order (every Job has the same priority, so docs/decisions/019-queue-order.md
orders them by creation; a count, not a pass/fail: the plain Jobs' count is the baseline,
kube-scheduler keeps no order between Jobs). Then the gangs' median and p99 over the plain
Jobs' (target: within 1.1x), and the reconciler's peak resident memory. Progress lines on
stderr every 5 s while a stream runs.

kube-controller-manager creates pods at its client rate (20 a second by default, burst 30):
G x M pods over S seconds above that rate queue in the Job controller, for every mode alike.
``--component-qps`` (and ``--component-burst``, default 2 x QPS) starts it and kube-scheduler
with ``--kube-api-qps``/``--kube-api-burst`` raised, which shows Troupe's own share.

This is a benchmark, not a test. On two busy cores, 100 gangs of 4 over 20 s on 128 nodes
(``--gangs 100 --members 4 --seconds 20 --topology 1x2x64``) took about 2 minutes with
the control plane's start; the default (2,000 gangs of 8 on 2,048 nodes) needs a quieter
machine than the benchmark's own watch, which decodes every pod event in Python.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane
from control_plane import clear, follow, rss_peak_mib
from kubernetes import client
from kubernetes.client.rest import ApiException
from scale import indexed_job
from stream_report import StreamResult, summary_table

MODES = ("plain", "gang")


def stream_job(name: str, members: int, gang: bool) -> dict[str, Any]:
    """An indexed Job of ``members`` pods of one GPU each; as one gang of ``members``
    named after the Job when ``gang`` (the ``troupe.io/gang-name``/``-size`` keys on its
    pod template, docs/contract.md)."""
    annotations = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(members)} if gang else {}
    return indexed_job(name, members, annotations, gpus=1)


class Tracker:
    """Which pods of which Job the watch has seen, and when each Job first had ``members``
    pods Running (none of them being deleted). Pods arrive as plain JSON dicts (the watch
    does not build the client's models: 4-5 events a pod)."""

    def __init__(self, members: int, start: float) -> None:
        self.members, self.start = members, start
        self.pods: dict[str, dict[str, bool]] = {}  # job -> pod name -> Running and not deleting
        self.running_at: dict[str, float] = {}  # job -> seconds from start
        self.complete_at: dict[str, float] = {}  # job -> seconds from start to all its pods seen
        self.lock = threading.Lock()

    def _job(self, pod: dict[str, Any]) -> str | None:
        return (pod.get("metadata", {}).get("labels") or {}).get("job-name")

    def listed(self, items: list[dict[str, Any]], now: float) -> None:
        """A fresh list of the namespace's pods at ``now`` (monotonic)."""
        with self.lock:
            self.pods.clear()
        for pod in items:
            self.event("ADDED", pod, now)

    def event(self, kind: str, pod: dict[str, Any], now: float) -> None:
        """One watch event (``kind``: ADDED, MODIFIED, DELETED) received at ``now``."""
        job = self._job(pod)
        if job is None:
            return
        name = pod["metadata"]["name"]
        with self.lock:
            pods = self.pods.setdefault(job, {})
            if kind == "DELETED":
                pods.pop(name, None)
                return
            pods[name] = (pod.get("status", {}).get("phase") == "Running"
                          and not pod["metadata"].get("deletionTimestamp"))
            if job not in self.complete_at and len(pods) >= self.members:
                self.complete_at[job] = now - self.start
            if job not in self.running_at and sum(pods.values()) >= self.members:
                self.running_at[job] = now - self.start

    def counts(self) -> tuple[int, int]:
        """(Jobs all Running, pods Running) now."""
        with self.lock:
            return len(self.running_at), sum(sum(pods.values()) for pods in self.pods.values())


def wait_running(tracker: Tracker, creator: threading.Thread, created: list[float | None], mode: str,
                 timeout: float, errors: list[str]) -> None:
    """Return once every Job of the stream (``created``: one entry per Job, None until its
    create call is sent) has all its pods Running and ``creator`` is done, or ``timeout``
    seconds after ``creator`` ended; a progress line on stderr every 5 s
    (:func:`control_plane.wait_done`)."""
    gangs = len(created)

    def state() -> tuple[int, int, str]:
        done, pods = tracker.counts()
        made = sum(1 for c in created if c is not None)
        return done, gangs, f"{made}/{gangs} Jobs created, {done}/{gangs} all Running, {pods} pods Running"

    control_plane.wait_done(state, creator, tracker.start, mode, timeout, errors)


def run_stream(api: Any, namespace: str, mode: str, gangs: int, members: int, seconds: float,
               timeout: float) -> StreamResult:
    """Create ``gangs`` Jobs of ``members`` pods (``mode``: plain or gang) in ``namespace``
    evenly over ``seconds`` and watch until each has all its pods Running, or ``timeout``
    seconds after the last was created; progress on stderr. The Jobs are named
    ``<mode>-<index>`` (zero-padded)."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    names = [f"{mode}-{i:05d}" for i in range(gangs)]
    created: list[float | None] = [None] * gangs
    failures: dict[int, str] = {}  # Job index -> why its create failed
    stop = threading.Event()
    errors: list[str] = []
    tracker = Tracker(members, 0.0)
    watcher = threading.Thread(target=follow, args=(core.list_namespaced_pod, namespace, tracker.listed, tracker.event,
                                                    stop, errors, True), daemon=True)
    watcher.start()
    time.sleep(1.0)
    start = time.monotonic()
    tracker.start = start

    def create(i: int) -> None:
        created[i] = time.monotonic() - start
        try:
            batch.create_namespaced_job(namespace, stream_job(names[i], members, mode == "gang"))
        except ApiException as e:
            failures[i] = f"{names[i]}: {e.status} {e.reason}"

    def pace() -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for i in range(gangs):
                delay = start + i * seconds / gangs - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(create, i)

    creator = threading.Thread(target=pace, daemon=True)
    creator.start()
    wait_running(tracker, creator, created, mode, timeout, errors)
    stop.set()
    if failures:
        print(f"  {len(failures)} creates failed, e.g. {list(failures.values())[:3]}", file=sys.stderr, flush=True)
    order = [i for i in range(gangs) if created[i] is not None and i not in failures]
    with tracker.lock:
        running = tuple(tracker.running_at.get(names[i]) for i in order)
        complete = tuple(tracker.complete_at.get(names[i]) for i in order)
    return StreamResult(mode, tuple(created[i] or 0.0 for i in order), running, complete)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring); exits 2 on a bad value."""
    p = control_plane.parser(__doc__)
    p.add_argument("--gangs", type=int, default=2000, metavar="G",
                   help="Jobs per stream (gangs, and as many plain Jobs) (default %(default)s)")
    p.add_argument("--members", type=int, default=8, metavar="M",
                   help="pods per Job, one GPU each (default %(default)s)")
    p.add_argument("--seconds", type=float, default=60.0, metavar="S",
                   help="the Jobs' creations spread evenly over S seconds (default %(default)s)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="which streams to run, in this order: plain, gang (default %(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="give up on a stream S seconds after its last Job was created (default %(default)s)")
    control_plane.add_flags(p, "4x8x64")
    args = p.parse_args(argv)
    args.modes = control_plane.parse_modes(p, args.modes, MODES)
    control_plane.check_positive(p, args, ("gangs", "members"))
    if args.seconds < 0:
        p.error(f"--seconds: expected zero or more, got {args.seconds:g}")
    control_plane.check_flags(p, args)
    blocks, subblocks, hosts = args.topology
    if args.gangs * args.members > blocks * subblocks * hosts * 8:
        p.error(f"--gangs x --members: {args.gangs * args.members} pods of one GPU do not fit on "
                f"{blocks * subblocks * hosts} nodes of 8 GPUs (every Job must fit at once)")
    return args


def main() -> int:
    args = parse_args()
    blocks, subblocks, hosts = args.topology
    nodes = blocks * subblocks * hosts
    title = (f"{args.gangs} Jobs of {args.members} one-GPU pods created evenly over {args.seconds:g} s, "
             f"{nodes} kwok nodes ({blocks}x{subblocks}x{hosts}, 8 GPUs each), per mode: {', '.join(args.modes)}")
    rate = control_plane.client_rate(args)
    title += f"; {control_plane.rates_text(rate)}"
    results = []
    began = time.monotonic()
    with control_plane.started(args, "", "troupe-bench-stream-") as (cluster, stack):
        print(title, flush=True)
        api = cluster.api_client("admin")
        core = client.CoreV1Api(api)
        pid = stack.process("troupe-reconciler").popen.pid
        for mode in args.modes:
            control_plane.warn_not_ready(core, f"the {mode} stream")
            namespace = f"stream-{mode}"
            core.create_namespace({"metadata": {"name": namespace}})
            print(f"{mode} stream...", file=sys.stderr, flush=True)
            result = run_stream(api, namespace, mode, args.gangs, args.members, args.seconds, args.timeout)
            results.append(result)
            print(f"  {mode}: {result.all_running} of {len(result.created)} Jobs all Running; median "
                  f"{result.stat(50) or float('nan'):.2f} s, p99 {result.stat(99) or float('nan'):.2f} s; "
                  f"{result.inversions} inversions", flush=True)
            cleared = time.monotonic()
            clear(api, namespace, timeout=900.0)
            print(f"  its pods deleted in {time.monotonic() - cleared:.1f}s", file=sys.stderr, flush=True)
            stack.check()
        peak = rss_peak_mib(pid)
    print(f"\n{title}; {time.monotonic() - began:.0f} s in all; reconciler peak memory {peak:.0f} MiB\n")
    print(summary_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
