"""``troupe.io/gang-failure-policy`` (docs/decisions/040-failure-policy.md) stepped through the
controller: a ``RestartGang`` gang restarts whole, once, when a running member's pod fails
or its node is deleted, NotReady past the grace, or tainted NoExecute; the default
``ReplaceMember`` lets the controller replace the member next to the gang. At each step a
restarted reconciler decides the same."""

from __future__ import annotations

import itertools

import pytest

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, own
from troupe.config import Config

UIDS = itertools.count()
GRACE = Config(gang_schedule_timeout_jitter_seconds=0, node_failure_grace_seconds=60)


def member(i, policy="RestartGang", required=None):
    b = make_pod(f"train-{i}").gang("train", 4).index(i).gpus(2).gated()
    if required is not None:
        b.obj["metadata"]["annotations"]["troupe.io/topology-required-level"] = required
    if policy is not None:
        b.obj["metadata"]["annotations"]["troupe.io/gang-failure-policy"] = policy
    pod = own([b.build()])[0]
    pod["metadata"]["uid"] = f"uid-{next(UIDS)}"
    return pod


def running_gang(policy="RestartGang", config=NO_JITTER, required=None):
    """A gang of 4 (two to a node of 4 GPUs), released and Running."""
    h = Harness(four_nodes(), [], config)
    for i in range(4):
        h.add(member(i, policy, required))
    assert h.reconcile().phase is Phase.PLACED
    h.sync()
    for i in range(4):
        h.bind(f"train-{i}")
    assert h.reconcile().phase is Phase.RELEASED
    return h


def fail_pod(h, name):
    pod = h.cluster.pods.objects[PodKey("team-a", name)]
    pod["status"]["phase"] = "Failed"
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    h.cache.pod_event("MODIFIED", pod)


def node_change(h, name, change):
    node = h.cluster.nodes.objects[name]
    change(node)
    node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
    h.cache.node_event("MODIFIED", node)


def not_ready_since(stamp):
    def change(node):
        node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "lastTransitionTime": stamp}]
    return change


def decided(h):
    """The controller's outcome, after checking a restarted reconciler decides the same."""
    fresh = h.new_controllers().gangs.gang("team-a/train")
    restarted = decide(fresh, h.cache.snapshot(), h.wall)
    outcome = h.reconcile()
    assert (restarted.phase, restarted.rule.name) == (outcome.phase, outcome.decision.rule.name)
    return outcome


def alive(h):
    return sorted(ref.name for ref in h.cluster.pods.objects if ref.name.startswith("train-"))


def test_a_failed_member_restarts_a_restart_gang_gang_whole_once_and_it_is_placed_again_whole():
    h = running_gang()
    fail_pod(h, "train-3")
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.ROLLED_BACK, "MemberFailed")
    assert outcome.reason.startswith("member train-3 failed: restarting the whole gang (RestartGang)")
    h.sync()
    assert alive(h) == ["train-3"], "every running member is deleted; the Failed pod is its Job's"
    # The Job recreates the three (new pods) and a replacement of the failed one.
    for i in range(3):
        h.add(member(i))
    h.add(member(3) | {"metadata": {**member(3)["metadata"], "name": "train-3b"}})
    h.wall += 11  # past the rollback's backoff
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.PLACED, "Placed"), outcome.reason
    assert len(outcome.decision.release) == 4, "placed again whole"
    h.sync()
    for m in outcome.decision.release:
        h.bind(PodKey.parse(m.pod).name)
    outcome = decided(h)
    assert outcome.phase is Phase.RELEASED, "the old Failed pod names no running release: no second restart"


