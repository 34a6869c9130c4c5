"""A gang with a minimum size (``troupe.io/gang-min-size``, docs/decisions/038-minimum-size.md)
stepped through the controller: released once its minimum is present and fits, the members
beyond it placed as they come and fit next to the running ones, inside the gang's required
domain, never moving a running member; the timeout rolls back the first release as a unit.
At each step a restarted reconciler decides the same."""

from __future__ import annotations

import itertools

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, own

UIDS = itertools.count()
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def member(i, size=8, minimum="4", required=None):
    """A new gated member ``train-<i>`` of a gang of ``size`` with minimum ``minimum``."""
    b = make_pod(f"train-{i}").gang("train", size).index(i).gpus(2).gated()
    if minimum is not None:
        b.obj["metadata"]["annotations"]["troupe.io/gang-min-size"] = minimum
    if required is not None:
        b.obj["metadata"]["annotations"]["troupe.io/topology-required-level"] = required
    pod = own([b.build()])[0]
    pod["metadata"]["uid"] = f"uid-{next(UIDS)}"
    return pod


def blocker(node):
    """A pod Troupe does not manage that takes every GPU of ``node``."""
    return make_pod(f"other-{node}").gpus(4).build() | {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}}}], "nodeName": node}} | {
        "status": {"phase": "Running"}}


def add(*ids, **kw):
    return lambda h: [h.add(member(i, **kw)) for i in ids]


def bind_all(h):
    h.sync()
    for ref, pod in sorted(h.cluster.pods.objects.items()):
        if pod["metadata"]["name"].startswith("train-") and not pod["spec"].get("schedulingGates") \
                and not pod["spec"].get("nodeName"):
            h.bind(ref.name)


def free(node):
    def step(h):
        h.cluster.pods.objects.pop(PodKey("team-a", f"other-{node}"))
        h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": f"other-{node}"}})
    return step


def later(seconds):
    def step(h):
        h.sync()
        h.wall += seconds
    return step


def run(h, steps):
    """Each step: act, check a restarted reconciler agrees, reconcile, check phase, rule, reason."""
    for step, action, want_phase, want_rule, want_reason in steps:
        action(h)
        fresh = h.new_controllers().gangs.gang("team-a/train")
        if fresh is not None and want_phase is not Phase.BACKING_OFF:
            restarted = decide(fresh, h.cache.snapshot(), h.wall)
            assert (restarted.phase, restarted.rule.name) == (want_phase, want_rule), f"{step}: after a restart"
        outcome = h.reconcile()
        assert (outcome.phase, outcome.decision.rule.name) == (want_phase, want_rule), f"{step}: {outcome.reason}"
        assert want_reason in outcome.reason, f"{step}: {outcome.reason}"


def nodes_of(h, *ids):
    return [h.node_of(f"train-{i}") for i in ids]


def test_a_gang_of_eight_with_minimum_four_runs_with_four_then_grows_to_eight_as_room_appears():
    # Room for 4 members (2 GPUs each) on n1 and n2; n3 and n4 are taken by other pods.
    h = Harness(four_nodes(), [blocker("n3"), blocker("n4")], NO_JITTER)
    run(h, [
        ("three of eight exist: below the minimum", add(0, 1, 2), Phase.WAITING, "MembersMissing",
         "3 of 8 members present (minimum 4)"),
        ("the fourth comes: the minimum is present and fits", add(3), Phase.PLACED, "Placed", "placed 4 members"),
        ("they run", bind_all, Phase.RELEASED, "AllReleased",
         "4 of 8 running (minimum 4); 4 member(s) not created yet"),
        ("two more come and find no room", add(4, 5), Phase.UNSCHEDULABLE, "Unplaced",
         "4 of 8 running (minimum 4); member(s) train-4, train-5: fits 0 of 2 members"),
        ("n3 is freed: they are placed there", free("n3"), Phase.PLACED, "Placed",
         "4 of 8 running (minimum 4); member(s) train-4, train-5: placed 2 members"),
        ("they run", bind_all, Phase.RELEASED, "AllReleased", "6 of 8 running (minimum 4)"),
        ("the last two come, n4 is freed", lambda h: (add(6, 7)(h), free("n4")(h)), Phase.PLACED, "Placed",
         "placed 2 members"),
        ("all eight run", bind_all, Phase.RELEASED, "AllReleased", "8 of 8 running (minimum 4)"),
    ])
    assert nodes_of(h, 0, 1, 2, 3) == ["n1", "n1", "n2", "n2"], "the first release is never moved"
    assert sorted(nodes_of(h, 4, 5, 6, 7)) == ["n3", "n3", "n4", "n4"]
    assert h.controller.illegal_moves == 0


