"""The preemption planner's entry, :func:`plan_preemption`, on the Volcano proposal's own
cases (``seeds/003``) and on Troupe's: priorities, gangs, pods, overage, modes, topology,
determinism, the reason line.

Nodes have 8 GPUs unless a case says otherwise; ``[A:4 B:3 C:1]`` under a node is what its
running pods use (gang and GPUs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from reconciler.engine.placement.place import place_gang
from reconciler.engine.preemption import VictimGang, plan_preemption
from testbed.engine_builders import GPU, SUBBLOCK, make_node, make_pod, snapshot_of
from tests.support.preemption_cases import Running, candidates, cluster, names, preemptor
from troupe.contract import TopologyRequest
from troupe.layers import SliceLayer

WIDGET = "example/com-widget"


@dataclass
class Case:
    name: str
    nodes: Sequence[str]
    running: Sequence[Running]
    members: int
    gpus: int
    mode: str = "minimal"
    want_victims: list[str] = field(default_factory=list)
    want_gangs: int = 0
    want_overage: int = 0
    want_method: str = "exact"


CASES = [
    # n1: [A:4 B:3 C:1]; the member needs 3 GPUs: B alone frees exactly 3.
    Case("one node with three gangs: the single gang with the least overage", ["n1"],
         [Running("a", [("n1", 4)]), Running("b", [("n1", 3)]), Running("c", [("n1", 1)])],
         1, 3, want_victims=["b-0"], want_gangs=1),
    # n1: [A:3 B:3 C:2]; 6 GPUs: no single gang, A + B frees exactly 6.
    Case("a preemptor needing two gangs", ["n1"],
         [Running("a", [("n1", 3)]), Running("b", [("n1", 3)]), Running("c", [("n1", 2)])],
         1, 6, want_victims=["a-0", "b-0"], want_gangs=2),
    # n1: [L:4 L:4] priority 1; n2: [H:8] priority 5. Two pods of L before one of H.
    Case("lowest priority first, even at more pods", ["n1", "n2"],
         [Running("l", [("n1", 4), ("n1", 4)], priority=1), Running("h", [("n2", 8)], priority=5)],
         1, 8, want_victims=["l-0", "l-1"], want_gangs=1),
    # n1: [A:8]  n2: [A:8]; one 8-GPU member. minimal: A's pod on n1 only.
    Case("minimal evicts only the pods the plan needs", ["n1", "n2"],
         [Running("a", [("n1", 8), ("n2", 8)])], 1, 8, want_victims=["a-0"], want_gangs=1),
    Case("atomic evicts every pod of the gang, on every node", ["n1", "n2"],
         [Running("a", [("n1", 8), ("n2", 8)])], 1, 8, mode="atomic", want_victims=["a-0", "a-1"],
         want_gangs=1, want_overage=8),
    # n1: [A:8]  n2: [B:8]; equal in every objective: the first node in topology order.
    Case("ties broken by node order", ["n1", "n2"],
         [Running("b", [("n2", 8)]), Running("a", [("n1", 8)])], 1, 8, want_victims=["a-0"], want_gangs=1),
    # n1: [A:4 B:4]  n2: [C:2 C:2 C:2 C:2]; 8 GPUs: C is one gang (4 pods), A + B two.
    Case("fewer gangs before fewer pods", ["n1", "n2"],
         [Running("a", [("n1", 4)]), Running("b", [("n1", 4)]), Running("c", [("n2", 2)] * 4)],
         1, 8, want_victims=["c-0", "c-1", "c-2", "c-3"], want_gangs=1),
    # n1: [A:8]  n2: [B:2 B:2 B:2 B:2]; 4 GPUs: one pod of A (4 beyond) or two of B (none).
    Case("fewer pods before less overage", ["n1", "n2"],
         [Running("b", [("n2", 2)] * 4), Running("a", [("n1", 8)])], 1, 4, want_victims=["a-0"],
         want_gangs=1, want_overage=4),
    # n1: [A:4 A:4]  n2: [A:4 B:4]; 2 members of 4: A's two pods on n1, not A + B's on n2.
    Case("a gang spread over nodes: its pods on one node suffice", ["n1", "n2"],
         [Running("a", [("n1", 4), ("n1", 4), ("n2", 4)]), Running("b", [("n2", 4)])], 2, 4,
         want_victims=["a-0", "a-1"], want_gangs=1),
    # Four gangs-of-one per node on 4 nodes: a 4-member gang of 8 GPUs needs 16 gangs
    # (more than the exact search takes on): the greedy does it.
    Case("many small gangs: whole nodes freed", ["n1", "n2", "n3", "n4"],
         [Running(f"p{n}{k}", [(f"n{n}", 2)]) for n in range(1, 5) for k in range(4)], 2, 8,
         want_victims=[f"p{n}{k}-0" for n in (1, 2) for k in range(4)], want_gangs=8, want_method="greedy"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_proposal_cases_and_troupes_objective(case: Case) -> None:
    snapshot = cluster(case.nodes, case.running)
    members = preemptor(case.members, case.gpus)
    plan = plan_preemption(snapshot, members, candidates(snapshot), case.mode)
    assert plan is not None
    assert names(plan) == case.want_victims
    assert len(plan.gangs) == case.want_gangs
    assert plan.overage == ((GPU, case.want_overage),)
    assert plan.method == case.want_method
    assert plan.placement.placed


def test_the_review_example_fewest_gangs_come_before_overage() -> None:
    """The proposal's review: need 80 on a node whose gangs use 50, 50, 50, 50, 20, 20, 20,
    20. The reviewer's optimum (20 + 20 + 20 + 20, no overage) disrupts four gangs; Troupe
    minimises gangs before overage, so it picks 50 + 50 (two gangs, 20 beyond the need),
    the first two in key order. The greedy finds the same."""
    used = [50, 50, 50, 50, 20, 20, 20, 20]
    snapshot = snapshot_of(
        [make_node("n1").allocatable(example__com_widget=sum(used))],
        [make_pod(f"g{i}", "batch").requests(example__com_widget=w).on("n1").label("gang", f"g{i}")
         for i, w in enumerate(used)])
    members = [make_pod("p", "ml").requests(example__com_widget=80).priority(1).gated().info()]
    for exact in (True, False):
        plan = plan_preemption(snapshot, members, candidates(snapshot), "minimal", exact=exact)
        assert plan is not None
        assert names(plan) == ["g0", "g1"]
        assert plan.overage == ((WIDGET, 20),)
        assert plan.objective() == (0, 2, 2, (20,))
    assert plan.method == "greedy"
    assert plan.gangs == ("batch/g0", "batch/g1")
    assert plan.reason == ("evict 2 gangs of other namespaces (2 pods, priority <= 0) to place 1 member in "
                           "node n1, freeing 20 example/com-widget beyond the need"), "the ml preemptor reads no batch name"


#   b0
#   ├── s1: n1 [A:8]  n2 [W:8]
#   └── s2: n3 [W:8]  n4 [B:8]
SUBBLOCKS = {"n1": "s1", "n2": "s1", "n3": "s2", "n4": "s2"}
SPLIT = [Running("a", [("n1", 8)]), Running("w", [("n2", 8), ("n3", 8)]), Running("b", [("n4", 8)])]


def test_without_a_level_one_gang_spanning_subblocks_is_enough() -> None:
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), "minimal")
    assert plan is not None
    assert names(plan) == ["w-0", "w-1"]
    assert plan.gangs == ("batch/w",)


def test_a_preemptor_with_slices_gets_a_plan_its_slices_can_use() -> None:
    """W alone frees one node in each subblock: enough for two members, not for a slice of
    two per subblock; the plan is the one placement accepts with the slices: A and W, s1."""
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    layout = TopologyRequest(slices=(SliceLayer(2, SUBBLOCK),))
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), "minimal", layout)
    assert plan is not None
    assert plan.gangs == ("batch/a", "batch/w")
    assert {a.node for a in plan.placement.assignments} == {"n1", "n2"}
    assert [str(s.domain) for s in plan.placement.slices] == [f"{SUBBLOCK}=b0/s1"]


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_a_required_subblock_takes_its_victims_from_one_subblock(mode: str) -> None:
    """W frees one node in each subblock: not enough for two members in one. Two gangs in
    one subblock are needed; s1 and s2 tie, s1 comes first. In ``minimal`` mode both
    victims are in s1; ``atomic`` also takes W's pod in s2."""
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), mode, TopologyRequest(required_level=SUBBLOCK))
    assert plan is not None
    assert plan.gangs == ("batch/a", "batch/w")
    assert names(plan) == (["a-0", "w-0"] if mode == "minimal" else ["a-0", "w-0", "w-1"])
    assert str(plan.placement.domain) == f"{SUBBLOCK}=b0/s1"
    assert plan.reason == (f"evict 2 gangs of other namespaces ({plan.pods} pods, priority <= 0) to place 2 members "
                           f"in {SUBBLOCK}=b0/s1"
                           + (", freeing 8 nvidia.com/gpu beyond the need" if mode == "atomic" else ""))
    assert {a.node for a in plan.placement.assignments} == {"n1", "n2"}
    if mode == "minimal":
        assert {plan.nodes[v] for v in plan.victims} <= {"n1", "n2"}


