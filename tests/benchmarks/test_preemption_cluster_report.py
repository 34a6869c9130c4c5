"""What the preemption benchmark on the control plane prints
(``benchmarks/preemption_cluster_report.py``): the watch folded into pod records, the
victim Jobs disturbed and broken, the preemptor's stages, the summary and the timeline,
from raw watch events given as data.

The runs below are small: victim Jobs ``low-0`` .. of 4 pods, a preemptor ``high`` of 2::

    subblock  gpu-b0-s0          gpu-b0-s1
    hosts     h0 h1 h2 h3        h0 h1 h2 h3
    pods      low-0 x4           low-1 x4
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from preemption_cluster_report import (
    KUBE_SCHEDULER,
    STAGES,
    TROUPE,
    Outcome,
    RunWatch,
    broken,
    mode_line,
    outcome,
    ratio,
    summary_table,
    timeline_text,
)

GATE, NOMINATION, TAINT = "troupe.io/placement", "reconciler.troupe.io/nomination", "troupe.io/nominated"


def pod(uid: str, job: str, *, phase: str = "Pending", node: str | None = None, gated: bool = False,
        deleting: bool = False, disrupted: bool = False, nominated: str | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as a raw watch carries it."""
    meta: dict[str, Any] = {"uid": uid, "name": uid, "labels": {"job-name": job}, "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    spec: dict[str, Any] = {"schedulingGates": [{"name": GATE}] if gated else []}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase,
                              "conditions": [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"metadata": meta, "spec": spec, "status": status}


def node(name: str, *taints: str) -> dict[str, Any]:
    """A node as a raw watch carries it, with taints of the keys ``taints``."""
    return {"metadata": {"name": name}, "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]}}


def filled(watch: RunWatch, jobs: int = 2, size: int = 4) -> None:
    """``jobs`` victim Jobs of ``size`` pods Running, Job i in subblock i, listed at 0 s."""
    watch.listed([pod(f"low-{j}-{i}", f"low-{j}", phase="Running", node=f"gpu-b0-s{j}-h{i}")
                  for j in range(jobs) for i in range(size)], 0.0)


def test_a_troupe_run_that_evicts_one_gang_whole_breaks_none_and_has_every_stage():
    watch = RunWatch("high", 2, GATE, NOMINATION, TAINT)
    filled(watch)
    start = 10.0
    for i in range(2):
        watch.event("ADDED", pod(f"high-{i}", "high", gated=True), start + 0.1 * (i + 1))
    watch.event("MODIFIED", pod("high-0", "high", gated=True, annotations={NOMINATION: "{}"}), 10.5)
    watch.nodes_listed([node("gpu-b0-s0-h0", TAINT), node("gpu-b0-s1-h0", "other")], 10.52)
    watch.node_event("MODIFIED", node("gpu-b0-s0-h1", TAINT), 10.55)
    watch.node_event("MODIFIED", node("gpu-b0-s0-h0"), 10.58)  # seen again: the first sighting counts
    for i in range(4):  # the whole of low-0: DisruptionTarget, then deleted, then Failed
        watch.event("MODIFIED", pod(f"low-0-{i}", "low-0", phase="Running", node=f"gpu-b0-s0-h{i}", disrupted=True),
                    10.6 + 0.01 * i)
        watch.event("MODIFIED", pod(f"low-0-{i}", "low-0", phase="Failed", node=f"gpu-b0-s0-h{i}", deleting=True),
                    11.0 + 0.01 * i)
    for i in range(2):
        watch.event("MODIFIED", pod(f"high-{i}", "high"), 11.5 + 0.1 * i)
        watch.event("MODIFIED", pod(f"high-{i}", "high", node=f"gpu-b0-s0-h{i}"), 11.8 + 0.1 * i)
        assert not watch.done.is_set()
        watch.event("MODIFIED", pod(f"high-{i}", "high", phase="Running", node=f"gpu-b0-s0-h{i}"), 12.0 + 0.5 * i)
    assert watch.done.is_set()

    result = outcome(watch, TROUPE, start, jobs=2, victim_size=4)

    assert result.to_running == pytest.approx(2.5)
    assert sorted(result.nodes) == ["gpu-b0-s0-h0", "gpu-b0-s0-h1"]
    assert result.victims == ("low-0",) * 4 and result.disturbed == ("low-0",)
    assert result.broken_at_running == () and result.broken_at_end == ()
    assert list(result.timeline) == list(STAGES)
    want = {"first created": 0.1, "last created": 0.2, "first nominated": 0.5, "last nominated": 0.5,
            "first node tainted": 0.52, "last node tainted": 0.55,
            "first eviction asked": 0.6, "last eviction asked": 0.63, "first victim gone": 1.0,
            "last victim gone": 1.03, "first released": 1.5, "last released": 1.6, "first bound": 1.8,
            "last bound": 1.9, "first Running": 2.0, "last Running": 2.5}
    assert result.timeline == pytest.approx(want)


def test_kube_schedulers_pod_by_pod_preemption_leaves_each_victim_job_partly_running():
    watch = RunWatch("high", 2, GATE, NOMINATION, TAINT)
    filled(watch)
    start = 5.0
    watch.event("ADDED", pod("high-0", "high"), 5.1)
    watch.event("ADDED", pod("high-1", "high"), 5.2)
    for i, (victim, job, node) in enumerate([("low-0-3", "low-0", "gpu-b0-s0-h3"), ("low-1-0", "low-1", "gpu-b0-s1-h0")]):
        watch.event("MODIFIED", pod(f"high-{i}", "high", nominated=node), 5.3 + i)
        watch.event("MODIFIED", pod(victim, job, phase="Running", node=node, disrupted=True), 5.4 + i)
        watch.event("DELETED", pod(victim, job, phase="Failed", node=node, deleting=True), 5.5 + i)
        watch.event("ADDED", pod(f"{victim}-again", job), 5.6 + i)  # the Job's replacement: Pending
        watch.event("MODIFIED", pod(f"high-{i}", "high", phase="Running", node=node), 5.7 + i)

    result = outcome(watch, KUBE_SCHEDULER, start, jobs=2, victim_size=4)

    assert result.to_running == pytest.approx(1.7)
    assert result.disturbed == ("low-0", "low-1") and len(result.victims) == 2
    assert result.broken_at_running == ("low-0", "low-1") and result.broken_at_end == ("low-0", "low-1")
    assert (result.timeline["first nominated"], result.timeline["last nominated"]) == pytest.approx((0.3, 1.3))
    assert result.timeline["first released"] is None and result.timeline["last released"] is None
    assert result.timeline["first node tainted"] is None
    assert result.timeline["last victim gone"] == pytest.approx(1.5)
    assert "2 pods of 2 of 2 victim Jobs evicted; 2 left partly running" in mode_line(result, 4)
    assert "2 subblock(s) (fewest 1)" in mode_line(result, 4)


def test_a_pod_evicted_before_the_preemptor_was_created_is_no_victim():
    watch = RunWatch("high", 1, GATE, NOMINATION, TAINT)
    filled(watch, jobs=1)
    watch.event("MODIFIED", pod("low-0-1", "low-0", phase="Running", node="gpu-b0-s0-h1", deleting=True), 3.0)
    result = outcome(watch, TROUPE, 4.0, jobs=1, victim_size=4)
    assert result.victims == () and result.broken_at_end == ()
    assert result.to_running is None and result.broken_at_running == ()


def test_a_node_tainted_before_the_preemptor_was_created_is_left_out():
    watch = RunWatch("high", 1, GATE, NOMINATION, TAINT)
    watch.nodes_listed([node("gpu-b0-s0-h0", TAINT)], 1.0)
    watch.node_event("MODIFIED", node("gpu-b0-s0-h1", TAINT), 6.0)
    result = outcome(watch, TROUPE, 5.0, jobs=1, victim_size=4)
    assert (result.timeline["first node tainted"], result.timeline["last node tainted"]) == (1.0, 1.0)


def test_a_relist_marks_the_pods_it_no_longer_lists_gone():
    watch = RunWatch("high", 1, GATE, NOMINATION, TAINT)
    filled(watch, jobs=1)
    watch.event("MODIFIED", pod("low-0-0", "low-0", phase="Running", node="gpu-b0-s0-h0", disrupted=True), 2.0)
    watch.listed([pod(f"low-0-{i}", "low-0", phase="Running", node=f"gpu-b0-s0-h{i}") for i in (1, 2, 3)], 3.0)
    assert watch.pods["low-0-0"].gone == 3.0 and not watch.pods["low-0-0"].active
    assert watch.jobs_running() == {"low-0": 3} and watch.active() == 3


def test_a_job_is_broken_only_when_disturbed_and_partly_running():
    running = {"a": 3, "b": 4, "c": 0}
    assert broken(["a", "b", "c", "a"], running, 4) == ("a",)
    assert broken(["d"], running, 4) == ()  # evicted whole: nothing runs
    assert broken([], {"e": 2}, 4) == ()  # partly running but never disturbed


def test_the_stages_need_a_positive_count():
    from preemption_cluster_report import preemptor_stages
    with pytest.raises(ValueError, match="n must be positive, not 0"):
        preemptor_stages([], [], 0, 0.0)


def nodes(count: int, subblocks: int) -> tuple[str, ...]:
    return tuple(f"gpu-b0-s{i % subblocks}-h{i}" for i in range(count))


def test_the_summary_puts_both_runs_side_by_side_with_the_targets():
    ks = Outcome(KUBE_SCHEDULER, 4.9, nodes(64, 2), ("low-1",) * 2 + tuple(f"low-{i}" for i in range(2, 64)),
                 tuple(f"low-{i}" for i in range(42)), tuple(f"low-{i}" for i in range(42)), 64)
    ours = Outcome(TROUPE, 7.5, nodes(64, 1), tuple(f"low-{i}" for i in range(8) for _ in range(8)), (), (), 64)
    assert ratio([ours, ks]) == pytest.approx(7.5 / 4.9)

    lines = summary_table([ours, ks], 64, 64, settle=15).splitlines()

    assert lines[0] == "|  | kube-scheduler | troupe |"
    assert lines[2] == "| seconds from the preemptor's creation to all 64 Running | 4.90 | 7.50 |"
    assert lines[3] == "| subblocks spanned (fewest: 1) | 2 | 1 |"
    assert lines[4] == "| victim Jobs left partly running when the preemptor ran | 42 of 64 | 0 of 64 |"
    assert lines[5] == "| the same 15 s later | 42 of 64 | 0 of 64 |"
    assert lines[6] == "| victim Jobs disturbed (a pod evicted) | 63 of 64 | 8 of 64 |"
    assert lines[7] == "| victim pods evicted | 64 | 64 |"
    assert lines[9] == "troupe / kube-scheduler: 1.53x (target within 1.2x: NOT met)"
    assert lines[10] == "troupe's victim gangs left partly running: 0 (target 0: met)"


def test_the_summary_says_when_troupe_broke_a_gang_or_met_the_time():
    ks = Outcome(KUBE_SCHEDULER, 5.0, nodes(8, 1), ("a",), ("a",), ("a",), 8)
    ours = Outcome(TROUPE, 5.5, nodes(8, 1), ("b", "b"), (), ("b",), 8)
    lines = summary_table([ks, ours], 8, 64, settle=10).splitlines()
    assert lines[-2] == "troupe / kube-scheduler: 1.10x (target within 1.2x: met)"
    assert lines[-1] == "troupe's victim gangs left partly running: 1 (target 0: NOT met)"


def test_a_run_that_never_got_its_preemptor_running_has_no_ratio():
    ks = Outcome(KUBE_SCHEDULER, 5.0, nodes(8, 1), (), (), (), 8)
    stuck = Outcome(TROUPE, None, (), (), (), (), 8)
    assert ratio([ks, stuck]) is None
    lines = summary_table([ks, stuck], 8, 64, settle=10).splitlines()
    assert lines[2].endswith("| 5.00 | n/a |") and lines[3].endswith("| 1 | n/a |")
    assert lines[4].endswith("| 0 of 8 | n/a |")
    assert not any(line.startswith("troupe / kube-scheduler") for line in lines)


def test_the_timeline_puts_troupe_beside_kube_scheduler_with_the_difference():
    ks = Outcome(KUBE_SCHEDULER, 1.0, (), (), (), (), 1, {**dict.fromkeys(STAGES), "first created": 0.1,
                                                          "last Running": 1.0})
    ours = Outcome(TROUPE, 1.5, (), (), (), (), 1, {**dict.fromkeys(STAGES), "first created": 0.1,
                                                    "first released": 1.2, "last Running": 1.5})
    lines = timeline_text([ours, ks]).splitlines()
    assert lines[0] == "| stage | kube-scheduler s | troupe s | troupe - kube-scheduler s |"
    assert lines[2:] == ["| first created | 0.10 | 0.10 | +0.00 |", "| first released | - | 1.20 | - |",
                         "| last Running | 1.00 | 1.50 | +0.50 |"]
