"""Releases decided while earlier releases are still being written (docs/decisions/068-release-pipeline.md),
on the in-memory cache and writer ports: the next gang is decided against the members of the
releases in flight, a write refused in the middle of the pipeline costs its own gang only, a
lost Lease stops every write in flight, and a pass of the worker decides many gangs on one
snapshot with the placements one snapshot per gang would give."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from kubernetes import client

from reconciler.daemon.controller import Outcome
from reconciler.daemon.cycle import Cycle
from reconciler.engine.decision import actions
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.ports import LostLeadership, Unsure, WriteError
from reconciler.run.reconciler import Reconciler
from testbed.reconciler_builders import make_node, make_pod
from tests.support.controller_harness import NO_JITTER, Harness
from troupe import contract

GANGS = ("a", "b", "c", "d")


def eight_nodes() -> list[dict]:
    """Two subblocks of four nodes of 4 GPUs: room for four gangs of 4 members of 2 GPUs."""
    return [make_node(f"n{i}").topology("b1", f"s{i // 4}", f"h{i}").gpus(4).build() for i in range(8)]


def gang(name: str, size: int = 4) -> list[dict]:
    return [make_pod(f"{name}-{i}").gang(name, size).index(i).gpus(2).gated().build() for i in range(size)]


def harness(*names: str, fence=None) -> Harness:
    pods = [p for n in names for p in gang(n)]
    return Harness(eight_nodes(), pods, config=NO_JITTER) if fence is None else \
        Harness(eight_nodes(), pods, config=NO_JITTER, fence=fence)


def placed_nodes(outcome: Outcome) -> dict[str, str]:
    release = next(a for a in outcome.decision.actions if isinstance(a, actions.Release))
    return {str(m.pod): m.node for m in release.members}


def over_committed(h: Harness) -> list[str]:
    """Nodes whose GPUs the cluster's pods (bound, pinned or reserved by a plan record) overcommit."""
    snapshot = Snapshot([NodeInfo.from_object(n) for n in eight_nodes()],
                        [PodInfo.from_object(p) for p in h.cluster.pods.objects.values()], TopologyLevels.default())
    return [n.name for n in snapshot.nodes if snapshot.free(n.name)["nvidia.com/gpu"] < 0]


def settle(*outcomes: Outcome) -> list[Outcome]:
    return [o.pending.result(timeout=10) if o.pending is not None else o for o in outcomes]


class Switch:
    """A fence a test opens and closes."""

    def __init__(self) -> None:
        self.open = True

    def check(self) -> None:
        if not self.open:
            raise LostLeadership("the Lease is held by replica-2")

    def confirm(self) -> None:
        self.check()


def test_the_next_gang_is_decided_while_the_first_ones_writes_are_in_flight():
    h = harness(*GANGS, "e")
    h.cluster.pods.gate.clear()  # every write waits on its way to the API server
    outcomes = [h.controller.reconcile(f"team-a/{g}", wait=False) for g in GANGS]
    assert all(o.phase is Phase.PLACED and o.pending is not None and not o.pending.done() for o in outcomes)
    nodes = [set(placed_nodes(o).values()) for o in outcomes]
    assert sum(len(n) for n in nodes) == 8 and set().union(*nodes) == {f"n{i}" for i in range(8)}, \
        "each gang placed on nodes no release in flight uses"
    waiting = h.controller.reconcile("team-a/e", wait=False)
    assert waiting.phase is Phase.UNSCHEDULABLE and waiting.pending is None, \
        "the cluster is full of releases in flight: the fifth gang waits"
    assert h.cluster.pods.patches == [] and h.cache.assumed_count() == 16
    h.cluster.pods.gate.set()
    done = settle(*outcomes)
    assert [o.released for o in done] == [4, 4, 4, 4] and not any(o.retry for o in done)
    assert h.cache.assumed_count() == 0, "every written pod took its assumption's place"
    assert over_committed(h) == []
    h.controllers.close()