def test_off_never_evicts_and_an_unknown_mode_is_refused() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    assert plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), "off") is None
    with pytest.raises(ValueError, match="gangPreemptionMode: expected one of off, minimal, atomic, got 'all'"):
        plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), "all")


def test_no_plan_when_even_every_candidate_is_not_enough() -> None:
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4)]), Running("hi", [("n1", 4), ("n2", 8)], priority=500)])
    assert plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), "atomic") is None


def test_a_gang_that_fits_gets_a_plan_without_victims() -> None:
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 8)])])
    plan = plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), "minimal")
    assert plan is not None
    assert plan.victims == () and plan.gangs == () and plan.pods == 0
    assert plan.reason == "fits without evicting anything: placed 1 member in node n2"


def test_the_overage_counts_gpus_first_then_cpu_in_millicores() -> None:
    """n1 (8 cpu): [A: 8 GPUs, 8 cpu]; the member asks 4 GPUs and 1 cpu: 4 GPUs and 7000m
    are freed beyond the need. With A using 4 cpu, the node's 4 free cpu already cover
    the member's: all 4000m freed are beyond it."""
    for used, want in (("8", 7000), ("4", 4000)):
        snapshot = cluster(["n1"], [Running("a", [("n1", 8, used)])])
        plan = plan_preemption(snapshot, preemptor(1, 4, cpu="1"), candidates(snapshot), "minimal")
        assert plan is not None
        assert plan.overage == ((GPU, 4), ("cpu", want))
        assert "freeing 4 nvidia.com/gpu, " in plan.reason


