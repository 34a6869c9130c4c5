"""What ``kubectl troupe plan``, ``status`` and ``why`` say of pods bound for a second
scheduler that Troupe does not adopt (docs/decisions/065-adopted-pods-join-their-peers-groups.md):
kube-scheduler never sees them and no scheduler of that name is Troupe's, so they wait for
one; ``adoptSchedulerNames`` would hand them over (or, for a pod whose group KAI's
pod-grouper makes from an owner Troupe cannot size, why it would not). Run through the
plugin's command line, on snapshots and manifests."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import yaml

from reconciler.tools import plugin
from testbed.engine_builders import make_pod
from tests.support.snapshots import node, write_list

NOW = "2026-03-01T10:00:00Z"
NODES = [node(0, 0, h).build() for h in range(4)]
WAITS_FOR_VOLCANO = ("spec.schedulerName volcano: kube-scheduler never sees it and no scheduler of that name is "
                     "Troupe's, so it waits for a scheduler named volcano")


def run(argv: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = plugin.main(argv)
    return code, stdout.getvalue(), stderr.getvalue()


def bound_for(scheduler: str, name: str = "web-0", owner: tuple[str, str] | None = None) -> dict[str, Any]:
    pod = make_pod(name, "ml").requests(cpu="1").build()
    pod["spec"]["schedulerName"] = scheduler
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "tfjob-mnist",
                                               "uid": "u-1", "controller": True}]
    return pod


def config_file(tmp_path: Path, adopted: tuple[str, ...]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"adoptSchedulerNames: [{', '.join(adopted)}]\n" if adopted else "{}\n")
    return str(path)


def test_plan_says_a_volcano_pod_waits_for_volcano_and_what_adoption_would_do(tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(bound_for("volcano")))
    snapshot = write_list(tmp_path, NODES)
    code, out, err = run(["plan", "-f", str(manifest), "--snapshot", snapshot, "--now", NOW,
                          "--config", config_file(tmp_path, ())])
    assert code == 0, err
    assert "kube-scheduler places them alone" not in out
    assert (f"not Troupe's nor kube-scheduler's: ml/web-0: {WAITS_FOR_VOLCANO}; adoptSchedulerNames: [volcano] would "
            "hand such pods to kube-scheduler through Troupe, ganged as Volcano's controller groups it") in out, out
    code, out, _ = run(["plan", "-f", str(manifest), "--snapshot", snapshot, "--now", NOW, "-o", "json",
                        "--config", config_file(tmp_path, ())])
    assert json.loads(out)["unscheduled"]["ml/web-0"].startswith(WAITS_FOR_VOLCANO)


def test_plan_of_an_adopted_name_says_kube_scheduler_places_the_pod(tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(bound_for("volcano")))
    code, out, err = run(["plan", "-f", str(manifest), "--snapshot", write_list(tmp_path, NODES), "--now", NOW,
                          "--config", config_file(tmp_path, ("volcano",))])
    assert code == 0, err
    assert "not Troupe's (no Troupe key; kube-scheduler places them alone): ml/web-0" in out, out


def test_status_notes_the_pods_that_wait_for_a_scheduler_not_adopted(tmp_path: Path) -> None:
    pods = [bound_for("volcano", f"web-{i}") for i in range(2)]
    snapshot = write_list(tmp_path, [*NODES, *pods])
    code, _, err = run(["status", "-A", "--snapshot", snapshot, "--now", NOW, "--config", config_file(tmp_path, ())])
    assert code == 0
    assert f"note: not Troupe's nor kube-scheduler's: ml/web-0, ml/web-1: {WAITS_FOR_VOLCANO}" in err, err


def test_status_and_why_say_why_a_tfjob_pod_for_kai_was_not_adopted(tmp_path: Path) -> None:
    tf = bound_for("kai-scheduler", "tfjob-mnist-worker-0", owner=("kubeflow.org/v1", "TFJob"))
    snapshot = write_list(tmp_path, [*NODES, tf])
    config = config_file(tmp_path, ("kai-scheduler",))
    code, _, err = run(["status", "-n", "ml", "--snapshot", snapshot, "--now", NOW, "--config", config])
    assert code == 0
    assert ("ml/tfjob-mnist-worker-0: spec.schedulerName kai-scheduler: kube-scheduler never sees it and no scheduler "
            "of that name is Troupe's, so it waits for a scheduler named kai-scheduler; adoptSchedulerNames would not "
            "hand it over: kai-scheduler: KAI's pod-grouper makes this pod's group from its top owner, here TFJob "
            "tfjob-mnist (kubeflow.org/v1)") in err, err
    code, _, err = run(["why", "tfjob-mnist-worker-0", "-n", "ml", "--snapshot", snapshot, "--now", NOW,
                        "--config", config])
    assert code == 1
    assert err.startswith("kubectl-troupe: pod ml/tfjob-mnist-worker-0 is not managed by Troupe: it carries no "
                          "gang annotation"), err
    assert "so it waits for a scheduler named kai-scheduler; adoptSchedulerNames would not hand it over" in err
