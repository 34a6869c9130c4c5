"""``queueingStrategy: Backfill``: a reservation at the earliest start of the first gang that
does not fit, and backfill that never delays it
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

Nodes (8 GPUs each)::

    block b0 / subblock s0:  n0 n1          block b0 / subblock s1:  n2 n3
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.step import step
from reconciler.engine.gangs.backfill import earliest_start, run_end
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.timestamps import rfc3339
from testbed.engine_builders import PodBuilder, make_node, make_pod
from testbed.engine_builders import snapshot_of as snapshot_of_builders
from troupe.config import Config

CONFIG = Config()
NOW = 1_800_000_000.0
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
BACKFILL = Policy(queueing="Backfill")


def snapshot_of(nodes: list[Any], pods: list[PodBuilder]) -> Snapshot:
    """The snapshot under ``queueingStrategy: Backfill`` (the pods' limits read)."""
    return snapshot_of_builders(nodes, pods, config=Config(queueing_strategy="Backfill"))


def nodes(n: int = 4) -> list[Any]:
    return [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(n)]


def running(name: str, node: str, limit: int | None, started: float = NOW - 10, gpus: int = 8) -> PodBuilder:
    """A pod of a gang of one on ``node`` since ``started``, ended by its
    ``activeDeadlineSeconds`` ``limit`` (None: none)."""
    pod = make_pod(name).gang(name, 1).requests(gpu=gpus).on(node)
    pod.obj["status"]["startTime"] = rfc3339(started)
    if limit is not None:
        pod.spec["activeDeadlineSeconds"] = limit
    return pod


def waiting(gang: str, size: int, limit: int | None, priority: int = 0, created: str = "2024-01-01T00:00:00Z",
            required: str | None = None, gpus: int = 8) -> list[PodBuilder]:
    out = []
    for i in range(size):
        pod = make_pod(f"{gang}-{i}").gang(gang, size).index(i).requests(gpu=gpus).priority(priority).gated()
        pod.created(created)
        if required:
            pod.annotate("troupe.io/topology-required-level", required)
        if limit is not None:
            pod.spec["activeDeadlineSeconds"] = limit
        out.append(pod)
    return out


def big() -> list[PodBuilder]:
    return waiting("big", 2, None, priority=50, required=SUBBLOCK)


def small(name: str, limit: int | None, created: str = "2024-01-01T00:00:01Z") -> list[PodBuilder]:
    return waiting(name, 1, limit, created=created)


def cycle(snapshot: Snapshot, policy: Policy = BACKFILL, now: float = NOW) -> tuple[dict[str, Any], Snapshot]:
    """Decide every waiting gang in queue order with :func:`step`, as the simulator does;
    the snapshot with the placed gangs assumed."""
    state = QueueState(policy.queueing)
    out = {}
    groups = group_by_gang(snapshot.pods.values(), CONFIG)
    gangs = [build_gang(k, pods, CONFIG, {}) for k, pods in groups.items() if any(p.gated for p in pods)]
    for gang in sorted(gangs, key=lambda g: queue_order(g.key, g.priority, g.created)):
        s = step(gang, snapshot, now, policy, state)
        out[gang.key] = s
        if s.decision.phase is Phase.PLACED:
            snapshot = snapshot.with_assumed(s.decision.placement)
    return out, snapshot


def placed_nodes(s: Any) -> set[str]:
    return {a.node for a in s.decision.placement.assignments}


def test_the_earliest_start_is_when_running_limits_free_a_whole_required_domain() -> None:
    snap = snapshot_of(nodes(), [running("a", "n0", 110), running("b", "n1", 310), running("c", "n2", 210),
                                 running("d", "n3", None), *big()])
    members = [p for p in snap.pods.values() if p.gated]
    start = earliest_start(snap, members, SUBBLOCK, NOW)
    assert start is not None
    assert (start.domain, sorted(start.nodes), start.at) == (f"{SUBBLOCK}=b0/b0-s0", [0, 1], NOW + 300)


def test_without_a_limit_in_every_domain_the_start_is_unknown() -> None:
    snap = snapshot_of(nodes(), [running("a", "n0", None), running("c", "n2", None), *big()])
    start = earliest_start(snap, [p for p in snap.pods.values() if p.gated], SUBBLOCK, NOW)
    assert start is not None and start.at is None and len(start.nodes) == 2


def test_while_the_start_is_not_known_no_gang_takes_a_reserved_node() -> None:
    pods = [running("a", "n0", None), running("c", "n2", None), running("d", "n3", None), *big(), *small("s", 5)]
    out, _ = cycle(snapshot_of(nodes(), pods))
    assert out["default/big"].effect.hold.start is None
    assert out["default/s"].decision.phase is Phase.UNSCHEDULABLE


def test_a_pod_being_deleted_counts_as_ending_now() -> None:
    gone = running("a", "n0", None)
    gone.obj["metadata"]["deletionTimestamp"] = rfc3339(NOW - 1)
    snap = snapshot_of(nodes(), [gone, running("b", "n1", 300), running("c", "n2", None), *big()])
    start = earliest_start(snap, [p for p in snap.pods.values() if p.gated], SUBBLOCK, NOW)
    assert start is not None and start.at == NOW + 290


def test_the_first_gang_that_does_not_fit_is_reserved_at_once_and_says_so() -> None:
    snap = snapshot_of(nodes(), [running("a", "n0", 110), running("c", "n2", None), running("d", "n3", None), *big()])
    out, _ = cycle(snap)
    s = out["default/big"]
    assert s.decision.phase is Phase.UNSCHEDULABLE
    hold = s.effect.hold
    assert hold is not None and hold.reservation and hold.start == NOW + 100 and hold.nodes == frozenset({0, 1})
    assert s.effect.recheck_at == NOW + 100
    assert "reserved gce-topology-subblock=b0/b0-s0 (2 node(s)) from " in s.decision.reason
    assert "(in 100s)" in s.decision.reason


def test_a_gang_behind_runs_on_reserved_nodes_only_if_its_limit_ends_it_by_the_start() -> None:
    base = [running("a", "n0", 110), running("c", "n2", None), running("d", "n3", None), *big()]
    for limit, phase in ((60, Phase.PLACED), (100, Phase.PLACED), (101, Phase.UNSCHEDULABLE),
                         (None, Phase.UNSCHEDULABLE)):
        out, _ = cycle(snapshot_of(nodes(), [*base, *small("s", limit)]))
        assert out["default/s"].decision.phase is phase, limit
        if phase is Phase.PLACED:
            assert placed_nodes(out["default/s"]) == {"n1"}
            reason = out["default/s"].decision.reason
            assert "backfilled onto 1 node(s) reserved for gang default/big from " in reason, reason
            assert f"; it ends by {rfc3339(NOW + limit)[11:19]}" in reason


def test_best_effort_fifo_would_let_the_long_gang_delay_the_big_one() -> None:
    pods = [running("a", "n0", 110), running("c", "n2", None), running("d", "n3", None), *big(), *small("s", 600)]
    out, _ = cycle(snapshot_of(nodes(), pods), Policy(queueing="BestEffortFIFO", head_of_line_seconds=10**9))
    assert out["default/s"].decision.phase is Phase.PLACED


def test_a_gang_that_fits_without_the_reserved_nodes_runs_whatever_its_limit() -> None:
    pods = [running("a", "n0", 110), running("c", "n2", None), *big(), *small("s", None)]
    out, _ = cycle(snapshot_of(nodes(), pods))
    assert out["default/s"].decision.phase is Phase.PLACED and placed_nodes(out["default/s"]) == {"n3"}
    assert "backfilled" not in out["default/s"].decision.reason


def test_an_overdue_pod_moves_the_start_to_now_and_nothing_backfills_before_it() -> None:
    # a's limit ran out 10 s ago (not enforced: it still runs)
    pods = [running("a", "n0", 20, started=NOW - 30), running("c", "n2", None), running("d", "n3", None), *big(),
            *small("s", 5)]
    out, _ = cycle(snapshot_of(nodes(), pods))
    assert out["default/big"].effect.hold.start == NOW
    assert out["default/s"].decision.phase is Phase.UNSCHEDULABLE


def test_only_backfill_reservations_gangs_get_one_and_they_take_different_domains() -> None:
    pods = [running("a", "n0", 100), running("c", "n2", 200), *big(),
            *waiting("big2", 2, None, priority=40, required=SUBBLOCK)]
    out, _ = cycle(snapshot_of(nodes(), pods))
    one, two = out["default/big"].effect.hold, out["default/big2"].effect.hold
    assert one.nodes == frozenset({0, 1}) and two.nodes == frozenset({2, 3}) and two.start == NOW + 190
    out, _ = cycle(snapshot_of(nodes(), pods), Policy(queueing="Backfill", backfill_reservations=1))
    assert out["default/big2"].effect.hold is None and out["default/big2"].effect.standing


def test_a_fresh_queue_makes_the_same_reservation() -> None:
    snap = snapshot_of(nodes(), [running("a", "n0", 110), running("c", "n2", None), running("d", "n3", None), *big()])
    first, _ = cycle(snap)
    again, _ = cycle(snap)  # a new leader: nothing remembered
    assert first["default/big"].effect.hold == again["default/big"].effect.hold


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 400)), min_size=8, max_size=8),
       st.lists(st.tuples(st.one_of(st.none(), st.integers(1, 400)), st.integers(1, 2)), min_size=1, max_size=6))
