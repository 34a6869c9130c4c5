"""``kubectl troupe plan`` makes the gangs the webhook and the reconciler make.

A table of manifests, one per workload kind Troupe sizes gangs from (Job, JobSet, the pods
of a PyTorchJob and of a LeaderWorkerSet, bare Pods) and per key family the webhook reads
(Troupe's ``troupe.io/*``, the PFN plugin's prefix, Kueue's ``podset-*-topology`` and
plain-pod groups, the namespace opt-in, the GKE topology gate). For each, the cluster's
path is followed on its own: the pods the controllers create (``created``) go through the
webhook's ``mutate`` as AdmissionReview JSON, entry by entry as the API server calls them
(the main entry, the namespace opt-in entry, the main entry again on reinvocation), their
patches applied with ``jsonpatch``; the reconciler's grouping then makes the gangs. ``plan``
runs through its command line (``-o json``) on the same manifest and cluster. Both must give
the same gangs: namespace, name, size and members.

The cluster has room for every gang, so every gang ``plan`` decides is placed and its
placements name its members.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from typing import Any

import pytest
import yaml

from reconciler.tools import plugin
from testbed.engine_builders import make_group, make_node
from tests.support.admission_path import Case, webhook_gangs
from tests.support.snapshots import node, write_list
from troupe import contract

NOW = "2026-03-01T10:00:00Z"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
HOST = "cloud.google.com/gce-topology-host"
PFN = "gang-scheduling.preferred.jp/gang"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
#   block gpu-b0: subblocks gpu-b0-s0, gpu-b0-s1, four hosts each (32 CPUs, 8 GPUs a host)
NODES = [node(0, s, h).build() for s in (0, 1) for h in range(4)]
#   and shared-gpu-0, opted in to SharedDeviceGroups (8 GPUs)
SHARED_NODE = make_node("shared-gpu-0").topology("gpu-b1", "gpu-b1-s0", "shared-gpu-0").allocatable(
    gpu=8, cpu="32").shared().build()
CONTAINERS = [{"name": "w", "image": "x", "resources": {"requests": {"cpu": "1"}}}]


def job(name: str, annotations: dict[str, str], parallelism: int = 2, labels: dict[str, str] | None = None,
        gates: list[str] = (), namespace: str = "ml") -> dict[str, Any]:
    """An Indexed Job of ``parallelism`` pods whose template carries ``annotations``."""
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": CONTAINERS}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"completionMode": "Indexed", "completions": parallelism, "parallelism": parallelism,
                     "template": {"metadata": {"annotations": annotations, "labels": labels or {}}, "spec": spec}}}


def jobset(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A JobSet of a driver Job (1 pod) and two worker Jobs (2 pods each)."""
    def replicated(rname: str, replicas: int, pods: int) -> dict[str, Any]:
        return {"name": rname, "replicas": replicas, "template": {"spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "template": {"metadata": {"annotations": annotations}, "spec": {"containers": CONTAINERS}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"replicatedJobs": [replicated("driver", 1, 1), replicated("workers", 2, 2)]}}


def pod(name: str, annotations: dict[str, str], labels: dict[str, str] | None = None,
        owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Pod as its creator sends it (a controller's pods carry their ``owner``)."""
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "annotations": annotations, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": CONTAINERS}}


PYTORCHJOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
              "metadata": {"name": "pt", "namespace": "ml", "uid": "uid-pt"},
              "spec": {"pytorchReplicaSpecs": {
                  "Master": {"replicas": 1, "template": {"spec": {"containers": CONTAINERS}}},
                  "Worker": {"replicas": 2, "template": {"spec": {"containers": CONTAINERS}}}}}}


def pytorchjob_pods(annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The pods the Kubeflow training operator makes of :data:`PYTORCHJOB`."""
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pt", "uid": "uid-pt"}
    return [pod(f"pt-{kind.lower()}-{i}", annotations, owner=owner, labels={
        "training.kubeflow.org/job-name": "pt", "training.kubeflow.org/replica-type": kind.lower(),
        "training.kubeflow.org/replica-index": str(i)}) for kind, n in (("Master", 1), ("Worker", 2)) for i in range(n)]


LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "serve", "namespace": "ml", "uid": "uid-lws"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2}}}


def lws_pods(annotations: dict[str, str]) -> list[dict[str, Any]]:
    """The pods the LeaderWorkerSet controller makes of :data:`LWS`: a leader StatefulSet's
    pod and a worker StatefulSet's per group."""
    out = []
    for group in range(2):
        for worker in range(2):
            sts = "serve" if worker == 0 else f"serve-{group}"
            out.append(pod(f"serve-{group}" + (f"-{worker}" if worker else ""), annotations, owner={
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": f"uid-sts-{sts}"}, labels={
                contract.LWS_NAME_LABEL: "serve", contract.LWS_GROUP_INDEX_LABEL: str(group),
                contract.LWS_WORKER_INDEX_LABEL: str(worker)}))
    return out


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


KUEUE_GROUP = {"kueue.x-k8s.io/pod-group-name": "pair"}
CASES = {
    "a Job with Troupe's gang name and size": Case(
        [job("train", {"troupe.io/gang-name": "train", "troupe.io/gang-size": "2"})], {"ml/train": 2}),
    "a Job with Troupe's auto size and a required level": Case(
        [job("train", {"troupe.io/gang-size": "auto", "troupe.io/topology-required-level": SUBBLOCK}, 3)],
        {"ml/job:train": 3}),
    "a Job with only Troupe's required level: each pod its own gang": Case(
        [job("train", {"troupe.io/topology-required-level": SUBBLOCK})],
        {"ml/pod:train-0-jbgmc": 1, "ml/pod:train-1-bk2z7": 1}),
    "a Job with a gang policy key only": Case(
        [job("train", {"troupe.io/gang-failure-policy": "RestartGang"}, 1)], {"ml/pod:train-0-jbgmc": 1}),
    "a Job with the PFN plugin's keys under its prefix": Case(
        [job("train", {f"{PFN}-name": "pfn", f"{PFN}-size": "2", f"{PFN}-schedule-timeout-seconds": "40"})],
        {"ml/pfn": 2}, config={"gangAnnotationPrefix": PFN}),
    "a Job with only Kueue's required topology": Case(
        [job("train", {KUEUE_REQUIRED: SUBBLOCK}, 3)], {"ml/job:train": 3}),
    "a Job with only Kueue's preferred topology": Case(
        [job("train", {"kueue.x-k8s.io/podset-preferred-topology": HOST})], {"ml/job:train": 2}),
    "a Job with Kueue's unconstrained topology": Case(
        [job("train", {"kueue.x-k8s.io/podset-unconstrained-topology": "true"})], {"ml/job:train": 2}),
    "a Job with Kueue's slice topology and size": Case(
        [job("train", {"kueue.x-k8s.io/podset-slice-required-topology": HOST,
                       "kueue.x-k8s.io/podset-slice-size": "2", KUEUE_REQUIRED: SUBBLOCK}, 4)],
        {"ml/job:train": 4}),
    "a Job with Kueue's multi-layer slice constraints": Case(
        [job("train", {"kueue.x-k8s.io/podset-slice-required-topology-constraints": json.dumps(
            [{"topology": SUBBLOCK, "size": 4}, {"topology": HOST, "size": 2}])}, 4)], {"ml/job:train": 4}),
    "a Job with Kueue's topology and Troupe's gang keys: Troupe's gang": Case(
        [job("train", {KUEUE_REQUIRED: SUBBLOCK, "troupe.io/gang-name": "mine", "troupe.io/gang-size": "2"})],
        {"ml/mine": 2}),
    "a Job Kueue admitted (its podset label): Kueue's, not Troupe's": Case(
        [job("train", {KUEUE_REQUIRED: SUBBLOCK}, labels={"kueue.x-k8s.io/podset": "main"})], {}),
    "a Job in a namespace opted in, without keys": Case(
        [job("train", {}, 3, namespace="auto")], {"auto/job:train": 3},
        cluster=[namespace("auto", {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO})]),
    "a Job in a namespace opted in, with Kueue's topology": Case(
        [job("train", {KUEUE_REQUIRED: SUBBLOCK}, 2, namespace="auto")], {"auto/job:train": 2},
        cluster=[namespace("auto", {contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO})]),
    "a Job created with the GKE topology gate": Case(
        [job("train", {}, 2, gates=["gke.io/topology-aware-auto-train"])], {"ml/gke:job-name=train": 2}),
    "a JobSet with Troupe's auto size": Case(
        [jobset("js", {"troupe.io/gang-size": "auto"})], {"ml/jobset:js:0": 5}),
    "a JobSet with only Kueue's required topology": Case(
        [jobset("js", {KUEUE_REQUIRED: SUBBLOCK})], {"ml/jobset:js:0": 5}),
    "a PyTorchJob's pods with only Kueue's required topology": Case(
        pytorchjob_pods({KUEUE_REQUIRED: SUBBLOCK}), {"ml/pytorchjob:pt": 3}, cluster=[PYTORCHJOB]),
    "a PyTorchJob's pods with Troupe's auto size": Case(
        pytorchjob_pods({"troupe.io/gang-size": "auto"}), {"ml/pytorchjob:pt": 3}, cluster=[PYTORCHJOB]),
    "a LeaderWorkerSet's pods with only Kueue's preferred topology: a gang per group": Case(
        lws_pods({"kueue.x-k8s.io/podset-preferred-topology": SUBBLOCK}), {"ml/lws:serve:0": 2, "ml/lws:serve:1": 2},
        cluster=[LWS]),
    "bare Pods of a Kueue plain-pod group with Kueue's topology": Case(
        [pod(f"p-{i}", {KUEUE_REQUIRED: SUBBLOCK, "kueue.x-k8s.io/pod-group-total-count": "2"}, KUEUE_GROUP)
         for i in range(2)], {"ml/pair": 2}),
    "a bare Pod with only Kueue's required topology: a gang of one": Case(
        [pod("solo", {KUEUE_REQUIRED: SUBBLOCK})], {"ml/pod:solo": 1}),
    "bare Pods with Troupe's gang name and size": Case(
        [pod(f"p-{i}", {"troupe.io/gang-name": "duo", "troupe.io/gang-size": "2"}) for i in range(2)],
        {"ml/duo": 2}),
    "bare Pods of a gang in a SharedDeviceGroup": Case(
        [pod(f"p-{i}", {"troupe.io/gang-name": "duo", "troupe.io/gang-size": "2", "deviceshare.io/group": "pair-gpus"})
         for i in range(2)], {"ml/duo": 2}, cluster=[SHARED_NODE, make_group("pair-gpus").resources(gpu=2).build()]),
    "a bare Pod in a SharedDeviceGroup, no gang: a gang of one": Case(
        [pod("alone", {"deviceshare.io/group": "one-gpu"})], {"ml/pod:alone": 1},
        cluster=[SHARED_NODE, make_group("one-gpu").resources(gpu=1).build()]),
    "a bare Pod without keys: not Troupe's": Case([pod("plain", {})], {}),
}


def plan_gangs(case: Case, tmp_path) -> tuple[dict[str, tuple[int | None, list[str]]], dict[str, Any]]:
    """The gangs ``kubectl troupe plan -o json`` gives for the case: key -> (size, members),
    and its whole answer."""
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(case.objects))
    argv = ["plan", "-f", str(manifest), "-n", "ml", "--snapshot", write_list(tmp_path, [*NODES, *case.cluster]),
            "--now", NOW, "-o", "json"]
    if case.config:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(case.config))
        argv += ["--config", str(tmp_path / "config.yaml")]
    out = _run(argv)
    gangs = {}
    for g in out["gangs"]:
        members = sorted(f"{g['namespace']}/{p['pod']}" for p in g["placements"])
        assert len(members) == g["members"]["present"], f"gang {g['name']} not placed whole: {g['reason']}"
        gangs[f"{g['namespace']}/{g['name']}"] = (g["size"], members)
    return gangs, out


def _run(argv: list[str]) -> dict[str, Any]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = plugin.main(argv)
    assert code == 0, stderr.getvalue()
    answer: dict[str, Any] = json.loads(stdout.getvalue())
    return answer


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_plan_makes_the_gangs_the_webhook_and_the_reconciler_make(case, tmp_path):
    want = webhook_gangs(case)
    assert {k: size for k, (size, _) in want.items()} == case.want, "the case's expectation"
    got, answer = plan_gangs(case, tmp_path)
    assert got == want
    managed = sorted(set(answer["pods"]) - set(answer["untouched"]))
    assert managed == sorted(m for _, members in want.values() for m in members)


KUEUE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    metadata:
      annotations: {kueue.x-k8s.io/podset-required-topology: cloud.google.com/gce-topology-subblock}
    spec:
      restartPolicy: Never
      containers: [{name: w, image: x, resources: {requests: {cpu: "1"}}}]
"""


def test_a_job_with_only_kueues_required_topology_is_planned_as_one_gang_not_left_to_kube_scheduler(
        tmp_path, capsys, monkeypatch):
    """The webhook gates such a Job's pods and stamps ``<prefix>-size: auto``; ``plan``
    once said "not Troupe's (no Troupe key; kube-scheduler places them alone)"."""
    monkeypatch.setenv("COLUMNS", "400")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(KUEUE_JOB)
    code = plugin.main(["plan", "-f", str(manifest), "--snapshot", write_list(tmp_path, NODES), "--now", NOW])
    out = capsys.readouterr().out
    assert code == 0
    assert "not Troupe's" not in out and "left to kube-scheduler" not in out
    assert re.search(rf"^ml/job:train +Placed +2/2 +\S+ +{re.escape(SUBBLOCK)}=gpu-b0/gpu-b0-s\d$", out, re.M), out
    assert "ml/job:train would be released now" in out


GROUP_JOB = """\
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: train, namespace: ml}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
  schedulingConstraints: {topology: [{key: cloud.google.com/gce-topology-subblock}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    spec:
      schedulingGroup: {podGroupName: train}
      schedulingGates: [{name: troupe.io/placement}]
      restartPolicy: Never
      containers: [{name: w, image: x, resources: {requests: {cpu: "1"}}}]
"""


def test_plan_reads_a_pod_group_with_the_job_whose_pods_name_it(tmp_path, capsys, monkeypatch):
    """``kubectl troupe plan -f`` takes a manifest's group objects with the workloads that
    join them, as a user applies them (docs/decisions/056-pod-groups.md): the gang is the
    group's, of its minimum, in one domain of its topology key."""
    monkeypatch.setenv("COLUMNS", "400")
    manifest = tmp_path / "group.yaml"
    manifest.write_text(GROUP_JOB)
    code = plugin.main(["plan", "-f", str(manifest), "--snapshot", write_list(tmp_path, NODES), "--now", NOW])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(rf"^ml/workload:train +Placed +4/4 +\S+ +{re.escape(SUBBLOCK)}=gpu-b0/gpu-b0-s\d$", out, re.M), out


def test_plan_says_which_gang_would_ask_for_room_how_much_and_of_which_shape(tmp_path):
    """With ``provisioning`` on, a gang that does not fit shows the ProvisioningRequest it
    would make (docs/decisions/080-provisioning-requests.md); one that fits shows none."""
    big = job("big", {"troupe.io/gang-name": "big", "troupe.io/gang-size": "16"}, parallelism=16)
    big["spec"]["template"]["spec"]["containers"] = [{"name": "w", "image": "x", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]
    small = job("small", {"troupe.io/gang-name": "small", "troupe.io/gang-size": "2"})
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all([big, small]))
    (tmp_path / "config.yaml").write_text("provisioning: {className: queued-provisioning.gke.io}\n")
    out = _run(["plan", "-f", str(manifest), "-n", "ml", "--snapshot", write_list(tmp_path, NODES), "--now", NOW,
                "-o", "json", "--config", str(tmp_path / "config.yaml")])
    gangs = {g["name"]: g for g in out["gangs"]}
    asked = gangs["big"]["provisioningRequest"]
    assert (asked["pods"], asked["class"], [s["count"] for s in asked["shapes"]]) == (16, "queued-provisioning.gke.io", [16])
    assert asked["shapes"][0]["requests"]["nvidia.com/gpu"] == 8
    assert "provisioningRequest" not in gangs["small"]
