"""Slices, balanced placement and exclusive domains (docs/decisions/035-topology-layers.md):
examples, then properties against brute force on small trees."""

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engine.filters.status import Code
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.placement.layers import water_fill
from reconciler.engine.placement.place import place_gang
from testbed.engine_builders import (
    BLOCK,
    GPU,
    SUBBLOCK,
    gang_of,
    make_node,
    make_pod,
    snapshot_of,
)
from troupe.config import Config
from troupe.contract import HOSTNAME_LABEL, TopologyRequest
from troupe.layers import SliceLayer

HOST = TopologyLevels.default().keys[2]


def gpu_node(name, block, subblock, host=None, gpus=8):
    return make_node(name).topology(block, subblock, host or name).allocatable(gpu=gpus)


def sliced(*layers, required=None, placement="Compact", exclusive=None):
    return TopologyRequest(required_level=required, slices=tuple(SliceLayer(size, level) for size, level in layers),
                           placement=placement, exclusive_level=exclusive)


def subblock_of(snapshot, node):
    return snapshot.paths[snapshot.index[node]][1]


# --- slices: examples -------------------------------------------------------------------
def test_slices_of_four_go_whole_into_subblocks_although_the_plain_gang_would_split_them():
    # s1 holds 6 one-node members, s2 6, s3 3: the plain gang of 8 takes s1 and s3 (best
    # fit), so ranks 4-7 straddle them; slices of 4 per subblock take s1 and s2.
    nodes = [gpu_node(f"a{i}", "b1", "s1") for i in range(6)]
    nodes += [gpu_node(f"b{i}", "b1", "s2") for i in range(6)]
    nodes += [gpu_node(f"c{i}", "b1", "s3") for i in range(3)]
    snap = snapshot_of(nodes)
    plain = place_gang(snap, gang_of(8, gpu=8))
    assert plain.placed
    assert len({subblock_of(snap, a.node) for a in plain.assignments[4:]}) == 2
    result = place_gang(snap, gang_of(8, gpu=8), sliced((4, SUBBLOCK)))
    assert result.placed, result.reason
    for k in range(2):
        assert len({subblock_of(snap, a.node) for a in result.assignments[4 * k:4 * k + 4]}) == 1
    assert [s.index for s in result.slices] == [0, 1]
    assert len({str(s.domain) for s in result.slices}) == 2
    assert "2 slices of 4 at" in result.reason


def test_an_indexed_job_of_32_in_slices_of_8_takes_four_whole_subblocks_in_rank_order():
    nodes = [gpu_node(f"s{s}n{n}", "b1", f"s{s}") for s in range(5) for n in range(10)]
    snap = snapshot_of(nodes, [make_pod(f"busy{n}", "other").requests(gpu=8).on(f"s0n{n}") for n in range(4)])
    result = place_gang(snap, gang_of(32, gpu=8), sliced((8, SUBBLOCK)))
    assert result.placed, result.reason
    used = [subblock_of(snap, a.node) for a in result.assignments]
    for k in range(4):
        assert len(set(used[8 * k:8 * k + 8])) == 1
    assert len(set(used)) == 4
    assert [s.index for s in result.slices] == [0, 1, 2, 3]
    assert [str(s.domain) for s in result.slices] == [f"{SUBBLOCK}=b1/{used[8 * k]}" for k in range(4)]
    assert "s0" not in used  # 6 free nodes hold no slice of 8


def test_nested_layers_keep_four_per_host_inside_eight_per_subblock():
    # Every node holds 2 members, every host (2 nodes) 4, every subblock (3 hosts) 12.
    nodes = [make_node(f"s{s}h{h}n{n}").topology("b1", f"s{s}", f"s{s}h{h}").allocatable(gpu=8)
             for s in range(3) for h in range(3) for n in range(2)]
    snap = snapshot_of(nodes, [make_pod("busy", "other").requests(gpu=4).on("s0h0n0")])
    members = gang_of(16, gpu=4)
    result = place_gang(snap, members, sliced((8, SUBBLOCK), (4, HOST)))
    assert result.placed, result.reason
    paths = [snap.paths[snap.index[a.node]] for a in result.assignments]
    for k in range(4):
        assert len({p[2] for p in paths[4 * k:4 * k + 4]}) == 1
    for k in range(2):
        assert len({p[1] for p in paths[8 * k:8 * k + 8]}) == 1
    assert [s.layer for s in result.slices] == [0, 0, 1, 1, 1, 1]


