"""One gang stepped through its whole lifecycle, a table of steps: after each step the
phase, the rule and the reason; at each step a reconciler that restarts (nothing in
memory, the same cluster) decides the same."""

from __future__ import annotations

import itertools

import pytest

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.lifecycle import MOVES, Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, own

UIDS = itertools.count()


def member(i, gpus=2, size=4):
    """A new gated member ``train-<i>``: a new pod (a new UID) even when the name is reused."""
    pod = own([make_pod(f"train-{i}").gang("train", size).index(i).gpus(gpus).gated().build()])[0]
    pod["metadata"]["uid"] = f"uid-{next(UIDS)}"
    return pod


def add(i, **kw):
    return lambda h: h.add(member(i, **kw))


def bind_all(h):
    h.sync()
    for ref, pod in sorted(h.cluster.pods.objects.items()):
        if not pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName"):
            h.bind(ref.name)


def delete(name):
    def step(h):
        h.cluster.pods.objects.pop(PodKey("team-a", name))
        h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": name}})
    return step


def later(seconds):
    def step(h):
        h.sync()
        h.wall += seconds
    return step


def recreate(h):
    """The Job recreates the members a rollback deleted (gated again by the webhook)."""
    h.sync()
    for i in range(4):
        if PodKey("team-a", f"train-{i}") not in h.cluster.pods.objects:
            h.add(member(i))


#   (step, action, want phase, want rule, want start of reason)
STEPS = [
    ("three of four members exist", lambda h: [add(i)(h) for i in range(3)], Phase.WAITING, "MembersMissing",
     "3 of 4 members present"),
    ("the fourth comes: the gang is placed and released whole", add(3), Phase.PLACED, "Placed",
     "placed 4 members in cloud.google.com/gce-topology-subblock=b1/s1"),
    ("the watch shows the release", later(0), Phase.RELEASED, "AllReleased", "0 of 4 released members bound"),
    ("kube-scheduler binds them", bind_all, Phase.RELEASED, "AllReleased",
     "all 4 active members released and bound (4 running)"),
    ("a member is deleted", delete("train-3"), Phase.RELEASED, "AllReleased",
     "all 3 active members released and bound (3 running); 1 missing"),
    ("its replacement fits and is released on its own", add(3), Phase.PLACED, "Placed",
     "replacement member(s) train-3: placed 1 members in node n2"),
    ("it runs", bind_all, Phase.RELEASED, "AllReleased", "all 4 active members released and bound"),
    ("a member is replaced by one that does not fit", lambda h: (delete("train-3")(h), add(3, gpus=8)(h)),
     Phase.UNSCHEDULABLE, "Unplaced", "replacement member(s) train-3: fits 0 of 1 members"),
    ("then by one that disagrees", lambda h: (delete("train-3")(h), add(3, size=5)(h)), Phase.HELD,
     "MembersDisagree", "members disagree on troupe.io/gang-size: 4, 5"),
    ("then by one that fits", lambda h: (delete("train-3")(h), add(3)(h)), Phase.PLACED, "Placed",
     "replacement member(s) train-3: placed 1 members"),
    ("it is never bound: at its timeout it alone is rolled back", later(30), Phase.ROLLED_BACK, "TimedOut",
     "1 released member(s) not bound within 30s (+0s jitter)"),
    ("its Job recreates it during the backoff", recreate, Phase.BACKING_OFF, "BackingOff",
     "backing off after 1 timeout(s): 10s left"),
    ("the backoff runs out", later(10), Phase.PLACED, "Placed", "replacement member(s) train-3"),
    ("every member goes away", lambda h: [delete(f"train-{i}")(h) for i in range(4)], None, "", ""),
    ("a new set of members comes", lambda h: [add(i)(h) for i in range(4)], Phase.PLACED, "Placed", "placed 4"),
    ("none is bound in time: the whole gang is rolled back", later(31), Phase.ROLLED_BACK, "TimedOut",
     "4 released member(s) not bound within 30s"),
    ("the Job recreates them (the gang had gone: its count starts again)", recreate, Phase.BACKING_OFF, "BackingOff",
     "backing off after 1 timeout(s): 10s left"),
    ("after the backoff they are placed again", later(10), Phase.PLACED, "Placed", "placed 4 members"),
]


def test_a_gang_steps_through_its_lifecycle_and_a_restart_decides_the_same_at_each_step():
    h = Harness(four_nodes(), [], NO_JITTER)
    seen = []
    for step, action, want_phase, want_rule, want_reason in STEPS:
        action(h)
        gang = h.controller.gang("team-a/train")
        if gang is not None and want_phase is not Phase.BACKING_OFF:
            # A restarted reconciler remembers nothing (a backoff is the one thing it loses).
            fresh = h.new_controllers().gangs.gang("team-a/train")
            restarted = decide(fresh, h.cache.snapshot(), h.wall)
            assert (restarted.phase, restarted.rule.name) == (want_phase, want_rule), f"{step}: after a restart"
        outcome = h.reconcile()
        if want_phase is None:
            assert outcome is None, step
            continue
        assert (outcome.phase, outcome.decision.rule.name) == (want_phase, want_rule), f"{step}: {outcome.reason}"
        assert outcome.reason.startswith(want_reason), f"{step}: {outcome.reason}"
        seen.append(outcome.phase)
    assert h.controller.illegal_moves == 0
    assert set(seen) == set(Phase) - {Phase.RELEASING, Phase.PREEMPTING}, \
        "every phase but Releasing (see test_controller) and Preempting (test_preemption_steps) is stepped"


@pytest.mark.parametrize("phase", list(Phase))
def test_every_move_leaves_its_phase_and_committed_phases_follow_only_a_plan(phase):
    assert phase not in MOVES[phase], "staying is always legal, never listed"
    assert Phase.RELEASING not in MOVES[phase] or phase in (Phase.PLACED, Phase.RELEASING)
