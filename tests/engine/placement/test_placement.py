"""Every placement rule: all or nothing, smallest domain, least cost, best fit, name order,
required and preferred levels, shapes, and the reasons given when nothing fits."""

import random

import pytest

from reconciler.engine.filters.status import Code
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.placement.place import DomainRef, place_gang
from testbed.engine_builders import (
    BLOCK,
    GPU,
    HOSTNAME,
    SUBBLOCK,
    counts,
    gang_of,
    make_node,
    make_pod,
    placed,
    snapshot_of,
)
from troupe.contract import TopologyRequest


def gpu_node(name, block, subblock, host=None):
    return make_node(name).topology(block, subblock, host or name).allocatable(gpu=8)


def busy(node, gpus):
    return make_pod(f"busy-{node}", "other").requests(gpu=gpus).on(node)


# Two blocks; every node has 8 GPUs and is its own host.
#
#   cluster
#   ├── b1
#   │   ├── s1: a1 a2 a3 a4        a1 runs a 6-GPU pod
#   │   └── s2: b1 b2
#   └── b2
#       └── s3: c1 c2 c3
@pytest.fixture
def two_blocks():
    nodes = [gpu_node(n, "b1", "s1") for n in ("a1", "a2", "a3", "a4")]
    nodes += [gpu_node(n, "b1", "s2") for n in ("b1", "b2")]
    nodes += [gpu_node(n, "b2", "s3") for n in ("c1", "c2", "c3")]
    return snapshot_of(nodes, [busy("a1", 6)])


# --- all or nothing, rank order ------------------------------------------------------------
def test_a_gang_that_does_not_fit_places_no_member(two_blocks):
    result = place_gang(two_blocks, gang_of(9, gpu=8))
    assert not result.placed
    assert result.assignments == []
    assert result.fits == 8


def test_members_are_placed_in_rank_order_by_completion_index_not_by_name(two_blocks):
    members = [make_pod(name).requests(gpu=8).index(i).gated().info()
               for name, i in (("zeta", 0), ("alpha", 2), ("mid", 1))]
    result = place_gang(two_blocks, members)
    assert [a.pod_key for a in result.assignments] == ["default/zeta", "default/mid", "default/alpha"]
    assert [a.rank for a in result.assignments] == [0, 1, 2]


def test_the_order_members_are_given_in_does_not_matter(two_blocks):
    members = gang_of(5, gpu=4)
    shuffled = members[:]
    random.Random(1).shuffle(shuffled)
    assert place_gang(two_blocks, shuffled) == place_gang(two_blocks, members)


def test_an_empty_gang_is_trivially_placed(two_blocks):
    result = place_gang(two_blocks, [])
    assert result.placed and result.assignments == []


# --- (a) the smallest domain -----------------------------------------------------------------
def test_a_gang_that_fits_on_one_node_shares_it_at_no_cost(two_blocks):
    """a1 has exactly 2 GPUs left: too few for four; a2 is the first that holds them."""
    result = place_gang(two_blocks, gang_of(4, gpu=2))
    assert counts(result) == {"a2": 4}
    assert result.cost == 0
    assert result.domain is not None and result.domain.level == HOSTNAME


def test_a_gang_goes_to_a_subblock_that_holds_it_whole(two_blocks):
    """s1 and s3 both hold three exactly; s1 comes first in topology order."""
    result = place_gang(two_blocks, gang_of(3, gpu=8))
    assert placed(result) == [("w-0", "a2"), ("w-1", "a3"), ("w-2", "a4")]
    assert result.domain == DomainRef(SUBBLOCK, ("b1", "s1"))
    assert result.cost == 200


def test_a_gang_spans_subblocks_of_one_block_before_it_spans_blocks(two_blocks):
    result = place_gang(two_blocks, gang_of(5, gpu=8))
    assert {n for _, n in placed(result)} == {"a2", "a3", "a4", "b1", "b2"}
    assert result.domain == DomainRef(BLOCK, ("b1",))
    assert result.cost == 1e4 + 3 * 100


def test_a_gang_larger_than_any_block_spans_the_fewest_blocks(two_blocks):
    result = place_gang(two_blocks, gang_of(7, gpu=8))
    assert result.domain == DomainRef("", ())
    assert str(result.domain) == "cluster"
    assert result.cost == 1e6 + 1e4 + 4 * 100