def test_backfill_never_delays_the_reservation(running_limits: list[int | None],
                                               gangs: list[tuple[int | None, int]]) -> None:
    """On 8 nodes (4 subblocks of 2) with pods of random limits (None: none; 0: the node is
    empty), a big gang
    needing a whole subblock and small gangs behind it: no backfilled gang ends on a
    reserved node after the reservation's start, none without a limit lands there, and the
    reservation's start, computed again with the backfilled gangs running, is no later."""
    pods: list[PodBuilder] = [running(f"r{i}", f"n{i}", limit) for i, limit in enumerate(running_limits) if limit != 0]
    pods += big()
    for k, (limit, size) in enumerate(gangs):
        pods += waiting(f"s{k}", size, limit, created=f"2024-01-01T00:00:{k + 1:02d}Z", gpus=4)
    snap = snapshot_of(nodes(8), pods)
    out, after = cycle(snap)
    hold = out["default/big"].effect.hold
    if hold is None:
        return
    for key, s in out.items():
        if key == "default/big" or s.decision.phase is not Phase.PLACED:
            continue
        on_reserved = {a.node for a in s.decision.placement.assignments} & {snap.nodes[i].name for i in hold.nodes}
        if on_reserved:
            gang = build_gang(key, group_by_gang(snap.pods.values(), CONFIG)[key], CONFIG, {})
            end = run_end(gang, snap, NOW)
            assert end is not None, f"{key} has no limit yet took a reserved node"
            assert hold.start is not None and end <= hold.start
    if hold.start is not None:
        members = [p for p in after.pods.values() if p.gated and p.name.startswith("big-")]
        again = earliest_start(after, members, SUBBLOCK, NOW)
        assert again is not None and again.at is not None and again.at <= hold.start