def test_a_gang_whose_slices_fit_nowhere_says_which_layer_failed_and_by_how_much():
    # 16 free one-member nodes in the block, but no subblock has 8 free.
    nodes = [gpu_node(f"s{s}n{n}", "b1", f"s{s}") for s in range(4) for n in range(5)]
    busy = [make_pod(f"busy{s}", "other").requests(gpu=8).on(f"s{s}n0") for s in range(4)]
    result = place_gang(snapshot_of(nodes, busy), gang_of(16, gpu=8), sliced((8, SUBBLOCK), required=BLOCK))
    assert not result.placed
    assert result.reason.startswith(f"slices of 8 at {SUBBLOCK}: 0 of 2 slices fit; best {BLOCK}=b1 holds 0; ")
    assert result.code == Code.UNSCHEDULABLE


def test_a_gang_size_that_is_not_a_multiple_of_the_slice_size_is_unresolvable():
    snap = snapshot_of([gpu_node("n1", "b1", "s1")])
    result = place_gang(snap, gang_of(6, gpu=1), sliced((4, SUBBLOCK)))
    assert result.code == Code.UNRESOLVABLE
    assert "not a multiple of the slice size 4" in result.reason


def test_the_gang_parses_its_slices_once_and_placement_reads_only_that_request():
    nodes = [gpu_node(f"a{i}", "b1", "s1") for i in range(6)] + [gpu_node(f"b{i}", "b1", "s2") for i in range(6)]
    members = [make_pod(f"w-{i}").requests(gpu=8).gang("train", 8).index(i).gated()
               .annotate("troupe.io/topology-slice-size", "4")
               .annotate("troupe.io/topology-slice-required-level", SUBBLOCK).info() for i in range(8)]
    gang = build_gang("default/train", members, Config(), {})
    assert gang.topology.slices == (SliceLayer(4, SUBBLOCK),)
    snap = snapshot_of(nodes)
    result = place_gang(snap, members, gang.topology)
    assert result.placed
    assert [s.index for s in result.slices] == [0, 1]
    assert place_gang(snap, members).slices == ()  # the annotations are the gang's to read, not placement's


# --- balanced -------------------------------------------------------------------------
def test_a_balanced_gang_of_12_over_two_10_node_subblocks_lands_6_and_6():
    nodes = [gpu_node(f"s{s}n{n}", "b1", f"s{s}") for s in range(2) for n in range(10)]
    snap = snapshot_of(nodes)
    compact = place_gang(snap, gang_of(12, gpu=8))
    used = [subblock_of(snap, a.node) for a in compact.assignments]
    assert sorted((used.count("s0"), used.count("s1"))) == [2, 10]
    result = place_gang(snap, gang_of(12, gpu=8), sliced(placement="Balanced"))
    assert result.placed
    used = [subblock_of(snap, a.node) for a in result.assignments]
    assert used.count("s0") == 6 and used.count("s1") == 6
    assert result.balance is not None and (result.balance.domains, result.balance.largest, result.balance.smallest) == (2, 6, 6)
    assert "balanced over 2" in result.reason and "6 to 6 members" in result.reason
    assert result.method == "balanced"


def test_water_fill_is_even_where_room_allows_and_gives_extras_in_order():
    assert water_fill([10, 10], 12) == [6, 6]
    assert water_fill([10, 10, 10], 13) == [5, 4, 4]
    assert water_fill([2, 10, 10], 13) == [2, 6, 5]
    assert water_fill([3], 3) == [3]