# --- (b) the least cost inside the domain ------------------------------------------------------
# One block; one pod of 8 GPUs per node.
#
#   b1
#   ├── s1: n11 n12 n13      3 free
#   ├── s2: n21              1 free
#   └── s3: n31 n32          2 free
@pytest.fixture
def uneven_block():
    nodes = [gpu_node(n, "b1", s) for s, ns in (("s1", ["n11", "n12", "n13"]), ("s2", ["n21"]), ("s3", ["n31", "n32"]))
             for n in ns]
    return snapshot_of(nodes)


def test_a_gang_spans_as_few_subblocks_as_it_can(uneven_block):
    result = place_gang(uneven_block, gang_of(4, gpu=8))
    assert sorted(counts(result)) == ["n11", "n12", "n13", "n21"]
    assert result.cost == 1e4 + 2 * 100


def test_the_least_fragmenting_subblock_completes_the_gang(uneven_block):
    """s2 (one free node) completes the four, leaving s3's two nodes together."""
    for budget in (0, 10**9):
        result = place_gang(uneven_block, gang_of(4, gpu=8), exact_budget=budget)
        assert "n21" in counts(result), result.method


def test_neighbouring_ranks_share_a_node_before_moving_on():
    snapshot = snapshot_of([gpu_node("n1", "b", "s", "h1"), gpu_node("n2", "b", "s", "h2")])
    result = place_gang(snapshot, gang_of(4, gpu=4))
    assert placed(result) == [("w-0", "n1"), ("w-1", "n1"), ("w-2", "n2"), ("w-3", "n2")]
    assert result.cost == 100


# One host with two nodes, two hosts with one node each, in one subblock.
#
#   b / s
#   ├── h1: n1 n2
#   ├── h2: n3
#   └── h3: n4
def test_nodes_of_one_host_are_preferred_to_nodes_of_two():
    nodes = [gpu_node("n1", "b", "s", "h1"), gpu_node("n2", "b", "s", "h1"),
             gpu_node("n3", "b", "s", "h2"), gpu_node("n4", "b", "s", "h3")]
    result = place_gang(snapshot_of(nodes), gang_of(2, gpu=8))
    assert sorted(counts(result)) == ["n1", "n2"]
    assert result.domain is not None and result.domain.level == "cloud.google.com/gce-topology-host"
    assert result.cost == 0


# --- (c) best fit, (d) name ----------------------------------------------------------------------
def test_a_pod_goes_to_the_node_it_fills_best():
    nodes = [gpu_node(n, "b", "s") for n in ("roomy", "snug", "mid")]
    snapshot = snapshot_of(nodes, [busy("snug", 6), busy("mid", 4)])
    assert placed(place_gang(snapshot, gang_of(1, gpu=2))) == [("w-0", "snug")]


def test_the_subblock_left_with_the_least_room_is_chosen():
    nodes = [gpu_node(n, "b", "big") for n in ("x1", "x2", "x3")] + [gpu_node(n, "b", "small") for n in ("y1", "y2")]
    result = place_gang(snapshot_of(nodes), gang_of(2, gpu=8))
    assert sorted(counts(result)) == ["y1", "y2"]


def test_among_equal_nodes_the_first_by_name_wins():
    nodes = [make_node(n).allocatable(gpu=8) for n in ("n3", "n1", "n2")]
    assert placed(place_gang(snapshot_of(nodes), gang_of(1, gpu=8))) == [("w-0", "n1")]


def test_the_same_snapshot_gives_the_same_plan_and_message(two_blocks):
    for gang in (gang_of(6, gpu=8), gang_of(12, gpu=8)):
        assert place_gang(two_blocks, gang) == place_gang(two_blocks, gang)


# --- nodes without labels, older labels ---------------------------------------------------------
def test_unlabelled_nodes_are_each_their_own_block():
    nodes = [make_node(n).allocatable(gpu=8) for n in ("u1", "u2")]
    result = place_gang(snapshot_of(nodes), gang_of(2, gpu=8))
    assert result.cost == 1e6
    assert result.domain == DomainRef("", ())


def test_a_labelled_subblock_is_preferred_to_unlabelled_nodes():
    nodes = [make_node(n).allocatable(gpu=8) for n in ("a", "b")] + [gpu_node(n, "b1", "s1") for n in ("x", "y")]
    assert sorted(counts(place_gang(snapshot_of(nodes), gang_of(2, gpu=8)))) == ["x", "y"]


