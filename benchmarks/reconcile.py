"""Reconcile benchmark: one gang decision of the controller, end to end on in-memory fakes.

    .venv/bin/python benchmarks/reconcile.py [--nodes N] [--pods N] [--gang P]

What a reconcile costs besides the engine: turning the cached Node and Pod dicts into the
engine's snapshot, then pinning and ungating every member (2 x P writes, here to
:class:`reconciler.writer.FakeWriter`, so the API server's latency is not in the numbers).

Timed in this process, on the same cluster:

- **baseline plan**: ``Snapshot.from_objects`` on every object (a snapshot parsed from
  scratch, as a reconcile would without the parse memo) plus ``place_gang``;
- **warm plan**: the controller's plan for the second gang after the first was released
  and planned once more: the parse memo serves every object;
- **reconcile**: the whole second reconcile, plan plus 2 x P writes to the in-memory
  writer (whose deep copies, not the controller, are most of that time).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.cache import ClusterCache
from reconciler.controller import GangController
from reconciler.engine.placement import place_gang
from reconciler.engine.snapshot import Snapshot
from reconciler.engine.topology import TopologyLevels
from reconciler.lifecycle import Phase
from reconciler.writer import FakeWriter
from tests.reconciler.builders import make_node, make_pod
from troupe.config import Config
from troupe.contract import TopologyRequest


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
    writer, cache = FakeWriter(), ClusterCache(Config())
    cache.replace_nodes(nodes)
    cache.replace_pods([writer.add(pod) for pod in running + gangs["first"] + gangs["second"]])
    controller = GangController(cache, writer, Config())

    def baseline_plan() -> None:
        all_nodes, all_pods = cache.objects()
        snapshot = Snapshot.from_objects(all_nodes, all_pods, TopologyLevels.default())
        result = place_gang(snapshot, [snapshot.pods[f"team-a/second-{i}"] for i in range(args.gang)])
        assert result.placed, result.reason

    baseline = best_of(3, baseline_plan)

    first = controller.reconcile("team-a/first")
    assert first is not None and first.phase is Phase.RELEASED, first
    second_members = cache.members("team-a/second")
    controller._plan(second_members, TopologyRequest())  # parses what the first release changed
    warm = best_of(3, lambda: controller._plan(second_members, TopologyRequest()))
    gc.collect()
    t = time.perf_counter()
    second = controller.reconcile("team-a/second")
    whole = time.perf_counter() - t
    assert second is not None and second.phase is Phase.RELEASED, second

    print(f"{args.nodes} nodes, {args.pods} running pods, gangs of {args.gang} (4 GPUs each)")
    print(f"{'baseline plan':14} {baseline * 1000:8.1f} ms   parse every object + place")
    print(f"{'warm plan':14} {warm * 1000:8.1f} ms   memo hits + snapshot + place")
    print(f"{'reconcile':14} {whole * 1000:8.1f} ms   warm plan + {2 * args.gang} in-memory writes")
    print(f"baseline / warm plan = {baseline / warm:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
