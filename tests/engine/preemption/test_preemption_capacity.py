"""The capacity model: members per node and per scope domain, with candidate pods evicted;
the fit of one shape (exact) and of several (each shape, then their envelope)."""

from __future__ import annotations

from reconciler.engine.preemption.capacity import (
    CapacityModel,
    Fit,
    Target,
    freed_by_node,
    overage_order,
    scope,
)
from reconciler.engine.preemption.plan import new_search
from reconciler.engine.preemption.search import Mode
from testbed.engine_builders import GPU, SUBBLOCK, make_pod
from tests.support.preemption_cases import Running, candidates, cluster, preemptor
from troupe.contract import TopologyRequest


def test_one_shape_counts_members_per_node_and_domain_exactly() -> None:
    """n1: [A:4], n2: [B:8]; members of 4 GPUs: n1 holds one now, two with A gone."""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4)]), Running("b", [("n2", 8)])])
    model = CapacityModel(snapshot, preemptor(3, 4), 0, {0})
    assert (model.single, model.member_count, model.resources) == (True, 3, [GPU, "pods"])
    assert model.base_caps == [[1], [0]]
    assert model.base_sums == {0: [1]}
    assert model.status([1]) is Fit.NO and model.status([3]) is Fit.YES
    assert model.deficit([1], Target.EACH_SHAPE) == 2
    assert model.cap(0, 0, [4, 1]) == 2
    assert model.node_caps(1, [8, 1]) == [2]


def test_several_shapes_each_fits_before_their_envelope() -> None:
    """A 6-GPU and a 2-GPU member on two empty 8-GPU nodes: each shape fits, and so does
    the envelope (two 6-GPU slots); on one node only each shape fits: MAYBE."""
    snapshot = cluster(["n1", "n2"], [])
    members = [make_pod(f"w-{i}", "ml").requests(gpu=g).priority(9).gated().info() for i, g in enumerate([6, 2])]
    model = CapacityModel(snapshot, members, 0, {0})
    assert (model.single, model.shape_counts, model.main_kind) == (False, [1, 1], 2)
    assert model.status(model.base_sums[0]) is Fit.YES
    assert model.status([1, 4, 1]) is Fit.MAYBE
    assert model.enough([1, 4, 1], Target.EACH_SHAPE) and not model.enough([1, 4, 1], Target.ENVELOPE)
    assert model.deficit([1, 4, 1], Target.EACH_SHAPE) == 0
    assert model.deficit([1, 4, 1], Target.ENVELOPE) == 1
    assert model.status([0, 4, 0]) is Fit.NO


def test_evicted_pods_move_their_nodes_counts_and_their_domains_sums() -> None:
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4), ("n2", 4)])])
    search = new_search(snapshot, preemptor(3, 4), candidates(snapshot), Mode.MINIMAL, TopologyRequest(), (), "")
    assert search is not None and search.sweep() is not None
    pods = search.gangs[0].pods
    model = search.model
    assert freed_by_node(pods, model.width) == {0: [4, 1], 1: [4, 1]}
    assert freed_by_node(pods[:1], model.width, start={0: [1, 0]}) == {0: [5, 1]}
    assert model.sums(pods) == {0: [4]}
    assert model.domain_sums(pods[:1], 0) == [3]
    caps: dict[int, list[int]] = {}
    sums = list(model.base_sums[0])
    assert model.recount(0, [4, 1], caps, sums) == [2]
    assert (caps, sums) == ({0: [2]}, [3])


def test_the_scope_is_the_required_levels_domains_or_the_cluster() -> None:
    subblocks = {"n1": "s1", "n2": "s2"}
    snapshot = cluster(list(subblocks), [], subblocks)
    assert scope(snapshot, None, ()) == (0, {0})
    depth, domains = scope(snapshot, SUBBLOCK, ()) or (0, set())
    assert (depth > 0, domains) == (True, {0, 1})
    assert scope(snapshot, SUBBLOCK, ["n2"]) == (depth, {1})
    assert scope(snapshot, "example.com/rack", ()) is None


def test_the_overage_order_puts_extended_resources_first() -> None:
    assert sorted(["memory", "cpu", GPU, "example.com/a"], key=overage_order) == [
        "example.com/a", GPU, "cpu", "memory"]
