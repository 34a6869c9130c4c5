"""The instant look: ``examples/snapshot.json`` (made by ``python -m devtools.demo.snapshot``
on the demo's cluster) read by the simulator and by ``kubectl troupe``, no cluster needed.

The scene (devtools/demo/snapshot.py)::

    ml/train        8 x 8 GPUs, one subblock          Released
    research/sweep  12 x 8 GPUs, priority 10          Released
    team-b/job:finetune  (gang-mode auto)             Released
    ml/urgent       8 x 8 GPUs in one subblock, 1000  Unschedulable: fits 5 of 8; would evict sweep
    ml/wide         9 x 8 GPUs in one subblock        Unschedulable: no subblock has 9 nodes
    ml/eval         3 of 4 members                    Waiting
    ml/misc         sizes 2 and 3                     Held
    infer/          llm-a Bound on shared-0 (0,1); llm-big (12 GPUs) Pending
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.demo.snapshot import decision_time
from reconciler.tools import plugin
from reconciler.tools import simulate as sim

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "examples" / "snapshot.json"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


@pytest.fixture(scope="module")
def now() -> str:
    return decision_time(json.loads(SNAPSHOT.read_text()))


def run(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return str(out.out)


def test_the_snapshot_is_what_kubectl_get_gives():
    listed = json.loads(SNAPSHOT.read_text())
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    kinds = {i["kind"] for i in listed["items"]}
    assert kinds == {"Node", "Pod", "Job", "SharedDeviceGroup"}
    assert sum(i["kind"] == "Node" for i in listed["items"]) == 34


def test_the_simulator_tells_the_story_of_every_waiting_gang_and_group(capsys, now):
    out = json.loads(run(sim.main, [str(SNAPSHOT), "--output", "json", "--now", now], capsys))
    gangs = {f"{g['namespace']}/{g['name']}": g for g in out["gangs"]}
    want = {
        "ml/urgent": ("Unschedulable", f"fits 5 of 8 members in one {SUBBLOCK}"),
        "ml/wide": ("Unschedulable", f"fits 5 of 9 members in one {SUBBLOCK}"),
        "ml/eval": ("Waiting", "3 of 4 members present"),
        "ml/misc": ("Held", "members disagree on troupe.io/gang-size: 2, 3"),
        "infer/pod:llm-big-0": ("Unschedulable", "SharedDeviceGroup llm-big (12 nvidia.com/gpu): no shared node has 12"),
    }
    assert {k: (g["phase"], g["reason"][:len(want[k][1])]) for k, g in gangs.items()} == want
    assert gangs["ml/wide"]["code"] == "UnschedulableAndUnresolvable", "no subblock has 9 nodes"
    assert gangs["ml/urgent"]["code"] == "Unschedulable", "room may be freed"
    groups = {g["name"]: g for g in out["deviceGroups"]}
    assert (groups["llm-a"]["phase"], groups["llm-a"]["node"], groups["llm-a"]["devices"]) == (
        "Bound", "shared-0", {"nvidia.com/gpu": [0, 1]})
    assert groups["llm-big"]["phase"] == "Pending"


@pytest.mark.parametrize(("mode", "want_victims"), [("minimal", 6), ("atomic", 12)])
def test_turning_preemption_on_would_evict_the_low_priority_sweep_for_urgent(capsys, now, mode, want_victims):
    out = json.loads(run(sim.main, [str(SNAPSHOT), "--output", "json", "--now", now,
                                    "--gang-preemption-mode", mode], capsys))
    urgent = next(g for g in out["gangs"] if g["name"] == "urgent")
    assert urgent["phase"] == "Preempting"
    assert urgent["reason"].startswith(f"evict 1 gang of another namespace ({want_victims} pods, priority <= 10)")
    assert len(urgent["victims"]) == want_victims, "the snapshot's own pods are named"
    assert {v["namespace"] for v in urgent["victims"]} == {"research"}


def test_kubectl_troupe_status_shows_the_running_gangs_too(capsys, now):
    out = json.loads(run(plugin.main, ["status", "-A", "--snapshot", str(SNAPSHOT), "--now", now, "-o", "json"],
                         capsys))
    phases = {f"{g['metadata']['namespace']}/{g['spec']['gangName']}": g["status"]["phase"] for g in out["items"]}
    assert phases == {
        "ml/urgent": "Unschedulable", "infer/pod:llm-big-0": "Unschedulable", "ml/eval": "Waiting",
        "ml/misc": "Held", "ml/wide": "Unschedulable",
        "ml/train": "Released", "research/sweep": "Released", "team-b/job:finetune": "Released",
    }
    table = run(plugin.main, ["status", "-A", "--snapshot", str(SNAPSHOT), "--now", now], capsys)
    assert table.splitlines()[0].split()[:3] == ["NAMESPACE", "GANG", "PHASE"]


def test_kubectl_troupe_why_explains_the_gang_that_never_fits(capsys, now):
    listed = json.loads(SNAPSHOT.read_text())
    wide = next(i["metadata"]["name"] for i in listed["items"]
                if i["kind"] == "Pod" and i["metadata"]["name"].startswith("wide-0-"))
    out = run(plugin.main, ["why", wide, "-n", "ml", "--snapshot", str(SNAPSHOT), "--now", now], capsys)
    assert "Phase:    Unschedulable (rule Unplaced, placement UnschedulableAndUnresolvable)" in out
    assert "at most 8 even when empty" in out


def test_the_decision_time_is_the_newest_timestamp_plus_five_seconds():
    listed = {"items": [
        {"metadata": {"creationTimestamp": "2026-01-01T10:00:00Z"}},
        {"metadata": {"creationTimestamp": "2026-01-01T09:00:00Z",
                      "annotations": {"reconciler.troupe.io/released-at": "2026-01-01T10:00:01.500+00:00"}}},
    ]}
    assert decision_time(listed) == "2026-01-01T10:00:06Z"
