"""What uses a node's resources, and plans applied to a snapshot with and without undo."""


import pytest

from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.records import Plan
from reconciler.engine.placement.place import place_gang
from testbed.engine_builders import (
    GPU,
    HOSTNAME,
    expr,
    gang_of,
    make_node,
    make_pod,
    snapshot_of,
)
from troupe.contract import ASSIGNED_NODE, GKE_GATE_PREFIX, PLAN


def gpu_free(snapshot, node="n1"):
    return snapshot.free(node)[GPU]


USAGE_CASES = [
    ("a bound running pod uses its node", make_pod("p").requests(gpu=2).on("n1"), 6),
    ("a bound pod not yet running uses its node", make_pod("p").requests(gpu=2).on("n1", phase="Pending"), 6),
    ("a succeeded pod uses nothing", make_pod("p").requests(gpu=2).on("n1", phase="Succeeded"), 8),
    ("a failed pod uses nothing", make_pod("p").requests(gpu=2).on("n1", phase="Failed"), 8),
    ("a released pod pinned by the reconciler's annotation uses its node",
     make_pod("p").requests(gpu=2).annotate(ASSIGNED_NODE, "n1"), 6),
    ("a pending pod pinned by a hostname nodeSelector uses nothing until it is bound",
     make_pod("p").requests(gpu=2).node_selector(HOSTNAME, "n1"), 8),
    ("a pending pod that can never be bound reserves nothing (no phantom reservation)",
     make_pod("p").requests(gpu=2).node_selector(HOSTNAME, "n1").node_selector("no-such-label", "x"), 8),
    ("a pending pod pinned by a one-value hostname affinity uses nothing until it is bound",
     make_pod("p").requests(gpu=2).affinity({"matchExpressions": [expr(HOSTNAME, "In", "n1")]}), 8),
    ("a pod the reconciler pinned is committed while still gated",
     make_pod("p").requests(gpu=2).annotate(ASSIGNED_NODE, "n1").gated(), 6),
    ("a pinned pod still gated by the GKE daemon uses nothing yet",
     make_pod("p").requests(gpu=2).node_selector(HOSTNAME, "n1").gated(GKE_GATE_PREFIX + "x"), 8),
    ("a pinned pod held by someone else's gate uses its node",
     make_pod("p").requests(gpu=2).annotate(ASSIGNED_NODE, "n1").gated("example.com/quota"), 6),
    ("an unbound, unpinned pending pod uses nothing", make_pod("p").requests(gpu=2), 8),
]


@pytest.mark.parametrize(("case", "pod", "want_free_gpus"), USAGE_CASES, ids=[c[0] for c in USAGE_CASES])
def test_which_pods_use_a_nodes_resources(case, pod, want_free_gpus):
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)], [pod])
    assert gpu_free(snapshot) == want_free_gpus
    assert gpu_free(snapshot, "n2") == 8


def plan_of(*members, at="2026-11-22T10:00:00.000+00:00"):
    return Plan(at, {f"uid-default-{pod}": node for pod, node in members}).encode()


def test_a_plan_record_reserves_the_nodes_of_members_not_yet_released():
    #   w-0 was released with the record; w-1 and w-2 are still gated: their nodes are held.
    record = plan_of(("w-0", "n1"), ("w-1", "n1"), ("w-2", "n2"))
    pods = [make_pod("w-0").requests(gpu=2).annotate(ASSIGNED_NODE, "n1").annotate(PLAN, record),
            make_pod("w-1").requests(gpu=2).gated(), make_pod("w-2").requests(gpu=3).gated()]
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)], pods)
    assert (gpu_free(snapshot, "n1"), gpu_free(snapshot, "n2")) == (4, 5)
    w1 = snapshot.pods["default/w-1"]
    assert snapshot.committed_node(w1) == "n1"
    assert snapshot.plan_of(w1) == "2026-11-22T10:00:00.000+00:00"


@pytest.mark.parametrize("holder", [
    make_pod("w-0").requests(gpu=2).on("n1", phase="Succeeded"),
    make_pod("w-0").requests(gpu=2).annotate(ASSIGNED_NODE, "n1").deleting(),
], ids=["the holder finished", "the holder is being deleted"])
def test_a_record_whose_holder_is_gone_reserves_nothing(holder):
    holder.annotate(PLAN, plan_of(("w-0", "n1"), ("w-1", "n2")))
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)],
                           [holder, make_pod("w-1").requests(gpu=2).gated()])
    assert gpu_free(snapshot, "n2") == 8


