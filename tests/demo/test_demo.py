"""The demo's parts that need no cluster: the topology it reads from the nodes, what it says
when a cluster lacks something, how it plays scenarios, the summary, its command line.
The demo itself (``make demo``) is its own end-to-end check: it exits non-zero when a
scenario does not show what it says."""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.demo import __main__ as demo
from devtools.demo.scenarios import SCENARIOS, Scenario, by_name
from devtools.demo.stage import DemoFailure, Narrator, Unsuitable, read_layout
from devtools.devcluster import nodes as nodes_mod
from troupe.config import GKE_LEVELS

REPO = Path(__file__).resolve().parents[2]


def demo_nodes() -> list[dict[str, Any]]:
    """The demo cluster's nodes, Ready as kwok makes them."""
    nodes = nodes_mod.load(REPO / "examples" / "demo-nodes.yaml")
    for n in nodes:
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return nodes


def test_the_demo_cluster_is_2_blocks_of_2_subblocks_of_8_hosts_2_shared_nodes_and_8_dra_nodes():
    layout = read_layout(demo_nodes(), GKE_LEVELS)
    assert [s.name for s in layout.subblocks] == ["gpu-b0-s0", "gpu-b0-s1", "gpu-b1-s0", "gpu-b1-s1"]
    assert (layout.hosts, layout.gpus, layout.shared, layout.node_count) == (8, 8, ("shared-0", "shared-1"), 42), \
        "the 8 DRA nodes (no nvidia.com/gpu) are not in the layout"
    assert layout.subblocks[2].nodes == tuple(f"gpu-b1-s0-h{i}" for i in range(8))
    assert layout.subblock_of("gpu-b0-s1-h3") == "gpu-b0-s1"


