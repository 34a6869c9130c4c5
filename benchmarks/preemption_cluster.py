"""Preemption benchmark on the local control plane (issue 45, "Preemption"): a high-priority
Job of whole-node pods on kwok nodes full of low-priority Jobs, Troupe's gang preemption
(``gangPreemptionMode: atomic``) against kube-scheduler's own pod-by-pod preemption of the
same Jobs, in the same run.

    .venv/bin/python benchmarks/preemption_cluster.py [--topology 1x8x64] [--victims 64]
        [--victim-size 8] [--preemptor 64] [--settle 15] [--modes kube-scheduler,troupe]
        [--timeout S] [--component-qps QPS [--component-burst B]] [--run-dir DIR]

The scenario, as a new user would set it up: ``--topology`` kwok nodes of 8 GPUs (blocks x
subblocks x hosts; 512 by default: 1 block of 8 subblocks of 64 hosts), two PriorityClasses,
``low`` (100) and ``high`` (1000), and Troupe's reconciler with ``gangPreemptionMode:
atomic``. Each run, on a clean cluster (the previous run's Jobs deleted and their pods
gone), in a namespace of its own:

1. ``--victims`` indexed Jobs ``low-<i>`` of ``--victim-size`` whole-node pods (8 GPUs
   each), PriorityClass ``low``, fill the cluster, and the benchmark waits for every pod
   to run (kwok pods run until deleted) and every Job's ``status.ready`` to count it (the
   Job controller caught up, so the preemptor's Job does not queue behind status updates);
2. ``high``, an indexed Job of ``--preemptor`` whole-node pods, PriorityClass ``high``, is
   created; the benchmark waits for all its pods to run, then ``--settle`` seconds more.

The Job is the one the guide gives (docs/guide/keys.md; ``scale.py``'s ``indexed_job``): a
pod failure policy that ignores ``DisruptionTarget``, so an evicted pod is recreated by its
Job rather than failing it (kube-scheduler's preemption and the Eviction API both mark the
pod so); ``terminationGracePeriodSeconds: 0``, since kwok runs no containers. The runs:

- **kube-scheduler**: the Jobs without Troupe keys; Troupe's webhook does not see their
  pods and its reconciler does not touch them: kube-scheduler's default preemption, pod by
  pod, by the PriorityClasses' values;
- **troupe**: each victim Job a gang (``troupe.io/gang-name: low-<i>``, ``gang-size``, released
  as the default ``releaseMode`` says: as created), and ``high`` a gang of ``--preemptor``
  with ``troupe.io/topology-required-level: cloud.google.com/gce-topology-subblock``.

Printed per run as soon as measured, then side by side (``preemption_cluster_report.py``):
seconds from the high Job's creation to all its pods Running (watched), the subblocks they
span against the fewest that hold them, the victim Jobs left partly running (some pods
evicted, others still running: a broken gang) when the preemptor ran and ``--settle``
seconds later, the victim Jobs disturbed and the victim pods evicted; Troupe's time over
kube-scheduler's (target: within 1.2x) and its broken gangs (target: 0). Then the
preemptor's timeline by stage, both runs side by side: created, nominated, nominated nodes
tainted, evictions asked, victims gone, released, bound, Running (what each stage means: the report module's
docstring). Progress lines on stderr.

This is a benchmark, not a test. On two busy cores (a load of 7-20), the default took 4.5
to 5 minutes with the control plane's start (the Job controller creates each run's 512
victim pods at its client rate: 35-85 s, and deleting them takes 20-40 s); at small scale
(``--topology 1x2x32 --victims 8 --preemptor 8``: 64 nodes, 8 victim gangs of 8 and a
preemptor of 8) under a minute.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane
from control_plane import clear, follow
from kubernetes import client
from preemption_cluster_report import (
    MODES,
    TROUPE,
    Outcome,
    RunWatch,
    mode_line,
    outcome,
    summary_table,
    timeline_text,
)
from scale import SUBBLOCK_LABEL, indexed_job

from devtools.devcluster.cluster import Cluster
from devtools.devcluster.workloads import wait_for_dry_run
from troupe.contract import GATE, NOMINATED_TAINT_KEY, NOMINATION

PRIORITIES = {"low": 100, "high": 1000}
PREEMPTOR = "high"
PROGRESS_SECONDS = 5.0
CONFIG = 'gangPreemptionMode: "atomic"\n'
#: The counts of the scenario: flag, default, metavar, meaning.
COUNTS = (("--victims", 64, "J", "low-priority victim Jobs"),
          ("--victim-size", 8, "M", "whole-node pods per victim Job"),
          ("--preemptor", 64, "N", "whole-node pods of the high-priority Job, required in one subblock"))


def preemption_job(name: str, size: int, priority: str, gang: bool, required: bool = False) -> dict[str, Any]:
    """An indexed Job of ``size`` whole-node pods of PriorityClass ``priority``; as one gang
    of ``size`` named after the Job when ``gang`` (``troupe.io/gang-name``/``-size``,
    docs/contract.md), required in one subblock when ``required`` too
    (``troupe.io/topology-required-level``)."""
    annotations = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(size)} if gang else {}
    if gang and required:
        annotations["troupe.io/topology-required-level"] = SUBBLOCK_LABEL
    body = indexed_job(name, size, annotations, gpus=8)
    body["spec"]["template"]["spec"]["priorityClassName"] = priority
    return body


def priority_classes(cluster: Cluster) -> None:
    """PriorityClasses ``low`` and ``high`` (:data:`PRIORITIES`), once the API server's
    Priority admission plugin resolves them (its informer lags the create: a pod created at
    once may be refused), checked by a server-side dry-run create of a pod of each."""
    scheduling = client.SchedulingV1Api(cluster.api_client("admin"))
    for name, value in PRIORITIES.items():
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "priority-probe", "namespace": "default"},
                 "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "x"}]}}
        wait_for_dry_run(cluster, probe, lambda pod, v=value: pod["spec"].get("priority") == v,
                         what=f"PriorityClass {name}")


def wait_until(what: str, ready: Any, progress: Any, timeout: float) -> float:
    """Poll ``ready()`` every 0.2 s until true; a line ``progress()`` on stderr every
    :data:`PROGRESS_SECONDS`. Returns the seconds it took; raises ``RuntimeError`` naming
    ``what`` after ``timeout`` seconds."""
    began = last = time.monotonic()
    while not ready():
        now = time.monotonic()
        if now - began > timeout:
            raise RuntimeError(f"{what}: not after {timeout:.0f}s ({progress()})")
        if now - last >= PROGRESS_SECONDS:
            last = now
            print(f"  {what}: {now - began:5.1f}s, {progress()}", file=sys.stderr, flush=True)
        time.sleep(0.2)
    return time.monotonic() - began


def jobs_ready(batch: Any, namespace: str, pods: int) -> bool:
    """Whether the Jobs of ``namespace`` count ``pods`` ready pods in their status: the Job
    controller has caught up with its victims' pods, so its work queue (and its client's
    token bucket, 20 requests/s by default) is as free for the preemptor's Job in every
    mode: a mode whose victims ran later must not start the preemptor behind their status
    updates."""
    return sum(job.status.ready or 0 for job in batch.list_namespaced_job(namespace).items) >= pods


def run(api: Any, mode: str, args: argparse.Namespace) -> Outcome:
    """One run of ``mode`` in namespace ``preempt-<mode>``: fill, preempt, settle, measure;
    then its Jobs and pods deleted (and gone). Raises ``RuntimeError`` when the victims do
    not all run within ``args.timeout`` seconds."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace, gang = f"preempt-{mode}", mode == TROUPE
    core.create_namespace({"metadata": {"name": namespace}})
    watch = RunWatch(PREEMPTOR, args.preemptor, GATE, NOMINATION, NOMINATED_TAINT_KEY)
    stop, errors = threading.Event(), []
    for watched in ((core.list_namespaced_pod, namespace, watch.listed, watch.event),
                    (core.list_node, None, watch.nodes_listed, watch.node_event)):
        threading.Thread(target=follow, args=(*watched, stop, errors, True), daemon=True).start()
    victims = [f"low-{i:02d}" for i in range(args.victims)]
    for name in victims:
        batch.create_namespaced_job(namespace, preemption_job(name, args.victim_size, "low", gang))
    pods = args.victims * args.victim_size
    took = wait_until(f"{mode}: filling", lambda: watch.active() >= pods,
                      lambda: f"{watch.active()} of {pods} victim pods Running", args.timeout)
    print(f"  {mode}: {pods} victim pods Running in {took:.1f}s", file=sys.stderr, flush=True)
    caught_up = wait_until(f"{mode}: the Job controller's statuses", lambda: jobs_ready(batch, namespace, pods),
                           lambda: "victim Jobs' status.ready short of their pods", args.timeout)
    print(f"  {mode}: every victim Job's status ready {caught_up:.1f}s later", file=sys.stderr, flush=True)
    time.sleep(1.0)
    start = time.monotonic()
    batch.create_namespaced_job(namespace, preemption_job(PREEMPTOR, args.preemptor, "high", gang, required=True))
    if not watch.done.wait(args.timeout):
        print(f"  {mode}: the preemptor not all Running after {args.timeout:.0f}s; watch errors: {errors[-3:]}",
              file=sys.stderr, flush=True)
    else:
        time.sleep(args.settle)
    stop.set()
    result = outcome(watch, mode, start, args.victims, args.victim_size)
    cleared = time.monotonic()
    clear(api, namespace, timeout=600.0)
    print(f"  {mode}: its pods deleted in {time.monotonic() - cleared:.1f}s", file=sys.stderr, flush=True)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring); exits 2 on a bad value."""
    p = control_plane.parser(__doc__)
    p.add_argument("--modes", default=",".join(MODES),
                   help="the runs, in this order: kube-scheduler, troupe (default %(default)s)")
    for flag, default, metavar, what in COUNTS:
        p.add_argument(flag, type=int, default=default, metavar=metavar, help=f"{what} (default %(default)s)")
    p.add_argument("--settle", type=float, default=15.0, metavar="S",
                   help="seconds to watch after the preemptor is Running, before the end's count "
                        "(default %(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="give up on filling or on the preemptor after S seconds (default %(default)s)")
    control_plane.add_flags(p, "1x8x64")
    args = p.parse_args(argv)
    control_plane.check_positive(p, args, ("victims", "victim_size", "preemptor"))
    args.modes = control_plane.parse_modes(p, args.modes, MODES)
    control_plane.check_flags(p, args)
    blocks, subblocks, hosts = args.topology
    if args.victims * args.victim_size > blocks * subblocks * hosts:
        p.error(f"--victims x --victim-size: {args.victims * args.victim_size} whole-node pods do not fit on "
                f"{blocks * subblocks * hosts} nodes")
    if args.preemptor > hosts:
        p.error(f"--preemptor: {args.preemptor} whole-node pods do not fit in one subblock of {hosts} hosts")
    return args


def main() -> int:
    args = parse_args()
    blocks, subblocks, hosts = args.topology
    nodes = blocks * subblocks * hosts
    rate = control_plane.client_rate(args)
    title = (f"a Job of {args.preemptor} whole-node pods (PriorityClass high) on {nodes} kwok nodes "
             f"({blocks}x{subblocks}x{hosts}, 8 GPUs each) full of {args.victims} Jobs of {args.victim_size} "
             f"(PriorityClass low); Troupe with gangPreemptionMode atomic; {control_plane.rates_text(rate)}")
    outcomes = []
    began = time.monotonic()
    with control_plane.started(args, CONFIG, "troupe-bench-preemption-") as (cluster, stack):
        priority_classes(cluster)
        print(title, flush=True)
        api = cluster.api_client("admin")
        for mode in args.modes:
            control_plane.warn_not_ready(client.CoreV1Api(api), f"the {mode} run")
            print(f"{mode} run...", file=sys.stderr, flush=True)
            outcomes.append(run(api, mode, args))
            print(mode_line(outcomes[-1], hosts), flush=True)
            stack.check()
    print(f"\n{title}; {time.monotonic() - began:.0f} s in all\n")
    print(summary_table(outcomes, args.preemptor, hosts, args.settle))
    print("\nThe preemptor's timeline, seconds from its Job's creation to each stage, as the watch received it:\n")
    print(timeline_text(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