def test_a_record_reserves_only_pods_of_its_namespace_and_with_its_uids():
    record = plan_of(("w-0", "n1"), ("w-1", "n2"))
    pods = [make_pod("w-0").annotate(ASSIGNED_NODE, "n1").annotate(PLAN, record),
            make_pod("w-1", namespace="other").requests(gpu=2).gated(),
            make_pod("w-9").requests(gpu=2).gated()]
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)], pods)
    assert gpu_free(snapshot, "n2") == 8


def test_a_malformed_record_reserves_nothing_and_does_not_stop_the_snapshot():
    pods = [make_pod("w-0").annotate(PLAN, "{not json"), make_pod("w-1").requests(gpu=2).gated()]
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)], pods)
    assert snapshot.pods["default/w-0"].plan is None
    assert gpu_free(snapshot) == 8


def test_phantom_reservations_do_not_keep_a_gang_off_free_nodes():
    nodes = [make_node(f"n{i}").allocatable(gpu=8) for i in range(2)]
    phantoms = [make_pod(f"x{i}", "tenant").requests(gpu=8).node_selector(HOSTNAME, f"n{i}")
                .node_selector("no-such-label", "x") for i in range(2)]
    gang = [make_pod(f"w-{i}").requests(gpu=8).gang("g", 2).index(i).gated() for i in range(2)]
    snapshot = snapshot_of(nodes, [*phantoms, *gang])
    result = place_gang(snapshot, [p.info() for p in gang])
    assert result.placed, result.reason


def test_nodes_are_kept_in_topology_order_whatever_the_input_order():
    nodes = [make_node(n).topology(b, s, h) for n, b, s, h in
             [("z", "b1", "s1", "h1"), ("a", "b2", "s2", "h2"), ("m", "b1", "s1", "h0")]]
    snapshot = snapshot_of(nodes)
    assert [n.name for n in snapshot.nodes] == ["m", "z", "a"]
    assert snapshot.index == {"m": 0, "z": 1, "a": 2}


def test_with_assumed_returns_a_copy_and_leaves_the_snapshot_alone():
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)])
    result = place_gang(snapshot, gang_of(2, gpu=3))
    after = snapshot.with_assumed(result)
    assert gpu_free(after) == 2
    assert gpu_free(snapshot) == 8
    assert after.using("default/w-0") == "n1"
    assert snapshot.using("default/w-0") is None


def test_assumed_applies_a_plan_for_the_block_and_undoes_it():
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)])
    result = place_gang(snapshot, gang_of(2, gpu=4))
    with snapshot.assumed(result) as s:
        assert gpu_free(s) == 0
        assert not place_gang(s, gang_of(1, gpu=1, name="other")).placed
    assert gpu_free(snapshot) == 8


def test_without_frees_victims_for_the_block_and_restores_them():
    pods = [make_pod("a", "team").requests(gpu=4).on("n1"), make_pod("b", "team").requests(gpu=4).on("n1")]
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)], pods)
    with snapshot.without(["team/a", "team/absent"]):
        assert gpu_free(snapshot) == 4
        assert place_gang(snapshot, gang_of(1, gpu=4)).placed
    assert gpu_free(snapshot) == 0
    assert gpu_free(snapshot.with_removed(["team/a", "team/b"])) == 8


def test_assuming_a_plan_for_an_unknown_node_changes_nothing():
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)])
    result = place_gang(snapshot, gang_of(2, gpu=1))
    broken = type(result)(True, [*result.assignments[:1], type(result.assignments[0])("default/x", "ghost", 1, {GPU: 1})],
                          result.code)
    with pytest.raises(KeyError):
        snapshot.with_assumed(broken)
    with pytest.raises(KeyError), snapshot.assumed(broken):
        pass
    assert gpu_free(snapshot) == 8


def test_capacity_counts_how_many_pods_fit_on_each_node():
    nodes = [make_node("n1").allocatable(cpu="4", gpu=8), make_node("n2").allocatable(gpu=8).pods(2),
             make_node("n3").allocatable(gpu=1)]
    snapshot = snapshot_of(nodes, [make_pod("busy").requests(gpu=5).on("n1")])
    requests = {"cpu": 1000, GPU: 1, "pods": 1}
    assert snapshot.capacity(requests) == [3, 2, 1]
    assert snapshot.capacity(requests, [True, False, True]) == [3, 0, 1]
    assert snapshot.capacity({"example.com/fpga": 1, "pods": 1}) == [0, 0, 0]