def test_nodes_with_the_older_gke_labels_are_grouped_by_them():
    def old(name, rack):
        return (make_node(name).label("topology.gke.io/cluster", "c").label("topology.gke.io/rack", rack)
                .label("topology.gke.io/host", name).allocatable(gpu=8))

    nodes = [old("n1", "r1"), old("n2", "r2"), old("n3", "r2")]
    result = place_gang(snapshot_of(nodes), gang_of(2, gpu=8), TopologyRequest(required_level="topology.gke.io/rack"))
    assert sorted(counts(result)) == ["n2", "n3"]


def test_configured_levels_are_used():
    levels = TopologyLevels(("example.com/rack",))
    nodes = [make_node(n).label("example.com/rack", r).allocatable(gpu=8) for n, r in
             (("n1", "r1"), ("n2", "r2"), ("n3", "r2"))]
    result = place_gang(snapshot_of(nodes, levels=levels), gang_of(2, gpu=8))
    assert sorted(counts(result)) == ["n2", "n3"]
    assert result.cost == 0, "the seed counts nodes with equal paths as one place"


# --- required and preferred levels -------------------------------------------------------------
def test_a_required_level_places_the_gang_in_one_domain_of_it(two_blocks):
    result = place_gang(two_blocks, gang_of(2, gpu=8), TopologyRequest(required_level=SUBBLOCK))
    assert result.domain is not None and result.domain.level == SUBBLOCK
    assert sorted(counts(result)) == ["b1", "b2"]


def test_a_required_level_that_no_domain_can_hold_now_is_unschedulable(two_blocks):
    result = place_gang(two_blocks, gang_of(4, gpu=8), TopologyRequest(required_level=SUBBLOCK))
    assert not result.placed
    assert result.code is Code.UNSCHEDULABLE  # s1 holds four once a1's pod is gone
    assert result.reason == (
        "fits 3 of 4 members in one cloud.google.com/gce-topology-subblock; "
        "1 node excluded: insufficient nvidia.com/gpu: 1"
    )


def test_a_required_level_that_no_domain_could_ever_hold_is_unresolvable(two_blocks):
    result = place_gang(two_blocks, gang_of(5, gpu=8), TopologyRequest(required_level=SUBBLOCK))
    assert result.code is Code.UNRESOLVABLE


def test_the_hostname_as_required_level_means_one_node(two_blocks):
    result = place_gang(two_blocks, gang_of(3, gpu=2), TopologyRequest(required_level=HOSTNAME))
    assert len(counts(result)) == 1
    assert not place_gang(two_blocks, gang_of(5, gpu=2), TopologyRequest(required_level=HOSTNAME)).placed


def test_an_unknown_level_is_unresolvable_and_names_the_known_ones(two_blocks):
    for kwargs in ({"required_level": "example.com/rack"}, {"preferred_level": "example.com/rack"}):
        result = place_gang(two_blocks, gang_of(2, gpu=8), TopologyRequest(**kwargs))
        assert result.code is Code.UNRESOLVABLE
        assert result.reason.startswith("unknown topology level 'example.com/rack' (known: cloud.google.com/gce-topology-block,")


def test_a_preferred_level_is_tried_first(two_blocks):
    result = place_gang(two_blocks, gang_of(2, gpu=4), TopologyRequest(preferred_level=SUBBLOCK))
    assert result.domain is not None and result.domain.level == SUBBLOCK
    assert len(counts(result)) == 1 and result.cost == 0


def test_a_preferred_level_falls_back_upwards(two_blocks):
    result = place_gang(two_blocks, gang_of(5, gpu=8), TopologyRequest(preferred_level=SUBBLOCK))
    assert result.placed
    assert result.domain == DomainRef(BLOCK, ("b1",))


# --- shapes: different requests per member ---------------------------------------------------------
def test_members_with_different_requests_are_placed_as_their_envelope():
    nodes = [gpu_node(n, "b", "s") for n in ("n1", "n2", "n3")]
    members = [make_pod("launcher").requests(cpu="1").index(0).gated().info()]
    members += [make_pod(f"worker-{i}").requests(gpu=8).index(i).gated().info() for i in (1, 2)]
    result = place_gang(snapshot_of(nodes), members)
    assert result.placed and result.method != "mixed"
    assert len(counts(result)) == 3