def test_a_job_released_as_created_backfills_by_its_deadline_and_one_without_waits() -> None:
    from reconciler.engine.decision.actions import Reserve
    from reconciler.engine.decision.decide import decide
    from reconciler.engine.gangs.queueing import Hold, QueueView
    from reconciler.engine.model.nodes import NodeInfo
    from testbed.as_created import NAMESPACE, gangs_of, job_object, workloads_of
    from testbed.as_created import snapshot_of as as_created_snapshot

    infos = [NodeInfo.from_object(n.build()) for n in nodes()]
    reserved = Hold("default/big", (-50, 0.0, "default/big"), 50, NOW, frozenset(range(4)), "the cluster", True,
                    NOW + 100)
    queue = QueueView(holds=(reserved,))
    for deadline, reserves in ((60, True), (None, False)):
        job = job_object("train", 1)
        job["status"] = {"startTime": rfc3339(NOW)}
        if deadline is not None:
            job["spec"]["activeDeadlineSeconds"] = deadline
        known = workloads_of(job)
        snapshot = as_created_snapshot(infos, [], known)
        gang = gangs_of(snapshot, known, CONFIG)[f"{NAMESPACE}/job:train"]
        decision = decide(gang, snapshot, NOW, BACKFILL, queue)
        assert (decision.find(Reserve) is not None) is reserves, decision.reason
        if reserves:
            assert "backfilled onto 1 node(s) reserved for a gang of another namespace from " in decision.reason