def test_a_pass_decides_many_gangs_on_one_snapshot_as_a_snapshot_per_gang_would():
    piped, alone = harness(*GANGS), harness(*GANGS)
    cycle = Cycle(piped.cache)
    together = settle(*[piped.controller.reconcile(f"team-a/{g}", cycle, wait=False) for g in GANGS])
    one_by_one = [alone.controller.reconcile(f"team-a/{g}") for g in GANGS]
    assert (cycle.taken, cycle.applied) == (1, 4), "one snapshot for the pass, each release applied to it"
    assert [placed_nodes(o) for o in together] == [placed_nodes(o) for o in one_by_one]
    assert over_committed(piped) == []
    piped.controllers.close()
    alone.controllers.close()


def test_a_pass_takes_a_new_snapshot_for_a_gang_whose_member_came_after_the_first():
    h = harness("a", "b")
    cycle = Cycle(h.cache)
    h.controller.reconcile("team-a/a", cycle, wait=False)
    h.add(make_pod("b-4").gang("b", 4).index(4).gpus(2).gated().build())  # a fifth pod naming gang b
    h.controller.reconcile("team-a/b", cycle, wait=False)
    assert cycle.taken == 2
    h.controllers.close()


def test_a_write_refused_in_the_middle_of_the_pipeline_costs_its_own_gang_only():
    h = harness(*GANGS)
    h.cluster.pods.gate.clear()
    h.cluster.pods.fail = {"b-0": WriteError("403 forbidden")}  # gang b's plan record
    outcomes = [h.controller.reconcile(f"team-a/{g}", wait=False) for g in GANGS]
    h.cluster.pods.gate.set()
    a, b, c, d = settle(*outcomes)
    assert (a.released, c.released, d.released) == (4, 4, 4)
    assert b.retry and b.released == 0 and "release not started" in b.reason
    assert h.gated(*[f"b-{i}" for i in range(4)]) == [f"b-{i}" for i in range(4)], "nothing of b is committed"
    assert h.cache.assumed_count() == 0, "its assumptions were forgotten at once: nothing was written"
    h.cluster.pods.fail = {}
    h.sync()
    again = h.controller.reconcile("team-a/b")
    assert again.released == 4 and placed_nodes(again) == placed_nodes(b)
    assert over_committed(h) == []
    h.controllers.close()


def test_a_write_of_unknown_outcome_keeps_its_gangs_nodes_from_the_next_gangs():
    h = harness("a", "b", "c", "d", "e")
    h.cluster.pods.fail = {"a-0": Unsure("504 the server timed out")}
    first = settle(h.controller.reconcile("team-a/a", wait=False))[0]
    assert first.retry and h.cache.assumed_count() == 4, "it may have landed: its members stay assumed"
    outcomes = settle(*[h.controller.reconcile(f"team-a/{g}", wait=False) for g in ("b", "c", "d", "e")])
    taken = {n for o in outcomes if o.released for n in placed_nodes(o).values()}
    assert not taken & set(placed_nodes(first).values()), "no gang is placed where a's release may be"
    assert outcomes[-1].phase is Phase.UNSCHEDULABLE
    h.controllers.close()


def test_a_lost_lease_stops_every_write_in_flight():
    fence = Switch()
    h = harness(*GANGS, fence=fence)
    h.cluster.pods.gate.clear()
    outcomes = [h.controller.reconcile(f"team-a/{g}", wait=False) for g in GANGS]
    fence.open = False  # the Lease is lost while every release waits to be sent
    h.cluster.pods.gate.set()
    done = settle(*outcomes)
    assert all(o.retry and o.released == 0 for o in done)
    assert h.cluster.pods.patches == [], "no write went out after the fence closed"
    assert h.cache.assumed_count() == 0
    h.controllers.close()


