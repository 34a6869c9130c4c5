"""Shared builders of the preemption tests: small clusters of 8-GPU nodes with running
gangs, their candidate gangs, and a preemptor's members.

``[A:4 B:3 C:1]`` under a node, in the tests' docstrings, is what its running pods use
(gang and GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.preemption import PreemptionPlan, VictimGang
from testbed.engine_builders import make_node, make_pod, snapshot_of


@dataclass
class Running:
    """A running gang: ``pods`` as (node, GPUs) pairs, or (node, GPUs, cpu) triples."""

    name: str
    pods: Sequence[tuple[str, int] | tuple[str, int, str]]
    priority: int = 0


def cluster(nodes: Sequence[str], running: Sequence[Running], subblocks: dict[str, str] | None = None,
            gpus: int = 8) -> Snapshot:
    """Nodes of ``gpus`` GPUs (in ``subblocks`` of block b0 when given) running ``running``
    (namespace ``batch``, labelled ``gang``)."""
    built = []
    for n in nodes:
        node = make_node(n).allocatable(gpu=gpus)
        if subblocks:
            node.topology("b0", subblocks[n], f"h-{n}")
        built.append(node)
    pods = []
    for r in running:
        for i, spec in enumerate(r.pods):
            pod = make_pod(f"{r.name}-{i}", "batch").requests(gpu=spec[1], cpu=spec[2] if len(spec) > 2 else None)
            pods.append(pod.on(spec[0]).priority(r.priority).label("gang", r.name))
    return snapshot_of(built, pods)


def candidates(snapshot: Snapshot) -> list[VictimGang]:
    """Every running gang of ``snapshot`` (by its ``gang`` label) as a candidate."""
    by_gang: dict[str, list[PodInfo]] = {}
    for p in snapshot.pods.values():
        by_gang.setdefault(p.labels["gang"], []).append(p)
    return [VictimGang.of(f"batch/{k}", v, snapshot) for k, v in sorted(by_gang.items())]


def preemptor(count: int, gpus: int, priority: int = 100, cpu: str | None = None) -> list[PodInfo]:
    """``count`` gated members ``ml/w-<i>`` of gang ``train`` asking ``gpus`` (and ``cpu``)."""
    return [make_pod(f"w-{i}", "ml").requests(gpu=gpus, cpu=cpu).gang("train", count).index(i).priority(priority)
            .gated().info() for i in range(count)]


def names(plan: PreemptionPlan | None) -> list[str]:
    """Victim pods without their namespace."""
    assert plan is not None
    return [v.split("/", 1)[1] for v in plan.victims]
