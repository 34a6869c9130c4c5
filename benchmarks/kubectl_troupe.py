"""``kubectl troupe`` on 2,048 nodes and 20,000 pods: each command end to end, and a live list.

    .venv/bin/python benchmarks/kubectl_troupe.py [--nodes N] [--pods N] [--repeat N] [--live]

The snapshot is the simulator benchmark's (``benchmarks/simulate_snapshot.py``: GKE nodes of
8 GPUs with the fields kubectl shows, a daemon pod per node, Job pods bound to the first
blocks, five waiting gangs of 512, 64, 64, 16 and 8 members), written as kubectl's JSON.

Timed, each as a subprocess (interpreter start, read, parse, decisions, output), best of
``--repeat`` wall time and the CPU time of that run:

- ``status``, ``why`` (a member of the last gang in the queue: every gang ahead is decided
  first), ``topology`` and ``plan -f`` (an indexed Job of 8 whole-node workers), each with
  ``--snapshot``;
- the **baseline**, in the same run: ``python -m reconciler simulate`` on the same file (the
  same reader and decisions, no plugin), so the ratio shows what the plugin adds.

With ``--live`` it also starts a local control plane (``devtools.devcluster``), creates the
snapshot's nodes and ``--live-pods`` pods (each as kubectl shows them, gated by a gate no one
removes, so nothing schedules them), and times what a live ``kubectl troupe`` pays to read
them: :func:`reconciler.kube.read_cluster` (pages of 500 from the watch cache, in
parallel), against one unpaged list from the watch cache and a paged quorum read (the
client's default), all in this process.

Target: every command under 2 s on 2,048 nodes and 20,000 pods from the snapshot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulate_snapshot import build_snapshot, progress, timed

REPO = Path(__file__).resolve().parents[1]
NOW = "2026-03-01T10:00:00Z"
TARGET_S = 2.0
PLAN = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bench-plan", "namespace": "ml"},
    "spec": {"completionMode": "Indexed", "completions": 8, "parallelism": 8, "template": {
        "metadata": {"annotations": {"troupe.io/gang-name": "bench-plan", "troupe.io/gang-size": "8"}},
        "spec": {"restartPolicy": "Never", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                 "containers": [{"name": "w", "image": "x", "resources": {
                     "requests": {"cpu": "100", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]}}},
}


def live(snapshot: dict[str, Any], pods: int) -> None:
    """Create the nodes and ``pods`` pods on a local control plane; time the reads."""
    from kubernetes import client

    from devtools.devcluster import Cluster
    from reconciler import kube

    nodes = [o for o in snapshot["items"] if o["kind"] == "Node"]
    bodies = [o for o in snapshot["items"] if o["kind"] == "Pod"][:pods]
    with Cluster(start_timeout=600.0) as cluster:
        api = cluster.api_client("admin")
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "ml"}})
        core.create_namespace({"metadata": {"name": "research"}})

        def make_node(obj: dict[str, Any]) -> None:
            body = {k: obj[k] for k in ("apiVersion", "kind", "spec")}
            body["metadata"] = {k: obj["metadata"][k] for k in ("name", "labels")}
            created = core.create_node(body, _preload_content=False)
            name = json.loads(created.data)["metadata"]["name"]
            core.patch_node_status(name, {"status": obj["status"]}, _preload_content=False)

        def make_pod(obj: dict[str, Any]) -> None:
            body = {k: obj[k] for k in ("apiVersion", "kind")}
            # No ownerReferences: the garbage collector would delete pods whose owner is absent.
            body["metadata"] = {k: v for k, v in obj["metadata"].items()
                                if k in ("name", "namespace", "labels", "annotations")}
            spec = {k: v for k, v in obj["spec"].items() if k not in ("nodeName",)}
            spec["schedulingGates"] = [{"name": "bench.troupe.io/hold"}]
            body["spec"] = spec
            core.create_namespaced_pod(obj["metadata"]["namespace"], body, _preload_content=False)

        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(make_node, nodes))
            progress(f"created {len(nodes)} nodes in {time.perf_counter() - start:.0f} s")
            start = time.perf_counter()
            list(pool.map(make_pod, bodies))
        progress(f"created {len(bodies)} pods in {time.perf_counter() - start:.0f} s")
        reader = kube.plugin_client(str(cluster.kubeconfig("admin")), None)[0]

        def best(run: Any, n: int = 3) -> float:
            times = []
            for _ in range(n):
                t = time.perf_counter()
                run()
                times.append(time.perf_counter() - t)
            return min(times)

        def unpaged() -> None:
            resp = client.CoreV1Api(reader).list_pod_for_all_namespaces(resource_version="0", _preload_content=False)
            orjson.loads(resp.data)

        def quorum_paged() -> None:
            cont = None
            while True:
                resp = client.CoreV1Api(reader).list_pod_for_all_namespaces(limit=500, _continue=cont,
                                                                            _preload_content=False)
                body = orjson.loads(resp.data)
                cont = body["metadata"].get("continue")
                if not cont:
                    return

        size = len(client.CoreV1Api(reader).list_pod_for_all_namespaces(resource_version="0",
                                                                           _preload_content=False).data)
        t_read = best(lambda: kube.read_cluster(reader))
        t_unpaged = best(unpaged)
        t_quorum = best(quorum_paged)
        print(f"live: {len(nodes)} nodes + {len(bodies)} pods on a local kube-apiserver (pods list {size / 2**20:.0f} MiB)")
        print(f"  read_cluster (every kind, pages of 500 from the watch cache, parallel)  {t_read:6.2f} s")
        print(f"  pods alone: one unpaged list from the watch cache (resourceVersion=0)    {t_unpaged:6.2f} s")
        print(f"  pods alone: pages of 500, quorum reads (the client's default)            {t_quorum:6.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2048, help="nodes (default %(default)s)")
    parser.add_argument("--pods", type=int, default=20000, help="pods, gang members included (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command, best kept (default %(default)s)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default %(default)s)")
    parser.add_argument("--live", action="store_true", help="also time reading them from a local control plane")
    parser.add_argument("--live-pods", type=int, default=20000, help="pods created for --live (default %(default)s)")
    args = parser.parse_args(argv)

    progress(f"building {args.nodes} nodes and {args.pods} pods")
    snapshot = build_snapshot(args.nodes, args.pods, args.seed)
    with tempfile.TemporaryDirectory(prefix="troupe-plugin-bench-") as tmp:
        path, manifest = Path(tmp) / "snapshot.json", Path(tmp) / "job.yaml"
        path.write_bytes(orjson.dumps(snapshot, option=orjson.OPT_INDENT_2))
        size = path.stat().st_size
        manifest.write_text(json.dumps(PLAN))
        common = ["--snapshot", str(path), "--now", NOW]
        last = [o for o in snapshot["items"] if o["kind"] == "Pod"][-1]["metadata"]
        runs = [
            ("status", ["status", "-A", *common]),
            ("why", ["why", f"{last['namespace']}/{last['name']}", *common]),
            ("topology", ["topology", *common]),
            ("plan", ["plan", "-f", str(manifest), *common]),
        ]
        progress(f"baseline: python -m reconciler simulate (best of {args.repeat})")
        base, base_cpu, _ = timed(["simulate", str(path), "--now", NOW, "--output", "json"], args.repeat)
        results = []
        for name, argv_ in runs:
            progress(f"kubectl troupe {name} (best of {args.repeat})")
            wall, cpu, out = timed(argv_, args.repeat)
            results.append((name, wall, cpu, out))
    print(f"snapshot: {args.nodes} nodes + {args.pods} pods, {size / 2**20:.0f} MiB of kubectl's JSON")
    print(f"baseline  simulate  {base:6.2f} s  (CPU {base_cpu:.2f} s)")
    ok = True
    for name, wall, cpu, _ in results:
        ok &= wall < TARGET_S
        print(f"          {name:<8}  {wall:6.2f} s  (CPU {cpu:.2f} s)  {wall / base:.2f}x the simulator")
    why_out = results[1][3].splitlines()
    print("why: " + (why_out[2] if len(why_out) > 2 else ""))
    print(f"target: every command under {TARGET_S:.0f} s: {'met' if ok else 'NOT met'}")
    if args.live:
        live(snapshot, args.live_pods)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
