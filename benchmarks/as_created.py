"""Release-as-created benchmark: what a reservation costs the engine, against the same gang
released when complete, in this process (docs/decisions/034-release-as-created.md).

    .venv/bin/python benchmarks/as_created.py [--nodes N] [--gang P]

On N nodes (8 GPUs each, 16 per subblock, 512 per block) and a Job gang of P whole-node
members, each timed as the best of several runs:

- **slots**: parsing the Job into its P slots (done once per change of the Job);
- **reserve**: the decision that places the P slots (rule ``Reserved``), against
  **place, when complete**: the decision that places P gated members (rule ``Placed``);
- **release as created**: the decision with the reservation held and half the members
  present, released onto their ranks' nodes (rule ``ReleaseAsCreated``: no placement);
- **snapshot**: building the snapshot with the reservation held, against without it.

This is a benchmark, not a test: it prints numbers and ratios.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reconcile import best_of
from reconciler.engine.decision import actions
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.parts import SnapshotParts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.templates import slots
from testbed.as_created import gangs_of, job_object, member_pod, workloads_of
from testbed.engine_builders import make_node
from troupe.config import Config

NOW = 1_800_000_000.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8192, help="nodes (default %(default)s)")
    p.add_argument("--gang", type=int, default=1024, help="members, 8 GPUs each (default %(default)s)")
    args = p.parse_args()
    config = Config()
    levels = TopologyLevels.default()
    table = NodeTable([NodeInfo.from_object(make_node(f"n{i:05d}").allocatable(gpu=8)
                                            .topology(f"b{i // 512}", f"s{i // 16}", f"h{i}").build())
                       for i in range(args.nodes)], levels)
    job = job_object("train", args.gang)
    known = workloads_of(job)
    empty = Snapshot(table, [], levels)
    gang = gangs_of(empty, known, config)["ml/job:train"]

    t_slots = best_of(3, lambda: slots("Job", job))
    t_reserve = best_of(5, lambda: decide(gang, empty, NOW))
    reserve = decide(gang, empty, NOW).find(actions.Reserve)
    assert reserve is not None, "the gang fits"
    members = [PodInfo.from_object(member_pod(job, i)) for i in range(args.gang)]
    complete = build_gang("ml/job:train", members, config, {}, known)
    whole = Snapshot(table, members, levels)
    t_complete = best_of(5, lambda: decide(complete, whole, NOW))

    held = workloads_of(job_object("train", args.gang, record=reserve.record))
    half = members[: args.gang // 2]
    t_snapshot_plain = best_of(5, lambda: build_snapshot(SnapshotParts(table, half, config=config, levels=levels)))
    t_snapshot_held = best_of(5, lambda: build_snapshot(SnapshotParts(table, half, workloads=held, config=config,
                                                                      levels=levels)))
    snapshot = build_snapshot(SnapshotParts(table, half, workloads=held, config=config, levels=levels))
    reserved_gang = gangs_of(snapshot, held, config)["ml/job:train"]
    decision = decide(reserved_gang, snapshot, NOW + 1)
    assert len(decision.release) == args.gang // 2, decision.reason
    t_release = best_of(5, lambda: decide(reserved_gang, snapshot, NOW + 1))

    print(f"{args.nodes} nodes, a Job gang of {args.gang} whole-node members")
    print(f"  slots from the pod template:            {t_slots * 1000:8.1f} ms")
    print(f"  reserve (place {args.gang} slots):            {t_reserve * 1000:8.1f} ms")
    print(f"  place when complete ({args.gang} members):    {t_complete * 1000:8.1f} ms   "
          f"reserve / complete = {t_reserve / t_complete:.2f}x")
    print(f"  release as created ({args.gang // 2} present):      {t_release * 1000:8.1f} ms   "
          f"/ place when complete = {t_release / t_complete:.2f}x")
    print(f"  snapshot, {args.gang // 2} members, reservation held: {t_snapshot_held * 1000:8.1f} ms   "
          f"/ without = {t_snapshot_held / t_snapshot_plain:.2f}x ({t_snapshot_plain * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