def test_members_that_need_different_nodes_are_filled_one_by_one():
    nodes = [make_node("cpu-1").label("pool", "cpu").topology("b", "s", "h0")]
    nodes += [gpu_node(n, "b", "s").label("pool", "gpu") for n in ("g1", "g2")]
    members = [make_pod("launcher").requests(cpu="1").node_selector("pool", "cpu").index(0).gated().info()]
    members += [make_pod(f"worker-{i}").requests(gpu=8).node_selector("pool", "gpu").index(i).gated().info()
                for i in (1, 2)]
    result = place_gang(snapshot_of(nodes), members)
    assert result.method == "mixed"
    assert placed(result) == [("launcher", "cpu-1"), ("worker-1", "g1"), ("worker-2", "g2")]


def test_a_small_member_shares_a_node_a_big_member_leaves_room_on():
    """The envelope (8 GPUs for everyone) needs 3 nodes; the fill packs them on 2."""
    nodes = [gpu_node(n, "b", "s") for n in ("n1", "n2")]
    members = [make_pod("w-0").requests(gpu=8).index(0).gated().info(),
               make_pod("w-1").requests(gpu=4).index(1).gated().info(),
               make_pod("w-2").requests(gpu=4).index(2).gated().info()]
    result = place_gang(snapshot_of(nodes), members)
    assert result.method == "mixed"
    assert counts(result) == {"n1": 1, "n2": 2}


# Subblock s1 has two free nodes, s2 one.
#
#   b
#   ├── s1: n1 n2
#   └── s2: n3
def test_a_fill_in_a_smaller_domain_beats_the_envelope_in_a_larger_one():
    """As envelope (three members of 8 GPUs) the gang needs both subblocks; filled one by
    one (8 + 4 + 4 GPUs) it fits in s1."""
    nodes = [gpu_node("n1", "b", "s1"), gpu_node("n2", "b", "s1"), gpu_node("n3", "b", "s2")]
    members = [make_pod("w-0").requests(gpu=8).index(0).gated().info(),
               make_pod("w-1").requests(gpu=4).index(1).gated().info(),
               make_pod("w-2").requests(gpu=4).index(2).gated().info()]
    result = place_gang(snapshot_of(nodes), members)
    assert result.method == "mixed"
    assert result.domain == DomainRef(SUBBLOCK, ("b", "s1"))
    assert counts(result) == {"n1": 1, "n2": 2}


# --- why not placed ---------------------------------------------------------------------------
# Four nodes: two tainted for inference, one full, one free.
@pytest.fixture
def crowded():
    nodes = [gpu_node("i1", "b", "s").taint("dedicated", "infer"), gpu_node("i2", "b", "s").taint("dedicated", "infer"),
             gpu_node("full", "b", "s"), gpu_node("free", "b", "s")]
    return snapshot_of(nodes, [busy("full", 8)])


def test_the_reason_counts_excluded_nodes_per_filter_in_kube_schedulers_order(crowded):
    result = place_gang(crowded, gang_of(2, gpu=8))
    assert result.reason == (
        "fits 1 of 2 members; 3 nodes excluded: untolerated taint dedicated=infer: 2, insufficient nvidia.com/gpu: 1"
    )
    assert result.code is Code.UNSCHEDULABLE


def test_freeing_capacity_cannot_help_past_taints(crowded):
    result = place_gang(crowded, gang_of(3, gpu=8))
    assert result.code is Code.UNRESOLVABLE


def test_tolerating_the_taint_makes_the_gang_fit(crowded):
    members = [make_pod(f"w-{i}").requests(gpu=8).tolerate("dedicated", "Exists").index(i).gated().info()
               for i in range(3)]
    assert place_gang(crowded, members).placed


def test_a_selector_no_node_matches_is_unresolvable(crowded):
    members = [make_pod("w-0").requests(gpu=1).node_selector("pool", "tpu").gated().info()]
    result = place_gang(crowded, members)
    assert result.code is Code.UNRESOLVABLE
    assert result.reason == "fits 0 of 1 members; 4 nodes excluded: untolerated taint dedicated=infer: 2, node selector mismatch: 2"