def test_present_members_that_do_not_all_fit_release_the_first_minimum_in_rank_order_and_the_rest_wait():
    h = Harness(four_nodes(), [blocker("n3"), blocker("n4")], NO_JITTER)
    run(h, [
        ("six of eight exist, room for four", add(0, 1, 2, 3, 4, 5), Phase.PLACED, "Placed",
         "the first 4 members (minimum 4) released; 2 more present wait for room next to them"),
    ])
    h.sync()
    assert h.gated("train-0", "train-1", "train-2", "train-3", "train-4", "train-5") == ["train-4", "train-5"]
    run(h, [("the rest wait with the gang's progress", bind_all, Phase.UNSCHEDULABLE, "Unplaced",
             "4 of 8 running (minimum 4); member(s) train-4, train-5")])


def test_a_first_release_not_bound_in_time_is_rolled_back_as_a_unit_and_placed_again():
    h = Harness(four_nodes(), [blocker("n3"), blocker("n4")], NO_JITTER)
    run(h, [
        ("the minimum comes", add(0, 1, 2, 3), Phase.PLACED, "Placed", "placed 4 members"),
        ("none is bound within the timeout: the release is rolled back", later(31), Phase.ROLLED_BACK, "TimedOut",
         "4 released member(s) not bound within 30s"),
    ])
    h.sync()
    assert {ref.name for ref in h.cluster.pods.objects if ref.name.startswith("train-")} == set(), \
        "every member of the first release is deleted (the Job recreates them)"


def test_members_beyond_the_minimum_wait_for_room_inside_the_gangs_required_domain_not_outside_it():
    # Subblock s1 (n1, n2) holds the first four; s2 (n3, n4) is free, but outside the gang's domain.
    h = Harness(four_nodes(), [], NO_JITTER)
    run(h, [
        ("the minimum of a gang that requires one subblock", add(0, 1, 2, 3, required=SUBBLOCK), Phase.PLACED,
         "Placed", "placed 4 members in cloud.google.com/gce-topology-subblock=b1/s"),
        ("they run", bind_all, Phase.RELEASED, "AllReleased", "4 of 8 running (minimum 4)"),
        ("two more come: their subblock is full", add(4, 5, required=SUBBLOCK), Phase.UNSCHEDULABLE, "Unplaced",
         "member(s) train-4, train-5: fits 0 of 2 members"),
    ])
    first = {h.node_of(f"train-{i}") for i in range(4)}
    assert first in ({"n1", "n2"}, {"n3", "n4"})
    assert h.gated("train-4", "train-5") == ["train-4", "train-5"]


def test_members_that_disagree_on_the_minimum_are_held_and_a_minimum_above_the_size_is_refused():
    h = Harness(four_nodes(), [], NO_JITTER)
    run(h, [("two members name different minimums", lambda h: (add(0, 1)(h), add(2, 3, minimum="2")(h)),
             Phase.HELD, "MembersDisagree", "troupe.io/gang-min-size: 2, 4")])
    assert h.gated("train-0", "train-1", "train-2", "train-3") == ["train-0", "train-1", "train-2", "train-3"], \
        "a held gang releases nothing"
    h2 = Harness(four_nodes(), [], NO_JITTER)
    run(h2, [("a minimum of 9 in a gang of 8", add(0, minimum="9"), Phase.HELD, "MembersDisagree",
              "annotation troupe.io/gang-min-size: must be an integer from 1 to the gang's troupe.io/gang-size (8)")])
    assert h2.gated("train-0") == ["train-0"]
