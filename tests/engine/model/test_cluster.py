"""Nodes and pods parsed from their objects: what a parsed pod keeps, and that it keeps
every field its constructor would."""

import dataclasses

import pytest

from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Plan
from testbed.engine_builders import GPU, make_node, make_pod
from troupe.contract import (
    ASSIGNED_NODE,
    ASSIGNED_RANK,
    DEVICE_GROUP,
    PLAN,
    PLANNED_AT,
    SELECTED_DEVICES,
    TOPOLOGY_REQUIRED_LEVEL,
)
from troupe.ranks import rank_key


def test_a_node_is_ready_unless_its_ready_condition_says_otherwise():
    obj = make_node("n1").build()
    del obj["status"]["conditions"]
    assert NodeInfo.from_object(obj).ready
    assert not make_node("n1").not_ready().info().ready


def test_a_pod_reads_its_gates_rank_and_priority():
    obj = make_pod("w-3").index(7).gated().build()
    obj["spec"]["priority"] = 100
    pod = PodInfo.from_object(obj)
    assert pod.gated and pod.gates == ("troupe.io/placement",)
    assert pod.rank == rank_key(obj)
    assert pod.priority == 100
    assert pod.key == "default/w-3"


def test_a_pod_keeps_the_annotations_it_reads_raw_and_parses_the_reconcilers():
    at = "2026-11-22T10:00:00.000+00:00"
    obj = (make_pod("w-0").gang("train", 2, prefix="example.com/team").annotate(TOPOLOGY_REQUIRED_LEVEL, "rack")
           .annotate("troupe.io/gang-schedule-timeout-seconds", "30").annotate("example.com/note", "hi")
           .annotate(ASSIGNED_NODE, "n1").annotate(ASSIGNED_RANK, "0").annotate(PLANNED_AT, at)
           .annotate(PLAN, Plan(at, {"uid-default-w-0": "n1"}).encode()).annotate(DEVICE_GROUP, "g")
           .annotate(SELECTED_DEVICES, '{"nvidia.com/gpu": "0,1"}').build())
    pod = PodInfo.from_object(obj)
    assert pod.gang_annotations == {"example.com/team-name": "train", "example.com/team-size": "2",
                                    TOPOLOGY_REQUIRED_LEVEL: "rack", "troupe.io/gang-schedule-timeout-seconds": "30"}
    assert (pod.assigned_node, pod.planned_at, pod.device_group) == ("n1", at, "g")
    assert pod.plan == Plan(at, {"uid-default-w-0": "n1"})
    assert pod.devices == {GPU: (0, 1)}


def test_parsed_infos_hold_every_field_as_their_constructor_would():
    node = make_node("n1").topology("b1", "s1", "h1").allocatable(gpu=8).taint("k", "v").build()
    pod = (make_pod("w-0", "ml").requests(cpu="500m", gpu=8).gang("g", 2).index(0).gated().owned_by()
           .tolerate("k", "Exists").build())
    for cls, obj in ((NodeInfo, node), (PodInfo, pod)):
        info = cls.from_object(obj)
        names = [f.name for f in dataclasses.fields(cls)]
        assert all(hasattr(info, name) for name in names), "every field set"
        values = {name: getattr(info, name) for name in names}
        built = cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.init})
        assert {name: getattr(built, name) for name in names} == values
        assert not hasattr(info, "__dict__"), "slotted: a cache holds them by the hundred thousand"
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.name = "other"
