"""A small cluster where waiting gangs hold capacity, for the topology map's ``held`` marks
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

Subblocks gpu-b0-s0 and gpu-b0-s1, two hosts each (8 GPUs a host). Each node runs a
whole-node pod outside any gang, the one pod of a Job started at STARTED: the Jobs on
gpu-b0-s0 end by their ``activeDeadlineSeconds`` 70 and 130 s after it (the Job controller
ends them; the subblock is free at 10:02:00), those on gpu-b0-s1 have none. Two gangs of 2 whole-node members with a required subblock wait:
ml/big (created first) and team/big (behind it). Under ``queueingStrategy: Backfill``
ml/big reserves gpu-b0-s0 from 10:02:00 and team/big, outside it, gpu-b0-s1 with its start
not known; under ``BestEffortFIFO`` ml/big, having waited past ``headOfLineSeconds``, holds
a subblock at the head of the queue.
"""

from __future__ import annotations

from typing import Any

from testbed.engine_builders import make_pod
from tests.support.snapshots import member, node

NOW = "2026-03-01T10:00:00Z"
STARTED = "2026-03-01T09:59:50Z"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
#: The nodes of each subblock.
S0 = ["gpu-b0-s0-h0", "gpu-b0-s0-h1"]
S1 = ["gpu-b0-s1-h0", "gpu-b0-s1-h1"]


def busy(name: str, on: str) -> dict[str, Any]:
    """The whole-node pod of Job ``name`` (namespace ``web``, outside any gang), running on ``on``."""
    pod = make_pod(f"{name}-0", "web").requests(gpu=8, cpu="1").on(on).owned_by("Job", name)
    pod.obj["status"]["startTime"] = STARTED
    return pod.build()


def job(name: str, deadline: int | None) -> dict[str, Any]:
    """Job ``name`` of one pod, started at STARTED, with ``activeDeadlineSeconds`` ``deadline``
    (None: no limit)."""
    spec: dict[str, Any] = {"parallelism": 1, "completions": 1, "template": {}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "web", "uid": f"uid-Job-{name}", "resourceVersion": "1"},
            "spec": spec, "status": {"startTime": STARTED, "active": 1}}


def jobs() -> list[dict[str, Any]]:
    """The four Jobs of the busy pods."""
    return [job("a", 70), job("b", 130), job("c", None), job("d", None)]


def nodes() -> list[dict[str, Any]]:
    """The four nodes."""
    return [node(0, s, h).build() for s in (0, 1) for h in range(2)]


def pods() -> list[dict[str, Any]]:
    """The busy pods and the two waiting gangs' gated members (ml/big created at 09:50,
    team/big at 09:55)."""
    out = [busy("a", S0[0]), busy("b", S0[1]), busy("c", S1[0]), busy("d", S1[1])]
    for namespace, created in (("ml", "2026-03-01T09:50:00Z"), ("team", "2026-03-01T09:55:00Z")):
        out += [member(namespace, "big", i, 2, created).annotate("troupe.io/topology-required-level", SUBBLOCK)
                .gated().build() for i in range(2)]
    return out


def objects() -> list[dict[str, Any]]:
    """Every object of the cluster."""
    return nodes() + jobs() + pods()


def reserved_under_backfill() -> dict[str, list[str]]:
    """Node name -> the ``held`` gang keys of its map under ``Backfill``."""
    return {**{name: ["ml/big"] for name in S0}, **{name: ["team/big"] for name in S1}}
