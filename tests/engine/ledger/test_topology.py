"""Levels, node paths and the domain tree; the seed's distance between nodes."""

import pytest

from reconciler.engine.ledger.topology import TopologyLevels, TopologyTree, distance, sequence_cost
from testbed.engine_builders import BLOCK, HOST, SUBBLOCK
from troupe.config import Config

LEVELS = TopologyLevels.default()
OLD = ("topology.gke.io/cluster", "topology.gke.io/rack", "topology.gke.io/host")

PATH_CASES = [
    ("a node with GKE's labels", {BLOCK: "b1", SUBBLOCK: "s1", HOST: "h1"}, ("b1", "s1", "h1")),
    ("a node with the older labels falls back to them",
     {OLD[0]: "c", OLD[1]: "r", OLD[2]: "h"}, ("c", "r", "h")),
    ("GKE's labels win when a node has both", {BLOCK: "b1", SUBBLOCK: "s1", HOST: "h1", OLD[0]: "c"}, ("b1", "s1", "h1")),
    ("a node without labels is its own domain at every level", {}, ("<n1>", "<n1>", "<n1>")),
    ("a missing host label makes the node its own host", {BLOCK: "b1", SUBBLOCK: "s1"}, ("b1", "s1", "<n1>")),
]


@pytest.mark.parametrize(("case", "labels", "want"), PATH_CASES, ids=[c[0] for c in PATH_CASES])
def test_a_nodes_path_through_the_levels(case, labels, want):
    assert LEVELS.path_of("n1", labels) == want


def test_level_keys_of_either_set_and_the_hostname_name_a_depth():
    assert [LEVELS.depth_of(k) for k in (BLOCK, SUBBLOCK, HOST)] == [1, 2, 3]
    assert [LEVELS.depth_of(k) for k in OLD] == [1, 2, 3]
    assert LEVELS.depth_of("kubernetes.io/hostname") == 4
    assert LEVELS.depth_of("example.com/rack") is None
    assert [LEVELS.name_of(d) for d in range(5)] == ["", BLOCK, SUBBLOCK, HOST, "kubernetes.io/hostname"]


def test_levels_come_from_the_configuration():
    levels = TopologyLevels.from_config(Config(topology_levels=("rack",), topology_fallback_levels=()))
    assert levels.path_of("n", {"rack": "r1"}) == ("r1",)
    assert levels.weights() == (100.0,)
    with pytest.raises(ValueError, match="as many as"):
        TopologyLevels(("a", "b"), ("c",))


def test_the_seeds_weights_are_a_hundredfold_per_level():
    assert LEVELS.weights() == (1e6, 1e4, 100.0)


DISTANCE_CASES = [
    ("the same node costs nothing", ("b", "s", "h"), ("b", "s", "h"), 0.0),
    ("another host", ("b", "s", "h1"), ("b", "s", "h2"), 100.0),
    ("another subblock", ("b", "s1", "h"), ("b", "s2", "h"), 1e4),
    ("another block", ("b1", "s", "h"), ("b2", "s", "h"), 1e6),
    ("two unlabelled nodes are in different blocks", ("<a>", "<a>", "<a>"), ("<b>", "<b>", "<b>"), 1e6),
]


@pytest.mark.parametrize(("case", "a", "b", "want"), DISTANCE_CASES, ids=[c[0] for c in DISTANCE_CASES])
def test_the_seeds_distance_between_two_nodes(case, a, b, want):
    assert distance(a, b, LEVELS.weights()) == want


def test_the_cost_of_a_rank_order_sums_neighbouring_distances():
    paths = [("b1", "s1", "h1"), ("b1", "s1", "h1"), ("b1", "s1", "h2"), ("b1", "s2", "h3"), ("b2", "s3", "h4")]
    assert sequence_cost(paths, LEVELS.weights()) == 0 + 100 + 1e4 + 1e6


#   cluster
#   ├── b1
#   │   ├── s1: h1 (n1, n2), h2 (n3)
#   │   └── s2: h3 (n4)
#   └── b2
#       └── s3: h4 (n5)
PATHS = [("b1", "s1", "h1"), ("b1", "s1", "h1"), ("b1", "s1", "h2"), ("b1", "s2", "h3"), ("b2", "s3", "h4")]
NAMES = ["n1", "n2", "n3", "n4", "n5"]


def test_domains_are_contiguous_node_ranges_with_contiguous_children():
    tree = TopologyTree(NAMES, PATHS, LEVELS)
    assert [(tree.lo[1][j], tree.hi[1][j]) for j in range(tree.size(1))] == [(0, 4), (4, 5)]
    assert [tree.prefix[2][j] for j in range(tree.size(2))] == [("b1", "s1"), ("b1", "s2"), ("b2", "s3")]
    assert list(tree.children(0, 0)) == [0, 1]
    assert list(tree.children(1, 0)) == [0, 1]
    assert list(tree.children(2, 0)) == [0, 1]
    assert list(tree.children(3, 0)) == [0, 1]
    assert tree.prefix[4][4] == ("b2", "s3", "h4", "n5")


def test_capacities_are_summed_bottom_up():
    tree = TopologyTree(NAMES, PATHS, LEVELS)
    caps = tree.caps_by_depth([1, 2, 0, 3, 4])
    assert caps == [[10], [6, 4], [3, 3, 4], [3, 0, 3, 4], [1, 2, 0, 3, 4]]


def test_the_tree_refuses_nodes_out_of_topology_order():
    with pytest.raises(ValueError, match="sorted"):
        TopologyTree(["n2", "n1"], [("b2", "s", "h"), ("b1", "s", "h")], LEVELS)