def test_the_worker_hands_a_gangs_key_back_only_once_its_writes_are_done():
    """The worker's pass (Reconciler._decide_cycle) returns while the writes go on; a key is
    done (and may be decided again) only when its outcome is final."""
    h = harness("a")
    reconciler = Reconciler(client.ApiClient(), NO_JITTER, writes=h.cluster, wall_clock=lambda: h.wall)
    reconciler.cache = h.cache
    reconciler.controllers = h.controllers
    h.cluster.pods.gate.clear()
    reconciler.queue.add("team-a/a")
    keys = reconciler.queue.get_batch(8)
    reconciler._decide_cycle(keys)
    reconciler.queue.add("team-a/a")  # an event while its writes are in flight
    assert reconciler.queue.get(timeout=0) is None, "still in the worker's hands"
    finished = threading.Event()
    original = reconciler._finish

    def finish(key: str, outcome: Outcome | None, start: float) -> None:
        original(key, outcome, start)
        finished.set()

    reconciler._finish = finish  # type: ignore[method-assign]
    h.cluster.pods.gate.set()
    assert finished.wait(10)
    assert reconciler.queue.get(timeout=1) == "team-a/a", "handed back, and queued again for the event"
    h.controllers.close()


def test_pending_outcomes_carry_what_a_synchronous_reconcile_returns():
    h = harness("a")
    pending = h.controller.reconcile("team-a/a", wait=False)
    assert isinstance(pending.pending, Future)
    final = pending.pending.result(timeout=10)
    assert final.pending is None and final.released == 4 and final.phase is Phase.PLACED
    for i in range(4):
        assert h.pod(f"a-{i}")["metadata"]["annotations"][contract.ASSIGNED_NODE]
    h.controllers.close()


def test_a_pod_event_that_changes_nothing_a_decision_reads_queues_nothing():
    """The reconciler's own condition written on a member (a new resourceVersion, a new
    troupe.io/Gang condition) gives its gang nothing to decide again; a label change does."""
    h = harness("a")
    pod = h.pod("a-0")
    pod["metadata"]["resourceVersion"] = "9000"
    pod["status"]["conditions"] = [{"type": contract.GANG_CONDITION, "status": "False", "reason": "WaitingForMembers",
                                    "message": "3 of 4 members present"}]
    assert h.cache.pod_event("MODIFIED", pod) == set()
    assert h.cache.pod_info(PodKey("team-a", "a-0")).resource_version == "9000", "the new version is kept"
    pod["metadata"]["resourceVersion"] = "9001"
    pod["metadata"]["labels"]["tier"] = "x"
    assert h.cache.pod_event("MODIFIED", pod) == {"team-a/a"}


def test_a_released_gangs_member_events_are_decided_once_a_second_later():
    h = harness("a")
    reconciler = Reconciler(client.ApiClient(), NO_JITTER, writes=h.cluster, wall_clock=lambda: h.wall)
    reconciler.cache, reconciler.controllers = h.cache, h.controllers
    assert h.controller.reconcile("team-a/a").released == 4
    h.sync()
    for i in range(4):
        h.bind(f"a-{i}")
    assert h.controller.reconcile("team-a/a").phase is Phase.RELEASED
    bound = h.pod("a-1")
    bound["metadata"]["resourceVersion"] = str(int(bound["metadata"]["resourceVersion"]) + 1)
    bound["metadata"]["labels"]["restarts"] = "1"  # a member's own change, nothing to act on at once
    reconciler._pod_event("MODIFIED", bound)
    assert reconciler.queue.get(timeout=0) is None, "not at once"
    assert reconciler.queue.get(timeout=3) == "team-a/a", "a second later"
    reconciler.queue.done("team-a/a")
    gated = make_pod("a-4").gang("a", 4).index(4).gpus(2).gated().build()  # a replacement, gated: at once
    reconciler._pod_event("ADDED", h.cluster.pods.add(gated))
    assert reconciler.queue.get(timeout=0) == "team-a/a"
    h.controllers.close()
