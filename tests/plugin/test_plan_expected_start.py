"""``kubectl troupe plan`` under ``queueingStrategy: Backfill`` prints a waiting gang's
expected start, the start of the reservation the reconciler makes for it
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

Nodes: subblocks gpu-b0-s0 and gpu-b0-s1, two hosts each (8 GPUs a host). Each node runs a
whole-node pod started at NOW - 10 s; those of gpu-b0-s0 end by their
``activeDeadlineSeconds`` 70 and 130 s after it, those of gpu-b0-s1 have none.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import yaml

from reconciler.tools import plugin
from testbed.engine_builders import make_pod
from tests.support.snapshots import node, write_list

NOW = "2026-03-01T10:00:00Z"
STARTED = "2026-03-01T09:59:50Z"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def busy(name: str, on: str, deadline: int | None) -> dict[str, Any]:
    pod = make_pod(name, "ml").requests(gpu=8, cpu="1").on(on)
    pod.obj["status"]["startTime"] = STARTED
    if deadline is not None:
        pod.spec["activeDeadlineSeconds"] = deadline
    return pod.build()


def big_job() -> dict[str, Any]:
    """An Indexed Job of 2 whole-node pods with a required subblock."""
    annotations = {"troupe.io/gang-name": "big", "troupe.io/gang-size": "2",
                   "troupe.io/topology-required-level": SUBBLOCK}
    spec = {"restartPolicy": "Never", "containers": [{"name": "w", "image": "x", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": "ml"},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                     "template": {"metadata": {"annotations": annotations}, "spec": spec}}}


def plan(tmp_path: Any, output: str) -> str:
    nodes = [node(0, s, h).build() for s in (0, 1) for h in range(2)]
    pods = [busy("a", "gpu-b0-s0-h0", 70), busy("b", "gpu-b0-s0-h1", 130), busy("c", "gpu-b0-s1-h0", None),
            busy("d", "gpu-b0-s1-h1", None)]
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump(big_job()))
    config = tmp_path / "config.yaml"
    config.write_text("queueingStrategy: Backfill\n")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = plugin.main(["plan", "-f", str(manifest), "-n", "ml", "--snapshot", write_list(tmp_path, nodes + pods),
                            "--config", str(config), "--now", NOW, "--output", output])
    assert code == 0, stderr.getvalue()
    return stdout.getvalue()


def test_plan_prints_the_expected_start_of_a_gang_that_waits_with_a_reservation(tmp_path: Any) -> None:
    (gang,) = json.loads(plan(tmp_path, "json"))["gangs"]
    assert gang["expectedStart"].startswith("2026-03-01T10:02:00"), gang
    assert gang["reserved"] == f"{SUBBLOCK}=gpu-b0/gpu-b0-s0"
    text = plan(tmp_path, "table")
    assert "is expected to start at 2026-03-01T10:02:00Z on " in text, text
    assert "reserved gce-topology-subblock=gpu-b0/gpu-b0-s0 (2 node(s)) from 10:02:00 (in 2m)" in text, text
