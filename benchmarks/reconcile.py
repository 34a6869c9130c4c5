"""Reconcile benchmark: one gang decision of the controller, end to end on in-memory fakes.

    .venv/bin/python benchmarks/reconcile.py [--nodes N] [--pods N] [--gang P]

What a reconcile costs besides the engine: turning the cluster into the engine's
snapshot, deciding, then releasing every member (one update per member, here to
:class:`reconciler.ports.fake.pods.FakePodWrites`, so the API server's latency is not in the numbers).

Timed in this process, on the same cluster:

- **baseline decision**: ``snapshot_of_objects`` on every object (a snapshot parsed
  from scratch) plus ``decide``;
- **warm decision**: ``decide`` on the cache's snapshot, rebuilt from the infos the cache
  parsed at event time after the first gang's release changed it;
- **reconcile**: the whole second reconcile, decision plus P in-memory writes (the fake
  writer's deep copies are most of that time).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import compose
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config


def best_of(n: int, run: Callable[[], object]) -> float:
    """The least of ``n`` timings of ``run()``, seconds, each after a full collection
    (the heap of a large cluster makes collector pauses the main noise)."""
    times = []
    for _ in range(n):
        gc.collect()
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8192, help="nodes (default %(default)s)")
    p.add_argument("--pods", type=int, default=20000, help="running pods besides the gangs (default %(default)s)")
    p.add_argument("--gang", type=int, default=256, help="members per gang, 4 GPUs each (default %(default)s)")
    args = p.parse_args()

    nodes = [make_node(f"n{i:05d}").topology(f"b{i // 512}", f"s{i // 16}", f"h{i}").gpus(8).build()
             for i in range(args.nodes)]
    running = [make_pod(f"busy-{i}", "busy").gpus(1).running_on(f"n{(i * 7) % args.nodes:05d}").build()
               for i in range(args.pods)]
    gangs = {g: [make_pod(f"{g}-{i}").gang(g, args.gang).index(i).gpus(4).gated().build() for i in range(args.gang)]
             for g in ("first", "second")}
    cluster, cache = FakeCluster(), ClusterCache(Config())
    cache.replace_nodes(nodes)
    cache.replace_pods([cluster.pods.add(pod) for pod in running + gangs["first"] + gangs["second"]])
    controller = compose(cache, cluster, Config()).gangs

    now = time.time()

    def baseline_decision() -> None:
        snapshot = snapshot_of_objects(nodes, list(cluster.pods.objects.values()), TopologyLevels.default())
        gang = controller.gang("team-a/second")
        assert gang is not None
        decision = decide(gang, snapshot, now)
        assert decision.phase is Phase.PLACED, decision.reason

    baseline = best_of(3, baseline_decision)

    first = controller.reconcile("team-a/first")
    assert first is not None and first.phase is Phase.PLACED, first and first.reason
    second = controller.gang("team-a/second")
    assert second is not None
    snapshot = cache.snapshot()  # rebuilt once: the first release changed the cache
    warm = best_of(3, lambda: decide(second, cache.snapshot(), now))
    gc.collect()
    t = time.perf_counter()
    outcome = controller.reconcile("team-a/second")
    whole = time.perf_counter() - t
    assert outcome is not None and outcome.phase is Phase.PLACED, outcome and outcome.reason
    released = sum(1 for p in cluster.pods.objects.values() if not p["spec"].get("schedulingGates"))
    assert released == args.pods + 2 * args.gang, released
    del snapshot

    print(f"{args.nodes} nodes, {args.pods} running pods, gangs of {args.gang} (4 GPUs each)")
    print(f"{'baseline':10} {baseline * 1000:8.1f} ms   parse every object + decide")
    print(f"{'warm':10} {warm * 1000:8.1f} ms   cached snapshot + decide")
    print(f"{'reconcile':10} {whole * 1000:8.1f} ms   snapshot + decide + {args.gang} in-memory writes")
    print(f"baseline / warm = {baseline / warm:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
