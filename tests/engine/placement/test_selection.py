"""Choosing nodes inside one domain: the greedy and the exact search."""

import pytest

from reconciler.engine.ledger.topology import TopologyLevels, TopologyTree
from reconciler.engine.placement import selection

LEVELS = TopologyLevels(("block", "subblock", "host"))


def tree_of(layout):
    """``layout``: {block: {subblock: {host: [node capacities]}}} -> (tree, caps, names)."""
    names, paths, node_caps = [], [], []
    for b, subblocks in sorted(layout.items()):
        for s, hosts in sorted(subblocks.items()):
            for h, caps in sorted(hosts.items()):
                for k, c in enumerate(caps):
                    names.append(f"{h}-n{k}")
                    paths.append((b, s, h))
                    node_caps.append(c)
    tree = TopologyTree(names, paths, LEVELS)
    return tree, tree.caps_by_depth(node_caps), names


def used(tree_caps_names, sel):
    _, _, names = tree_caps_names
    return {names[i]: n for i, n in sel.counts}


def unit_hosts(**subblocks):
    """One node of capacity 1 per host: ``A1=2`` is subblock A1 with 2 hosts."""
    return {s: {f"{s}h{k}": [1] for k in range(n)} for s, n in subblocks.items()}


# One block, subblocks with 3, 1 and 2 single-node hosts; one pod per node.
#
#   b
#   ├── s1: 3 hosts
#   ├── s2: 1 host
#   └── s3: 2 hosts
@pytest.fixture
def block():
    return tree_of({"b": unit_hosts(s1=3, s2=1, s3=2)})


@pytest.mark.parametrize("search", [selection.greedy, selection.exact])
def test_both_searches_use_the_fewest_subblocks_and_complete_with_the_best_fit(block, search):
    tree, caps, _ = block
    sel = search(tree, caps, 1, 0, 4)
    assert sel.vector == (2, 4, 4)
    assert sorted(used(block, sel)) == ["s1h0-n0", "s1h1-n0", "s1h2-n0", "s2h0-n0"]
    assert sel.spare == (0, 0, 0)


@pytest.mark.parametrize("search", [selection.greedy, selection.exact])
def test_a_selection_never_exceeds_a_nodes_capacity_and_holds_exactly_x(block, search):
    tree, caps, _ = block
    for x in range(1, 7):
        sel = search(tree, caps, 1, 0, x)
        assert sum(n for _, n in sel.counts) == x
        assert all(0 < n <= caps[4][i] for i, n in sel.counts)


# Three blocks of single-node hosts, six pods, one per node.
#
#   cluster
#   ├── A: A1 (2 hosts), A2 (2 hosts)
#   ├── B: B1 (4 hosts)
#   └── C: C1 (1 host), C2 (1 host)
#
# Two blocks are needed. Best fit at the block level picks B then C (exactly 6), which
# needs three subblocks; B and A need only two (B1 and one of A's).
@pytest.fixture
def best_fit_trap():
    return tree_of({"A": unit_hosts(A1=2, A2=2), "B": unit_hosts(B1=4), "C": unit_hosts(C1=1, C2=1)})


def test_the_greedy_best_fit_can_cost_a_subblock_at_the_next_level(best_fit_trap):
    tree, caps, _ = best_fit_trap
    assert selection.greedy(tree, caps, 0, 0, 6).vector == (2, 3, 6, 6)


def test_the_exact_search_finds_the_fewest_subblocks(best_fit_trap):
    tree, caps, _ = best_fit_trap
    sel = selection.exact(tree, caps, 0, 0, 6)
    assert sel.vector == (2, 2, 6, 6)
    subblocks = {name[:2] for name in used(best_fit_trap, sel)}
    assert subblocks in ({"A1", "B1"}, {"A2", "B1"})


# One host, three nodes that hold 3, 2 and 2 pods.
def test_the_exact_search_leaves_no_room_where_the_greedy_leaves_some():
    layout = {"b": {"s": {"h": [3, 2, 2]}}}
    tree, caps, _ = tree_of(layout)
    greedy = selection.greedy(tree, caps, 3, 0, 4)
    exact = selection.exact(tree, caps, 3, 0, 4)
    assert greedy.vector == exact.vector == (2,)
    assert greedy.slack == 1
    assert exact.slack == 0
    assert used(tree_of(layout), exact) == {"h-n1": 2, "h-n2": 2}


# Two subblocks of equal capacity: two pods in s1 sit on one host, in s2 on two.
#
#   b
#   ├── s1: h1 (n0 n1)
#   └── s2: h2 (n0), h3 (n0)
def test_among_equal_capacities_the_greedy_takes_the_more_concentrated_domain():
    layout = {"b": {"s2": {"h2": [1], "h3": [1]}, "s1": {"h1": [1, 1]}}}
    tree, caps, _ = tree_of(layout)
    sel = selection.greedy(tree, caps, 0, 0, 3)
    assert sel.vector == (1, 2, 2, 3)
    assert sorted(used(tree_of(layout), sel)) == ["h1-n0", "h1-n1", "h2-n0"]


def test_a_node_alone_holds_the_gang_with_nothing_spare():
    tree, caps, _ = tree_of({"b": {"s": {"h": [5]}}})
    for search in (selection.greedy, selection.exact):
        sel = search(tree, caps, 4, 0, 3)
        assert sel.counts == ((0, 3),)
        assert sel.vector == () and sel.slack == 0


def test_the_exact_work_estimate_grows_with_nodes_and_gang_size():
    assert selection.exact_work(10, 5) == 360
    assert selection.exact_work(20, 5) > selection.exact_work(10, 5)
    assert selection.exact_work(10, 6) > selection.exact_work(10, 5)
