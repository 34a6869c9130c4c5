"""A gang's move between phases (:func:`reconciler.engine.gangs.lifecycle.move`): legal by the
table of moves, told by the rule that applied and its reason, so that two causes of one pair
of phases read as what they are."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.lifecycle import IllegalTransition, Observation, Phase, move

OBS = Observation("team-a/train", active=4, size=4, gated=1, reserved=1, released=3)


@pytest.mark.parametrize(("rule", "reason", "want"), [
    (lifecycle.RELEASE_AS_CREATED, "AsCreated: 4 node(s) reserved; 2 of 4 members exist, 2 released, 0 bound",
     "Placed -> Releasing (ReleaseAsCreated): AsCreated: 4 node(s) reserved; 2 of 4 members exist, 2 released, 0 bound"),
    (lifecycle.RELEASE_IN_PROGRESS, lifecycle.RELEASE_IN_PROGRESS.reason(OBS),
     "Placed -> Releasing (ReleaseInProgress): finishing a release: 3 of 4 members released, 1 to go on their "
     "planned nodes"),
    (lifecycle.RELEASE_IN_PROGRESS,
     lifecycle.RELEASE_IN_PROGRESS.reason(replace(OBS, unwritten="1 of 4 write(s) failed (x)")),
     "Placed -> Releasing (ReleaseInProgress): finishing a release after 1 of 4 write(s) failed (x): 3 of 4 members "
     "released, 1 to go on their planned nodes"),
], ids=["as-created", "cut-short", "write-failed"])
def test_one_pair_of_phases_is_told_by_the_rule_that_made_the_move(rule, reason, want):
    moved = move("team-a/train", Phase.PLACED, rule, OBS, reason)
    assert moved is not None and moved.describe() == want
    assert moved.fields() == {"gang": "team-a/train", "from": "Placed", "to": "Releasing", "rule": rule.name}


def test_staying_in_a_phase_is_no_move_whatever_the_rule():
    assert move("team-a/train", Phase.WAITING, lifecycle.QUEUED, OBS, "") is None
    assert move("team-a/train", Phase.WAITING, lifecycle.MEMBERS_MISSING, OBS, "3 of 4 members present") is None


def test_a_first_decision_is_any_phase_and_an_empty_reason_leaves_the_rule_alone():
    moved = move("team-a/train", None, lifecycle.AWAITING_VICTIMS, OBS, "")
    assert moved is not None and moved.describe() == "(new) -> Preempting (AwaitingVictims)"
    assert moved.fields()["from"] == ""


def test_a_move_the_table_refuses_names_the_gang_both_phases_and_the_observation():
    with pytest.raises(IllegalTransition, match=r"gang team-a/train: illegal move Waiting -> Releasing \(active=4"):
        move("team-a/train", Phase.WAITING, lifecycle.RELEASE_IN_PROGRESS, OBS, "")
