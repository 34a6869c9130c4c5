"""DRA devices counted as units (reconciler.engine.ledger.draunits): what a node offers, what a pod
asks, what holds a gang, and the property that no plan names a node with fewer free
matching devices than its members there need."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.actions import Release
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger import draunits
from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.ledger.snapshot import Snapshot
from testbed import dra_builders as b
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0
KIND = f"devices/{b.CLASS}"


def nodes(n: int = 4) -> list[dict[str, Any]]:
    """``n`` nodes (two per subblock) with no extended GPUs: their devices are DRA's."""
    return [make_node(f"n{i}").topology("b1", f"s{(i - 1) // 2}", f"h{i}").build() for i in range(1, n + 1)]


def member(i: int, size: int, template: str = "eight", name: str = "train") -> dict[str, Any]:
    return b.with_claim(make_pod(f"{name}-{i}").gang(name, size).index(i).gated().build(), template=template)


def decided(node_objs: list[dict[str, Any]], pods: list[dict[str, Any]], dra_objs: list[dict[str, Any]],
            key: str = "team-a/train") -> tuple[Any, Any, Snapshot]:
    snapshot = snapshot_of_objects(node_objs, pods, objects=dra_objs, config=CONFIG)
    gang = build_gang(key, [p for p in snapshot.pods.values() if p.key.startswith(key + "-")], CONFIG, {})
    return gang, decide(gang, snapshot, NOW), snapshot


def cluster_objects(count: int = 8) -> list[dict[str, Any]]:
    return [b.device_class(), b.claim_template("eight", count), *(b.resource_slice(f"n{i}") for i in range(1, 5))]


def test_each_node_offers_its_devices_and_each_member_asks_its_claims_devices():
    gang, decision, snapshot = decided(nodes(), [member(i, 2) for i in range(2)], cluster_objects())
    assert snapshot.nodes[0].allocatable[KIND] == 8
    assert gang.members[0].requests[KIND] == 8
    assert decision.phase is Phase.PLACED
    release = decision.find(Release)
    assert release is not None
    assert sorted(m.node for m in release.members) == ["n1", "n2"], "two whole nodes of one subblock"


def test_devices_allocated_to_other_claims_are_not_free_and_the_reason_counts_them():
    taken = [b.claim(f"other-{i}", 4, allocated_on=f"n{i}", devices=tuple(f"gpu-{d}" for d in range(4)))
             for i in range(1, 5)]
    _, decision, snapshot = decided(nodes(), [member(i, 2) for i in range(2)], cluster_objects() + taken)
    assert [n.allocatable[KIND] for n in snapshot.nodes] == [4, 4, 4, 4]
    assert decision.phase is Phase.UNSCHEDULABLE
    assert f"insufficient {KIND}: 4" in decision.reason, decision.reason


def test_a_selector_on_an_attribute_counts_only_the_devices_it_accepts():
    objs = [b.device_class(), b.claim_template("eight", 8, selectors=('device.attributes["gpu.troupe.dev"].model == "B200"',)),
            b.resource_slice("n1", model="B200"), b.resource_slice("n2", model="B200"),
            b.resource_slice("n3"), b.resource_slice("n4")]
    _, decision, snapshot = decided(nodes(), [member(i, 2) for i in range(2)], objs)
    kind = next(k for k in snapshot.nodes[0].allocatable if k.startswith("devices/"))
    assert kind.startswith(KIND + "~")
    assert [n.allocatable.get(kind, 0) for n in snapshot.nodes] == [8, 8, 0, 0]
    release = decision.find(Release)
    assert release is not None and sorted(m.node for m in release.members) == ["n1", "n2"]


def test_what_cannot_be_counted_holds_the_gang_with_a_reason_that_quotes_it():
    cases = [
        ([b.claim_template("eight", 8, cls="tpu.example.com")], "DeviceClass tpu.example.com (request gpus) not found"),
        ([b.claim_template("eight", 8, selectors=("device.attributes[",))], "CEL selector 'device.attributes[' does not compile"),
        ([b.claim_template("eight", 8, selectors=('semver("1.2.3") == "x"',))], "CEL selector 'semver(\"1.2.3\") == \"x\"'"),
        ([b.claim_template("eight", 8, mode="All")], "allocationMode All is not counted"),
        ([], "ResourceClaimTemplate team-a/eight (claim gpus) not found"),
    ]
    for templates, said in cases:
        objs = [b.device_class(), *templates, *(b.resource_slice(f"n{i}") for i in range(1, 5))]
        _, decision, _ = decided(nodes(), [member(i, 2) for i in range(2)], objs)
        assert decision.phase is Phase.HELD, (said, decision.reason)
        assert said in decision.reason, decision.reason


