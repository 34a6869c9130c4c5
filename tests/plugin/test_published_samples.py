"""``kubectl troupe plan -f`` on the peers' published samples, kept verbatim in
``tests/plugin/samples/`` (their sources and commits: ``samples/SOURCES.yaml``;
docs/decisions/077-plan-takes-what-users-apply.md).

Per sample, ``plan -o json`` on a cluster with room (8 hosts of 32 CPUs, 8 GPUs) must give
the gangs the table says (key -> phase, size, members present), the objects it leaves to
kube-scheduler (object -> pods), the pods that wait for another scheduler, and the notes
(generated names, upstream Workloads). Then it must agree with the two others that decide:

- **the webhook**: the pods the controllers make (``created``) go through the webhook's
  ``mutate`` as AdmissionReview JSON, entry by entry as the API server calls them, and the
  reconciler groups them into gangs (``webhook_gangs`` of tests/support/admission_path.py):
  the same gangs, sizes and members;
- **the engine**: the simulator (``python -m reconciler.tools.simulate``), on a snapshot of
  the nodes, the webhook-admitted pods and the workloads, makes the same decision per
  gang: phase, size, members present and the node of each member placed.

A sample that asks a topology level its nodes do not carry is given the level
(``levels``): Troupe's configuration names it, and the nodes carry it as the subblock.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.tools import plugin, simulate
from reconciler.tools.manifests import Context, created
from tests.support.admission_path import Case, admitted_by_the_webhook, webhook_gangs
from tests.support.snapshots import node, write_list
from troupe import contract
from troupe.config import from_mapping

SAMPLES = Path(__file__).parent / "samples"
SOURCES = yaml.safe_load((SAMPLES / "SOURCES.yaml").read_text())["samples"]
NOW = "2026-03-01T10:00:00Z"
BLOCK, SUBBLOCK, HOST = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                         "cloud.google.com/gce-topology-host")
#: The levels of Kueue's TAS samples (its site/static/examples/tas/kind-cluster.yaml).
KUEUE_LEVELS = ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack")


@dataclass(frozen=True)
class Want:
    """What ``plan`` decides of a sample: ``gangs`` (key -> (phase, size, members present)),
    ``left`` (object left to kube-scheduler -> its pods), ``elsewhere`` (pods waiting for
    another scheduler), ``notes`` (how many), and ``levels``: the two upper topology level
    keys the sample asks, which the cluster is given (default GKE's block and subblock);
    ``opted``: namespace ``default`` opts its workloads in (``troupe.io/gang-mode: auto``)."""

    gangs: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)
    elsewhere: int = 0
    notes: int = 0
    levels: tuple[str, str] | None = None
    opted: bool = False


WANT = {
    # The upstream Workload API: one pod of a group of minimum 4 waits for the other three.
    "k8s-podgroup-api": Want({"default/workload:training-worker-0": ("Waiting", 4, 1)}, notes=1),
    "k8s-workload-api": Want(notes=1),
    "jobset-gang": Want({"default/workload:js-abc-workers-def": ("Placed", 6, 6)}, notes=1),
    "jobset-tas": Want({"default/workload:js-abc-workers-def": ("Placed", 4, 4)}, notes=1,
                       levels=(BLOCK, "topology.example.com/rack")),
    "jobset-paralleljobs": Want(left={"JobSet default/paralleljobs": 5}),
    "coscheduling-replicaset": Want({"default/coscheduling:nginx": ("Placed", 6, 6)}),
    "volcano-deployment": Want(elsewhere=1),
    "lws-sample": Want(left={"LeaderWorkerSet default/leaderworkerset-sample": 12}),
    "lws-multi-template": Want(left={"LeaderWorkerSet default/leaderworkerset-multi-template": 12}),
    "kai-batch-job": Want(elsewhere=2),
    "kai-gpu-pod": Want(elsewhere=1),
    # Kueue's TAS samples, applied with kubectl create: generated names; one gang of the Job.
    "kueue-tas-required": Want({"default/job:tas-sample-required": ("Placed", 10, 10)}, notes=1,
                               levels=KUEUE_LEVELS),
    "kueue-tas-preferred": Want({"default/job:tas-sample-preferred": ("Placed", 40, 40)}, notes=1,
                                levels=KUEUE_LEVELS),
    "kueue-jobset": Want(left={"JobSet default/sleep-job-": 2}, notes=1),
    # The operators' samples, in a namespace that opts its workloads in, and in one that does not.
    "kuberay-raycluster": Want({"default/raycluster:raycluster-kuberay": ("Placed", 2, 2)}, opted=True),
    # KubeRay names a RayJob's cluster <rayjob>-<five random characters>: deterministic here.
    "kuberay-rayjob": Want({"default/raycluster:rayjob-sample-q2vzx": ("Placed", 2, 2),
                            "default/job:rayjob-sample": ("Placed", 1, 1)}, notes=1, opted=True),
    "mpi-operator-pi": Want({"default/mpijob:pi": ("Placed", 3, 3)}, opted=True),
}
#: The operators' samples where nothing opts them in: left to kube-scheduler whole.
NOT_OPTED = {"kuberay-raycluster": {"RayCluster default/raycluster-kuberay": 2},
             "kuberay-rayjob": {"RayJob default/rayjob-sample": 3}, "mpi-operator-pi": {"MPIJob default/pi": 3}}


def sample_objects(name: str) -> list[dict[str, Any]]:
    """The sample's objects, its files in the order listed."""
    return [d for f in SOURCES[name]["files"] for d in yaml.safe_load_all((SAMPLES / f).read_text()) if d]


OPTED_IN = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "default", "labels": {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO}}}


