"""In-process scale benchmark: Troupe's own costs on the largest training clusters, the rows
of ``make bench-scale`` that need no control plane (issue 37).

    .venv/bin/python benchmarks/scale_inprocess.py [--scales 8192x100000,4096x20000]
        [--rows memory,decision,plan] [--repeat N]

For each scale (nodes x pods), each row measured in a fresh interpreter of its own, so one
row's heap is not another's:

- **memory**: the reconciler's resident memory (RSS) at steady state with its cache fed by
  its own informers, nodes, pods, Jobs and namespaces as a cluster of that size has them
  (``benchmarks/cache_memory.py``: GPU nodes of about 7.8 KB of JSON, pods of indexed Jobs of
  64 members of about 7.4 KB each, ``managedFields`` included, one Job per 64 pods), and at
  the peak of a re-list after ``410 Gone`` (10% of the pods changed). No baseline: the
  objects kept whole would not fit the machine at 100,000 pods.
- **decision**: a gang of 1,024 whole-node members with two slice layers
  (``troupe.io/topology-slice-size: "128,8"``: 128 members per block, 8 per subblock) decided
  on the reconciler's cache (:class:`reconciler.daemon.cache.ClusterCache`) holding the
  nodes and the pods (running pods spread over every node, a fifth of the nodes busy with
  GPU work, as ``benchmarks/placement.py`` builds them); the baseline, in the same process
  on the same snapshot: the same gang without slice layers. Warm (best of 5, alternated),
  and the same decision after one pod changed (the snapshot rebuilt, its node table kept:
  what the next decision pays after any event).
- **release**: the whole reconcile of that gang, its decision and 1,024 member writes to
  in-memory fakes (:class:`reconciler.ports.fake.FakeCluster`, so the API server's
  latency is not in it); the baseline: the gang without slices, released after it. A gang
  of 8 is released first: the first release in a process took 140-230 ms more than the
  next, whichever gang it was (512 against 372 ms with the two swapped, at 100,000 pods).
- **plan** and **status**: ``kubectl troupe plan -f job.yaml --snapshot FILE`` (an indexed
  Job of 8 whole-node workers) and ``kubectl troupe status -A --snapshot FILE``, each a
  subprocess from interpreter start to exit (best of ``--repeat``), on kubectl's JSON of
  the simulator benchmark's cluster at that size (``benchmarks/simulate_snapshot.py``); the
  baseline: ``python -m reconciler simulate`` on the same file.

Targets (issue 37): at 8,192 nodes + 100,000 pods memory under 500 MiB, the decision under
100 ms, ``plan`` under 3 s; at 4,096 nodes + 20,000 pods memory under 200 MiB. Printed as
one table (:func:`table`); ``benchmarks/scale.py`` prints the same rows before its
control-plane timelines. About 15 minutes on two busy cores, most of it the 100,000 pods'
memory row and snapshot file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve()
ROWS = ("memory", "decision", "plan")
SCALES = ((8192, 100_000), (4096, 20_000))
GANG = 1024
#: Targets by (row, nodes, pods): MiB for memory, ms for the decision, s for plan.
TARGETS: dict[tuple[str, int, int], float] = {("memory", 8192, 100_000): 500.0, ("memory", 4096, 20_000): 200.0,
                                              ("decision", 8192, 100_000): 100.0, ("plan", 8192, 100_000): 3.0}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def filler_pods(nodes: Sequence[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` running pods of one CPU each, round robin over ``nodes`` (every node's
    agents and CPU work: they leave the GPUs free, so the gang has room)."""
    names = [n["metadata"]["name"] for n in nodes]
    return [{"kind": "Pod", "metadata": {"name": f"cpu-{i:06d}", "namespace": f"team-{i // 2000:02d}",
                                         "uid": f"uid-cpu-{i}", "resourceVersion": str(10 + i),
                                         "labels": {"app": f"svc-{i // 500}"}},
             "spec": {"nodeName": names[i % len(names)],
                      "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]},
             "status": {"phase": "Running"}} for i in range(count)]


def child_decision(nodes: int, pods: int) -> dict[str, Any]:
    """The decision and release rows, in this (fresh) interpreter."""
    from placement import CLUSTER_LABEL, RACK_LABEL, build_objects
    from reconcile import best_of

    from reconciler.daemon.cache import ClusterCache
    from reconciler.engine.decision.decide import decide
    from reconciler.engine.gangs.lifecycle import Phase
    from reconciler.engine.model.keys import PodKey
    from reconciler.ports.fake import FakeCluster
    from reconciler.run.controllers import compose
    from troupe.config import Config
    from troupe.layers import TOPOLOGY_SLICE_REQUIRED_LEVEL, TOPOLOGY_SLICE_SIZE

    node_objs, busy, sliced = build_objects(nodes, GANG, 7)
    plain = json.loads(json.dumps(sliced))
    for i, pod in enumerate(sliced):
        pod["metadata"]["annotations"][TOPOLOGY_SLICE_SIZE] = "128,8"
        pod["metadata"]["annotations"][TOPOLOGY_SLICE_REQUIRED_LEVEL] = f"{CLUSTER_LABEL},{RACK_LABEL}"
        pod["metadata"]["uid"] = f"uid-sliced-{i}"
    for i, pod in enumerate(plain):
        pod["metadata"]["name"] = f"plain-worker-{i}"
        pod["metadata"]["annotations"]["troupe.io/gang-name"] = "plain"
        pod["metadata"]["uid"] = f"uid-plain-{i}"
    warm = [json.loads(json.dumps(plain[i])) for i in range(8)]  # a first release, to warm the release path
    for i, pod in enumerate(warm):
        pod["metadata"].update(name=f"warm-worker-{i}", uid=f"uid-warm-{i}")
        pod["metadata"]["annotations"].update({"troupe.io/gang-name": "warm", "troupe.io/gang-size": "8"})
    running = busy + filler_pods(node_objs, max(0, pods - len(busy) - 2 * GANG - len(warm)))
    config = Config(gang_schedule_timeout_jitter_seconds=0)
    cluster, cache = FakeCluster(), ClusterCache(config)
    cache.replace_nodes(node_objs)
    cache.replace_pods([cluster.pods.add(pod) for pod in running + warm + sliced + plain])
    controller = compose(cache, cluster, config).gangs
    gangs = {name: controller.gang(f"ml/{name}") for name in ("train", "plain")}
    now = time.time()
    start = time.perf_counter()
    snapshot = cache.snapshot()
    first_snapshot = time.perf_counter() - start
    out: dict[str, Any] = {"pods_in_cache": len(running) + len(warm) + 2 * GANG, "first_snapshot_ms": first_snapshot * 1000}
    for name, gang in gangs.items():
        assert gang is not None
        decision = decide(gang, snapshot, now)
        assert decision.phase is Phase.PLACED, decision.reason
        out[f"{name}_ms"] = float("inf")
    for _ in range(5):  # alternated, so that a burst of load on the machine falls on both
        for name, gang in gangs.items():
            assert gang is not None
            out[f"{name}_ms"] = min(out[f"{name}_ms"], best_of(1, lambda gang=gang: decide(gang, snapshot, now)) * 1000)

    changed = PodKey.of(running[-1])

    def one_pod_changed() -> None:
        # A label set on one running pod through the fake API server: a new version whose
        # parsed form differs, so the cache's version moves and the snapshot is built again.
        stored = cluster.pods.objects[changed]
        labels = dict(stored["metadata"].get("labels") or {}, **{"bench.troupe.io/changed": str(time.perf_counter_ns())})
        before = cache.version
        cache.pod_event("MODIFIED", cluster.pods.add(dict(stored, metadata={**stored["metadata"], "labels": labels})))
        assert cache.version > before, "the change reached the cache"
        decide(gangs["train"], cache.snapshot(), now)  # type: ignore[arg-type]

    out["rebuild_ms"] = best_of(3, one_pod_changed) * 1000
    warmed = controller.reconcile("ml/warm")  # the first release in a process pays more (either gang, measured)
    assert warmed is not None and warmed.phase is Phase.PLACED, warmed and warmed.reason
    for name in ("train", "plain"):  # the sliced gang first, then the baseline on what is left
        import gc

        gc.collect()
        start = time.perf_counter()
        outcome = controller.reconcile(f"ml/{name}")
        out[f"{name}_release_ms"] = (time.perf_counter() - start) * 1000
        assert outcome is not None and outcome.phase is Phase.PLACED, outcome and outcome.reason
    released = sum(1 for p in cluster.pods.objects.values() if p["metadata"]["name"].startswith(("train-", "plain-"))
                   and not p["spec"].get("schedulingGates"))
    assert released == 2 * GANG, released  # and the 8 warm-up members, named warm-
    return out


def child_plan(nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    """The plan and status rows, in this (fresh) interpreter: the snapshot file is written,
    its objects dropped, then each command timed as a subprocess."""
    import gc

    import orjson
    from kubectl_troupe import NOW, PLAN
    from simulate_snapshot import build_snapshot, timed

    with tempfile.TemporaryDirectory(prefix="troupe-scale-") as tmp:
        path, manifest = Path(tmp) / "snapshot.json", Path(tmp) / "job.yaml"
        snapshot = build_snapshot(nodes, pods, 7)
        path.write_bytes(orjson.dumps(snapshot))
        del snapshot
        gc.collect()
        manifest.write_text(json.dumps(PLAN))
        common = ["--snapshot", str(path), "--now", NOW]
        out: dict[str, Any] = {"file_mib": path.stat().st_size / 2**20}
        out["simulate_s"], out["simulate_cpu_s"], _ = timed(["simulate", str(path), "--now", NOW, "--output", "json"],
                                                            repeat)
        out["plan_s"], out["plan_cpu_s"], _ = timed(["plan", "-f", str(manifest), *common], repeat)
        out["status_s"], out["status_cpu_s"], _ = timed(["status", "-A", *common], repeat)
    return out


def child_memory(nodes: int, pods: int) -> dict[str, Any]:
    """The memory row: ``benchmarks/cache_memory.py``'s retained mode in a fresh interpreter."""
    done = subprocess.run([sys.executable, str(HERE.parent / "cache_memory.py"), "--child", "retained",
                           "--nodes", str(nodes), "--pods", str(pods)], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_child(row: str, nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    """Row ``row`` at one scale, measured in a fresh interpreter; its numbers."""
    if row == "memory":
        return child_memory(nodes, pods)
    done = subprocess.run([sys.executable, str(HERE), "--child", row, "--scales", f"{nodes}x{pods}",
                           "--repeat", str(repeat)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{row} at {nodes} nodes + {pods} pods failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rows_of(row: str, nodes: int, pods: int, m: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The table's rows of one measurement: (what, measured, baseline, ratio, target)."""
    scale = f"{nodes:,} nodes + {pods:,} pods"

    def target(value: float, unit: str, key: str | None = None) -> str:
        limit = TARGETS.get((key or row, nodes, pods))
        if limit is None:
            return "-"
        return f"< {limit:g} {unit}: {'met' if value < limit else 'NOT met'}"

    if row == "memory":
        return [(f"reconciler memory, steady, {scale}", f"{m['steady']:.0f} MiB", "-", "-", target(m["steady"], "MiB")),
                (f"reconciler memory, re-list peak, {scale}", f"{m['relist_peak']:.0f} MiB", "-",
                 f"{m['relist_peak'] / m['steady']:.2f}x steady", "-")]
    if row == "decision":
        return [(f"decision, gang of {GANG}, two slice layers, {scale}", f"{m['train_ms']:.1f} ms",
                 f"{m['plain_ms']:.1f} ms (no slices)", f"{m['train_ms'] / m['plain_ms']:.2f}x",
                 target(m["train_ms"], "ms")),
                (f"the same decision after one pod changed (snapshot rebuilt), {scale}", f"{m['rebuild_ms']:.1f} ms",
                 f"{m['train_ms']:.1f} ms (unchanged)", f"{m['rebuild_ms'] / m['train_ms']:.2f}x",
                 target(m["rebuild_ms"], "ms", "decision")),
                (f"release of that gang (decision + {GANG} in-memory writes), {scale}", f"{m['train_release_ms']:.0f} ms",
                 f"{m['plain_release_ms']:.0f} ms (no slices)", f"{m['train_release_ms'] / m['plain_release_ms']:.2f}x", "-")]
    return [(f"kubectl troupe plan, snapshot file {m['file_mib']:.0f} MiB, {scale}", f"{m['plan_s']:.2f} s",
             f"{m['simulate_s']:.2f} s (simulate)", f"{m['plan_s'] / m['simulate_s']:.2f}x", target(m["plan_s"], "s")),
            (f"kubectl troupe status -A, {scale}", f"{m['status_s']:.2f} s", f"{m['simulate_s']:.2f} s (simulate)",
             f"{m['status_s'] / m['simulate_s']:.2f}x", "-")]


def table(rows: Sequence[tuple[str, str, str, str, str]]) -> str:
    """The rows as one markdown table."""
    lines = ["| what | measured | baseline (same run) | ratio | target |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def parse_scales(text: str) -> list[tuple[int, int]]:
    """``"8192x100000,4096x20000"`` as ``[(8192, 100000), (4096, 20000)]``."""
    out = []
    for part in text.split(","):
        nodes, _, pods = part.strip().partition("x")
        out.append((int(nodes), int(pods)))
    return out


def measure(scales: Sequence[tuple[int, int]], rows: Sequence[str], repeat: int) -> list[tuple[str, str, str, str, str]]:
    """Every row at every scale (each in a fresh interpreter), printed as it comes; the table's rows."""
    out = []
    for nodes, pods in scales:
        for row in rows:
            if row == "decision" and nodes < 2048:
                continue
            progress(f"{row}: {nodes} nodes + {pods} pods")
            measured = rows_of(row, nodes, pods, run_child(row, nodes, pods, repeat))
            for r in measured:
                progress("  " + " | ".join(r))
            out += measured
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--scales", default=",".join(f"{n}x{q}" for n, q in SCALES),
                   help="NODESxPODS, comma-separated (default %(default)s)")
    p.add_argument("--rows", default=",".join(ROWS), help="rows to measure (default %(default)s)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each kubectl troupe command, best kept (default 1)")
    p.add_argument("--child", choices=("decision", "plan"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    scales = parse_scales(args.scales)
    if args.child:
        nodes, pods = scales[0]
        result = child_decision(nodes, pods) if args.child == "decision" else child_plan(nodes, pods, args.repeat)
        print(json.dumps(result))
        return 0
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        p.error(f"--rows: unknown {', '.join(unknown)} (choose from {', '.join(ROWS)})")
    print(table(measure(scales, rows, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
