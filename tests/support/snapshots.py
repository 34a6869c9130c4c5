"""Snapshots for the offline tools (``kubectl troupe``, the simulator): a ``kind: List`` file
of objects, and the golden snapshot of the demo cluster with gangs in every state."""

from __future__ import annotations

import yaml

from testbed.engine_builders import SUBBLOCK, make_node, make_pod


def write_list(tmp_path, objects, name="snapshot.yaml"):
    """Write ``objects`` as one ``kind: List`` YAML document to ``tmp_path/name``; its path."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def node(b: int, s: int, h: int):
    """Node builder of host ``h`` of subblock ``s`` of block ``b``: 8 GPUs, 32 CPUs."""
    name = f"gpu-b{b}-s{s}-h{h}"
    return make_node(name).topology(f"gpu-b{b}", f"gpu-b{b}-s{s}", name).allocatable(gpu=8, cpu="32")


def member(namespace, gang, i, size, created, gpus=8, priority=0):
    """Pod builder of member ``i`` of a gang of ``size`` owned by the Job ``gang``."""
    return (make_pod(f"{gang}-{i}", namespace).requests(gpu=gpus, cpu="1").gang(gang, size).index(i)
            .owned_by("Job", gang).created(created).priority(priority))


# The demo cluster: 2 blocks x 2 subblocks x 4 hosts of 8 GPUs, every host one node.
#
#   gpu-b0   gpu-b0-s0: h0 h1 h2 h3    ml/running (4 x 8 GPUs, priority 10) runs here
#            gpu-b0-s1: h0 h1 h2 h3    h0 cordoned, h1 runs a 4-GPU pod outside any gang
#   gpu-b1   gpu-b1-s0: h0 h1 h2 h3    h3 not ready
#            gpu-b1-s1: h0 h1 h2 h3    ml/batch (4 x 8 GPUs, priority 0) runs here
#
# Waiting: ml/wide (8 x 8 GPUs in one subblock: no subblock has 8 nodes), ml/partial (3 of 4
# members), team/held (members disagree on the size), team/small (2 x 8 GPUs: fits).
# The plan: ml/urgent-train, 4 x 8 GPUs in one subblock at priority 100: no subblock has
# room; with preemption, ml/batch (the lowest priority) makes it.
def snapshot() -> dict:
    """The demo cluster with gangs in every state (the comment above), as a ``kind: List`` dict."""
    nodes = [node(b, s, h) for b in (0, 1) for s in (0, 1) for h in range(4)]
    nodes[4] = nodes[4].unschedulable()
    nodes[11] = nodes[11].not_ready()
    pods = [member("ml", "running", i, 4, "2026-03-01T08:00:00Z", priority=10).on(f"gpu-b0-s0-h{i}")
            .annotate("reconciler.troupe.io/released-at", "2026-03-01T08:00:05.000+00:00")
            .annotate("reconciler.troupe.io/planned-at", "2026-03-01T08:00:04.000+00:00")
            for i in range(4)]
    pods += [member("ml", "batch", i, 4, "2026-03-01T07:00:00Z").on(f"gpu-b1-s1-h{i}")
             .annotate("reconciler.troupe.io/released-at", "2026-03-01T07:00:05.000+00:00")
             .annotate("reconciler.troupe.io/planned-at", "2026-03-01T07:00:04.000+00:00")
             for i in range(4)]
    pods.append(make_pod("notebook", "lab").requests(gpu=4, cpu="1").on("gpu-b0-s1-h1"))
    pods += [member("ml", "wide", i, 8, "2026-03-01T09:30:00Z").annotate(
        "troupe.io/topology-required-level", SUBBLOCK).gated() for i in range(8)]
    pods += [member("ml", "partial", i, 4, "2026-03-01T09:50:00Z", gpus=2).gated() for i in range(3)]
    pods += [member("team", "held", i, 2, "2026-03-01T09:55:00Z", gpus=1).gated() for i in range(2)]
    pods[-1] = pods[-1].annotate("troupe.io/gang-size", "3")
    pods += [member("team", "small", i, 2, "2026-03-01T09:58:00Z").gated() for i in range(2)]
    objects = [n.build() for n in nodes] + [p.build() for p in pods]
    objects.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": "urgent"}, "value": 100})
    return {"apiVersion": "v1", "kind": "List", "items": objects}
