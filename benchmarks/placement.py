"""Placement benchmark: Troupe's engine against the GKE topology daemon's search.

    .venv/bin/python benchmarks/placement.py [--quick] [--seed N]

Synthetic GKE clusters: blocks of 32 subblocks of 16 nodes (512 nodes a block), every
node on its own host (``cloud.google.com/gce-topology-*`` labels), 8 GPUs each; 20% of
the nodes run a pod using 1-8 GPUs, 1% are NotReady and 1% carry an untolerated taint,
so which nodes to use matters. The gang: P members of 8 GPUs each (one per node), ranked
by completion index.

Timed, on the same prepared inputs, in this process:

- **Troupe**: ``place_gang`` on a prepared :class:`Snapshot` (its build time is printed
  apart). ``cold`` is the first call (filters evaluated for the first time), ``warm``
  the best of 5 further calls.
- **Baseline**: the seed's ``calculate_pods_assignment`` (``seeds/002``) enumerates every
  increasing sequence of node indices over the fitting nodes sorted by
  ``node_topology_key``; that is exponential, so the baseline is its faithful bounded
  form, a *sliding window*: for every run of P consecutive fitting nodes in that order
  (one pod per node, as the seed places them), check ``can_schedule`` for each pod and
  compute the total ``node_topology_distance`` over neighbouring ranks from scratch, as
  the seed does for every candidate assignment; keep the least. The seed's own helper
  functions are re-implemented below unchanged in logic. Its inputs, the seed's node-info
  dicts of free cpu/memory/gpu and labels for the Ready, tolerated nodes (what its
  ``find_schedulable_nodes`` returns), are prepared outside the timing. (Computing the
  window costs incrementally would make the baseline O(N); the seed does not.)

The anti-affinity case (issue 23; ``--anti-affinity-only`` runs it alone): the 8,192-node
gang of 1,024 members again, each with a required ``kubernetes.io/hostname`` anti-affinity
against the gang, timed against the same gang without it in the same process; target
under 100 ms warm.

The slices case (issue 25; ``--layers-only`` runs it alone): the same gang with two slice
layers, 128 members per block inside the gang and 8 per subblock inside each of those
(``troupe.io/topology-slice-size: "128,8"``), timed against the same gang without slices
in the same process; target under 50 ms warm and within 2x of the plain gang.

Targets (DESIGN.md, issue "Placement engine"): Troupe >= 50x faster than the baseline at
4,096 nodes / 256 pods and 8,192 nodes / 1,024 pods, under 100 ms at the larger size,
and its topology cost never higher than the baseline's.
"""

from __future__ import annotations

import argparse
import copy
import gc
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.decisions import Decisions, placement
from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import PlacementResult, place_gang
from troupe.contract import TopologyRequest
from troupe.layers import SliceLayer

GPU = "nvidia.com/gpu"
CLUSTER_LABEL = "cloud.google.com/gce-topology-block"
RACK_LABEL = "cloud.google.com/gce-topology-subblock"
HOST_LABEL = "cloud.google.com/gce-topology-host"
PRERELEASE = ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host")
SUBBLOCKS_PER_BLOCK = 32
NODES_PER_SUBBLOCK = 16
SIZES = [(512, 32), (4096, 256), (8192, 1024)]
#: Every plan of this run (benchmarks/decisions.py): named in main() from the arguments.
DECISIONS = Decisions("placement")