# --- exclusive ------------------------------------------------------------------------
def test_an_exclusive_gang_keeps_other_gangs_out_of_its_subblock_and_stays_out_of_theirs():
    nodes = [gpu_node(f"s{s}n{n}", "b1", f"s{s}") for s in range(3) for n in range(4)]
    exclusive = make_pod("x-0", "ns").requests(gpu=8).gang("x", 2).annotate(
        "troupe.io/topology-exclusive-level", SUBBLOCK).on("s0n0")
    snap = snapshot_of(nodes, [exclusive])
    other = place_gang(snap, gang_of(4, gpu=8, name="other"))
    assert other.placed
    assert {subblock_of(snap, a.node) for a in other.assignments} == {"s1"}
    # A pod Troupe released (pinned) in s1: an exclusive gang does not go there.
    pinned = make_pod("y-0", "ns").requests(gpu=8).gang("y", 1).annotate("reconciler.troupe.io/node", "s1n0").gated()
    snap = snapshot_of(nodes, [exclusive, pinned])
    mine = place_gang(snap, gang_of(2, gpu=8, name="z"), sliced(exclusive=SUBBLOCK))
    assert {subblock_of(snap, a.node) for a in mine.assignments} == {"s2"}


# --- properties -------------------------------------------------------------------------
@st.composite
def small_trees(draw):
    """Up to 2 blocks x 3 subblocks x 3 hosts x 2 nodes, 0-3 members free per node."""
    nodes, busy = [], []
    for b in range(draw(st.integers(1, 2))):
        for s in range(draw(st.integers(1, 3))):
            for h in range(draw(st.integers(1, 3))):
                for n in range(draw(st.integers(1, 2))):
                    name = f"b{b}s{s}h{h}n{n}"
                    nodes.append(make_node(name).topology(f"b{b}", f"b{b}s{s}", f"b{b}s{s}h{h}").allocatable(gpu=3))
                    used = draw(st.integers(0, 3))
                    if used:
                        busy.append(make_pod(f"busy-{name}", "other").requests(gpu=used).on(name))
    return snapshot_of(nodes, busy)


LEVELS = [BLOCK, SUBBLOCK, HOST, HOSTNAME_LABEL]


@st.composite
def layouts(draw):
    first = draw(st.sampled_from([1, 2, 3]))  # index into LEVELS: subblock, host, node
    inner = draw(st.sampled_from([None, *range(first, 4)]))
    size = draw(st.sampled_from([2, 3, 4]))
    layers = [(size * (2 if inner is not None else 1), LEVELS[first])]
    if inner is not None:
        layers.append((size, LEVELS[inner]))
    return layers


def fits_every_node(snap, result):
    for node, n in Counter(a.node for a in result.assignments).items():
        assert snap.free(node)[GPU] >= n * 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=small_trees(), layers=layouts(), slices=st.integers(1, 4), balanced=st.booleans())
