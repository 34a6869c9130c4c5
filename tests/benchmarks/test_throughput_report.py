"""What the throughput benchmark prints (``benchmarks/throughput_report.py``): pods per
second from the first creation to the last Running, a gang's first creation to its last
Running, the gangs over more than one subblock, the ratios and the table, from measured
runs given as data."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from throughput_report import (
    ModeRun,
    gang_of,
    mode_lines,
    ratio,
    shape_text,
    summary_table,
    verdict_lines,
)


def run(mode: str, created: dict[str, float], running: dict[str, float], nodes: dict[str, str] | None = None,
        **kwargs: Any) -> ModeRun:
    """A run whose last create call was answered 0.5 s after the last was sent."""
    return ModeRun(mode, created, max(created.values()) + 0.5, running, nodes or {}, **kwargs)


# Two gangs of two: g0 created at 0.0 and 0.1 s, g1 at 0.2 and 0.3 s.
CREATED = {"g0-0": 0.0, "g0-1": 0.1, "g1-0": 0.2, "g1-1": 0.3}


def test_a_pod_belongs_to_the_gang_its_name_starts_with():
    assert gang_of("g12-3") == "g12"
    assert gang_of("g0-10") == "g0"


def test_pods_per_second_run_from_the_first_creation_to_the_last_running():
    result = run("plain", CREATED, {"g0-0": 1.0, "g0-1": 1.5, "g1-0": 1.8, "g1-1": 2.0})
    assert result.pods_per_second == pytest.approx(4 / 2.0)
    assert run("plain", CREATED, {}).pods_per_second is None


def test_the_creation_rate_counts_the_pods_created_until_the_last_call_answered():
    result = ModeRun("plain", CREATED, 0.8, {}, {})
    assert result.creation_rate == pytest.approx(5.0)  # 4 pods in 0.8 s


def test_a_gang_runs_from_its_first_members_creation_to_its_last_running():
    result = run("troupe", CREATED, {"g0-0": 1.0, "g0-1": 3.0, "g1-0": 1.2, "g1-1": 1.5})
    assert sorted(result.gang_seconds()) == pytest.approx([1.3, 3.0])  # g1: 1.5 - 0.2; g0: 3.0 - 0.0
    assert result.gang_stat(50) == pytest.approx(1.3)
    assert result.gang_stat(90) == pytest.approx(3.0)


def test_a_gang_with_a_member_never_running_has_no_time():
    result = run("troupe", CREATED, {"g0-0": 1.0, "g0-1": 3.0, "g1-0": 1.2})
    assert result.gang_seconds() == [3.0]
    assert run("troupe", CREATED, {}).gang_stat(50) is None


def test_a_gang_spans_the_subblocks_of_its_bound_members():
    nodes = {"g0-0": "gpu-b0-s0-h1", "g0-1": "gpu-b0-s0-h2", "g1-0": "gpu-b0-s1-h0", "g1-1": "gpu-b1-s1-h0"}
    assert run("plain", CREATED, {}, nodes).spanning == 1  # g1: b0-s1 and b1-s1
    assert run("plain", CREATED, {}, {"g1-0": "gpu-b0-s1-h0"}).spanning == 0  # an unbound member spans nothing


def test_ratio_is_the_pods_per_second_over_plains():
    plain = run("plain", CREATED, dict.fromkeys(CREATED, 2.0))
    troupe = run("troupe", CREATED, dict.fromkeys(CREATED, 4.0))
    assert ratio(troupe, plain) == pytest.approx(0.5)
    assert ratio(troupe, None) is None
    assert ratio(run("troupe", CREATED, {}), plain) is None


def test_the_verdict_compares_troupe_to_plain_against_the_target_and_to_native():
    plain = run("plain", CREATED, dict.fromkeys(CREATED, 2.0))
    troupe = run("troupe", CREATED, dict.fromkeys(CREATED, 2.1))
    native = run("native", CREATED, dict.fromkeys(CREATED, 4.0), {p: f"gpu-b0-s{i}-h0" for i, p in enumerate(CREATED)})
    lines = verdict_lines({"plain": plain, "troupe": troupe, "native": native})
    assert lines == [
        "troupe / plain: 0.95x pods/s (target at least 0.9x: met)",
        "native / plain: 0.50x pods/s",
        "troupe ahead of native: yes (1.9 against 1.0 pods/s)",
        "native: 2 gangs over more than one subblock (must be 0)",
    ]


def test_the_verdict_says_when_troupe_misses_the_target_and_trails_native():
    plain = run("plain", CREATED, dict.fromkeys(CREATED, 2.0))
    troupe = run("troupe", CREATED, dict.fromkeys(CREATED, 4.0))
    native = run("native", CREATED, dict.fromkeys(CREATED, 3.0))
    assert verdict_lines({"plain": plain, "troupe": troupe, "native": native})[::2] == [
        "troupe / plain: 0.50x pods/s (target at least 0.9x: NOT met)",
        "troupe ahead of native: no (1.0 against 1.3 pods/s)",
    ]
    assert verdict_lines({"troupe": troupe}) == []


def test_the_lines_of_a_mode_say_each_figure():
    result = run("troupe", CREATED, {"g0-0": 1.0, "g0-1": 3.0, "g1-0": 1.2, "g1-1": 1.5},
                 {"g0-0": "gpu-b0-s0-h1", "g0-1": "gpu-b0-s0-h2"}, threads=16, reconciler_peak_mib=123.4)
    assert mode_lines(result) == [
        "troupe: 4 of 4 pods Running (2 of 2 gangs whole), the last 3.0 s after the first creation: 1.3 pods/s",
        "  a gang from its first member's creation to its last Running: median 1.30 s, p90 3.00 s",
        "  created at 5 pods/s (4 in 0.8 s, 16 client threads)",
        "  0 gangs over more than one subblock; reconciler peak memory 123 MiB",
    ]
    assert mode_lines(run("native", CREATED, {}, failed_creates=2))[2].endswith(", 2 creates refused")
    assert mode_lines(run("native", CREATED, {}))[3].endswith("reconciler peak memory not running")


def test_the_table_has_a_column_per_mode_and_the_ratios_in_brackets():
    plain = run("plain", CREATED, dict.fromkeys(CREATED, 2.0), threads=8)
    troupe = run("troupe", CREATED, dict.fromkeys(CREATED, 4.0), threads=8, reconciler_peak_mib=99.6)
    lines = summary_table({"plain": plain, "troupe": troupe}, "2 gangs of 2").splitlines()
    assert lines[0] == ("| 2 gangs of 2 | kube-scheduler alone (the same pods, no gang keys) | Troupe "
                        "| kube-scheduler's own gang plugin (Troupe off) |")
    assert lines[2] == "| pods Running per second, first creation to last Running | 2.0 | 1.0 (0.50) | - |"
    assert lines[3].endswith("| 1.8 s / 2.0 s | 3.8 s / 4.0 s | - |")  # g1 created 0.2 s after g0
    assert lines[5] == "| gangs all Running / over more than one subblock | 2 of 2 / 0 | 2 of 2 / 0 | - |"
    assert lines[6] == "| reconciler peak memory | - | 100 MiB | - |"


def test_the_shape_in_words():
    assert shape_text(500, 4, {"nvidia.com/gpu": "2"}, 2048, (4, 8, 64)) == (
        "500 gangs of 4 pods asking nvidia.com/gpu 2, 2,048 kwok nodes (4x8x64), each gang required in one subblock")