def test_every_short_resource_of_a_node_is_counted():
    snapshot = snapshot_of([make_node("n1").allocatable(cpu="1", gpu=1)])
    result = place_gang(snapshot, [make_pod("w").requests(cpu="2", gpu=2).gated().info()])
    assert result.reason == "fits 0 of 1 members; 1 node excluded: insufficient cpu: 1, insufficient nvidia.com/gpu: 1"


def test_not_ready_and_unschedulable_nodes_are_excluded():
    nodes = [gpu_node("n1", "b", "s").not_ready(), gpu_node("n2", "b", "s").unschedulable()]
    result = place_gang(snapshot_of(nodes), gang_of(1, gpu=1))
    assert result.reason == "fits 0 of 1 members; 2 nodes excluded: node not ready: 1, node unschedulable: 1"
    assert result.code is Code.UNRESOLVABLE


def test_a_full_pod_count_is_too_many_pods():
    snapshot = snapshot_of([gpu_node("n1", "b", "s").pods(1)], [make_pod("other").on("n1")])
    result = place_gang(snapshot, gang_of(1, gpu=1))
    assert result.reason == "fits 0 of 1 members; 1 node excluded: too many pods: 1"


def test_an_empty_cluster_says_so():
    result = place_gang(snapshot_of([]), gang_of(1, gpu=1))
    assert result.reason == "fits 0 of 1 members; no nodes"
    assert result.code is Code.UNRESOLVABLE


def test_released_pods_of_other_gangs_hold_their_nodes(two_blocks):
    pinned = [make_pod(f"o-{n}", "other").requests(gpu=8).annotate("reconciler.troupe.io/node", n)
              for n in ("c1", "c2", "c3")]
    snapshot = snapshot_of([gpu_node(n, "b2", "s3") for n in ("c1", "c2", "c3")], pinned)
    result = place_gang(snapshot, gang_of(1, gpu=1))
    assert not result.placed
    assert snapshot.free("c1")[GPU] == 0


# The worked example of docs/decisions/001-placement-objective.md: 8-GPU nodes, members of 4.
#
#   cluster                                   members that fit
#   ├── b1                                      7
#   │   ├── s1: n1 (8 free) n2 (8) n3 (4)       5
#   │   └── s2: n4 (8)      n5 (2)              2
#   └── b2                                      9
#       ├── s3: n6 (8) n7 (8)                   4
#       └── s4: n8 (8) n9 (8) n10 (6)           5
DECISION_001 = [
    ("seven fill block b1 exactly", 7, {"n1": 2, "n2": 2, "n3": 1, "n4": 2}, 10_200, "cloud.google.com/gce-topology-block=b1"),
    ("five fill subblock s1, first of two exact fits", 5, {"n1": 2, "n2": 2, "n3": 1}, 200,
     "cloud.google.com/gce-topology-subblock=b1/s1"),
    ("twelve take fewer nodes before a tighter fit", 12, {"n1": 2, "n2": 2, "n6": 2, "n7": 2, "n8": 2, "n9": 2},
     1_010_300, "cluster"),
    ("seventeen do not fit", 17, {}, 0, "None"),
]


@pytest.mark.parametrize(("case", "size", "want_counts", "want_cost", "want_domain"), DECISION_001,
                         ids=[c[0] for c in DECISION_001])
def test_the_worked_example_of_decision_001(case, size, want_counts, want_cost, want_domain):
    used = {"n3": 4, "n5": 6, "n10": 2}
    layout = [("n1", "b1", "s1"), ("n2", "b1", "s1"), ("n3", "b1", "s1"), ("n4", "b1", "s2"), ("n5", "b1", "s2"),
              ("n6", "b2", "s3"), ("n7", "b2", "s3"), ("n8", "b2", "s4"), ("n9", "b2", "s4"), ("n10", "b2", "s4")]
    snapshot = snapshot_of([gpu_node(n, b, s) for n, b, s in layout], [busy(n, g) for n, g in used.items()])
    result = place_gang(snapshot, gang_of(size, gpu=4))
    assert counts(result) == want_counts
    assert result.cost == want_cost
    assert str(result.domain) == want_domain
    if not result.placed:
        assert result.reason == "fits 16 of 17 members; 1 node excluded: insufficient nvidia.com/gpu: 1"
        assert result.code is Code.UNSCHEDULABLE
