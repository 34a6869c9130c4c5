"""The preemption planner on the Volcano proposal's own cases (``seeds/003``) and on
Troupe's: priorities, gangs, pods, overage, modes, topology, determinism.

Nodes have 8 GPUs unless a case says otherwise; ``[A:4 B:3 C:1]`` under a node is what its
running pods use (gang and GPUs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from reconciler.engine import place_gang, preemption
from reconciler.engine.preemption import (
    PreemptionPlan,
    VictimGang,
    candidate_gangs,
    plan_preemption,
)
from reconciler.engine.snapshot import PodInfo, Snapshot
from tests.support.engine_builders import GPU, SUBBLOCK, make_node, make_pod, snapshot_of

WIDGET = "example/com-widget"


@dataclass
class Running:
    """A running gang: ``pods`` as (node, GPUs) pairs, or (node, GPUs, cpu) triples."""

    name: str
    pods: Sequence[tuple[str, int] | tuple[str, int, str]]
    priority: int = 0


def cluster(nodes: Sequence[str], running: Sequence[Running], subblocks: dict[str, str] | None = None,
            gpus: int = 8) -> Snapshot:
    built = []
    for n in nodes:
        node = make_node(n).allocatable(gpu=gpus)
        if subblocks:
            node.topology("b0", subblocks[n], f"h-{n}")
        built.append(node)
    pods = []
    for r in running:
        for i, spec in enumerate(r.pods):
            pod = make_pod(f"{r.name}-{i}", "batch").requests(gpu=spec[1], cpu=spec[2] if len(spec) > 2 else None)
            pods.append(pod.on(spec[0]).priority(r.priority).label("gang", r.name))
    return snapshot_of(built, pods)


def candidates(snapshot: Snapshot) -> list[VictimGang]:
    by_gang: dict[str, list[PodInfo]] = {}
    for p in snapshot.pods.values():
        by_gang.setdefault(p.labels["gang"], []).append(p)
    return [VictimGang.of(f"batch/{k}", v, snapshot) for k, v in sorted(by_gang.items())]


def preemptor(count: int, gpus: int, priority: int = 100, cpu: str | None = None) -> list[PodInfo]:
    return [make_pod(f"w-{i}", "ml").requests(gpu=gpus, cpu=cpu).gang("train", count).index(i).priority(priority)
            .gated().info() for i in range(count)]


def names(plan: PreemptionPlan | None) -> list[str]:
    """Victim pods without their namespace."""
    assert plan is not None
    return [v.split("/", 1)[1] for v in plan.victims]


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
    assert plan.reason == ("evict 2 gangs (2 pods, priority <= 0: batch/g0, batch/g1) to place 1 member in "
                           "node n1, freeing 20 example/com-widget beyond the need")


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


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_a_required_subblock_takes_its_victims_from_one_subblock(mode: str) -> None:
    """W frees one node in each subblock: not enough for two members in one. Two gangs in
    one subblock are needed; s1 and s2 tie, s1 comes first. In ``minimal`` mode both
    victims are in s1; ``atomic`` also takes W's pod in s2."""
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), mode, SUBBLOCK)
    assert plan is not None
    assert plan.gangs == ("batch/a", "batch/w")
    assert names(plan) == (["a-0", "w-0"] if mode == "minimal" else ["a-0", "w-0", "w-1"])
    assert str(plan.placement.domain) == f"{SUBBLOCK}=b0/s1"
    assert plan.reason == (f"evict 2 gangs ({plan.pods} pods, priority <= 0: batch/a, batch/w) to place 2 members "
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


def test_candidates_of_equal_or_higher_priority_and_the_own_gang_are_never_victims() -> None:
    """n1: [same:8] priority 100 (the preemptor's), n2: [own:8], n3: [high:8] priority 200.
    Nothing may be evicted: no plan."""
    snapshot = cluster(["n1", "n2", "n3"], [
        Running("same", [("n1", 8)], priority=100), Running("own", [("n2", 8)]),
        Running("high", [("n3", 8)], priority=200)])
    cands = candidates(snapshot)
    assert plan_preemption(snapshot, preemptor(1, 8), cands, "minimal", gang="batch/own") is None
    plan = plan_preemption(snapshot, preemptor(1, 8), cands, "minimal")
    assert plan is not None
    assert plan.gangs == ("batch/own",)


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


def test_a_candidate_gang_given_twice_is_refused() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    cands = candidates(snapshot)
    with pytest.raises(ValueError, match="candidate gang 'batch/a' given twice"):
        plan_preemption(snapshot, preemptor(1, 8), cands + cands, "minimal")


def test_a_replacement_with_a_required_subblock_preempts_only_in_its_gangs_subblock() -> None:
    """The gang already runs on n4 (s2); its replacement member must join it in s2, so
    W's pod on n3 goes, not A's on n1 (which sorts first)."""
    snapshot = cluster(list(SUBBLOCKS), [Running("a", [("n1", 8)]), Running("w", [("n3", 8)]),
                                         Running("train", [("n4", 8)], priority=100)], SUBBLOCKS)
    member = preemptor(1, 8)
    plan = plan_preemption(snapshot, member, candidates(snapshot), "minimal", SUBBLOCK, near=["n4"])
    assert plan is not None
    assert names(plan) == ["w-0"]
    assert plan.placement.nodes() == {"ml/w-0": "n3"}
    unplaced = plan_preemption(snapshot, member, candidates(snapshot), "minimal", SUBBLOCK, near=["gone"])
    assert unplaced is None


def test_a_preferred_level_may_take_victims_anywhere() -> None:
    snapshot = cluster(list(SUBBLOCKS), SPLIT, SUBBLOCKS)
    plan = plan_preemption(snapshot, preemptor(2, 8), candidates(snapshot), "minimal", preferred_level=SUBBLOCK)
    assert plan is not None
    assert plan.gangs == ("batch/w",)


def test_an_unknown_required_level_has_no_plan() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    assert plan_preemption(snapshot, preemptor(1, 8), candidates(snapshot), "minimal", "example.com/rack") is None


def test_pods_that_use_no_node_are_never_victims() -> None:
    """A candidate's pending pod and its finished pod use nothing: only its running pod on
    n1 is evicted, even in ``atomic`` mode."""
    snapshot = snapshot_of(
        [make_node("n1").allocatable(gpu=8)],
        [make_pod("a-0", "batch").requests(gpu=8).on("n1").label("gang", "a"),
         make_pod("a-1", "batch").requests(gpu=8).label("gang", "a"),
         make_pod("a-2", "batch").requests(gpu=8).on("n1", phase="Succeeded").label("gang", "a")])
    gang = VictimGang("batch/a", 0, tuple(snapshot.pods[f"batch/a-{i}"] for i in range(3)))
    plan = plan_preemption(snapshot, preemptor(1, 8), [gang], "atomic")
    assert plan is not None
    assert names(plan) == ["a-0"]
    assert VictimGang.of("batch/a", snapshot.pods.values(), snapshot).pods == (snapshot.pods["batch/a-0"],)


def test_candidate_gangs_groups_running_pods_and_leaves_out_what_may_not_be_evicted() -> None:
    """By gang annotation (here a label stands in for the gang key function); a pod outside
    any gang is a gang of one; pending, finished and terminating pods use nothing to take
    back; gangs at the preemptor's priority or above, and its own gang, are left out."""
    snapshot = snapshot_of([make_node("n1").allocatable(gpu=8), make_node("n2").allocatable(gpu=8)], [
        make_pod("a-0", "batch").requests(gpu=2).on("n1").label("gang", "a"),
        make_pod("a-1", "batch").requests(gpu=2).on("n2").label("gang", "a"),
        make_pod("a-2", "batch").requests(gpu=2).label("gang", "a"),
        make_pod("lone", "batch").requests(gpu=1).on("n1").priority(5),
        make_pod("done", "batch").requests(gpu=1).on("n1", phase="Succeeded"),
        make_pod("going", "batch").requests(gpu=1).on("n2").deleting(),
        make_pod("hi-0", "batch").requests(gpu=1).on("n2").priority(50).label("gang", "hi"),
        make_pod("own-0", "ml").requests(gpu=1).on("n2").label("gang", "own"),
    ])

    def gang_of(pod: PodInfo) -> str | None:
        return f"{pod.namespace}/{pod.labels['gang']}" if "gang" in pod.labels else None

    got = candidate_gangs(snapshot, gang_of, below=50, exclude="ml/own")
    assert [(c.key, c.priority, [p.name for p in c.pods]) for c in got] == [
        ("batch/a", 0, ["a-0", "a-1"]),
        ("batch/pod:lone", 5, ["lone"]),
    ]


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_members_of_two_shapes_the_engines_fill_cannot_place_without_help(mode: str) -> None:
    """n1 free, n2: [V:2], n3: [U:8]; members 6, 4, 4 GPUs in rank order. Each shape fits
    the free capacity, but the placement engine's rank-order fill puts the 6 on n1 and then
    finds room for one 4 only. Evicting V (2 GPUs) lets both 4s share n2: the exact search
    confirms it with the engine. Without the exact search the greedy's plan aims at the
    members' envelope (three nodes with 6 free): U, 4 GPUs beyond the need."""
    snapshot = cluster(["n1", "n2", "n3"], [Running("v", [("n2", 2)]), Running("u", [("n3", 8)])])
    members = [make_pod(f"w-{i}", "ml").requests(gpu=g).gang("train", 3).index(i).priority(9).gated().info()
               for i, g in enumerate([6, 4, 4])]
    assert not place_gang(snapshot, members).placed
    plan = plan_preemption(snapshot, members, candidates(snapshot), mode)
    assert plan is not None
    assert (names(plan), plan.method, plan.overage) == (["v-0"], "exact", ((GPU, 0),))
    assert plan.placement.nodes() == {"ml/w-0": "n1", "ml/w-1": "n2", "ml/w-2": "n2"}
    greedy = plan_preemption(snapshot, members, candidates(snapshot), mode, exact=False)
    assert greedy is not None
    assert (names(greedy), greedy.method, greedy.overage) == (["u-0"], "greedy", ((GPU, 4),))


def test_settling_drops_the_victims_the_placement_does_not_need() -> None:
    """The last step of every search, on a redundant victim set. n1: [A:4 B:4], n2: [A:4
    C:4]; one 4-GPU member. With all four pods gone it goes to n1. Gangs first: B and C
    together, or A and C, can go back (A and C: three pods kept out of the plan); on n1, B's
    pod covers the member. Placed again without B only, the member still goes to n1: done.
    (The searches themselves leave nothing to drop for members of one shape; this guards
    plans whose arithmetic was only a bound, for members of several shapes.)"""
    snapshot = cluster(["n1", "n2"], [Running("a", [("n1", 4), ("n2", 4)]), Running("b", [("n1", 4)]),
                                      Running("c", [("n2", 4)])])
    planner = preemption._planner(snapshot, preemptor(1, 4), candidates(snapshot), "minimal", None, None, (), "")
    assert planner is not None
    assert planner.sweep() is not None
    everything = [p for g in planner.gangs for p in g.pods]
    settled = planner.settle(everything, preemption._Budget(0, 4))
    assert settled is not None
    pods, placement = settled
    assert [p.key for p in pods] == ["batch/b-0"]
    assert placement.nodes() == {"ml/w-0": "n1"}
    with snapshot.without(["batch/b-0"]) as s:
        assert place_gang(s, preemptor(1, 4)) == placement


def test_a_pod_in_two_candidate_gangs_is_refused() -> None:
    snapshot = cluster(["n1"], [Running("a", [("n1", 8)])])
    pod = snapshot.pods["batch/a-0"]
    with pytest.raises(ValueError, match="pod 'batch/a-0' is in candidate gangs 'batch/a' and 'batch/b'"):
        plan_preemption(snapshot, preemptor(1, 8), [VictimGang("batch/a", 0, (pod,)), VictimGang("batch/b", 0, (pod,))],
                        "minimal")


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_twelve_gangs_of_one_for_three_whole_nodes(mode: str) -> None:
    """Three nodes of four 2-GPU gangs of one each, and a fourth node's gangs at a higher
    (still lower than the preemptor's) priority: three 8-GPU members need the twelve
    lowest, the first three nodes whole."""
    running = [Running(f"p{n}{k}", [(f"n{n}", 2)], priority=1 if n == 4 else 0) for n in range(1, 5) for k in range(4)]
    snapshot = cluster(["n1", "n2", "n3", "n4"], running)
    plan = plan_preemption(snapshot, preemptor(3, 8), candidates(snapshot), mode)
    assert plan is not None
    assert (len(plan.gangs), plan.pods, plan.max_priority, plan.method) == (12, 12, 0, "greedy")
    assert {plan.nodes[v] for v in plan.victims} == {"n1", "n2", "n3"}