def test_an_empty_copy_frees_everything():
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8)], [make_pod("p").requests(gpu=8).on("n1")])
    assert gpu_free(snapshot.empty()) == 8
    assert gpu_free(snapshot) == 0


def test_filter_results_are_cached_per_filter():
    snapshot = snapshot_of([make_node("n1"), make_node("n2").taint("x")])
    flt = make_pod("p").info().node_filter
    assert snapshot.eligible(flt) == [True, False]
    assert snapshot.eligible(flt) is snapshot.eligible(flt)


BAD_OBJECTS = [
    ("a node without allocatable", [{"metadata": {"name": "n1"}, "status": {}}], [],
     "nodes[0] (Node n1): status.allocatable: missing field"),
    ("a node without a name", [{"metadata": {}, "status": {"allocatable": {}}}], [],
     "nodes[0] (Node): metadata.name: missing field"),
    ("a pod without containers", [], [{"metadata": {"name": "p"}, "spec": {}}],
     "pods[0] (Pod p): spec.containers: missing field"),
    ("a pod with a bad quantity", [], [make_pod("p").requests(cpu="fast").build()],
     "pods[0] (Pod default/p): spec.containers[0].resources.requests.cpu: invalid quantity 'fast'"),
    ("a pod with a gate without a name", [], [make_pod("p").build() | {"spec": {"containers": [], "schedulingGates": [{}]}}],
     "pods[0] (Pod default/p): spec.schedulingGates[0].name: missing field"),
    ("a pod whose gates are not a list", [], [make_pod("p").build() | {"spec": {"containers": [], "schedulingGates": 5}}],
     "pods[0] (Pod default/p): spec.schedulingGates: expected a list, got int"),
]


@pytest.mark.parametrize(("case", "nodes", "pods", "want"), BAD_OBJECTS, ids=[c[0] for c in BAD_OBJECTS])
def test_a_malformed_object_is_refused_naming_its_place_and_field(case, nodes, pods, want):
    with pytest.raises(ObjectError) as err:
        snapshot_of_objects(nodes, pods, TopologyLevels.default())
    assert str(err.value) == want


def test_duplicate_nodes_are_refused():
    with pytest.raises(ObjectError, match=r"nodes\[1\] \(Node n1\): duplicate of nodes\[0\]"):
        snapshot_of([make_node("n1"), make_node("n1")])


def test_a_long_running_caller_can_skip_malformed_objects_and_hear_about_them():
    skipped: list[str] = []
    nodes = [{"metadata": {"name": "registering"}, "status": {}}, make_node("n1").build()]
    snapshot = snapshot_of_objects(nodes, [make_pod("p").on("n1").build()], skipped=skipped)
    assert [n.name for n in snapshot.nodes] == ["n1"]
    assert skipped == ["nodes[0] (Node registering): status.allocatable: missing field"]


def test_a_release_assumed_in_place_of_a_nomination_is_undone_back_to_the_nomination():
    from dataclasses import dataclass as _dc

    from reconciler.engine.model.records import Nomination
    from testbed.reconciler_builders import make_node as node
    from testbed.reconciler_builders import make_pod as pod_
    from troupe import contract as c

    @_dc(frozen=True)
    class At:
        pod_key: str
        node: str
        requests: dict

    @_dc(frozen=True)
    class Result:
        assignments: list

    nomination = Nomination("2027-01-15T08:00:00.000+00:00", {"uid-pre-0": "n1"})
    pre = pod_("pre-0").gang("pre", 1).gpus(4).gated().annotate(c.NOMINATION, nomination.encode()).build()
    snap = snapshot_of_objects([node(f"n{i}").topology("b", "s", f"h{i}").gpus(4).build() for i in (1, 2)], [pre])
    assert snap.using("team-a/pre-0") == "n1", "the nomination holds n1"
    elsewhere = Result([At("team-a/pre-0", "n2", {"nvidia.com/gpu": 4})])
    with snap.assumed(elsewhere):
        assert snap.using("team-a/pre-0") == "n2" and snap.free("n1")["nvidia.com/gpu"] == 4
    assert snap.using("team-a/pre-0") == "n1" and snap.free("n1")["nvidia.com/gpu"] == 0
    assert snap.with_assumed(elsewhere).using("team-a/pre-0") == "n2"