# --- the synthetic cluster -----------------------------------------------------------------
def build_objects(n_nodes: int, n_pods: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(nodes, running pods, gang members) as plain Kubernetes objects."""
    rng = random.Random(seed)
    nodes, running = [], []
    for k in range(n_nodes):
        b, rest = divmod(k, SUBBLOCKS_PER_BLOCK * NODES_PER_SUBBLOCK)
        s = rest // NODES_PER_SUBBLOCK
        name = f"gke-a3-{rng.getrandbits(40):010x}"
        node: dict[str, Any] = {
            "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name,
                CLUSTER_LABEL: f"block-{b:02d}",
                RACK_LABEL: f"block-{b:02d}-sb-{s:02d}",
                HOST_LABEL: f"host-{rng.getrandbits(48):012x}",
            }},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "207500m", "memory": "1830Gi", GPU: "8", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        roll = rng.random()
        if roll < 0.01:
            node["status"]["conditions"][0]["status"] = "False"
        elif roll < 0.02:
            node["spec"]["taints"] = [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]
        elif roll < 0.22:
            running.append({
                "kind": "Pod",
                "metadata": {"name": f"busy-{k}", "namespace": "other"},
                "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {
                    GPU: str(rng.randint(1, 8)), "cpu": "20", "memory": "200Gi"}}}]},
                "status": {"phase": "Running"},
            })
        nodes.append(node)
    rng.shuffle(nodes)
    members = [
        {
            "kind": "Pod",
            "metadata": {
                "name": f"train-worker-{i}", "namespace": "ml",
                "labels": {"batch.kubernetes.io/job-completion-index": str(i)},
                "annotations": {"troupe.io/gang-name": "train", "troupe.io/gang-size": str(n_pods)},
            },
            "spec": {
                "schedulingGates": [{"name": "troupe.io/placement"}],
                "containers": [{"name": "c", "resources": {"requests": {GPU: "8", "cpu": "100", "memory": "1000Gi"}}}],
            },
            "status": {"phase": "Pending"},
        }
        for i in range(n_pods)
    ]
    return nodes, running, members


# --- the baseline: seeds/002's functions, logic unchanged ----------------------------------
def node_topology_key(node: dict[str, Any]) -> tuple[str, ...]:
    node_labels = node["node_labels"]
    for labels in [(CLUSTER_LABEL, RACK_LABEL, HOST_LABEL), PRERELEASE]:
        if all(label in node_labels for label in labels):
            return tuple(node_labels[label] for label in labels)
    return ()


def node_topology_distance(node1: dict[str, Any], node2: dict[str, Any]) -> float:
    node1_topology_keys = node_topology_key(node1)
    node2_topology_keys = node_topology_key(node2)
    result = 1000000.0
    for i, node1_topology_key in enumerate(node1_topology_keys):
        if node1_topology_key != node2_topology_keys[i]:
            return result
        result /= 100
    return 0.0


def pod_sorting_key(pod_info: dict[str, Any]) -> Any:
    index_value = pod_info.get("index")
    if index_value is not None:
        return int(index_value)
    name = pod_info["name"]
    if match := re.fullmatch(r"^(.*?)(\d+)$", name):
        prefix, suffix = match.groups()
        return (prefix, int(suffix))
    return (name, 0)


def can_schedule(node: dict[str, Any], pod: dict[str, Any]) -> bool:
    node_selector = pod.get("node_selector", {})
    node_labels = node.get("node_labels", {})
    for key, value in node_selector.items():
        if key not in node_labels or node_labels[key] != value:
            return False
    return bool(node["cpu"] >= pod["cpu"] and node["memory"] >= pod["memory"] and node["gpu"] >= pod["gpu"])


def baseline_sliding_window(nodes_info: list[dict[str, Any]], pods_info: list[dict[str, Any]]) -> tuple[list[str], float]:
    """The seed's search bounded to windows of consecutive fitting nodes (module doc)."""
    sorted_pods = sorted(pods_info, key=pod_sorting_key)
    sorted_nodes = sorted(nodes_info, key=node_topology_key)
    fitting = [n for n in sorted_nodes if any(can_schedule(n, p) for p in sorted_pods[:1])]
    p = len(sorted_pods)
    best: list[str] = []
    minimum = float("inf")
    for start in range(len(fitting) - p + 1):
        window = fitting[start:start + p]
        if not all(can_schedule(window[i], sorted_pods[i]) for i in range(p)):
            continue
        distance = 0.0
        for i in range(1, p):
            distance += node_topology_distance(window[i], window[i - 1])
        if distance < minimum:
            minimum, best = distance, [n["name"] for n in window]
    return best, minimum


def seed_inputs(snapshot: Snapshot, members: list[PodInfo]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the seed's ``find_schedulable_nodes``/``find_schedulable_pods`` return: free
    cpu (cores), memory, gpu and labels of Ready nodes whose taints are tolerated."""
    nodes_info = []
    for i, node in enumerate(snapshot.nodes):
        if not node.ready or node.taints:
            continue
        free = snapshot.free(i)
        nodes_info.append({
            "name": node.name, "cpu": free.get("cpu", 0) / 1000, "memory": free.get("memory", 0),
            "gpu": free.get(GPU, 0), "node_labels": dict(node.labels),
        })
    pods_info = [
        {"name": m.name, "index": m.labels.get("batch.kubernetes.io/job-completion-index"),
         "cpu": m.requests.get("cpu", 0) / 1000, "memory": m.requests.get("memory", 0), "gpu": m.requests.get(GPU, 0)}
        for m in members
    ]
    return nodes_info, pods_info


# --- checks and timing -----------------------------------------------------------------------
def check_plan(snapshot: Snapshot, members: list[PodInfo], result: PlacementResult) -> None:
    """All or nothing, and no node over its allocatable."""
    assert result.placed and len(result.assignments) == len(members), result.reason
    after = snapshot.with_assumed(result)
    for a in result.assignments:
        assert all(v >= 0 for v in after.free(a.node).values()), f"{a.node} overcommitted"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()  # the garbage of building the inputs is not the timed code's
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def run_size(n_nodes: int, n_pods: int, seed: int) -> dict[str, Any]:
    nodes, running, member_objs = build_objects(n_nodes, n_pods, seed)
    build_ms, snapshot = timed(lambda: snapshot_of_objects(nodes, running + member_objs))
    members = [snapshot.pods[f"ml/train-worker-{i}"] for i in range(n_pods)]
    cold_ms, result = timed(lambda: place_gang(snapshot, members))
    warm_ms = min(timed(lambda: place_gang(snapshot, members))[0] for _ in range(5))
    check_plan(snapshot, members, result)
    DECISIONS.add(f"{n_nodes} nodes, {n_pods} members", placement(result))
    nodes_info, pods_info = seed_inputs(snapshot, members)
    base_ms, (base_nodes, base_cost) = timed(lambda: baseline_sliding_window(nodes_info, pods_info))
    assert len(base_nodes) == n_pods, "the baseline found no window"
    return {
        "nodes": n_nodes, "pods": n_pods, "build_ms": build_ms, "cold_ms": cold_ms, "warm_ms": warm_ms,
        "base_ms": base_ms, "ratio": base_ms / cold_ms, "cost": result.cost, "base_cost": base_cost,
        "method": result.method, "domain": str(result.domain),
    }


def with_anti_affinity(member: dict[str, Any]) -> dict[str, Any]:
    """``member`` with a required ``kubernetes.io/hostname`` anti-affinity against its gang
    (one member per node, the usual distributed-training pattern)."""
    out = copy.deepcopy(member)
    out["metadata"]["labels"]["app"] = "train"
    out["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "train"}}}]}}
    return out


def cold_and_warm(snapshot: Snapshot, members: list[PodInfo]) -> tuple[float, float, PlacementResult]:
    """The first call's time, the best of 5 further calls' (ms), and the result."""
    cold_ms, result = timed(lambda: place_gang(snapshot, members))
    warm_ms = min(timed(lambda: place_gang(snapshot, members))[0] for _ in range(5))
    return cold_ms, warm_ms, result


def run_anti_affinity(n_nodes: int, n_pods: int, seed: int) -> dict[str, Any]:
    """The same gang with and without the hostname anti-affinity, on the same cluster, in
    this process: cold and warm (best of 5) times of each, and their ratio (warm)."""
    nodes, running, member_objs = build_objects(n_nodes, n_pods, seed)
    out: dict[str, Any] = {"nodes": n_nodes, "pods": n_pods}
    for name, objs in (("plain", member_objs), ("anti", [with_anti_affinity(m) for m in member_objs])):
        snapshot = snapshot_of_objects(nodes, running + objs)
        members = [snapshot.pods[f"ml/train-worker-{i}"] for i in range(n_pods)]
        out[f"{name}_cold_ms"], out[f"{name}_warm_ms"], result = cold_and_warm(snapshot, members)
        check_plan(snapshot, members, result)
        DECISIONS.add(f"{n_nodes} nodes, {n_pods} members, {name}", placement(result))
        if name == "anti":
            assert len({a.node for a in result.assignments}) == n_pods, "two members share a node"
    out["ratio"] = out["anti_warm_ms"] / out["plain_warm_ms"]
    return out


def print_anti_affinity(seed: int) -> bool:
    """Print the anti-affinity case (8,192 nodes, 1,024 members); whether it is under
    100 ms warm."""
    r = run_anti_affinity(8192, 1024, seed)
    print(f"\nhostname anti-affinity, {r['nodes']} nodes, {r['pods']} members: "
          f"plain {r['plain_cold_ms']:.1f} ms cold / {r['plain_warm_ms']:.1f} ms warm, "
          f"anti-affinity {r['anti_cold_ms']:.1f} ms cold / {r['anti_warm_ms']:.1f} ms warm, "
          f"ratio {r['ratio']:.2f}x (warm)")
    if r["anti_warm_ms"] >= 100:
        print(f"  FAIL: {r['anti_warm_ms']:.1f} ms is not under 100 ms")
        return False
    return True


#: The slices case's layers, outermost first.
LAYERS = (SliceLayer(128, CLUSTER_LABEL), SliceLayer(8, RACK_LABEL))


def run_layers(n_nodes: int, n_pods: int, seed: int) -> dict[str, Any]:
    """The same gang with and without :data:`LAYERS`, on the same snapshot, in this
    process: cold and warm (best of 7, the two alternated) times of each, and their ratio
    (warm)."""
    nodes, running, member_objs = build_objects(n_nodes, n_pods, seed)
    snapshot = snapshot_of_objects(nodes, running + member_objs)
    members = [snapshot.pods[f"ml/train-worker-{i}"] for i in range(n_pods)]
    out: dict[str, Any] = {"nodes": n_nodes, "pods": n_pods}
    cases = (("plain", TopologyRequest()), ("sliced", TopologyRequest(slices=LAYERS)))
    for name, layout in cases:
        out[f"{name}_cold_ms"], result = timed(lambda layout=layout: place_gang(snapshot, members, layout))
        check_plan(snapshot, members, result)
        DECISIONS.add(f"{n_nodes} nodes, {n_pods} members, {name}", placement(result))
        out[f"{name}_method"] = result.method
        if layout.slices:
            assert all(str(s.domain) for s in result.slices) and len(result.slices) == n_pods // 128 + n_pods // 8
        out[f"{name}_warm_ms"] = float("inf")
    for _ in range(7):  # alternated, so that a burst of load on the machine falls on both
        for name, layout in cases:
            ms = timed(lambda layout=layout: place_gang(snapshot, members, layout))[0]
            out[f"{name}_warm_ms"] = min(out[f"{name}_warm_ms"], ms)
    out["ratio"] = out["sliced_warm_ms"] / out["plain_warm_ms"]
    return out


def print_layers(seed: int) -> bool:
    """Print the slices case (8,192 nodes, 1,024 members); whether it is under 50 ms warm
    and within 2x of the plain gang."""
    r = run_layers(8192, 1024, seed)
    print(f"\ntwo slice layers (128 per block, 8 per subblock), {r['nodes']} nodes, {r['pods']} members: "
          f"plain {r['plain_cold_ms']:.1f} ms cold / {r['plain_warm_ms']:.1f} ms warm, "
          f"sliced {r['sliced_cold_ms']:.1f} ms cold / {r['sliced_warm_ms']:.1f} ms warm ({r['sliced_method']}), "
          f"ratio {r['ratio']:.2f}x (warm)")
    ok = r["sliced_warm_ms"] < 50 and r["ratio"] <= 2
    if not ok:
        print(f"  FAIL: {r['sliced_warm_ms']:.1f} ms warm, {r['ratio']:.2f}x the plain gang")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the small size")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the synthetic clusters")
    parser.add_argument("--anti-affinity-only", action="store_true",
                        help="only the hostname anti-affinity case (8,192 nodes, 1,024 members)")
    parser.add_argument("--layers-only", action="store_true",
                        help="only the two slice layers case (8,192 nodes, 1,024 members)")
    parser.add_argument("--record-decisions", action="store_true",
                        help="record this run's plans as the ones later runs must match (benchmarks/decisions.py)")
    args = parser.parse_args(argv)
    case = "layers" if args.layers_only else "anti-affinity" if args.anti_affinity_only else \
        "quick" if args.quick else "all"
    DECISIONS.name = f"placement ({case}, seed {args.seed})"
    if args.layers_only:
        return 0 if print_layers(args.seed) & DECISIONS.report(args.record_decisions) else 1
    if args.anti_affinity_only:
        return 0 if print_anti_affinity(args.seed) & DECISIONS.report(args.record_decisions) else 1
    sizes = SIZES[:1] if args.quick else SIZES
    header = (f"{'nodes':>6} {'pods':>5} {'build ms':>9} {'troupe ms':>10} {'(warm)':>7} {'baseline ms':>12} "
              f"{'speedup':>8} {'troupe cost':>12} {'baseline cost':>14}  method/domain")
    print(header)
    ok = True
    for n_nodes, n_pods in sizes:
        r = run_size(n_nodes, n_pods, args.seed)
        print(f"{r['nodes']:>6} {r['pods']:>5} {r['build_ms']:>9.1f} {r['cold_ms']:>10.2f} {r['warm_ms']:>7.2f} "
              f"{r['base_ms']:>12.1f} {r['ratio']:>7.0f}x {r['cost']:>12.0f} {r['base_cost']:>14.0f}  "
              f"{r['method']} {r['domain']}")
        if r["cost"] > r["base_cost"]:
            ok = False
            print(f"  FAIL: Troupe's cost {r['cost']:.0f} is higher than the baseline's {r['base_cost']:.0f}")
        if n_nodes >= 4096 and r["ratio"] < 50:
            ok = False
            print(f"  FAIL: speedup {r['ratio']:.0f}x is under 50x")
        if n_nodes >= 8192 and r["cold_ms"] >= 100:
            ok = False
            print(f"  FAIL: {r['cold_ms']:.1f} ms is not under 100 ms")
    if not args.quick:
        ok = print_anti_affinity(args.seed) and ok
        ok = print_layers(args.seed) and ok
    ok = DECISIONS.report(args.record_decisions) and ok
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
