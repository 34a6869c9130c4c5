"""A big gang under a stream of small ones on the local control plane, under each
``queueingStrategy`` (issue 48's table; docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

    .venv/bin/python benchmarks/backfill_cluster.py [--strategies StrictFIFO,BestEffortFIFO,Backfill]
        [--arrive 60] [--timeout 600] [--seeds 1] [--run-dir DIR]

The cluster: 4 subblocks of 8 whole-GPU kwok nodes (2 blocks x 2 subblocks x 8 hosts, 8
GPUs each). Each strategy runs on it in turn, in a namespace of its own, with a reconciler
started with that ``queueingStrategy`` (other keys at their defaults): a stream of small
gangs, Indexed Jobs of 1 to 4 whole-node pods with ``activeDeadlineSeconds`` of 30 to 180 s
(the Job controller ends them), is kept so that the nodes they ask for stay at 90 % of the
cluster, plus a queue of one more gang; ``--arrive`` seconds in, a gang of 8 whole nodes with
a required subblock and no limit arrives. The same seeded stream for each strategy; with
several ``--seeds`` (``1,2,3``) every strategy runs once per seed, and the table ends with
each strategy's median over its runs. Polled once a second:

- **wait**: the big gang's arrival to all its pods Running;
- **late**: its start (its last pod's ``status.startTime``) less the earliest time a subblock
  could have been free under the limits of the gangs running when it arrived (the latest end
  among each subblock's running Jobs, the earliest subblock); gangs ahead of it in the queue
  (created before it, waiting) may take that subblock first, under any strategy;
- **after reserved**: its start less the start of its reservation as its reason last gave
  it before it ran (``Backfill`` only: the start Troupe computed, gangs ahead counted);
- **idle GPU-s**: GPUs of nodes without a running pod, summed over each second it waited;
- **small median wait**: creation to Running of the small gangs created while it waited
  (one still waiting when the big gang runs counts its wait so far).

Targets (issue 48): Backfill's big gang within the release's seconds of its earliest start,
its idle GPU-seconds at most half of BestEffortFIFO's, its small gangs' median wait no worse
than StrictFIFO's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client

from benchmarks import control_plane
from devtools.devcluster.stack import Stack

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
NODES, GPUS = 32, 8
RUNS = iter(range(100))
#: How a reserved gang's reason gives its start (docs/decisions/079).
RESERVED_FROM = re.compile(r"reserved \S+ \(\d+ node\(s\)\) from (\d\d):(\d\d):(\d\d)")


def job(name: str, size: int, deadline: int | None, required: bool = False) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node pause pods as one gang."""
    annotations = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(size)}
    if required:
        annotations["troupe.io/topology-required-level"] = SUBBLOCK
    spec: dict[str, Any] = {"completionMode": "Indexed", "completions": size, "parallelism": size, "backoffLimit": 0,
                            "template": {"metadata": {"labels": {"gang": name}, "annotations": annotations},
                                         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                                  "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                                                  "resources": {"requests": {"cpu": "100m",
                                                                                             "nvidia.com/gpu": "8"},
                                                                                "limits": {"nvidia.com/gpu": "8"}}}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def restart(stack: Stack, strategy: str) -> None:
    """Run the reconciler with ``queueingStrategy: strategy`` (a new replica takes over)."""
    stack.config_path.write_text(f"gangScheduleTimeoutJitterSeconds: 1\nqueueingStrategy: {strategy}\n")
    for started in list(stack._started):
        if started.record.name.startswith("troupe-reconciler") and started.popen.poll() is None:
            os.kill(started.record.pid, signal.SIGTERM)
            started.popen.wait(timeout=30)
    stack.start_reconciler(f"troupe-reconciler-{strategy.lower()}-{next(RUNS)}")


def earliest_free(batch: client.BatchV1Api, core: client.CoreV1Api, ns: str, subblock_of: dict[str, str]) -> float:
    """The earliest time a subblock is free under the deadlines of the Jobs running now."""
    ends: dict[str, float] = {}
    jobs = {j.metadata.name: j for j in batch.list_namespaced_job(ns).items}
    for p in core.list_namespaced_pod(ns).items:
        j = jobs.get((p.metadata.labels or {}).get("gang", ""))
        if p.spec.node_name and j is not None and j.status.start_time and j.spec.active_deadline_seconds:
            end = j.status.start_time.timestamp() + j.spec.active_deadline_seconds
            sub = subblock_of[p.spec.node_name]
            ends[sub] = max(ends.get(sub, 0.0), end)
    busy = set(ends)
    free_now = [s for s in set(subblock_of.values()) if s not in busy]
    return time.time() if free_now else min(ends.values())