@pytest.mark.parametrize(("change", "want"), [
    ("deleted", "node n1 of member train-0 was deleted"),
    ("tainted", "node n1 of member train-0 is tainted maintenance=now:NoExecute"),
])
def test_a_lost_node_under_a_running_member_restarts_the_gang(change, want):
    h = running_gang()
    node = h.node_of("train-0")
    assert node == "n1"
    if change == "deleted":
        gone = h.cluster.nodes.objects.pop(node)
        h.cache.node_event("DELETED", gone)
    else:
        node_change(h, node, lambda n: n["spec"].setdefault("taints", []).append(
            {"key": "maintenance", "value": "now", "effect": "NoExecute"}))
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.ROLLED_BACK, "MemberFailed")
    assert want in outcome.reason


def test_a_tolerated_no_execute_taint_is_no_failure():
    h = running_gang()
    for i in range(4):
        pod = h.cluster.pods.objects[PodKey("team-a", f"train-{i}")]
        pod["spec"]["tolerations"].append({"key": "maintenance", "operator": "Exists", "effect": "NoExecute"})
        pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        h.cache.pod_event("MODIFIED", pod)
    node_change(h, "n1", lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "maintenance", "value": "now", "effect": "NoExecute"}))
    assert decided(h).phase is Phase.RELEASED


def test_a_node_not_ready_restarts_the_gang_only_past_the_grace():
    h = running_gang(config=GRACE)
    from reconciler.engine.model.timestamps import rfc3339
    node_change(h, "n2", not_ready_since(rfc3339(h.wall - 20)))
    outcome = decided(h)
    assert outcome.phase is Phase.RELEASED, "20 s NotReady is within the 60 s grace"
    assert outcome.decision.recheck_at == pytest.approx(h.wall + 40), "looked at again when the grace runs out"
    h.wall += 41
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.ROLLED_BACK, "MemberFailed")
    assert "node n2 of member train-2 is NotReady for 61s" in outcome.reason


def test_replace_member_the_default_lets_the_controller_replace_a_failed_member_next_to_the_gang():
    h = running_gang(policy=None)
    fail_pod(h, "train-3")
    assert decided(h).phase is Phase.RELEASED
    assert alive(h) == ["train-0", "train-1", "train-2", "train-3"], "no running member is deleted"
    h.add(member(3, None) | {"metadata": {**member(3, None)["metadata"], "name": "train-3b"}})
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.PLACED, "Placed")
    assert outcome.reason.startswith("replacement member(s) train-3b")


def test_members_that_disagree_on_the_policy_are_held():
    h = Harness(four_nodes(), [], NO_JITTER)
    h.add(member(0, "RestartGang"))
    for i in range(1, 4):
        h.add(member(i, None))
    outcome = h.reconcile()
    assert outcome.phase is Phase.HELD
    assert "troupe.io/gang-failure-policy: <unset>, RestartGang" in outcome.reason


def test_replace_member_puts_the_replacements_of_a_lost_node_back_into_the_gangs_subblock_waiting_for_room_there():
    subblock = "cloud.google.com/gce-topology-subblock"
    h = running_gang(policy=None, required=subblock)
    home = h.node_of("train-0")
    other = "n2" if home == "n1" else "n1"
    gone = h.cluster.nodes.objects.pop(home)
    h.cache.node_event("DELETED", gone)
    assert decided(h).phase is Phase.RELEASED, "ReplaceMember: the node's loss restarts nothing"
    for name in ("train-0", "train-1"):  # the pod garbage collector deletes them; the Job recreates them
        h.cluster.pods.objects.pop(PodKey("team-a", name))
        h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": name}})
        h.add(member(int(name[-1]), None, subblock) | {"metadata": {
            **member(int(name[-1]), None, subblock)["metadata"], "name": name + "b"}})
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.UNSCHEDULABLE, "Unplaced"), outcome.reason
    assert "fits 0 of 2 members" in outcome.reason, "subblock s2 has room, but it is outside the gang's domain"
    h.cache.node_event("ADDED", h.cluster.nodes.add(gone | {"metadata": {**gone["metadata"], "name": home}}))
    outcome = decided(h)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.PLACED, "Placed")
    assert {m.node for m in outcome.decision.release} == {home}, f"back in the gang's subblock (with {other})"
