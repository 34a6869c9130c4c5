"""The scale benchmark's timeline by stage (``benchmarks/timeline.py``): the first and last
member in each state, the medians over runs and the side-by-side table, from marks given
as data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from timeline import PLANNED, RESERVATION, STAGES, PodMarks, median_timeline, stage_table, stages


def test_stages_take_the_first_and_the_nth_member_in_each_state():
    pods = [PodMarks(0.1, 0.3, 0.4, 0.5), PodMarks(0.2, 0.35, 0.6, 0.9), PodMarks(0.15, 0.32, 0.5, 0.7)]
    timeline = stages(pods, 3, reservation=0.05, planned=0.04)
    assert list(timeline) == list(STAGES)
    assert timeline[RESERVATION] == 0.05 and timeline[PLANNED] == 0.04
    assert (timeline["first created"], timeline["last created"]) == (0.1, 0.2)
    assert (timeline["first ungated"], timeline["last ungated"]) == (0.3, 0.35)
    assert (timeline["first bound"], timeline["last bound"]) == (0.4, 0.6)
    assert (timeline["first Running"], timeline["last Running"]) == (0.5, 0.9)


def test_a_plain_job_has_no_gate_stages_and_no_workload_stages():
    timeline = stages([PodMarks(0.1, None, 0.2, 0.3), PodMarks(0.2, None, 0.3, 0.4)], 2)
    assert timeline["first ungated"] is None and timeline["last ungated"] is None
    assert timeline[RESERVATION] is None and timeline[PLANNED] is None
    assert timeline["last Running"] == 0.4


def test_a_recreated_member_counts_and_the_last_is_the_nth_seen():
    # four pods seen for n = 3 (one rolled back and recreated): the last Running is the 3rd
    pods = [PodMarks(0.1, running=0.5), PodMarks(0.2, running=None), PodMarks(0.3, running=0.7),
            PodMarks(0.9, running=1.2)]
    timeline = stages(pods, 3)
    assert timeline["last created"] == 0.3
    assert timeline["last Running"] == 1.2


def test_a_state_fewer_members_reached_has_no_last():
    timeline = stages([PodMarks(0.1, bound=0.4), PodMarks(0.2)], 2)
    assert timeline["first bound"] == 0.4 and timeline["last bound"] is None


def test_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be positive, not 0"):
        stages([], 0)


def test_median_timeline_over_the_runs_that_saw_each_stage():
    runs = [{"first created": 0.1, RESERVATION: None}, {"first created": 0.3, RESERVATION: 0.02},
            {"first created": 0.2, RESERVATION: 0.04}]
    medians = median_timeline(runs)
    assert medians["first created"] == 0.2
    assert medians[RESERVATION] == pytest.approx(0.03)
    assert medians["last Running"] is None


def test_stage_table_puts_the_modes_side_by_side_with_the_difference():
    plain = stages([PodMarks(0.1, None, 0.2, 0.3)], 1)
    gang = stages([PodMarks(0.15, 0.4, 0.45, 0.5)], 1, reservation=0.05)
    lines = stage_table(plain, {"AsCreated": gang}).splitlines()
    assert lines[0] == "| stage | plain s | AsCreated s | AsCreated - plain s |"
    assert "| reservation on the Job | - | 0.05 | - |" in lines
    assert "| first ungated | - | 0.40 | - |" in lines
    assert "| last Running | 0.30 | 0.50 | +0.20 |" in lines
    assert not any(line.startswith("| planned ") for line in lines)  # seen in no mode


def test_stage_table_without_the_plain_job_has_no_difference_columns():
    gang = stages([PodMarks(0.15, 0.4, 0.45, 0.5)], 1)
    header = stage_table(None, {"AsCreated": gang, "WhenComplete": gang}).splitlines()[0]
    assert header == "| stage | plain s | AsCreated s | WhenComplete s |"


def test_stage_table_of_other_stages_names_its_baseline():
    base = {"evicted": 0.2, "last Running": 1.0}
    other = {"evicted": 0.5, "last Running": 1.5}
    lines = stage_table(base, {"troupe": other}, names=("evicted", "last Running"), base="kube-scheduler").splitlines()
    assert lines[0] == "| stage | kube-scheduler s | troupe s | troupe - kube-scheduler s |"
    assert lines[2:] == ["| evicted | 0.20 | 0.50 | +0.30 |", "| last Running | 1.00 | 1.50 | +0.50 |"]