def run(api: Any, stack: Stack, strategy: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One strategy's run on the stream of ``seed`` (module docstring); its measures."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    subblock_of = {n.metadata.name: n.metadata.labels[SUBBLOCK] for n in core.list_node().items}
    restart(stack, strategy)
    ns = f"bf-{strategy.lower()}-{next(RUNS)}"
    control_plane.open_namespace(core, ns, strategy)
    rng = random.Random(seed)
    began, arrived, earliest, started = time.time(), None, 0.0, None
    reserved: float | None = None  # the start of the big gang's reservation, as its reason last said
    created: dict[str, tuple[float, int]] = {}
    first_running: dict[str, float] = {}
    idle, k = 0.0, 0
    while time.time() - began < args.timeout:
        now = time.time()
        pods = core.list_namespaced_pod(ns).items
        running: dict[str, int] = {}
        used = set()
        for p in pods:
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp:
                gang = (p.metadata.labels or {}).get("gang", "")
                running[gang] = running.get(gang, 0) + 1
                used.add(p.spec.node_name)
        for gang, count in running.items():
            if gang in created and count >= created[gang][1]:
                first_running.setdefault(gang, now)
        if arrived is not None:
            idle += (NODES - len(used)) * GPUS
            big = [p for p in pods if (p.metadata.labels or {}).get("gang") == "big"]
            if running.get("big", 0) == 8:
                started = max(p.status.start_time.timestamp() for p in big if p.status.start_time)
                break
            reserved = reserved_start(big, now) or reserved
        live = sum(j.spec.parallelism for j in batch.list_namespaced_job(ns).items
                   if j.metadata.name != "big" and not _ended(j))
        while live < int(0.9 * NODES) + 4:
            size, name = rng.randint(1, 4), f"s{k}"
            batch.create_namespaced_job(ns, job(name, size, rng.randint(30, 180)))
            created[name] = (time.time(), size)
            live, k = live + size, k + 1
        if arrived is None and now - began >= args.arrive:
            earliest = earliest_free(batch, core, ns, subblock_of)
            batch.create_namespaced_job(ns, job("big", 8, None, required=True))
            arrived = time.time()
            created["big"] = (arrived, 8)
        time.sleep(1.0)
    end = time.time()  # a small gang not running by then counts its wait so far (a lower bound)
    waits = [first_running.get(g, end) - t for g, (t, _) in created.items()
             if g != "big" and arrived is not None and t >= arrived]
    out = {"strategy": strategy, "seed": seed, "wait": (started - arrived) if started and arrived else None,
           "late": (started - earliest) if started else None,
           "reserved": (started - reserved) if started and reserved else None, "idle": idle,
           "small": statistics.median(waits) if waits else None, "smalls": len(waits)}
    control_plane.clear_namespace(api, ns)
    return out


def reserved_start(pods: list[Any], now: float) -> float | None:
    """The start of the reservation the big gang's reason names (``reserved ... from
    12:04:00``, UTC, the day nearest ``now``), None while it names none."""
    for p in pods:
        for c in p.status.conditions or []:
            found = RESERVED_FROM.search(c.message or "") if c.type == "troupe.io/Gang" else None
            if found:
                day = datetime.datetime.fromtimestamp(now, datetime.UTC).replace(hour=0, minute=0, second=0,
                                                                                   microsecond=0)
                h, m, sec = (int(v) for v in found.groups())
                at = (day + datetime.timedelta(hours=h, minutes=m, seconds=sec)).timestamp()
                return min((at - 86400, at, at + 86400), key=lambda t: abs(t - now))
    return None


def _ended(j: Any) -> bool:
    """Whether a Job has ended (its deadline, a failure or its completions)."""
    return any(c.type in ("Failed", "Complete", "FailureTarget", "SuccessCriteriaMet") and c.status == "True"
               for c in j.status.conditions or [])


def main() -> int:
    """Run every strategy and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", default="StrictFIFO,BestEffortFIFO,Backfill")
    p.add_argument("--arrive", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--seeds", default="1", help="comma-separated seeds of the small gangs' stream (default 1)")
    p.add_argument("--run-dir", default=None)
    args = p.parse_args()
    args.topology, args.component_qps, args.component_burst = (2, 2, 8), None, None
    rows = []
    with control_plane.started(args, "gangScheduleTimeoutJitterSeconds: 1\n", "troupe-bench-backfill-") as (
            cluster, stack):
        api = cluster.api_client("admin")
        for seed in (int(s) for s in args.seeds.split(",")):
            for strategy in args.strategies.split(","):
                print(f"{strategy} run, seed {seed}...", file=sys.stderr, flush=True)
                rows.append(run(api, stack, strategy, seed, args))
                print(rows[-1], file=sys.stderr, flush=True)
    print(table(rows, args.strategies.split(","), args.timeout))
    return 0


def table(rows: list[dict[str, Any]], strategies: list[str], timeout: float) -> str:
    """The runs side by side, and each strategy's medians when it ran more than once (a big
    gang that never started counts as waiting ``timeout`` seconds there)."""

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    def median(runs: list[dict[str, Any]], key: str, missing: float | None) -> float | None:
        values = [r[key] if r[key] is not None else missing for r in runs]
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    lines = [f"{'strategy':<16}{'seed':>6}{'wait (s)':>10}{'late (s)':>10}{'after reserved (s)':>20}"
             f"{'idle GPU-s':>12}{'small median wait (s)':>23}"]
    for r in rows:
        lines.append(f"{r['strategy']:<16}{r['seed']:>6}{num(r['wait']):>10}{num(r['late']):>10}"
                     f"{num(r.get('reserved')):>20}{num(r['idle']):>12}"
                     f"{num(r['small']):>23}  ({r['smalls']} small gangs)")
    if len(rows) > len(strategies):
        for strategy in strategies:
            runs = [r for r in rows if r["strategy"] == strategy]
            lines.append(f"{strategy:<16}{'median':>6}{num(median(runs, 'wait', timeout)):>10}"
                         f"{num(median(runs, 'late', None)):>10}{num(median(runs, 'reserved', None)):>20}"
                         f"{num(median(runs, 'idle', None)):>12}{num(median(runs, 'small', None)):>23}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