def cluster(want: Want) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Nodes (2 subblocks x 4 hosts; with ``want.opted``, namespace ``default`` opted in) and
    the configuration, with ``want.levels`` as the upper levels."""
    nodes = [node(0, s, h).build() for s in (0, 1) for h in range(4)] + ([OPTED_IN] if want.opted else [])
    if want.levels is None:
        return nodes, {}
    for n in nodes[:8]:
        labels = n["metadata"]["labels"]
        labels[want.levels[0]], labels[want.levels[1]] = labels[BLOCK], labels[SUBBLOCK]
    return nodes, {"topologyLevels": [*want.levels, HOST]}


def run(argv: list[str], entry: Any = plugin.main) -> dict[str, Any]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = entry(argv)
    assert code == 0, stderr.getvalue()
    answer: dict[str, Any] = json.loads(stdout.getvalue())
    return answer


def gang_key(name: str, generated: dict[str, str]) -> str:
    """``name`` with the generated names of the answer put back to their prefixes."""
    for full, prefix in generated.items():
        name = name.replace(full, prefix)
    return name


def test_every_source_is_in_the_table_and_every_file_is_listed():
    assert set(SOURCES) == set(WANT)
    listed = {f for s in SOURCES.values() for f in s["files"]}
    assert listed == {p.name for p in SAMPLES.glob("*.yaml")} - {"SOURCES.yaml"}
    for s in SOURCES.values():
        assert len(s["commit"]) == 40 and s["url"].startswith("https://") and s["repository"]
    assert len(SOURCES) >= 14


@pytest.mark.parametrize("name", sorted(WANT))
def test_plan_decides_the_published_sample_as_the_webhook_and_the_engine_do(name, tmp_path):
    want = WANT[name]
    nodes, config = cluster(want)
    argv = ["--snapshot", write_list(tmp_path, nodes), "--now", NOW, "-o", "json"]
    if config:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        argv += ["--config", str(tmp_path / "config.yaml")]
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("\n---\n".join((SAMPLES / f).read_text() for f in SOURCES[name]["files"]))
    answer = run(["plan", "-f", str(manifest), *argv])

    # What plan decides, as the table says.
    generated = {n.split()[1].rstrip(":").split("/")[1]: n.split("'")[1] for n in answer["notes"] if "generateName" in n}
    got = {gang_key(f"{g['namespace']}/{g['name']}", generated): (g["phase"], g["size"], g["members"]["present"])
           for g in answer["gangs"]}
    assert got == want.gangs, [g["reason"] for g in answer["gangs"]]
    assert {gang_key(x["object"], generated): len(x["pods"]) for x in answer["leftToKubeScheduler"]} == want.left
    assert len(answer["unscheduled"]) == want.elsewhere
    assert len(answer["notes"]) == want.notes
    for g in answer["gangs"]:
        if g["phase"] == "Placed":
            assert len(g["placements"]) == g["size"]

    # The webhook's and the reconciler's path gives the same gangs, sizes and members.
    objects = sample_objects(name)
    case = Case(objects, {}, cluster=[OPTED_IN] if want.opted else [], config=config)
    by_webhook = webhook_gangs(case, "default")
    assert {k: size for k, (size, _) in by_webhook.items()} == {f"{g['namespace']}/{g['name']}": g["size"]
                                                                  for g in answer["gangs"]}
    managed = sorted(set(answer["pods"]) - set(answer["untouched"]))
    assert managed == sorted(m for _, members in by_webhook.values() for m in members)

    # The engine (the simulator) decides each gang as plan does, on the admitted pods.
    cfg = from_mapping(config)
    pods, workloads = created([("manifest", o["kind"], o) for o in objects], Context(cfg, "default"))
    admitted = [admitted_by_the_webhook(p, cfg, want.opted) for p in pods]
    snapshot = write_list(tmp_path, [*nodes, *admitted, *(o for _, o in workloads)])
    simulated = run([str(snapshot), "--output", "json", "--now", NOW,
                     *(["--config", str(tmp_path / "config.yaml")] if config else [])], simulate.main)
    gated = {f"{g['namespace']}/{g['name']}": g for g in answer["gangs"]}
    decided = {f"{g.get('namespace', 'default')}/{g['name']}": g for g in simulated["gangs"]}
    assert set(decided) == set(gated)
    for key, g in gated.items():
        s = decided[key]
        assert (s["phase"], s["size"]) == (g["phase"], g["size"]), key
        assert ({p["pod"]: p["node"] for p in s.get("placements", [])}
                == {p["pod"]: p["node"] for p in g["placements"]}), key
    assert all(contract.GATE in json.dumps(p["spec"].get("schedulingGates", [])) for p in admitted
               if f"{p['metadata']['namespace']}/{p['metadata']['name']}" in managed)


@pytest.mark.parametrize("name", sorted(NOT_OPTED))
def test_an_operators_sample_nothing_opts_in_is_left_to_kube_scheduler_whole(name, tmp_path):
    nodes, _ = cluster(Want())
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("\n---\n".join((SAMPLES / f).read_text() for f in SOURCES[name]["files"]))
    answer = run(["plan", "-f", str(manifest), "--snapshot", write_list(tmp_path, nodes), "--now", NOW, "-o", "json"])
    assert answer["gangs"] == []
    assert {x["object"]: len(x["pods"]) for x in answer["leftToKubeScheduler"]} == NOT_OPTED[name]
