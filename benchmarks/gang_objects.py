"""Gang objects benchmark: what keeping one ``gangs.troupe.io`` object per gang costs at
2,000 gangs (docs/decisions/043-gang-objects.md).

    .venv/bin/python benchmarks/gang_objects.py [--gangs N] [--members M] [--api-server]

**In this process** (always), on 2,048 nodes of 8 GPUs and N gangs of M one-GPU members whose
members arrive one at a time, a round of one new member per gang every 0.25 s of a fake
clock, each arrival reconciled by the controller (in-memory cache and writer): the status
writes the sink makes against the baseline of one write per decision (what a controller
without coalescing would send), the most writes any gang got in one second, and the CPU the
Gang objects add to a reconcile (the status computed from the decision and handed to the
sink, then the flushes) against the reconcile itself.

**Against a real API server** (``--api-server``: the local control plane of
``python -m devtools.devcluster``, built once): the N objects created and their status
written through the reconciler's writer, one at a time as the sink writes them, then every
status rewritten once; seconds and requests per second of each, and the object's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.gangobjects import GangObjects
from reconciler.engine.decision import gangobject
from reconciler.engine.decision.decide import decide
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import compose
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config


class Clock:
    """A monotonic clock the benchmark moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def in_process(gangs: int, members: int) -> dict[str, Any]:
    """The arrival rounds on in-memory fakes; returns the counts and timings."""
    config = Config()
    cluster = FakeCluster()
    cache = ClusterCache(config)
    nodes = [make_node(f"n{i:05d}").topology(f"b{i // 512}", f"s{i // 64}", f"h{i}").gpus(8).build()
             for i in range(2048)]
    cache.replace_nodes([cluster.nodes.add(n) for n in nodes])
    wall = [1_800_000_000.0]
    controllers = compose(cache, cluster, config, wall_clock=lambda: wall[0])
    controller = controllers.gangs
    clock = Clock()
    objects = controllers.gang_objects
    objects.clock, objects.budget, objects._credit = clock, float("inf"), float("inf")
    keys = [f"team-{g % 20}/g{g:04d}" for g in range(gangs)]
    decisions = reconcile_s = 0.0
    added = 0.0
    per_second: Counter[tuple[str, int]] = Counter()
    gc.collect()
    for rank in range(members):
        for key in keys:
            namespace, name = key.split("/")
            pod = make_pod(f"{name}-{rank}", namespace).gang(name, members).index(rank).gpus(1).gated().build()
            cache.pod_event("ADDED", cluster.pods.add(pod))
            t = time.perf_counter()
            controller.reconcile(key)
            reconcile_s += time.perf_counter() - t
            decisions += 1
        t = time.perf_counter()
        before = list(cluster.gang_objects.writes)
        objects.flush()
        added += time.perf_counter() - t
        for kind, ns, name in cluster.gang_objects.writes[len(before):]:
            if kind == "status":
                per_second[(f"{ns}/{name}", int(clock.now))] += 1
        clock.now += 0.25
        wall[0] += 0.25
    clock.now += 1.0
    t = time.perf_counter()
    objects.flush()
    added += time.perf_counter() - t
    # The status computation each reconcile made, timed on its own on the last decisions.
    snapshot = cache.snapshot()
    sample = keys[:200]
    gang_list = [controller.gang(k) for k in sample]
    decided = [(g, decide(g, snapshot, wall[0], controller.policy)) for g in gang_list if g is not None]
    t = time.perf_counter()
    for g, d in decided:
        objects.want(g.key, gangobject.object_name(g), g.name, gangobject.owner_references(g),
                     gangobject.gang_status(g, d, snapshot))
    per_status = (time.perf_counter() - t) / max(len(decided), 1)
    writes = Counter(kind for kind, _, _ in cluster.gang_objects.writes)
    size = len(json.dumps(next(iter(cluster.gang_objects.objects.values()))))
    return {"decisions": int(decisions), "writes": writes, "max_per_gang_second": max(per_second.values()),
            "reconcile_ms": reconcile_s / decisions * 1000, "status_ms": per_status * 1000,
            "flush_ms": added / decisions * 1000, "object_bytes": size}


