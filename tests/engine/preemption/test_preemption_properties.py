"""Properties of the preemption planner on random small clusters, and its optimality
against the brute force of :mod:`testbed.preemption_oracle` (every subset).

Clusters: 1-4 nodes of 8 GPUs in two subblocks, full or nearly, running gangs of 1-4 pods
(1, 2, 4 or 8 GPUs) with priorities 0-12; the preemptor: 1-3 members of 2, 4 or 8 GPUs at
priority 10 (and, for some properties, a launcher asking only cpu), so some running gangs
may not be evicted (priority 10 or more), and one running gang may be the preemptor's own.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import place_gang
from reconciler.engine.preemption import PreemptionPlan, VictimGang, plan_preemption
from testbed.engine_builders import SUBBLOCK, make_node, make_pod, snapshot_of
from testbed.preemption_oracle import Instance, brute_force
from troupe.contract import TopologyRequest

PRIORITY = 10
OWN = "batch/own"


def eligible(inst: Instance) -> list[VictimGang]:
    """What the caller would pass: strictly lower priority, not the own gang."""
    return [c for c in inst.candidates if c.priority < PRIORITY and c.key != OWN]


@st.composite
def instances(draw: st.DrawFn, max_nodes: int = 4, max_pods: int = 10, launcher: bool = False) -> Instance:
    n = draw(st.integers(1, max_nodes))
    nodes = [make_node(f"n{k}").topology("b0", f"s{k // 2}", f"h{k}").allocatable(gpu=8) for k in range(n)]
    gangs = draw(st.lists(st.integers(0, 12), min_size=1, max_size=6))  # priorities
    pods = []
    for k in range(n):
        used = draw(st.sampled_from([0, 0, 0, 2, 4]))
        while used < 8 and len(pods) < max_pods:
            gpus = min(draw(st.sampled_from([1, 2, 4, 8])), 8 - used)
            g = draw(st.integers(0, len(gangs) - 1))
            name = "own" if g == 0 and draw(st.booleans()) and gangs[0] >= 10 else f"g{g}"
            pods.append(make_pod(f"{name}-{len(pods)}", "batch").requests(gpu=gpus).on(f"n{k}")
                        .priority(gangs[g]).label("gang", name))
            used += gpus
    snapshot = snapshot_of(nodes, pods)
    by_gang: dict[str, list[PodInfo]] = {}
    for p in snapshot.pods.values():
        by_gang.setdefault(p.labels["gang"], []).append(p)
    candidates = [VictimGang.of(f"batch/{k}", v, snapshot) for k, v in sorted(by_gang.items())]
    size, gpus = draw(st.integers(1, 3)), draw(st.sampled_from([2, 4, 8]))
    members = [make_pod(f"w-{i}", "ml").requests(gpu=gpus).gang("train", size).index(i).priority(PRIORITY)
               .gated().info() for i in range(size)]
    if launcher:  # a second shape: cpu only, every node has 8
        cpu = draw(st.sampled_from(["1", "7"]))
        members.append(make_pod("launcher", "ml").requests(cpu=cpu).gang("train", size).priority(PRIORITY)
                       .gated().info())
    required = draw(st.sampled_from([None, SUBBLOCK]))
    return Instance(snapshot, members, candidates, required)


MODES = st.sampled_from(["minimal", "atomic"])
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plan_of(inst: Instance, mode: str, candidates: list[VictimGang] | None = None) -> PreemptionPlan | None:
    return plan_preemption(inst.snapshot, inst.members, inst.candidates if candidates is None else candidates, mode, TopologyRequest(required_level=inst.required), gang=OWN)


@FAST
@given(instances(), MODES)
def test_victims_are_candidates_of_strictly_lower_priority_never_the_own_gang(inst: Instance, mode: str) -> None:
    plan = plan_of(inst, mode)
    event("plan" if plan else "no plan")
    if plan is None:
        return
    allowed = {p.key: c for c in eligible(inst) for p in c.pods}
    for v in plan.victims:
        assert v in allowed, v
        assert allowed[v].priority < PRIORITY
        assert inst.snapshot.pods[v].priority < PRIORITY
    assert set(plan.gangs) == {allowed[v].key for v in plan.victims}
    assert plan.max_priority == max((allowed[v].priority for v in plan.victims), default=0)


@FAST
@given(instances() | instances(launcher=True), MODES)
def test_the_plan_is_feasible_and_its_placement_is_the_engines(inst: Instance, mode: str) -> None:
    before = [inst.snapshot.free(i) for i in range(len(inst.snapshot.nodes))]
    plan = plan_of(inst, mode)
    assert [inst.snapshot.free(i) for i in range(len(inst.snapshot.nodes))] == before
    if plan is None:
        return
    with inst.snapshot.without(plan.victims) as s:
        placement = place_gang(s, inst.members, TopologyRequest(required_level=inst.required))
    assert placement.placed
    assert placement == plan.placement
    assert plan.pods == len(plan.victims)


@FAST
@given(instances() | instances(launcher=True), MODES)
def test_minimal_never_evicts_a_pod_the_plan_does_not_need(inst: Instance, mode: str) -> None:
    """For every victim: the plan's placement does not fit without the other victims.
    In ``atomic`` mode the same holds of whole gangs. Members of one or two shapes."""
    plan = plan_of(inst, mode)
    if plan is None or not plan.victims:
        return
    by_gang = {p.key: c.key for c in inst.candidates for p in c.pods}
    units = [[v] for v in plan.victims] if mode == "minimal" else [
        [v for v in plan.victims if by_gang[v] == g] for g in plan.gangs]
    for unit in units:
        others = [v for v in plan.victims if v not in unit]
        after = inst.snapshot.with_removed(others)
        demand: dict[str, dict[str, int]] = {}
        for a in plan.placement.assignments:
            for r, q in a.requests.items():
                demand.setdefault(a.node, {})[r] = demand.get(a.node, {}).get(r, 0) + q
        fits = all(after.free(node).get(r, 0) >= q for node, need in demand.items() for r, q in need.items())
        assert not fits, f"{unit} is not needed"


@settings(max_examples=25, deadline=None)
@given(instances())
def test_off_never_evicts(inst: Instance) -> None:
    assert plan_of(inst, "off") is None


@FAST
@given(instances(), MODES, st.randoms(use_true_random=False))
def test_the_same_plan_whatever_the_order_of_the_candidates(inst: Instance, mode: str, rnd: random.Random) -> None:
    shuffled = [VictimGang(c.key, c.priority, tuple(rnd.sample(c.pods, len(c.pods)))) for c in inst.candidates]
    rnd.shuffle(shuffled)
    assert plan_of(inst, mode, shuffled) == plan_of(inst, mode)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_pods=9), MODES)
def test_optimal_against_brute_force_over_every_subset(inst: Instance, mode: str) -> None:
    """(1) highest victim priority, (2) gangs, (3) pods, (4) overage: the planner's value
    is the least over every subset of the candidates (pods in ``minimal``, gangs in
    ``atomic``); None exactly when no subset lets the gang be placed."""
    want = brute_force(inst.snapshot, inst.members, eligible(inst), mode, inst.required)
    plan = plan_of(inst, mode)
    event(f"method: {plan.method if plan else None}")
    assert (plan.objective() if plan else None) == want