@pytest.mark.parametrize(("spoil", "message"), [
    ("one block", "needs 2 blocks (cloud.google.com/gce-topology-block) with 2 subblocks"),
    ("no labels", "no Ready, untainted node with nvidia.com/gpu and the labels"),
    ("cordoned", "found 2 block(s) with such subblocks: gpu-b0 (2), gpu-b1 (1)"),
])
def test_a_cluster_without_the_topology_says_what_is_missing(spoil, message):
    nodes = demo_nodes()
    for n in nodes:
        labels = n["metadata"]["labels"]
        if spoil == "one block" and "cloud.google.com/gce-topology-block" in labels:
            labels["cloud.google.com/gce-topology-block"] = "only"
        if spoil == "no labels":
            for key in GKE_LEVELS:
                labels.pop(key, None)
        if spoil == "cordoned" and n["metadata"]["name"].startswith("gpu-b1-s1-h"):
            n["spec"]["unschedulable"] = int(n["metadata"]["name"][-1]) < 5  # 3 usable nodes left
    with pytest.raises(Unsuitable, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_layout(nodes, GKE_LEVELS)


def test_subblocks_are_cut_to_the_smallest_and_nodes_of_another_gpu_count_are_left_out():
    nodes = demo_nodes()
    extra = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == "gpu-b0-s0-h0"))
    extra["metadata"]["name"] = "gpu-b0-s0-h8"
    extra["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    nodes = [n for n in nodes if n["metadata"]["name"] != "gpu-b1-s1-h7"] + [extra]
    layout = read_layout(nodes, GKE_LEVELS)
    assert layout.hosts == 7 and all(len(s.nodes) == 7 for s in layout.subblocks)
    assert "gpu-b0-s0-h8" not in layout.subblocks[0].nodes


@dataclass
class FakeStage:
    """What :func:`devtools.demo.__main__.play` uses of a stage."""

    narrator: Narrator = field(default_factory=lambda: Narrator(io.StringIO()))
    local: bool = False
    logs: str = "/tmp/logs"
    checks: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        self.narrator.step(text)

    def delete_namespace(self, name: str) -> None:
        self.deleted.append(name)


def scenario(name: str, outcome: str | Exception) -> Scenario:
    def run(stage: Any) -> str:
        stage.created.append(f"demo-{name}")
        stage.checks.append("a check")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return Scenario(name, f"the {name} scenario", run)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.5
        return self.t


def test_play_runs_each_scenario_times_it_and_deletes_its_namespaces():
    stage = FakeStage()
    results = demo.play(stage, [scenario("one", "shown"), scenario("two", "shown too")], clock=Clock())  # type: ignore[arg-type]
    assert [(r.scenario.name, r.status, r.summary, r.seconds, r.checks) for r in results] == [
        ("one", "ok", "shown", 1.5, 1), ("two", "ok", "shown too", 1.5, 1)]
    assert stage.deleted == ["demo-one", "demo-two"]
    text = stage.narrator.out.getvalue()  # type: ignore[attr-defined]
    assert "== 1/2  the one scenario" in text and "OK: 1 checks in 1.5s" in text


def test_keep_leaves_the_last_scenarios_namespace():
    stage = FakeStage()
    demo.play(stage, [scenario("one", "x"), scenario("two", "y")], keep_last=True, clock=Clock())  # type: ignore[arg-type]
    assert stage.deleted == ["demo-one"]


def test_a_scenario_that_does_not_show_what_it_says_fails_the_demo_naming_it_and_the_logs():
    stage = FakeStage()
    with pytest.raises(demo.ScenarioFailed) as failed:
        demo.play(stage, [scenario("one", "x"), scenario("two", DemoFailure("expected 4 pods Running")),  # type: ignore[arg-type]
                          scenario("three", "never played")], clock=Clock())
    assert str(failed.value) == ("scenario 2 (two) failed after 1.5s: expected 4 pods Running\n"
                                 "[demo] logs: /tmp/logs")
    assert stage.deleted == ["demo-one", "demo-two"], "an existing cluster is cleaned up after a failure too"


def test_on_its_own_cluster_a_failed_scenarios_objects_stay_for_the_logs():
    stage = FakeStage(local=True)
    with pytest.raises(demo.ScenarioFailed):
        demo.play(stage, [scenario("one", DemoFailure("no"))], clock=Clock())  # type: ignore[arg-type]
    assert stage.deleted == []


def test_the_summary_has_a_line_per_scenario_with_its_time_and_the_totals():
    results = [demo.Result(1, SCENARIOS[0], "ok", "ran whole", 4.04, 9),
               demo.Result(2, SCENARIOS[3], "skipped", "needs a shared node", 0.0, 0)]
    text = demo.summary(results, "a local cluster of 34 nodes", [("control plane", 5.3), ("total", 20.0)])
    assert text.splitlines() == [
        "== Summary: 1 of 2 scenarios shown and checked (9 checks), 1 skipped, on a local cluster of 34 nodes",
        "   1. gang       4.0s  ok    ran whole",
        "   2. devices     -    SKIP  needs a shared node",
        "   control plane 5.3s; total 20.0s",
    ]


def test_scenarios_are_chosen_by_name_in_story_order():
    assert [s.name for s in by_name(["jobset", "gang"])] == ["gang", "jobset"]
    with pytest.raises(ValueError, match="unknown scenario\\(s\\) nope; known: gang, topology"):
        by_name(["nope"])


def test_every_capability_of_the_issue_has_a_scenario():
    assert [s.name for s in SCENARIOS] == [
        "gang", "topology", "deadlock", "devices", "preemption", "admission", "timeout", "jobset", "slices",
        "recovery", "dra"]
    assert all(s.run.__doc__ for s in SCENARIOS), "each scenario says what it shows"


def test_help_lists_the_scenarios_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as e:
        demo.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for text in ("--keep", "--kubeconfig", "--only", "deadlock", "Exit codes"):
        assert text in out


def test_an_unknown_scenario_is_one_line_and_exit_code_1(capsys):
    assert demo.main(["--only", "nope"]) == 1
    assert capsys.readouterr().err.startswith("[demo] error: unknown scenario(s) nope")


def test_a_kubeconfig_that_does_not_exist_is_refused_before_anything_runs(capsys, tmp_path):
    assert demo.main(["--kubeconfig", str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err