def test_an_allocated_claim_holds_its_consumer_to_the_node_it_is_on():
    pod = b.with_claim(make_pod("train-0").gang("train", 1).gated().build(), claim_name="mine")
    objs = [b.device_class(), b.claim("mine", 2, allocated_on="n3", devices=("gpu-0", "gpu-1")),
            *(b.resource_slice(f"n{i}") for i in range(1, 5))]
    gang, decision, snapshot = decided(nodes(), [pod], objs)
    assert gang.members[0].requests == {"pods": 1, "cpu": 1000, "resourceclaim/team-a/mine": 1, KIND: 2}, \
        "its devices stay counted on it: evicting it frees them"
    assert [n.allocatable.get("resourceclaim/team-a/mine", 0) for n in snapshot.nodes] == [0, 0, draunits.MAX_CONSUMERS, 0]
    assert [n.allocatable[KIND] for n in snapshot.nodes] == [8, 8, 8, 8]
    release = decision.find(Release)
    assert release is not None and [m.node for m in release.members] == ["n3"]


def test_a_claim_shared_by_members_is_counted_once():
    pods = [b.with_claim(make_pod(f"train-{i}").gang("train", 2).index(i).gated().build(), claim_name="shared")
            for i in range(2)]
    objs = [b.device_class(), b.claim("shared", 8), b.resource_slice("n1")]
    gang, decision, _ = decided(nodes(1), pods, objs)
    assert [m.requests.get(KIND, 0) for m in gang.members] == [8, 0]
    assert decision.phase is Phase.PLACED, decision.reason


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Up to 6 nodes with 0-8 devices each, some allocated to others' claims, and a gang of
    1-6 members asking 1-8 devices each."""
    n = draw(st.integers(1, 6))
    counts = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    objs: list[dict[str, Any]] = [b.device_class(), b.claim_template("eight", draw(st.integers(1, 8)))]
    for i, count in enumerate(counts, start=1):
        objs.append(b.resource_slice(f"n{i}", count))
        taken = draw(st.integers(0, count))
        if taken:
            objs.append(b.claim(f"other-{i}", taken, allocated_on=f"n{i}", devices=tuple(f"gpu-{d}" for d in range(taken))))
    size = draw(st.integers(1, 6))
    return nodes(n), [member(i, size) for i in range(size)], objs


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_no_plan_names_a_node_with_fewer_free_matching_devices_than_its_members_there_need(case):
    node_objs, pods, objs = case
    gang, decision, _ = decided(node_objs, pods, objs)
    release = decision.find(Release)
    if release is None:
        return
    free = {o["spec"]["nodeName"]: len(o["spec"]["devices"]) for o in objs if o["kind"] == "ResourceSlice"}
    for o in objs:
        if o["kind"] == "ResourceClaim":
            free[o["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]] -= \
                len(o["status"]["allocation"]["devices"]["results"])
    per_member = next(o for o in objs if o["kind"] == "ResourceClaimTemplate")["spec"]["spec"]["devices"]["requests"][0][
        "exactly"]["count"]
    planned = Counter(m.node for m in release.members)
    for node, members in planned.items():
        assert members * per_member <= free[node], (node, members, per_member, free)
    assert gang.members[0].requests[KIND] == per_member


def test_a_device_allocated_to_a_claim_no_pod_asks_for_counts_for_no_one_and_one_a_pod_asks_for_only_for_its_kind():
    objs = [b.device_class(), b.claim_template("eight", 1), b.claim("orphan", 2, allocated_on="n1", devices=("gpu-0", "gpu-1")),
            b.claim("used", 2, allocated_on="n2", devices=("gpu-0", "gpu-1")), *(b.resource_slice(f"n{i}") for i in range(1, 5))]
    user = b.with_claim(make_pod("other-0").running_on("n2").build(), claim_name="used")
    narrow = b.claim_template("narrow", 1, selectors=('device.attributes["gpu.troupe.dev"].index >= 0',))
    pods = [member(0, 2), b.with_claim(make_pod("train-1").gang("train", 2).index(1).gated().build(), template="narrow"),
            user]
    _, _, snapshot = decided(nodes(), pods, [*objs, narrow])
    other_kind = next(k for k in snapshot.nodes[0].allocatable if k.startswith(KIND + "~"))
    assert [n.allocatable[KIND] for n in snapshot.nodes] == [6, 8, 8, 8]
    assert [n.allocatable[other_kind] for n in snapshot.nodes] == [6, 6, 8, 8]


def test_a_shared_claim_one_consumer_was_placed_with_holds_the_others_to_its_node():
    placed = b.with_claim(make_pod("infer-0").running_on("n2").build(), claim_name="shared")
    waiting = b.with_claim(make_pod("train-0").gang("train", 1).gated().build(), claim_name="shared")
    objs = [b.device_class(), b.claim("shared", 2), *(b.resource_slice(f"n{i}") for i in range(1, 5))]
    gang, decision, snapshot = decided(nodes(), [placed, waiting], objs)
    assert snapshot.pods["team-a/infer-0"].requests[KIND] == 2, "the devices are counted on the placed consumer"
    assert gang.members[0].requests.get(KIND, 0) == 0
    release = decision.find(Release)
    assert release is not None and [m.node for m in release.members] == ["n2"]


def test_a_sharer_decided_before_the_one_its_claim_is_counted_on_goes_only_where_the_claim_fits():
    """Two gangs of one share an unallocated claim; the devices are counted on first-0, and
    second-0 is decided first: it must not be pinned where kube-scheduler cannot allocate
    the claim (a node with no devices, or too few free)."""
    pods = [b.with_claim(make_pod(f"{name}-0").gang(name, 1).gated().build(), claim_name="shared")
            for name in ("first", "second")]
    objs = [b.device_class(), b.claim("shared", 4), b.resource_slice("n3", 2), b.resource_slice("n4")]
    gang, decision, snapshot = decided(nodes(), pods, objs, key="team-a/second")
    assert gang.members[0].requests.get(KIND, 0) == 0, "the devices are counted once, on first-0"
    assert [n.allocatable.get("resourceclaim/team-a/shared", 0) for n in snapshot.nodes] == [0, 0, 0, draunits.MAX_CONSUMERS]
    release = decision.find(Release)
    assert release is not None and [m.node for m in release.members] == ["n4"]


def test_a_device_attribute_all_of_a_nodes_devices_share_is_a_topology_level():
    level = "gpu.troupe.dev/nvlinkDomain"
    config = Config(topology_levels=(level, "cloud.google.com/gce-topology-host"), topology_fallback_levels=())
    node_objs = [make_node(f"n{i}").build() for i in range(1, 5)]
    slices = []
    for i in range(1, 5):
        s = b.resource_slice(f"n{i}")
        for device in s["spec"]["devices"]:
            device["attributes"]["nvlinkDomain"] = {"string": "rack-a" if i <= 2 else "rack-b"}
        slices.append(s)
    pods = [b.with_claim(make_pod(f"train-{i}").gang("train", 2).index(i).annotate(
        "troupe.io/topology-required-level", level).gated().build(), template="eight") for i in range(2)]
    snapshot = snapshot_of_objects(node_objs, pods, objects=[b.device_class(), b.claim_template("eight", 8), *slices],
                                   config=config)
    assert [n.labels[level] for n in snapshot.nodes] == ["rack-a", "rack-a", "rack-b", "rack-b"]
    gang = build_gang("team-a/train", list(snapshot.pods.values()), config, {})
    release = decide(gang, snapshot, NOW).find(Release)
    assert release is not None
    assert len({snapshot.nodes[snapshot.index[m.node]].labels[level] for m in release.members}) == 1, \
        "inside one NVLink domain"


@settings(max_examples=60, deadline=None)
@given(clusters(), clusters())
def test_counting_with_a_memo_gives_what_counting_afresh_gives_and_keeps_the_nodes_for_the_same_demand(one, two):
    from reconciler.engine.ledger.parts import located, read_parts

    memo = draunits.NodesMemo()
    for node_objs, pods, objs in (one, two, one):
        listed = [*located("nodes", "Node", node_objs), *located("pods", "Pod", pods),
                  *[(f"objects[{i}]", o["kind"], o) for i, o in enumerate(objs)]]
        parts = read_parts(listed, CONFIG, None).parts
        fresh_nodes, fresh_pods = draunits.apply(parts.nodes, parts.pods, parts.devices)
        kept_nodes, kept_pods = draunits.apply(parts.nodes, parts.pods, parts.devices, memo=memo)
        assert [(n.name, n.allocatable) for n in kept_nodes] == [(n.name, n.allocatable) for n in fresh_nodes]
        assert [(p.key, p.requests, p.malformed) for p in kept_pods] == [(p.key, p.requests, p.malformed)
                                                                         for p in fresh_pods]
        again, _ = draunits.apply(parts.nodes, [dataclasses.replace(p) for p in parts.pods], parts.devices, memo=memo)
        assert again is kept_nodes, "the same nodes, catalog and demand: the nodes counted before"