def test_the_simulator_prints_the_reserved_gangs_expected_start() -> None:
    from reconciler.tools.simulate import simulate

    snap = snapshot_of(nodes(), [running("a", "n0", 110), running("c", "n2", None), running("d", "n3", None),
                                 *big(), *small("s", 60)])
    outcomes = {o.name: o for o in simulate(snap, Config(queueing_strategy="Backfill"), NOW)}
    reserved = outcomes["big"].to_json()
    assert (reserved["expectedStart"], reserved["reserved"]) == (rfc3339(NOW + 100), f"{SUBBLOCK}=b0/b0-s0")
    assert outcomes["s"].placed and "expectedStart" not in outcomes["s"].to_json()


def test_the_reserved_gangs_reason_counts_the_gangs_backfilled_since_it_was_complete() -> None:
    from troupe.contract import PLANNED_AT

    early = running("early", "n1", 50)
    early.annotate(PLANNED_AT, "2023-12-31T00:00:00.000+00:00")  # before the big gang was complete
    late = running("late", "n1", 50, gpus=0)
    late.annotate(PLANNED_AT, rfc3339(NOW - 5))
    pods = [running("a", "n0", 110), early, late, running("c", "n2", None), running("d", "n3", None), *big()]
    out, _ = cycle(snapshot_of(nodes(), pods))
    assert out["default/big"].effect.hold.backfilled == 1
    assert out["default/big"].decision.reason.endswith("(in 100s), 1 gang(s) backfilled")


# --- slices and exclusive levels (docs/decisions/035-topology-layers.md) -----------------
HOST = "cloud.google.com/gce-topology-host"


def shaped(gang: str, size: int, slice_size: int | None = None, exclusive: str | None = None,
           required: str | None = SUBBLOCK) -> list[PodBuilder]:
    """A waiting gang of ``size`` members of 4 GPUs (two per node), in slices of
    ``slice_size`` per host and exclusive at ``exclusive`` when given."""
    pods = waiting(gang, size, None, priority=50, required=required, gpus=4)
    for pod in pods:
        if slice_size is not None:
            pod.annotate("troupe.io/topology-slice-size", str(slice_size))
            pod.annotate("troupe.io/topology-slice-required-level", HOST)
        if exclusive is not None:
            pod.annotate("troupe.io/topology-exclusive-level", exclusive)
    return pods


def released(pod: PodBuilder) -> PodBuilder:
    """``pod`` as Troupe released it (its ``planned-at``): a pod of another gang."""
    from troupe.contract import PLANNED_AT

    return pod.annotate(PLANNED_AT, rfc3339(NOW - 20))


def start_of(snap: Snapshot, gang: str) -> tuple[Any, list[Any], Any]:
    """The earliest start of waiting gang ``gang`` as :func:`step` computes it, its
    members and the gang."""
    from reconciler.engine.placement.layers import layout_of

    key = f"default/{gang}"
    built = build_gang(key, group_by_gang(snap.pods.values(), CONFIG)[key], CONFIG, {})
    members = sorted((p for p in built.members if p.gated), key=lambda p: p.key)
    layout, bad = layout_of(snap, built.topology)
    assert not bad
    return earliest_start(snap, members, built.topology.required_level, NOW, layout=layout), members, built


def placed_at(snap: Snapshot, members: list[Any], gang: Any, at: float, only: frozenset[int]) -> Any:
    """The real placement of ``members`` at time ``at``: the pods that end by then removed,
    every node but ``only`` closed."""
    from reconciler.engine.model.limits import expected_end
    from reconciler.engine.placement.place import place_gang

    ended = []
    for key, pod in snap.pods.items():
        end = NOW if pod.deleting else expected_end(snap.limits.get(key), NOW)
        if end is not None and max(end, NOW) <= at:
            ended.append(key)
    later = snap.with_removed(ended).with_blocked(i for i in range(len(snap.nodes)) if i not in only)
    return place_gang(later, members, gang.topology)


