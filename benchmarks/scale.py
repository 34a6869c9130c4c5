"""Scale benchmark: an indexed Job of N whole-node pods, plain and as one gang, on the local
control plane with 2,048 kwok nodes (4 blocks x 8 subblocks x 64 hosts, 8 GPUs each).

    .venv/bin/python benchmarks/scale.py [--sizes 64,256,512] [--release-concurrency C]

For each N, in the same run and on the same cluster:

- **plain**: the Job without Troupe keys (kube-scheduler alone places the pods);
- **gang**: the same Job with ``troupe.io/gang-name``/``-size: N`` and
  ``troupe.io/topology-preferred-level: <subblock>``.

Printed per N: seconds from Job creation to all N pods Running (watched), the gang/plain
ratio, seconds of the release alone (from the watch seeing the N-th member to it seeing
the last member ungated: the plan and every write), the subblocks the pods span against
the fewest that can hold N (64 hosts each), and the reconciler's resident memory (peak,
``VmHWM``). Targets (DESIGN.md scale, issue "decision core"): gang within 1.2x of plain,
a release of 512 under 3 s, the fewest subblocks.

This is a benchmark, not a test: it prints numbers. About 6 minutes on two cores, after
the control plane is built (``python -m devtools.devcluster build``).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch

from devtools.devcluster.cluster import Cluster, exists
from devtools.devcluster.stack import Stack

BLOCKS, SUBBLOCKS, HOSTS = 4, 8, 64
SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
TROUPE_GATE = "troupe.io/placement"


def nodes_file(directory: Path) -> Path:
    """A FakeNodes file of BLOCKS x SUBBLOCKS x HOSTS nodes with 8 GPUs each."""
    path = directory / "nodes.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "troupe.dev/devcluster/v1", "kind": "FakeNodes",
        "groups": [{"name": "gpu",
                    "topology": {"blocks": BLOCKS, "subblocksPerBlock": SUBBLOCKS, "hostsPerSubblock": HOSTS},
                    "resources": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}}],
    }))
    return path


def job(name: str, n: int, gang: bool) -> dict[str, Any]:
    """An indexed Job of ``n`` pods of 8 GPUs each (whole nodes), as one gang or plain."""
    annotations = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(n),
                   "troupe.io/topology-preferred-level": SUBBLOCK_LABEL} if gang else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "train", "image": "trainer:latest",
                                         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"},
                                                       "limits": {"nvidia.com/gpu": "8"}}}]},
            },
        },
    }


@dataclass
class Run:
    """One measured Job: seconds to all Running, seconds of the release, subblocks spanned."""

    to_running: float
    release: float | None
    subblocks: int


def measure(api: Any, namespace: str, name: str, n: int, gang: bool, timeout: float = 600.0) -> Run:
    """Create the Job and watch its pods until all ``n`` are Running; returns the times.
    The watch is resumed from a fresh list when the API server drops it."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    seen: dict[str, Any] = {}
    marks: dict[str, float] = {}
    done, stop = threading.Event(), threading.Event()
    errors: list[str] = []

    def note(now: float) -> None:
        if "complete" not in marks and len(seen) >= n:
            marks["complete"] = now
        if "ungated" not in marks and len(seen) >= n and not any(
                any(g.name == TROUPE_GATE for g in p.spec.scheduling_gates or ()) for p in seen.values()):
            marks["ungated"] = now
        if sum(1 for p in seen.values() if p.status.phase == "Running") >= n:
            marks["running"] = now
            done.set()

    def follow() -> None:
        selector = f"job-name={name}"
        while not stop.is_set() and not done.is_set():
            try:
                listing = core.list_namespaced_pod(namespace, label_selector=selector)
                seen.clear()
                seen.update({p.metadata.name: p for p in listing.items})
                note(time.monotonic())
                w = watch.Watch()
                for event in w.stream(core.list_namespaced_pod, namespace, label_selector=selector,
                                      resource_version=listing.metadata.resource_version, timeout_seconds=60):
                    pod = event["object"]
                    if event["type"] == "DELETED":
                        seen.pop(pod.metadata.name, None)
                    else:
                        seen[pod.metadata.name] = pod
                    note(time.monotonic())
                    if done.is_set() or stop.is_set():
                        w.stop()
            except Exception as e:  # noqa: BLE001  resumed from a fresh list
                errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.2)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    batch.create_namespaced_job(namespace, job(name, n, gang))
    finished = done.wait(timeout)
    stop.set()
    if not finished:
        running = sum(1 for p in seen.values() if p.status.phase == "Running")
        raise RuntimeError(f"{name}: {running} of {n} pods Running after {timeout:.0f}s; watch errors: {errors[-3:]}")
    subblocks = {p.spec.node_name.rsplit("-", 1)[0] for p in seen.values()}
    release = marks["ungated"] - marks["complete"] if gang and "ungated" in marks and "complete" in marks else None
    return Run(marks["running"] - t0, release, len(subblocks))


