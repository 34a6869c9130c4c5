"""The demo's slices scenario: a gang whose ranks come in slices, each slice inside one
subblock (``troupe.io/topology-slice-size`` with ``-slice-required-level``; issue 25,
docs/guide/layers.md). Sizes follow the cluster's layout as in :mod:`.scenarios`."""

from __future__ import annotations

from typing import Any

from devtools.demo.stage import Stage, indexed_job, pod, running
from troupe import contract
from troupe.layers import TOPOLOGY_SLICE_REQUIRED_LEVEL, TOPOLOGY_SLICE_SIZE


def _rank(p: Any) -> int:
    return int((p.metadata.annotations or {}).get(contract.ASSIGNED_RANK, "-1"))


def gang_in_slices(stage: Stage) -> str:
    """A notebook takes the first node of every subblock, so each holds ``2H - 2`` members
    of half a node (14 on the demo cluster). A gang of ``4H`` members in slices of ``H``
    per subblock: the plain gang would fill three subblocks and split a slice between
    two; the slices take ``H`` in each of the four, ranks in order."""
    ns = stage.namespace("demo-slices")
    lay = stage.layout
    h, g, s = lay.hosts, lay.gpus, lay.subblocks
    for sub in s:
        stage.core.create_namespaced_pod(ns, pod(f"notebook-{sub.nodes[0]}", gpus=g, labels={"app": "notebook"},
                                                 node_selector={contract.HOSTNAME_LABEL: sub.nodes[0]}))
    stage.wait("the notebooks Running", lambda: running(stage.pods(ns, "app=notebook"), len(s)))
    size, half = 4 * h, max(1, g // 2)
    level = lay.subblock_label
    stage.say(f"A notebook takes one node of every subblock; each subblock now holds {2 * h - 2} members of "
              f"{half} GPUs. The gang: {size} members in slices of {h} ({TOPOLOGY_SLICE_SIZE}: "
              f"\"{h}\", {TOPOLOGY_SLICE_REQUIRED_LEVEL}: {level}).")
    extra = {TOPOLOGY_SLICE_SIZE: str(h), TOPOLOGY_SLICE_REQUIRED_LEVEL: level}
    template = pod("w", gpus=half, labels={"gang": "sliced"}, annotations=stage.gang("sliced", size, extra=extra))
    stage.batch.create_namespaced_job(ns, indexed_job("sliced", size, template))
    pods = stage.wait(f"the {size} members Running", lambda: running(stage.pods(ns, "gang=sliced"), size),
                      timeout=120)
    stage.troupe("topology")
    labels = stage.node_labels()
    by_rank = [labels[p.spec.node_name].get(level, "-") for p in sorted(pods, key=_rank)]
    slices = [by_rank[k * h:(k + 1) * h] for k in range(4)]
    stage.expect(all(len(set(one)) == 1 for one in slices), f"every slice of {h} inside one subblock")
    stage.expect([one[0] for one in slices] == [sub.name for sub in s], "slice k in the k-th subblock, in rank order")
    stage.say("Each slice of consecutive ranks sits whole in one subblock: " +
              ", ".join(f"ranks {k * h}-{(k + 1) * h - 1} in {one[0]}" for k, one in enumerate(slices)) + ".")
    return f"{size} members in 4 slices of {h}, one whole subblock each, in rank order"