def test_a_domain_that_holds_the_members_but_not_their_slices_is_not_the_start() -> None:
    # s0 holds two members now (4 GPUs free on each node) but no slice of 2 on one host
    # until a ends; s1 has a whole host from c's end, later.
    pods = [running("a", "n0", 200, gpus=4), running("b", "n1", 300, gpus=4), running("c", "n2", 260),
            running("d", "n3", None)]
    plain, _, _ = start_of(snapshot_of(nodes(), [*pods, *shaped("big", 2)]), "big")
    assert plain is not None and (plain.domain, plain.at) == (f"{SUBBLOCK}=b0/b0-s0", NOW)
    snap = snapshot_of(nodes(), [*pods, *shaped("big", 2, slice_size=2)])
    start, members, gang = start_of(snap, "big")
    assert start is not None and (start.domain, sorted(start.nodes), start.at) == (f"{SUBBLOCK}=b0/b0-s0", [0, 1],
                                                                                   NOW + 190)
    assert not placed_at(snap, members, gang, NOW, start.nodes).placed
    result = placed_at(snap, members, gang, NOW + 190, start.nodes)
    assert result.placed and {a.node for a in result.assignments} == {"n0"}


def test_slices_that_never_fit_leave_the_start_unknown() -> None:
    pods = [running("a", "n0", None, gpus=4), running("b", "n1", None, gpus=4), running("c", "n2", None, gpus=4),
            running("d", "n3", None, gpus=4)]
    start, _, _ = start_of(snapshot_of(nodes(), [*pods, *shaped("big", 2, slice_size=2)]), "big")
    assert start is not None and start.at is None


def test_the_reservation_in_a_cycle_counts_slices() -> None:
    pods = [running("a", "n0", 200, gpus=4), running("b", "n1", 300, gpus=4), running("c", "n2", 260),
            running("d", "n3", None), *shaped("big", 2, slice_size=2)]
    out, _ = cycle(snapshot_of(nodes(), pods))
    hold = out["default/big"].effect.hold
    assert out["default/big"].decision.phase is Phase.UNSCHEDULABLE
    assert hold is not None and hold.nodes == frozenset({0, 1}) and hold.start == NOW + 190


def test_an_exclusive_gang_starts_in_a_domain_when_another_gangs_pod_there_ends() -> None:
    # s0 and s1 each hold the members now, but a (ends in 90 s) and c (no limit) are pods of
    # other gangs there.
    pods = [released(running("a", "n0", 100, gpus=4)), released(running("c", "n2", None, gpus=4)),
            *shaped("big", 2, exclusive=SUBBLOCK)]
    snap = snapshot_of(nodes(), pods)
    start, members, gang = start_of(snap, "big")
    assert start is not None and (start.domain, start.at) == (f"{SUBBLOCK}=b0/b0-s0", NOW + 90)
    assert not placed_at(snap, members, gang, NOW + 89, start.nodes).placed
    assert placed_at(snap, members, gang, NOW + 90, start.nodes).placed
    plain, _, _ = start_of(snapshot_of(nodes(), [*pods[:2], *shaped("big", 2)]), "big")
    assert plain is not None and plain.at == NOW  # not exclusive: it fits beside them now


def test_an_exclusive_gang_never_starts_beside_a_pod_without_a_limit() -> None:
    pods = [released(running("a", "n0", None, gpus=4)), released(running("c", "n2", None, gpus=4)),
            *shaped("big", 2, exclusive=SUBBLOCK)]
    start, _, _ = start_of(snapshot_of(nodes(), pods), "big")
    assert start is not None and start.at is None