def rss_peak_mib(pid: int) -> float:
    """Peak resident memory of process ``pid`` (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def clear(core: client.CoreV1Api, namespace: str) -> None:
    """Delete ``namespace`` and wait until it is gone (its pods' capacity is free again)."""
    core.delete_namespace(namespace, grace_period_seconds=0)
    end = time.monotonic() + 300
    while exists(lambda: core.read_namespace(namespace)):
        if time.monotonic() > end:
            raise RuntimeError(f"namespace {namespace} not deleted after 300s")
        time.sleep(0.5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--sizes", default="64,256,512", help="gang sizes N, comma-separated (default %(default)s)")
    p.add_argument("--release-concurrency", type=int, default=None, metavar="C",
                   help="the reconciler's releaseConcurrency (default: the built-in default)")
    p.add_argument("--run-dir", metavar="DIR", default=None,
                   help="keep the control plane's run directory (logs of every component) here")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="troupe-bench-scale-") as tmp:
        directory = Path(tmp)
        config = directory / "config.yaml"
        config.write_text("" if args.release_concurrency is None else f"releaseConcurrency: {args.release_concurrency}\n")
        print(f"starting the control plane with {BLOCKS * SUBBLOCKS * HOSTS} kwok nodes...", file=sys.stderr)
        t = time.monotonic()
        with Cluster(args.run_dir, nodes=nodes_file(directory), start_timeout=600.0) as cluster, Stack(cluster, config) as stack:
            print(f"  ready in {time.monotonic() - t:.0f}s", file=sys.stderr)
            api = cluster.api_client("admin")
            core = client.CoreV1Api(api)
            pid = stack.process("troupe-reconciler").popen.pid
            rows = []
            for n in sizes:
                runs = {}
                for kind in ("plain", "gang"):
                    namespace = f"bench-{kind}-{n}"
                    core.create_namespace({"metadata": {"name": namespace}})
                    print(f"N={n} {kind}...", file=sys.stderr)
                    runs[kind] = measure(api, namespace, f"{kind}-{n}", n, gang=(kind == "gang"))
                    print(f"  {runs[kind].to_running:.1f}s to all Running", file=sys.stderr)
                    clear(core, namespace)
                rows.append((n, runs["plain"], runs["gang"], rss_peak_mib(pid)))
                stack.check()

    print(f"{BLOCKS * SUBBLOCKS * HOSTS} kwok nodes ({BLOCKS} blocks x {SUBBLOCKS} subblocks x {HOSTS} hosts, 8 GPUs), "
          f"indexed Job of N whole-node pods")
    print(f"{'N':>5} {'plain s':>8} {'gang s':>8} {'ratio':>6} {'release s':>10} {'subblocks plain/gang/min':>25} "
          f"{'reconciler RSS MiB':>19}")
    for n, plain, gang, rss in rows:
        release = f"{gang.release:.2f}" if gang.release is not None else "n/a"
        print(f"{n:>5} {plain.to_running:>8.1f} {gang.to_running:>8.1f} {gang.to_running / plain.to_running:>5.2f}x "
              f"{release:>10} {f'{plain.subblocks}/{gang.subblocks}/{math.ceil(n / HOSTS)}':>25} {rss:>19.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
