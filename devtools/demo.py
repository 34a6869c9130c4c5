"""``python -m devtools.demo``: Troupe end to end on a local control plane, then stop.

1. Build (or reuse) the control-plane binaries; start etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler and kwok with 16 fake GPU nodes
   (``examples/nodes.yaml``: 2 blocks x 2 subblocks x 4 hosts).
2. Start Troupe's webhook and reconciler on it (:class:`devtools.devcluster.stack.Stack`).
3. Submit ``examples/gang-job.yaml``: an indexed Job of 4 one-GPU pods, one gang.
4. Wait until all four are Running, print pod -> node -> block/subblock/host, stop everything.

Exit code 0 when the gang ran whole; 1 otherwise, with the reason and where the logs are.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from devtools.devcluster.cluster import Cluster
from devtools.devcluster.stack import Stack
from troupe import contract
from troupe.config import GKE_LEVELS

REPO = Path(__file__).resolve().parents[1]


def say(message: str) -> None:
    """Progress on stderr, so stdout carries only the result table."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def wait_running(core: client.CoreV1Api, job: str, want: int, timeout: float) -> list[Any]:
    """The job's pods once ``want`` of them are Running; raises ``TimeoutError``."""
    end = time.monotonic() + timeout
    last = ""
    while True:
        pods = core.list_namespaced_pod("default", label_selector=f"job-name={job}").items
        running = [p for p in pods if p.status.phase == "Running"]
        gated = [p for p in pods if p.spec.scheduling_gates]
        status = f"{len(pods)} pods: {len(gated)} gated, {len(running)} running"
        if status != last:
            say(status)
            last = status
        if len(running) >= want:
            return sorted(running, key=lambda p: int((p.metadata.labels or {}).get(contract.JOB_COMPLETION_INDEX, 0)))
        if time.monotonic() > end:
            raise TimeoutError(f"only {status} after {timeout:.0f}s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default=str(REPO / "examples" / "nodes.yaml"), help="fake nodes file (default %(default)s)")
    p.add_argument("--job", default=str(REPO / "examples" / "gang-job.yaml"), help="the Job to submit (default %(default)s)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the gang to run (default %(default)s)")
    args = p.parse_args(argv)
    job = yaml.safe_load(Path(args.job).read_text())
    want = int(job["spec"]["parallelism"])
    started = time.monotonic()
    say("starting the local control plane (the first run builds it from Go modules: about 8 minutes)")
    with Cluster(nodes=args.nodes) as cluster:
        say(f"control plane ready; logs in {cluster.logs_dir}")
        with Stack(cluster):
            say("Troupe's webhook and reconciler are running")
            api = cluster.api_client("admin")
            client.BatchV1Api(api).create_namespaced_job("default", job)
            say(f"submitted Job {job['metadata']['name']}: {want} pods, one gang")
            core = client.CoreV1Api(api)
            try:
                pods = wait_running(core, job["metadata"]["name"], want, args.timeout)
            except TimeoutError as e:
                say(f"the gang did not run: {e}; see {cluster.logs_dir}/troupe-reconciler.log")
                return 1
            rows = [["POD", "RANK", "NODE", "BLOCK", "SUBBLOCK", "HOST"]]
            for pod in pods:
                labels = core.read_node(pod.spec.node_name).metadata.labels or {}
                rank = (pod.metadata.labels or {}).get(contract.JOB_COMPLETION_INDEX, "?")
                rows.append([pod.metadata.name, rank, pod.spec.node_name, *(labels.get(k, "-") for k in GKE_LEVELS)])
            print(table(rows))
    say(f"done in {time.monotonic() - started:.0f}s; everything stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
