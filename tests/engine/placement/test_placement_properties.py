"""Properties of placement on random small clusters, checked against brute force.

The oracle here is independent of the engine: it knows which nodes fit from how the
cluster was generated, and computes the seed's cost (1e6 across blocks, 1e4 across
subblocks, 100 across hosts) of every ordered choice of nodes.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from reconciler.engine.filters.profile import node_status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import place_gang
from testbed.engine_builders import GPU, make_node, make_pod, snapshot_of
from troupe.contract import TopologyRequest

WEIGHTS = (1e6, 1e4, 100.0)
#: The engine's default; a test may lower it to 0 to check the property fails without it.
EXACT_BUDGET = 60_000


@dataclass
class Cluster:
    """A generated cluster and what the oracle knows of it."""

    snapshot: Snapshot
    free_gpus: dict[str, int]
    paths: dict[str, tuple[str, str, str]]


@st.composite
def clusters(draw, max_nodes=10, unlabelled=True, one_block=False, one_node_per_host=False):
    """Up to ``max_nodes`` 8-GPU nodes in up to 3 blocks x 3 subblocks x 3 hosts, some
    without labels, each running a pod that uses 0-8 GPUs (mostly none)."""
    n = draw(st.integers(1, max_nodes) | st.just(max_nodes))
    nodes, pods, free, paths = [], [], {}, {}
    for k in range(n):
        name = f"n{k}"
        node = make_node(name).allocatable(gpu=8)
        if unlabelled and draw(st.integers(0, 9)) == 0:
            paths[name] = (f"<{name}>",) * 3
        else:
            b = 0 if one_block else draw(st.integers(0, 2))
            s = draw(st.integers(0, 2))
            h = k if one_node_per_host else draw(st.integers(0, 2))
            paths[name] = (f"b{b}", f"b{b}-s{s}", f"b{b}-s{s}-h{h}")
            node.topology(*paths[name])
        used = draw(st.sampled_from([0, 0, 0, 0, 1, 3, 4, 8]) | st.integers(0, 8))
        if used:
            pods.append(make_pod(f"busy-{k}", "other").requests(gpu=used).on(name))
        free[name] = 8 - used
        nodes.append(node)
    return Cluster(snapshot_of(nodes, pods), free, paths)


def gang(size: int, gpus: int) -> list[PodInfo]:
    return [make_pod(f"w-{i}").requests(gpu=gpus).gang("g", size).index(i).gated().info() for i in range(size)]


def seed_cost(paths: list[tuple[str, str, str]]) -> float:
    total = 0.0
    for a, b in itertools.pairwise(paths):
        total += next((w for x, y, w in zip(a, b, WEIGHTS, strict=True) if x != y), 0.0)
    return total


def brute_force(cluster: Cluster, size: int, gpus: int) -> float | None:
    """The least seed cost over every ordered choice of ``size`` distinct fitting nodes."""
    fitting = [name for name, free in cluster.free_gpus.items() if free >= gpus]
    if len(fitting) < size:
        return None
    return min(seed_cost([cluster.paths[n] for n in perm]) for perm in itertools.permutations(fitting, size))


def describe(result) -> None:
    """Hypothesis statistics: how the examples were placed (``--hypothesis-show-statistics``)."""
    event(f"placed in {result.domain.level or 'cluster'} by {result.method}" if result.placed else "not placed")


# More than 4 GPUs per pod: at most one member per node, as the seed places them.
@settings(max_examples=300, deadline=None)
@given(cluster=clusters(), size=st.integers(1, 5) | st.just(5), gpus=st.integers(5, 8))
def test_with_one_pod_per_node_the_cost_is_the_brute_force_optimum(cluster, size, gpus):
    result = place_gang(cluster.snapshot, gang(size, gpus), exact_budget=EXACT_BUDGET)
    describe(result)
    want = brute_force(cluster, size, gpus)
    if want is None:
        assert not result.placed
    else:
        assert result.placed, result.reason
        assert result.cost == want
        assert result.cost == seed_cost([cluster.paths[a.node] for a in result.assignments])


@settings(max_examples=150, deadline=None)
@given(cluster=clusters(max_nodes=10, unlabelled=False, one_block=True, one_node_per_host=True),
       size=st.integers(2, 5), gpus=st.integers(5, 8))
def test_the_greedy_search_is_optimal_inside_one_block_of_single_node_hosts(cluster, size, gpus):
    result = place_gang(cluster.snapshot, gang(size, gpus), exact_budget=0)
    describe(result)
    want = brute_force(cluster, size, gpus)
    assert (want is None) == (not result.placed)
    if want is not None:
        assert result.method in ("greedy", "exact")  # "exact" only for a single node
        assert result.cost == want


@st.composite
def mixed_gangs(draw):
    """One or two shapes: GPUs and CPU per member, and maybe a toleration or a selector."""
    size = draw(st.integers(1, 6))
    shapes = draw(st.lists(
        st.tuples(st.integers(0, 8), st.sampled_from(["0", "500m", "2", "7"]), st.booleans(), st.booleans()),
        min_size=1, max_size=2))
    members = []
    for i in range(size):
        gpus, cpu, tolerate, select = shapes[draw(st.integers(0, len(shapes) - 1))]
        pod = make_pod(f"w-{i}").requests(cpu=cpu, gpu=gpus or None).index(i).gated()
        if tolerate:
            pod.tolerate("dedicated", "Exists")
        if select:
            pod.node_selector("pool", "a")
        members.append(pod.info())
    return members


@st.composite
def decorated_clusters(draw):
    """Random clusters whose nodes also have taints, pools, CPU and pod limits."""
    cluster = draw(clusters())
    nodes = []
    for node in cluster.snapshot.nodes:
        builder = make_node(node.name).allocatable(cpu=draw(st.sampled_from(["1", "4", "8"])), gpu=8)
        builder.pods(draw(st.integers(1, 10)))
        for k, v in node.labels.items():
            builder.label(k, v)
        if draw(st.booleans()):
            builder.label("pool", "a")
        if draw(st.integers(0, 5)) == 0:
            builder.taint("dedicated", "x")
        if draw(st.integers(0, 9)) == 0:
            builder.not_ready()
        nodes.append(builder)
    pods = [make_pod(p.name, p.namespace).requests(gpu=p.requests.get(GPU)).on(p.node_name)
            for p in cluster.snapshot.pods.values()]
    return snapshot_of(nodes, pods)


@settings(max_examples=200, deadline=None)
@given(snapshot=decorated_clusters(), members=mixed_gangs(), level=st.sampled_from(
    [None, None, "cloud.google.com/gce-topology-subblock", "kubernetes.io/hostname"]))
def test_every_plan_passes_every_filter_and_fits_every_node(snapshot, members, level):
    result = place_gang(snapshot, members, TopologyRequest(required_level=level))
    describe(result)
    if not result.placed:
        assert result.assignments == []
        assert result.reason
        return
    assert sorted(a.pod_key for a in result.assignments) == sorted(m.key for m in members)
    by_key = {m.key: m for m in members}
    for a in result.assignments:
        node = snapshot.nodes[snapshot.index[a.node]]
        flt = by_key[a.pod_key].node_filter
        assert node_status(flt, node) is None
    after = snapshot.with_assumed(result)
    for i, node in enumerate(snapshot.nodes):
        before = snapshot.free(i)
        for resource, amount in after.free(i).items():
            assert amount >= 0 or amount == before.get(resource), f"{node.name} over its {resource}"
    if level is not None:
        depth = snapshot.levels.depth_of(level)
        prefixes = {snapshot.paths[snapshot.index[a.node]][: depth] + ((a.node,) if level.endswith("hostname") else ())
                    for a in result.assignments}
        assert len(prefixes) == 1, "a required level means one domain"


@settings(max_examples=100, deadline=None)
@given(cluster=clusters(), size=st.integers(1, 6), gpus=st.integers(1, 8))
def test_a_single_shape_is_placed_exactly_when_the_cluster_has_room(cluster, size, gpus):
    room = sum(free // gpus for free in cluster.free_gpus.values())
    result = place_gang(cluster.snapshot, gang(size, gpus))
    assert result.placed == (room >= size)
    assert len(result.assignments) == (size if result.placed else 0)


@settings(max_examples=80, deadline=None)
@given(snapshot=decorated_clusters(), members=mixed_gangs(), seed=st.integers(0, 1000))
def test_the_same_input_gives_the_same_plan_and_message(snapshot, members, seed):
    shuffled = members[:]
    random.Random(seed).shuffle(shuffled)
    first = place_gang(snapshot, members)
    assert place_gang(snapshot, shuffled) == first
    assert place_gang(snapshot, members).reason == first.reason


@settings(max_examples=300, deadline=None)
@given(cluster=clusters(max_nodes=14), x=st.integers(1, 20), data=st.data())
def test_the_bounded_exact_search_chooses_what_trying_every_domain_chooses(cluster, x, data):
    """The exact search's bound (place._best_exact, docs/decisions/068-release-pipeline.md)
    skips only domains that cannot win: its choice is the least key over every domain."""
    from reconciler.engine.placement import place, selection

    tree = cluster.snapshot.tree
    node_caps = [data.draw(st.integers(0, 5)) for _ in cluster.snapshot.nodes]
    caps = tree.caps_by_depth(node_caps)
    for d in range(tree.leaf_depth + 1):
        candidates = [j for j, c in enumerate(caps[d]) if c >= x]
        if not candidates:
            continue
        everyone = min((s.vector, caps[d][j] - x, s.spare, j)
                       for j in candidates for s in [selection.exact(tree, caps, d, j, x)])
        for j in candidates:
            assert selection.least_vector(tree, caps, d, j, x) <= selection.exact(tree, caps, d, j, x).vector
        assert place._best_exact(tree, caps, d, x, candidates)[0] == everyone