def test_several_member_shapes_a_launcher_and_workers() -> None:
    """A launcher asking cpu only and two 8-GPU workers; n1: [A:8], n2: [B:8]: the
    launcher fits beside the running pods, the workers need both nodes freed."""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 8)]), Running("b", [("n2", 8)])])
    launcher = make_pod("launcher", "ml").requests(cpu="1").gang("train", 3).index(0).priority(100).gated().info()
    workers = [make_pod(f"w-{i}", "ml").requests(gpu=8).gang("train", 3).index(i + 1).priority(100).gated().info()
               for i in range(2)]
    plan = plan_preemption(snapshot, [launcher, *workers], candidates(snapshot), "minimal")
    assert plan is not None
    assert names(plan) == ["a-0", "b-0"]
    assert len(plan.placement.assignments) == 3


def test_the_same_plan_whatever_the_order_of_the_candidates_and_the_snapshot_unchanged() -> None:
    running = [Running(f"g{k}", [(f"n{(k + j) % 4}", 2 + (k % 3) * 2) for j in range(1 + k % 2)]) for k in range(6)]
    snapshot = cluster([f"n{i}" for i in range(4)], running)
    before = [snapshot.free(i) for i in range(len(snapshot.nodes))]
    cands = candidates(snapshot)
    plans = []
    for seed in range(5):
        shuffled = [VictimGang(c.key, c.priority, tuple(random.Random(seed).sample(c.pods, len(c.pods)))) for c in cands]
        random.Random(seed).shuffle(shuffled)
        plans.append(plan_preemption(snapshot, preemptor(3, 4), shuffled, "minimal"))
    assert plans[0] is not None
    assert all(p == plans[0] for p in plans)
    assert [snapshot.free(i) for i in range(len(snapshot.nodes))] == before
    with snapshot.without(plans[0].victims) as s:
        assert place_gang(s, preemptor(3, 4)) == plans[0].placement


def test_a_replacement_with_a_required_subblock_preempts_only_in_its_gangs_subblock() -> None:
    """The gang already runs on n4 (s2); its replacement member must join it in s2, so
    W's pod on n3 goes, not A's on n1 (which sorts first)."""
    snapshot = cluster(list(SUBBLOCKS), [Running("a", [("n1", 8)]), Running("w", [("n3", 8)]),
                                         Running("train", [("n4", 8)], priority=100)], SUBBLOCKS)
    member = preemptor(1, 8)
    plan = plan_preemption(snapshot, member, candidates(snapshot), "minimal", TopologyRequest(required_level=SUBBLOCK), near=["n4"])
    assert plan is not None
    assert names(plan) == ["w-0"]
    assert plan.placement.nodes() == {"ml/w-0": "n3"}
    unplaced = plan_preemption(snapshot, member, candidates(snapshot), "minimal", TopologyRequest(required_level=SUBBLOCK), near=["gone"])
    assert unplaced is None


def test_a_preferred_level_may_take_victims_anywhere() -> None:
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), "minimal", TopologyRequest(preferred_level=SUBBLOCK))
    assert plan is not None
    assert plan.gangs == ("batch/w",)


def test_an_unknown_required_level_has_no_plan() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    assert plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), "minimal", TopologyRequest(required_level="example.com/rack")) is None