def test_every_slice_is_inside_one_domain_of_its_level_and_every_member_fits(snap, layers, slices, balanced):
    size = layers[0][0] * slices
    result = place_gang(snap, gang_of(size, gpu=1), sliced(*layers, placement="Balanced" if balanced else "Compact"))
    if not result.placed:
        return
    fits_every_node(snap, result)
    for n, (slice_size, level) in enumerate(layers):
        depth = snap.levels.depth_of(level)
        for k in range(size // slice_size):
            members = result.assignments[k * slice_size:(k + 1) * slice_size]
            assert len({snap.tree.domain_of[depth][snap.index[a.node]] for a in members}) == 1
        assert [s.index for s in result.slices if s.layer == n] == list(range(size // slice_size))


def slice_units(snap, level, slice_size):
    """Per domain of ``level``: whole slices of one-GPU members it holds."""
    depth = snap.levels.depth_of(level)
    tree = snap.tree
    free = [max(snap.free(i)[GPU], 0) for i in range(len(snap.nodes))]
    return depth, [sum(free[tree.lo[depth][j]:tree.hi[depth][j]]) // slice_size for j in range(tree.size(depth))]


def brute_force_vector(snap, level, slice_size, slices):
    """The least (gang depth deepest first, vector of domains used per depth down to the
    slice level) over every set of slice-level domains that holds the slices."""
    depth, units = slice_units(snap, level, slice_size)
    tree = snap.tree
    best = None
    usable = [j for j, u in enumerate(units) if u > 0]
    for r in range(1, len(usable) + 1):
        for chosen in itertools.combinations(usable, r):
            if sum(units[j] for j in chosen) < slices:
                continue
            lo = [tree.lo[depth][j] for j in chosen]
            gang_depth = max(d for d in range(depth + 1) if len({tree.domain_of[d][i] for i in lo}) == 1)
            vector = tuple(len({tree.domain_of[d][i] for i in lo}) for d in range(gang_depth + 1, depth + 1))
            key = (-gang_depth, vector)
            if best is None or key < best:
                best = key
    return best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=small_trees(), level=st.sampled_from([SUBBLOCK, HOST]), slice_size=st.integers(2, 4),
       slices=st.integers(1, 4))
def test_slices_use_the_fewest_domains_that_brute_force_finds(snap, level, slice_size, slices):
    result = place_gang(snap, gang_of(slice_size * slices, gpu=1), sliced((slice_size, level)))
    best = brute_force_vector(snap, level, slice_size, slices)
    assert result.placed == (best is not None)
    if best is None:
        return
    depth = snap.levels.depth_of(level)
    nodes = [snap.index[a.node] for a in result.assignments]
    tree = snap.tree
    gang_depth = max(d for d in range(depth + 1) if len({tree.domain_of[d][i] for i in nodes}) == 1)
    vector = tuple(len({tree.domain_of[d][i] for i in nodes}) for d in range(gang_depth + 1, depth + 1))
    assert (-gang_depth, vector) == best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=small_trees(), size=st.integers(2, 12))
def test_a_balanced_spread_differs_by_at_most_one_member_where_room_allows(snap, size):
    result = place_gang(snap, gang_of(size, gpu=1), sliced(placement="Balanced"))
    if not result.placed or result.balance is None:
        return
    fits_every_node(snap, result)
    tree, depth = snap.tree, result.balance.depth
    member_caps = tree.caps_by_depth([max(snap.free(i)[GPU], 0) for i in range(len(snap.nodes))])[depth]
    shares = {}
    for a in result.assignments:
        j = tree.domain_of[depth][snap.index[a.node]]
        shares[j] = shares.get(j, 0) + 1
    unfilled = [n for j, n in shares.items() if n < member_caps[j]]
    if unfilled:
        assert max(unfilled) - min(unfilled) <= 1
        assert max(shares.values()) <= min(unfilled) + 1
    # fewest domains: no fewer domains of that level inside the gang's domain hold it.
    parent = tree.domain_of[depth - 1][snap.index[result.assignments[0].node]]
    room = sorted((member_caps[c] for c in tree.children(depth - 1, parent)), reverse=True)
    assert sum(room[:len(shares) - 1]) < size


@st.composite
def held_trees(draw):
    """A small tree whose nodes run members of other gangs, some exclusive at a level."""
    snap_nodes, pods = [], []
    for s in range(draw(st.integers(1, 4))):
        for h in range(draw(st.integers(1, 3))):
            name = f"s{s}h{h}"
            snap_nodes.append(make_node(name).topology("b0", f"s{s}", name).allocatable(gpu=4))
            if draw(st.booleans()):
                pod = make_pod(f"held-{name}", "other").requests(gpu=1).gang(f"g{draw(st.integers(0, 2))}", 1)
                level = draw(st.sampled_from([None, SUBBLOCK, HOST]))
                if level is not None:
                    pod = pod.annotate("troupe.io/topology-exclusive-level", level)
                pods.append(pod.annotate("reconciler.troupe.io/node", name).gated())
    return snapshot_of(snap_nodes, pods)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=held_trees(), size=st.integers(1, 6), level=st.sampled_from([None, SUBBLOCK, HOST]))
def test_exclusive_domains_are_never_shared(snap, size, level):
    result = place_gang(snap, gang_of(size, gpu=1, name="mine"), sliced(exclusive=level))
    if not result.placed:
        return
    fits_every_node(snap, result)
    tree = snap.tree
    mine = {snap.index[a.node] for a in result.assignments}
    for key in snap.exclusive:
        other = snap.node_index_of(key)
        depth = snap.levels.depth_of(snap.pods[key].gang_annotations["troupe.io/topology-exclusive-level"])
        assert tree.domain_of[depth][other] not in {tree.domain_of[depth][i] for i in mine}
    if level is not None:
        depth = snap.levels.depth_of(level)
        held = {tree.domain_of[depth][snap.node_index_of(key)] for key in snap.pods}
        assert not held & {tree.domain_of[depth][i] for i in mine}
