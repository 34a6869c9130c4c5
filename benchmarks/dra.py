"""DRA benchmark: what counting Dynamic Resource Allocation devices costs a decision, against
the same cluster with extended GPUs (docs/decisions/044-dra.md).

    .venv/bin/python benchmarks/dra.py [--nodes N] [--gang P]

On N nodes (4 blocks, subblocks of 64 hosts) with 8 GPUs each, once as ``nvidia.com/gpu`` in
allocatable and once as 8 devices per node in ResourceSlices (a DeviceClass selecting the
driver by CEL, a ResourceClaimTemplate of 8 devices): a waiting gang of P whole-node members
(each one GPU request of 8, or one claim of 8 devices). Timed in this process: the DRA
counting (:func:`reconciler.engine.ledger.draunits.apply`) cold (every CEL selector evaluated once per
device with cel-python) and warm (memoized), the snapshot built, and the gang's decision; the
ratios against extended resources.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger import draunits
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model import cel, dra
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from testbed import dra_builders as b
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config


def timed(run):  # type: ignore[no-untyped-def]
    gc.collect()  # the cold count's garbage is collected before, not inside, the next timing
    start = time.perf_counter()
    out = run()
    return out, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2048, help="nodes (default %(default)s)")
    p.add_argument("--gang", type=int, default=512, help="members of the waiting gang (default %(default)s)")
    args = p.parse_args()
    config = Config(gang_schedule_timeout_jitter_seconds=0)
    levels = TopologyLevels.from_config(config)
    node_objs = [make_node(f"n{i:05d}").topology(f"b{i // 512}", f"s{i // 64}", f"h{i}") for i in range(args.nodes)]
    plain_nodes = [NodeInfo.from_object(n.gpus(8).build()) for n in node_objs]
    dra_nodes = [NodeInfo.from_object(make_node(f"n{i:05d}").topology(f"b{i // 512}", f"s{i // 64}", f"h{i}").build())
                 for i in range(args.nodes)]
    plain_pods = [PodInfo.from_object(make_pod(f"train-{i}").gang("train", args.gang).index(i).gpus(8).gated().build())
                  for i in range(args.gang)]
    dra_pods = [PodInfo.from_object(b.with_claim(make_pod(f"train-{i}").gang("train", args.gang).index(i).gated().build(),
                                                 template="eight")) for i in range(args.gang)]
    catalog = dra.catalog((o["kind"], o) for o in [b.device_class(), b.claim_template("eight", 8),
                                                    *(b.resource_slice(n.name) for n in dra_nodes)])
    print(f"# {args.nodes} nodes x 8 GPUs, a waiting gang of {args.gang} whole-node members", flush=True)
    cel.forget()
    (counted_nodes, counted_pods), cold = timed(lambda: draunits.apply(dra_nodes, dra_pods, catalog))
    _, warm = timed(lambda: draunits.apply(dra_nodes, dra_pods, catalog))
    plain_snapshot, plain_build = timed(lambda: Snapshot(plain_nodes, plain_pods, levels))
    dra_snapshot, dra_build = timed(lambda: Snapshot(counted_nodes, counted_pods, levels))
    plain_gang = build_gang("team-a/train", plain_pods, config, {})
    dra_gang = build_gang("team-a/train", list(dra_snapshot.pods.values()), config, {})
    plain_decision, plain_decide = timed(lambda: decide(plain_gang, plain_snapshot, 1_800_000_000.0))
    dra_decision, dra_decide = timed(lambda: decide(dra_gang, dra_snapshot, 1_800_000_000.0))
    assert plain_decision.phase == dra_decision.phase, (plain_decision.reason, dra_decision.reason)
    print(f"DRA counting, cold (cel-python on {len(catalog.devices)} devices)  {cold * 1000:8.1f} ms")
    print(f"DRA counting, warm (memoized)                        {warm * 1000:8.1f} ms")
    print(f"snapshot: extended GPUs {plain_build * 1000:.1f} ms, DRA {dra_build * 1000:.1f} ms "
          f"({dra_build / plain_build:.2f}x)")
    print(f"decision ({dra_decision.phase.value}): extended GPUs {plain_decide * 1000:.1f} ms, DRA "
          f"{dra_decide * 1000:.1f} ms ({dra_decide / plain_decide:.2f}x)")
    print(f"a warm DRA decision in all (counting + snapshot + decide) against extended GPUs: "
          f"{(warm + dra_build + dra_decide) / (plain_build + plain_decide):.2f}x")
    # The reconciler's cache keeps its node table while the nodes stay, and DRA's counted
    # nodes and their table while the nodes, the DRA objects and the demand stay (a pod
    # without claims changed, say): what each of its snapshots then pays.
    memo = draunits.NodesMemo()
    draunits.apply(dra_nodes, dra_pods, catalog, memo=memo)
    (kept_nodes, kept_pods), kept = timed(lambda: draunits.apply(dra_nodes, dra_pods, catalog, memo=memo))
    kept_table = memo.derived(kept_nodes, lambda: NodeTable(kept_nodes, levels))
    _, kept_build = timed(lambda: Snapshot(kept_table, kept_pods, levels))
    plain_table = NodeTable(plain_nodes, levels)
    _, plain_kept_build = timed(lambda: Snapshot(plain_table, plain_pods, levels))
    print(f"as the cache builds them (node tables kept): counting {kept * 1000:.1f} ms, snapshot: extended GPUs "
          f"{plain_kept_build * 1000:.1f} ms, DRA {kept_build * 1000:.1f} ms; a warm DRA decision in all against "
          f"extended GPUs: {(kept + kept_build + dra_decide) / (plain_kept_build + plain_decide):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
