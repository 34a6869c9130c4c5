"""kube-scheduler's refusal of a pinned member, as the engine reads it (reconciler.engine.gangs.refusals),
and what a plan says of what the engine does not model (reconciler.engine.filters.unmodeled)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.engine.decision.actions import Release, RollBack
from reconciler.engine.decision.conditions import conditions
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.refusals import MAX_AVOIDED_NODES, REFUSAL_GRACE_SECONDS, Refusal
from reconciler.engine.ledger.builder import snapshot_of_objects
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import four_nodes, gang_pods, own
from troupe import contract
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0
PLANNED = "2027-01-15T08:00:00.000+00:00"  # NOW is 2027-01-15T08:00:00Z
MESSAGE = ("0/4 nodes are available: 1 node(s) had no available disk, 3 node(s) didn't match Pod's node "
           "affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")


def released(i: int, node: str, bound: bool = False, scheduled: tuple[str, str, str] | None = None,
             pinned: bool = True) -> dict:
    """Member ``train-<i>`` of a 2-member gang, released by Troupe onto ``node`` (pinned),
    bound there or carrying kube-scheduler's ``PodScheduled`` condition ``scheduled``."""
    builder = make_pod(f"train-{i}").gang("train", 2).index(i).gpus(4)
    if pinned:
        builder = (builder.annotate(contract.ASSIGNED_NODE, node).annotate(contract.PLANNED_AT, PLANNED)
                   .annotate(contract.RELEASED_AT, PLANNED))
    pod = builder.build()
    pod["spec"]["nodeSelector"] = {contract.HOSTNAME_LABEL: node}
    if bound:
        pod["spec"]["nodeName"], pod["status"]["phase"] = node, "Running"
    if scheduled is not None:
        status, reason, message = scheduled
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": status, "reason": reason, "message": message}]
    return own([pod])[0]


def decided(pods: list[dict], now: float = NOW + 10, **gang_fields):
    snapshot = snapshot_of_objects(four_nodes(), pods)
    gang = build_gang("team-a/train", list(snapshot.pods.values()), CONFIG, {})
    return gang, decide(replace(gang, **gang_fields), snapshot, now)


def test_a_pinned_member_kube_scheduler_refuses_rolls_its_release_back_at_once_and_avoids_the_node():
    _, decision = decided([released(0, "n1", bound=True), released(1, "n2", scheduled=("False", "Unschedulable", MESSAGE))])
    assert (decision.phase, decision.rule.name) == (Phase.ROLLED_BACK, "Refused")
    assert decision.reason == (f"kube-scheduler refused member train-1 on node n2: {MESSAGE}; "
                               "rolling the release back to plan again off that node")
    rollback = decision.find(RollBack)
    assert rollback is not None
    assert (rollback.delete, rollback.keep, rollback.releases) == (("team-a/train-0", "team-a/train-1"), (), (PLANNED,))
    assert rollback.avoid == (Refusal("team-a/train-1", "n2", MESSAGE[:240]),)
    assert decision.rule.notice is not None and decision.rule.notice.reason == "GangRefused"


def test_a_refusal_counts_only_once_the_member_has_been_released_a_few_seconds():
    pods = [released(0, "n1", bound=True), released(1, "n2", scheduled=("False", "Unschedulable", MESSAGE))]
    _, early = decided(pods, now=NOW + 1)
    assert early.phase is Phase.RELEASED, "kube-scheduler's view may lag a moment: it retries on its own"
    assert early.recheck_at == NOW + REFUSAL_GRACE_SECONDS
    _, later = decided(pods, now=NOW + REFUSAL_GRACE_SECONDS)
    assert later.rule.name == "Refused"


@pytest.mark.parametrize("scheduled, pinned, why", [
    (("False", "SchedulingGated", "gated"), True, "a gated pod's reason is not a refusal"),
    (("True", "", ""), True, "scheduled"),
    (("False", "Unschedulable", MESSAGE), False, "not pinned by Troupe: kube-scheduler chooses its node"),
])
def test_no_refusal_without_unschedulable_or_on_a_member_troupe_did_not_pin(scheduled, pinned, why):
    _, decision = decided([released(0, "n1", bound=True), released(1, "n2", scheduled=scheduled, pinned=pinned)])
    assert decision.phase is Phase.RELEASED, why
    assert decision.find(RollBack) is None


def test_a_refusal_on_one_more_node_than_the_gang_may_avoid_is_left_to_the_timeout():
    avoid = {f"x{i}": "refused" for i in range(MAX_AVOIDED_NODES)}
    _, decision = decided([released(0, "n1", bound=True), released(1, "n2", scheduled=("False", "Unschedulable", MESSAGE))],
                          avoid=avoid)
    assert decision.phase is Phase.RELEASED
    # One of the nodes it avoids already: still rolled back (a pin there never binds).
    avoid = {**{f"x{i}": "refused" for i in range(MAX_AVOIDED_NODES - 1)}, "n2": "refused before"}
    _, decision = decided([released(0, "n1", bound=True), released(1, "n2", scheduled=("False", "Unschedulable", MESSAGE))],
                          avoid=avoid)
    assert decision.rule.name == "Refused"


def test_the_next_plan_avoids_the_refused_node_and_says_why():
    avoid = {"n2": f"kube-scheduler refused member train-1 on node n2: {MESSAGE}"}
    gang, free = decided(gang_pods(2, gpus=4))
    assert {m.node for m in free.release} == {"n1", "n2"}, "without it, the best plan is subblock s1"
    gang, decision = decided(gang_pods(2, gpus=4), avoid=avoid)
    assert decision.phase is Phase.PLACED
    assert "n2" not in {m.node for m in decision.release}
    assert f"avoiding node n2 (kube-scheduler refused member train-1 on node n2: {MESSAGE})" in decision.reason
    release = decision.find(Release)
    assert release is not None and release.note.startswith("avoiding node n2")
    message = conditions(gang, decision)["team-a/train-0"].message
    assert message.startswith("released onto node ") and "avoiding node n2" in message


def test_a_gang_that_cannot_fit_off_the_avoided_nodes_is_unschedulable_and_says_which_it_avoids():
    avoid = dict.fromkeys(("n1", "n2", "n3"), "refused")
    _, decision = decided(gang_pods(2, gpus=4), avoid=avoid)
    assert decision.phase is Phase.UNSCHEDULABLE
    assert "avoiding node n1 (refused)" in decision.reason


INLINE_DISK = {"name": "scratch", "csi": {"driver": "disk.example.com"}}


def test_a_member_using_what_the_engine_does_not_model_is_placed_with_a_note_saying_so():
    pods = gang_pods(2, gpus=4)
    pods[1]["spec"]["volumes"] = [INLINE_DISK]
    gang, decision = decided(pods)
    assert decision.phase is Phase.PLACED
    note = "placed without modeling: inline csi volume scratch (kube-scheduler will check it)"
    assert decision.reason.endswith(f"; {note}")
    assert conditions(gang, decision)["team-a/train-0"].message.endswith(f"; {note}")
    _, plain = decided(gang_pods(2, gpus=4))
    assert "without modeling" not in plain.reason and plain.find(Release).note == ""


def test_what_the_engine_models_is_not_noted():
    pods = gang_pods(2, gpus=4)
    pods[1]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": contract.HOSTNAME_LABEL}]}}
    pods[1]["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    _, decision = decided(pods)
    assert decision.phase is Phase.PLACED and "without modeling" not in decision.reason