def test_a_domain_another_gang_holds_exclusively_opens_when_its_pods_end() -> None:
    held = [running(f"x{i}", f"n{i}", limit, gpus=4).annotate("troupe.io/topology-exclusive-level", SUBBLOCK)
            for i, limit in ((0, 50), (1, 150), (2, None))]
    snap = snapshot_of(nodes(), [*held, *shaped("big", 2)])
    start, members, gang = start_of(snap, "big")
    assert start is not None and (start.domain, start.at) == (f"{SUBBLOCK}=b0/b0-s0", NOW + 140)
    assert not placed_at(snap, members, gang, NOW + 139, start.nodes).placed
    assert placed_at(snap, members, gang, NOW + 140, start.nodes).placed


RUNNING = st.tuples(st.one_of(st.none(), st.integers(1, 400)), st.booleans(), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2).flatmap(lambda n: st.lists(RUNNING, min_size=n, max_size=n)), min_size=8,
                max_size=8),
       st.sampled_from([2, 4]), st.sampled_from([None, 2]), st.sampled_from([None, SUBBLOCK]),
       st.sampled_from([None, SUBBLOCK]))
def test_at_the_start_the_placement_holds_the_gang_in_the_reserved_domain_and_not_before(
        on_nodes: list[list[tuple[int | None, bool, bool]]], size: int, slice_size: int | None,
        exclusive: str | None, required: str | None) -> None:
    """On 8 nodes (4 subblocks of 2) running pods of 4 GPUs with random limits (None: none),
    each Troupe's or not, each holding its subblock exclusively or not: a gang of 2 or 4
    members of 4 GPUs, in slices of 2 per host or not, exclusive at the subblock or not,
    with a required subblock or not. At the computed start, with the pods that end by then
    removed, the real placement places the whole gang inside the reserved domain; at the
    current time and at every earlier pod end it does not."""
    from reconciler.engine.model.limits import expected_end

    pods: list[PodBuilder] = []
    for i, held in enumerate(on_nodes):
        for k, (limit, troupes, exclusively) in enumerate(held):
            pod = running(f"r{i}-{k}", f"n{i}", limit, gpus=4)
            pod = released(pod) if troupes else pod
            pods.append(pod.annotate("troupe.io/topology-exclusive-level", SUBBLOCK) if exclusively else pod)
    snap = snapshot_of(nodes(8), [*pods, *shaped("big", size, slice_size, exclusive, required)])
    start, members, gang = start_of(snap, "big")
    assert start is not None and start.nodes
    ends = {max(e, NOW) for key in snap.pods if (e := expected_end(snap.limits.get(key), NOW)) is not None}
    if start.at is None:
        assert not placed_at(snap, members, gang, max(ends, default=NOW), start.nodes).placed
        return
    result = placed_at(snap, members, gang, start.at, start.nodes)
    assert result.placed, result.reason
    assert {snap.index[a.node] for a in result.assignments} <= start.nodes
    for at in sorted(e for e in ends | {NOW} if e < start.at):
        assert not placed_at(snap, members, gang, at, start.nodes).placed, at


def test_a_gang_with_members_running_is_reserved_without_its_slices_as_it_is_placed() -> None:
    # s0 = n0 n1 n2, s1 = n3 n4 n5 (full, no limits). big-0 and big-1 run on n0; the two
    # replacements fit one on n1 and one on n2 once b ends (90 s), the slices of 2 per host
    # they would ask for only once c ends (190 s): the placement drops them, and so does the count.
    ns = [make_node(f"n{i}").topology("b0", f"b0-s{i // 3}", f"n{i}").allocatable(gpu=8) for i in range(6)]
    gang = shaped("big", 4, slice_size=2)
    for pod in gang[:2]:
        pod.spec.pop("schedulingGates", None)
        pod.on("n0").obj["status"]["startTime"] = rfc3339(NOW - 10)
    pods = [running("a", "n1", 300, gpus=4), running("b", "n2", 100, gpus=4), running("c", "n2", 200, gpus=4),
            *[running(f"f{i}", f"n{i}", None) for i in (3, 4, 5)], *gang]
    out, _ = cycle(snapshot_of(ns, pods))
    hold = out["default/big"].effect.hold
    assert hold is not None and hold.nodes == frozenset({0, 1, 2}) and hold.start == NOW + 90