def against_api_server(gangs: int) -> dict[str, Any]:
    """N objects created and their status written on the local control plane, then every
    status rewritten; seconds of each and the requests per second."""
    from devtools.devcluster import Cluster
    from reconciler import kube

    with Cluster(nodes=str(Path(__file__).resolve().parents[1] / "examples" / "nodes.yaml")) as cluster:
        api = cluster.api_client("admin")
        from kubernetes import client

        client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
        writes = kube.KubeWrites(api, kube.RateLimiter(10_000, 10_000))
        clock = Clock()
        objects = GangObjects(writes.gang_objects, budget=float("inf"), clock=clock)
        status = {"phase": "Waiting", "reason": "WaitingForMembers", "message": "3 of 8 members present",
                  "members": "3/8", "present": 3, "gated": 3, "released": 0, "bound": 0, "running": 0, "size": 8,
                  "releaseMode": "WhenComplete", "priority": 0, "conditions": [
                      {"type": "Waiting", "status": "True", "reason": "WaitingForMembers", "message": "3 of 8"}]}
        for g in range(gangs):
            objects.want(f"bench/g{g:04d}", f"g{g:04d}", f"g{g:04d}", [], status)
        t = time.perf_counter()
        made = objects.flush(everything=True)
        create_s = time.perf_counter() - t
        clock.now += 2
        for g in range(gangs):
            objects.want(f"bench/g{g:04d}", f"g{g:04d}", f"g{g:04d}", [], {**status, "message": "4 of 8 members present"})
        t = time.perf_counter()
        rewritten = objects.flush(everything=True)
        update_s = time.perf_counter() - t
        writes.close()
    return {"made": made, "create_s": create_s, "create_rps": 2 * made / create_s,
            "rewritten": rewritten, "update_s": update_s, "update_rps": rewritten / update_s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gangs", type=int, default=2000, help="gangs (default %(default)s)")
    p.add_argument("--members", type=int, default=8, help="members per gang, one GPU each (default %(default)s)")
    p.add_argument("--api-server", action="store_true", help="also measure against the local control plane")
    args = p.parse_args()
    print(f"# {args.gangs} gangs of {args.members} members arriving one per gang every 0.25 s, on 2,048 nodes",
          flush=True)
    r = in_process(args.gangs, args.members)
    w = r["writes"]
    status_writes = w["status"]
    print(f"decisions (baseline: one status write each)   {r['decisions']}")
    print(f"status writes made                              {status_writes} "
          f"({status_writes / r['decisions']:.3f}x the baseline), creates {w['create']}")
    print(f"most status writes of one gang in one second    {r['max_per_gang_second']}")
    print(f"reconcile (in-memory), per decision             {r['reconcile_ms']:.3f} ms")
    print(f"  of which the Gang status computed and wanted  {r['status_ms']:.3f} ms "
          f"({r['status_ms'] / r['reconcile_ms']:.1%})")
    print(f"sink flushes, per decision                      {r['flush_ms']:.3f} ms "
          f"({r['flush_ms'] / r['reconcile_ms']:.1%} of a reconcile)")
    print(f"one object, JSON                                {r['object_bytes']} bytes")
    if args.api_server:
        a = against_api_server(args.gangs)
        print(f"api server: {a['made']} objects created + status  {a['create_s']:.1f} s "
              f"({a['create_rps']:.0f} requests/s, one at a time)")
        print(f"api server: {a['rewritten']} statuses rewritten       {a['update_s']:.1f} s "
              f"({a['update_rps']:.0f} requests/s); at the default budget (kubeAPIQPS/5 = 20/s) "
              f"{a['rewritten'] / 20:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
