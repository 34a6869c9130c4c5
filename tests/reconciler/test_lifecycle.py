"""The gang lifecycle table: legal moves, and errors that name the gang, phases and reason."""

import pytest

from reconciler.lifecycle import TRANSITIONS, GangState, IllegalTransition, Phase


def test_a_gang_steps_from_waiting_to_released():
    state = GangState("ns/g")
    assert state.move(Phase.WAITING, "2 of 4 members present")
    assert state.move(Phase.WAITING, "3 of 4 members present")
    assert not state.move(Phase.WAITING, "3 of 4 members present"), "same phase and reason: no change"
    assert state.move(Phase.RELEASING, "placing gang")
    assert state.phase is Phase.RELEASING
    assert state.move(Phase.RELEASED, "released 4")
    assert [p for p, _ in state.history] == [Phase.WAITING, Phase.WAITING, Phase.RELEASING, Phase.RELEASED]


def test_a_released_gang_cannot_become_unschedulable():
    state = GangState("ns/g", phase=Phase.RELEASED)
    with pytest.raises(IllegalTransition) as err:
        state.move(Phase.UNSCHEDULABLE, "no nodes")
    assert str(err.value) == "gang ns/g: illegal move Released -> Unschedulable (no nodes)"
    assert state.phase is Phase.RELEASED


def test_every_phase_appears_in_the_table():
    assert set(TRANSITIONS) == set(Phase)
    assert all(targets <= set(Phase) for targets in TRANSITIONS.values())


def test_the_first_observation_may_find_a_gang_in_any_phase():
    for phase in Phase:
        state = GangState("ns/g")
        assert state.phase is None
        assert state.move(phase, "seen after a restart")
        assert state.phase is phase
