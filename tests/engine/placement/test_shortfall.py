"""The per-domain shortfall (``kubectl troupe why``) and the topology occupancy
(``kubectl troupe topology``): the level chosen, members that fit now and when emptied,
each excluded node's first reason, and agreement with placement."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.filters import (
    interpodaffinity,
    nodeaffinity,
    nodename,
    nodeports,
    nodeunschedulable,
    podtopologyspread,
    tainttoleration,
    volumebinding,
)
from reconciler.engine.ledger.occupancy import occupancy
from reconciler.engine.model.selectors import Taint
from reconciler.engine.placement.place import place_gang
from reconciler.engine.placement.shortfall import (
    FULL_KEY,
    TOO_SMALL_KEY,
    Excluded,
    held_key,
    short_level,
    shortfall,
    status_key,
    target_depth,
)
from testbed.engine_builders import (
    BLOCK,
    HOSTNAME,
    SUBBLOCK,
    gang_of,
    make_node,
    make_pod,
    snapshot_of,
)
from troupe.contract import TopologyRequest
from troupe.layers import SliceLayer


def gpu_node(name, block, subblock, gpu=8):
    return make_node(name).topology(block, subblock, name).allocatable(gpu=gpu)


def busy(node, gpus, name=None, namespace="other"):
    return make_pod(name or f"busy-{node}", namespace).requests(gpu=gpus).on(node)


# One block, two subblocks of four 8-GPU nodes:
#
#   b0
#   ├── s0: n0 n1 n2 n3      n0 cordoned, n1 not ready, n2 full (8-GPU pod), n3 free
#   └── s1: m0 m1 m2 m3      m0 runs a 4-GPU pod, m1 tainted, m2 m3 free
def cluster(pods=()):
    nodes = [gpu_node("n0", "b0", "s0").unschedulable(), gpu_node("n1", "b0", "s0").not_ready(),
             gpu_node("n2", "b0", "s0"), gpu_node("n3", "b0", "s0"),
             gpu_node("m0", "b0", "s1"), gpu_node("m1", "b0", "s1").taint("dedicated", "infer"),
             gpu_node("m2", "b0", "s1"), gpu_node("m3", "b0", "s1")]
    return snapshot_of(nodes, [busy("n2", 8), busy("m0", 4), *pods])


def subblock_gang(size, gpu):
    return [make_pod(f"w-{i}").requests(gpu=gpu).gang("train", size).index(i).gated()
            .annotate("troupe.io/topology-required-level", SUBBLOCK).info() for i in range(size)]


def test_each_subblock_says_how_many_fit_and_why_the_other_nodes_take_none():
    report = shortfall(cluster(), subblock_gang(4, 8), TopologyRequest(required_level=SUBBLOCK))
    assert report.level == SUBBLOCK
    assert [d.describe() for d in report.domains] == [
        "subblock s1: 2 of 4 fit (1 node untolerated taint dedicated=infer, 1 full); at most 3 even when empty",
        "subblock s0: 1 of 4 fit (1 node not ready, 1 cordoned, 1 full); at most 2 even when empty",
    ]
    best = report.domains[0]
    assert (best.nodes, best.fits, best.could, best.free) == (4, 2, 3, 20)


def test_a_gang_without_a_level_is_shown_at_the_smallest_level_that_could_ever_hold_it():
    wants_two_nodes = gang_of(2, gpu=8)
    assert short_level(cluster().levels.name_of(target_depth(cluster(), wants_two_nodes))) == "subblock"
    wants_more_than_a_subblock = gang_of(5, gpu=8)
    report = shortfall(cluster(), wants_more_than_a_subblock)
    assert report.level == BLOCK
    assert report.domains[0].describe() == (
        "block b0: 3 of 5 fit (1 node not ready, 1 cordoned, 1 untolerated taint dedicated=infer, 2 full); "
        "fits once room is freed")


def test_a_gang_too_big_for_any_domain_is_shown_for_the_whole_cluster():
    report = shortfall(cluster(), gang_of(9, gpu=8))
    assert report.level == ""
    assert report.domains[0].describe().startswith("cluster: 3 of 9 fit")
    assert report.domains[0].describe().endswith("; at most 5 even when empty")


def test_nodes_held_for_a_gang_ahead_in_the_queue_are_named_with_it():
    snapshot = cluster()
    held = {snapshot.index["m2"]: "ml/big", snapshot.index["m3"]: "ml/big"}
    report = shortfall(snapshot, subblock_gang(2, 8), TopologyRequest(required_level=SUBBLOCK), held=held)
    s1 = next(d for d in report.domains if d.name == "s1")
    assert s1.describe() == ("subblock s1: 0 of 2 fit (1 node untolerated taint dedicated=infer, "
                             "2 held for ml/big, 1 full); fits once room is freed")


def test_a_node_too_small_even_when_empty_is_told_from_a_full_one():
    nodes = [gpu_node("big", "b0", "s0", gpu=8), gpu_node("small", "b0", "s0", gpu=2)]
    report = shortfall(snapshot_of(nodes, [busy("big", 8)]), subblock_gang(1, 4), TopologyRequest(required_level=SUBBLOCK))
    assert report.domains[0].excluded == (("too small", 1), ("full", 1))


def test_a_replacement_member_only_sees_the_domains_of_its_running_gang():
    report = shortfall(cluster(), subblock_gang(1, 8), TopologyRequest(required_level=SUBBLOCK), near=["m2"])
    assert [d.name for d in report.domains] == ["s1"]


def test_domains_come_best_first_and_ties_keep_topology_order():
    nodes = [gpu_node(f"{s}-{i}", "b0", s) for s in ("s0", "s1", "s2") for i in range(2)]
    report = shortfall(snapshot_of(nodes, [busy("s0-0", 8)]), subblock_gang(2, 8), TopologyRequest(required_level=SUBBLOCK))
    assert [(d.name, d.fits) for d in report.domains] == [("s1", 2), ("s2", 2), ("s0", 1)]


@settings(max_examples=60, deadline=None)
@given(busy_gpus=st.lists(st.integers(0, 8), min_size=6, max_size=6), size=st.integers(1, 7),
       gpu=st.sampled_from([1, 2, 4, 8]))
def test_a_gang_of_one_shape_is_placed_exactly_when_its_best_domain_fits_every_member(busy_gpus, size, gpu):
    for d in report_agrees_with_placement(busy_gpus, subblock_gang(size, gpu)):
        assert 0 <= d.fits <= d.could <= d.need == size
        assert sum(n for _, n in d.excluded) <= d.nodes


def report_agrees_with_placement(busy_gpus, members):
    """On two subblocks of three nodes busy with ``busy_gpus``: assert the gang is placed
    exactly when the report's best domain fits every member; the report's domains."""
    nodes = [gpu_node(f"{s}-{i}", "b0", s) for s in ("s0", "s1") for i in range(3)]
    pods = [busy(n["metadata"]["name"], g) for n, g in zip((x.build() for x in nodes), busy_gpus, strict=True) if g]
    snapshot = snapshot_of(nodes, pods)
    report = shortfall(snapshot, members, TopologyRequest(required_level=SUBBLOCK))
    placed = place_gang(snapshot, members, TopologyRequest(required_level=SUBBLOCK)).placed
    assert placed == (report.domains[0].fits == len(members))
    return report.domains


def apart_gang(size, gpu):
    """``subblock_gang`` whose members are per host anti-affine to each other."""
    return [make_pod(f"w-{i}").requests(gpu=gpu).gang("train", size).index(i).gated().label("app", "w")
            .annotate("troupe.io/topology-required-level", SUBBLOCK)
            .pod_affinity(HOSTNAME, {"app": "w"}, anti=True).info() for i in range(size)]


@settings(max_examples=60, deadline=None)
@given(busy_gpus=st.lists(st.integers(0, 8), min_size=6, max_size=6), size=st.integers(1, 5),
       gpu=st.sampled_from([1, 2, 4, 8]))
def test_with_pod_anti_affinity_a_gang_is_placed_exactly_when_its_best_domain_fits_every_member(busy_gpus, size, gpu):
    for d in report_agrees_with_placement(busy_gpus, apart_gang(size, gpu)):
        assert 0 <= d.fits <= d.could <= min(d.need, d.nodes)
        assert sum(n for _, n in d.excluded) <= d.nodes


def test_with_pod_anti_affinity_nodes_are_named_by_why_they_refuse_the_next_member():
    snapshot = cluster()
    held = {snapshot.index["m3"]: "ml/big"}
    report = shortfall(snapshot, apart_gang(4, 2), TopologyRequest(required_level=SUBBLOCK), held=held)
    assert [d.describe() for d in report.domains] == [
        "subblock s1: 2 of 4 fit (1 node untolerated taint dedicated=infer, 1 held for ml/big, "
        "2 didn't match pod anti-affinity rules); at most 3 even when empty",
        "subblock s0: 1 of 4 fit (1 node not ready, 1 cordoned, 1 full, "
        "1 didn't match pod anti-affinity rules); at most 2 even when empty",
    ]


# --- occupancy ------------------------------------------------------------------------------
def test_the_topology_tree_sums_free_devices_and_names_who_holds_each_node():
    gated_pinned = make_pod("t-1", "ml").requests(gpu=8).gang("train", 2).gated() \
        .annotate("reconciler.troupe.io/node", "m3")
    snapshot = cluster([busy("m2", 8, "t-0", "ml"), gated_pinned])
    tree = occupancy(snapshot, {"ml/t-0": "ml/train", "ml/t-1": "ml/train"})
    assert (tree.level, tree.allocatable, tree.free) == ("", 64, 20)
    (block,) = tree.children
    s0, s1 = block.children
    assert (s0.name, s0.free, s1.name, s1.free) == ("s0", 8, "s1", 12)
    host_m2 = next(h for h in s1.children if h.name == "m2")
    (node,) = host_m2.nodes
    assert (node.name, node.free, node.holders, node.others) == ("m2", 0, (("ml/train", 8, 1),), 0)
    m3 = next(h for h in s1.children if h.name == "m3").nodes[0]
    assert m3.holders == (("ml/train", 8, 1),)  # reserved by its pin before it is bound
    n0 = s0.children[0].nodes[0]
    assert (n0.cordoned, n0.ready) == (True, True)
    n2 = s0.children[2].nodes[0]
    assert (n2.holders, n2.others) == ((), 1)


@pytest.mark.parametrize(("level", "want"), [
    ("cloud.google.com/gce-topology-subblock", "subblock"), ("topology.gke.io/rack", "rack"),
    ("kubernetes.io/hostname", "node"), ("", "cluster"),
])
def test_levels_are_called_by_their_last_word(level, want):
    assert short_level(level) == want


def test_a_preferred_level_is_shown_at_that_level():
    members = [make_pod(f"w-{i}").requests(gpu=8).gang("train", 2).index(i).gated()
               .annotate("troupe.io/topology-preferred-level", BLOCK).info() for i in range(2)]
    report = shortfall(cluster(), members, TopologyRequest(preferred_level=BLOCK))
    assert (report.level, [d.describe() for d in report.domains]) == (BLOCK, ["block b0: 2 of 2 fit (1 node not ready, "
                                                                              "1 cordoned, 1 untolerated taint "
                                                                              "dedicated=infer, 2 full)"])


def test_members_of_several_shapes_are_counted_shape_by_shape():
    # Two whole-GPU-node members and two CPU-only ones: in s1 the GPU members fit twice
    # (m2, m3) and the CPU ones on any node without the taint.
    gpu = [make_pod(f"g-{i}").requests(gpu=8).index(i).gated().info() for i in range(2)]
    cpu = [make_pod(f"c-{i}").requests(cpu="1").index(2 + i).gated().info() for i in range(2)]
    report = shortfall(cluster(), gpu + cpu, TopologyRequest(required_level=SUBBLOCK))
    s1 = next(d for d in report.domains if d.name == "s1")
    assert (s1.need, s1.fits, s1.could) == (4, 4, 4)
    s0 = next(d for d in report.domains if d.name == "s0")
    assert (s0.fits, s0.could) == (3, 4)  # one GPU member (n3), both CPU ones; two GPU nodes when emptied


def test_each_domain_names_the_slice_layer_it_cannot_hold():
    # b1 has 16 free one-member nodes but no subblock with 8 free; b2 has one full subblock.
    nodes = [gpu_node(f"b1s{s}n{n}", "b1", f"b1s{s}") for s in range(4) for n in range(5)]
    nodes += [gpu_node(f"b2s0n{n}", "b2", "b2s0") for n in range(8)]
    taken = [busy(f"b1s{s}n0", 8) for s in range(4)]
    members = gang_of(16, gpu=8)
    snap = snapshot_of(nodes, taken)
    layout = TopologyRequest(required_level=BLOCK, slices=(SliceLayer(8, SUBBLOCK),))
    found = shortfall(snap, members, replace(layout, required_level=BLOCK))
    by_name = {d.name: d for d in found.domains}
    assert by_name["b1"].slices == f"slices of 8 at {SUBBLOCK}: 0 of 2 fit"
    assert by_name["b2"].slices == f"slices of 8 at {SUBBLOCK}: 1 of 2 fit"
    assert "; slices of 8 at" in by_name["b1"].describe()
    assert shortfall(snap, members, TopologyRequest(required_level=BLOCK)).domains[0].slices == ""


def test_a_domains_reasons_are_listed_by_the_plugin_that_gave_them_in_profile_order():
    """Node filters, NodeName, NodePorts, NodeResourcesFit's capacity words (held, too small,
    full), then the volume, spread and inter-pod plugins, each in its own order; reasons of
    equal words (``not selected``) are one."""
    excluded = Excluded()
    for key in (status_key(interpodaffinity.ANTI_AFFINITY), FULL_KEY, status_key(podtopologyspread.SKEWED),
                status_key(nodeaffinity.AFFINITY_STATUS), status_key(volumebinding.MISSING), held_key("team-a/big"),
                status_key(nodeports.IN_USE), status_key(tainttoleration.untolerated(Taint("gpu", "", "NoSchedule"))),
                status_key(nodeaffinity.SELECTOR_STATUS), TOO_SMALL_KEY, status_key(nodename.MISMATCH),
                status_key(nodeunschedulable.UNSCHEDULABLE_STATUS), status_key(interpodaffinity.EXISTING),
                status_key(nodeunschedulable.NOT_READY_STATUS)):
        excluded.add(key)
    assert excluded.listed() == (
        ("didn't match the requested node name", 1), ("not ready", 1), ("cordoned", 1), ("untolerated taint gpu", 1),
        ("not selected", 2), ("didn't have free ports for the requested pod ports", 1), ("held for team-a/big", 1),
        ("too small", 1), ("full", 1), ("unavailable due to one or more pvc(s) bound to non-existent pv(s)", 1),
        ("didn't match pod topology spread constraints", 1), ("didn't satisfy existing pods anti-affinity rules", 1),
        ("didn't match pod anti-affinity rules", 1),
    )
