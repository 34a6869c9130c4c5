"""The pods and PodGroups the throughput benchmark creates (``benchmarks/throughput.py``):
the same pod in every mode but for how it declares its gang, and the presets of
kube-scheduler's own benchmark of KEP-5732."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from throughput import SHAPES, SUBBLOCK_LABEL, parse_args, pod_body, pod_group_body


def test_the_pods_of_each_mode_differ_only_in_how_they_declare_their_gang():
    shape = SHAPES["default"]
    plain, troupe, native = (pod_body(12, 3, shape, mode) for mode in ("plain", "troupe", "native"))
    assert plain["metadata"] == {"name": "g12-3", "annotations": {}}
    assert troupe["metadata"]["annotations"] == {"troupe.io/gang-name": "g12", "troupe.io/gang-size": "4",
                                                 "troupe.io/topology-required-level": SUBBLOCK_LABEL}
    assert native["spec"].pop("schedulingGroup") == {"podGroupName": "g12"}
    assert plain["spec"] == troupe["spec"] == native["spec"]
    assert plain["spec"]["containers"][0]["resources"] == {"requests": {"nvidia.com/gpu": "2"},
                                                           "limits": {"nvidia.com/gpu": "2"}}


def test_a_pod_group_is_a_gang_of_its_members_required_in_one_subblock():
    assert pod_group_body(7, SHAPES["perf-3x1000"]) == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g7"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1000}},
                 "schedulingConstraints": {"topology": [{"key": SUBBLOCK_LABEL}]}}}


def test_the_scheduler_perf_shapes_are_5000_nodes_in_50_racks_of_small_pods():
    for name, gangs, members in (("perf-750x4", 750, 4), ("perf-3x1000", 3, 1000)):
        shape = SHAPES[name]
        assert (shape.gangs, shape.members, shape.topology) == (gangs, members, (1, 50, 100))
        assert shape.node == {"cpu": "4", "memory": "32Gi", "pods": "110"}
        assert pod_body(0, 0, shape, "plain")["spec"]["containers"][0]["resources"] == {
            "requests": {"cpu": "100m", "memory": "100Mi"}}


def test_the_command_line_overrides_a_shapes_counts_and_topology():
    args = parse_args(["--shape", "perf-750x4", "--gangs", "20", "--topology", "1x5x10", "--modes", "native,plain"])
    assert (args.shape.gangs, args.shape.members, args.shape.topology) == (20, 4, (1, 5, 10))
    assert args.modes == ["plain", "native"]
