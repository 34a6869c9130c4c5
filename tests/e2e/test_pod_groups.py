"""Pod groups as gang declarations on a v1.37 control plane with the upstream Workload API
on (``scheduling.k8s.io/v1beta1``, ``GenericWorkload``; ``v1alpha2`` on v1.36), with and without
``TopologyAwareWorkloadScheduling`` (docs/decisions/056-pod-groups.md).

The nodes of examples/nodes.yaml (2 blocks x 2 subblocks x 4 hosts, 8 GPUs each); members
ask for 8 GPUs (a node each). A busy pod on one host of every subblock but gpu-b1-s0 leaves
one subblock with room for 4 members::

    gpu-b0-s0 [busy . . .]  gpu-b0-s1 [busy . . .]  gpu-b1-s0 [. . . .]  gpu-b1-s1 [busy . . .]

kube-scheduler alone spreads such a gang over two subblocks (the issue's trial); Troupe pins
it whole in gpu-b1-s0, kube-scheduler's own gang plugin switched on, and its topology
plugin on or off. The members carry Troupe's gate as the user wrote it (legal), and again
as their users write them (a peer's ``schedulerName`` included), adopted and gated by the
webhook. A gang of
each of the four sources with fewer members than its group's minimum waits and says so in
``kubectl get gangs`` and ``kubectl troupe status``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.cluster import (
    PEER_POD_GROUP_CRDS,
    TOPOLOGY_AWARE_WORKLOADS,
    WORKLOAD_API,
    WORKLOAD_GATES,
)
from devtools.devcluster.stack import Stack
from devtools.devcluster.toolchain import control_plane_version
from reconciler.objects.kinds import SNAPSHOT_COMMAND
from tests.support import e2e
from troupe import contract
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME
from troupe.workloadkinds import CUSTOM_KINDS

REPO = Path(__file__).resolve().parents[2]
NODES_FILE = REPO / "examples" / "nodes.yaml"
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
BUSY_HOSTS = ("gpu-b0-s0-h0", "gpu-b0-s1-h0", "gpu-b1-s1-h0")
#: The Workload API's version served: v1beta1 from 1.37, v1alpha2 in 1.36 (the
#: compatibility run, ``TROUPE_KUBERNETES_VERSION=v1.36.3``).
WORKLOAD_VERSION = "v1alpha2" if control_plane_version().startswith("v1.36.") else "v1beta1"
#: Each source's API and how its pods name a group.
SOURCES = {
    "workload": ("scheduling.k8s.io", WORKLOAD_VERSION),
    "volcano": ("scheduling.volcano.sh", "v1beta1"),
    "coscheduling": ("scheduling.x-k8s.io", "v1alpha1"),
    "kai": ("scheduling.run.ai", "v2alpha2"),
}

#: The scheduler each peer's users name in their pods (adopted by the webhook:
#: ``adoptSchedulerNames``, decision 057).
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "kai": "kai-scheduler"}


@pytest.fixture(scope="module", params=[True, False], ids=["topology-aware", "gang-only"])
def workload_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A cluster of its own serving the Workload API, kube-scheduler's gang plugin on, its
    topology plugin on or off, the peers' PodGroup CRDs installed, and Troupe on it."""
    gates = TOPOLOGY_AWARE_WORKLOADS if request.param else WORKLOAD_GATES
    runtime = WORKLOAD_API if WORKLOAD_VERSION == "v1beta1" else (f"scheduling.k8s.io/{WORKLOAD_VERSION}=true",)
    with Cluster(nodes=NODES_FILE, feature_gates=gates, runtime_config=runtime) as cluster:
        cluster.install_crds(PEER_POD_GROUP_CRDS)
        config = tmp_path_factory.mktemp("troupe") / "config.yaml"
        config.write_text("gangScheduleTimeoutJitterSeconds: 1\n"
                          f"adoptSchedulerNames: [{', '.join(SCHEDULER_NAMES.values())}]\n")
        with Stack(cluster, config) as stack:
            yield stack


@pytest.fixture
def ns(workload_stack: Stack) -> Iterator[str]:
    with e2e.temporary_namespace(client.CoreV1Api(workload_stack.cluster.api_client("admin")), "pg") as name:
        yield name


def create_group(api: Any, namespace: str, source: str, name: str, minimum: int,
                 subblock: bool = False) -> None:
    group, version = SOURCES[source]
    if source == "workload":
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
        if subblock:
            spec["schedulingConstraints"] = {"topology": [{"key": SUBBLOCK}]}
    else:
        spec = {"minMember": minimum}
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}
    client.CustomObjectsApi(api).create_namespaced_custom_object(group, version, namespace, "podgroups", body)


def naming(template_or_pod: dict[str, Any], source: str, group: str, gate: bool = True) -> dict[str, Any]:
    """``template_or_pod`` naming ``group`` the way ``source``'s users write it, with
    Troupe's gate unless ``gate`` is False (then only the webhook may add it)."""
    meta, spec = template_or_pod.setdefault("metadata", {}), template_or_pod["spec"]
    if source == "workload":
        spec["schedulingGroup"] = {"podGroupName": group}
    elif source == "volcano":
        meta.setdefault("annotations", {})["scheduling.k8s.io/group-name"] = group
    elif source == "coscheduling":
        meta.setdefault("labels", {})["scheduling.x-k8s.io/pod-group"] = group
    else:
        meta.setdefault("annotations", {})["pod-group-name"] = group
    if gate:
        spec["schedulingGates"] = [{"name": contract.GATE}]
    return template_or_pod


def make_busy(core: client.CoreV1Api, namespace: str) -> None:
    for host in BUSY_HOSTS:
        busy = e2e.pod_body(f"busy-{host}", gpus=8)
        busy["spec"]["nodeName"] = host
        core.create_namespaced_pod(namespace, busy)


@pytest.mark.parametrize("source", list(SOURCES))
def test_a_job_naming_a_group_of_four_runs_whole_in_the_one_subblock_with_room(workload_stack, ns, source):
    cluster = workload_stack.cluster
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    make_busy(core, ns)
    create_group(api, ns, source, "train", 4, subblock=True)
    job = e2e.indexed_job("train", 4, {}, gpus=8)
    naming(job["spec"]["template"], source, "train")
    client.BatchV1Api(api).create_namespaced_job(ns, job)

    pods = e2e.running_job_pods(core, ns, "train", 4, timeout=120)
    nodes = {p.metadata.name: p.spec.node_name for p in pods}
    assert {core.read_node(n).metadata.labels[SUBBLOCK] for n in nodes.values()} == {"gpu-b1-s0"}, nodes
    assert all((p.metadata.annotations or {}).get(contract.ASSIGNED_NODE) == p.spec.node_name for p in pods), \
        "each member runs where Troupe pinned it"

    def released() -> list[str] | None:  # a Gang object is written at most once a second (decision 043)
        gangs = cluster.kubectl("get", "gangs", "-n", ns, "--no-headers").stdout
        row = next((line.split() for line in gangs.splitlines() if line.startswith(f"{source}-train-")), None)
        return row if row is not None and row[1:3] == ["Released", "4/4"] else None

    row = e2e.wait_for("the gang Released 4/4 in kubectl get gangs", released, timeout=30)
    assert row[3] == f"{SUBBLOCK}=gpu-b1-s0", row


@pytest.mark.parametrize("source", list(SOURCES))
def test_a_job_as_its_users_write_it_runs_whole_once_the_webhook_gates_it(workload_stack, ns, source):
    """The same Job as its users write it: no gate of Troupe's in its template and, for a
    peer's group, the peer's ``schedulerName``. The webhook adopts the pods for
    kube-scheduler (the name the user wrote kept in ``troupe.io/original-scheduler-name``)
    and gates them for the group they name (decision 057); the reconciler places them as
    above."""
    cluster = workload_stack.cluster
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    make_busy(core, ns)
    create_group(api, ns, source, "train", 4, subblock=True)
    job = e2e.indexed_job("train", 4, {}, gpus=8)
    template = naming(job["spec"]["template"], source, "train", gate=False)
    written = SCHEDULER_NAMES.get(source)
    if written:
        template["spec"]["schedulerName"] = written
    client.BatchV1Api(api).create_namespaced_job(ns, job)
    pods = e2e.running_job_pods(core, ns, "train", 4, timeout=120)
    assert {core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods} == {"gpu-b1-s0"}
    assert all((p.metadata.annotations or {}).get(contract.ASSIGNED_NODE) == p.spec.node_name for p in pods)
    assert {p.spec.scheduler_name for p in pods} == {"default-scheduler"}
    assert {(p.metadata.annotations or {}).get(ORIGINAL_SCHEDULER_NAME) for p in pods} == {written}
    stored = client.BatchV1Api(api).read_namespaced_job("train", ns)
    assert stored.spec.template.spec.scheduler_name == (written or "default-scheduler"), \
        "the Job keeps the scheduler its user wrote"


def test_a_gang_of_each_source_short_of_its_minimum_waits_and_says_why(workload_stack, ns):
    cluster = workload_stack.cluster
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    for source in SOURCES:
        create_group(api, ns, source, "short", 5)
        for i in range(4):
            core.create_namespaced_pod(ns, naming(e2e.pod_body(f"{source}-{i}", gpus=1), source, "short"))

    def listed() -> dict[str, list[str]] | None:
        out = cluster.kubectl("get", "gangs", "-n", ns, "--no-headers").stdout
        rows = {cols[0].rsplit("-", 2)[0]: cols for line in out.splitlines() if (cols := line.split())}
        waiting = {k: r for k, r in rows.items() if r[1:3] == ["Waiting", "4/5"]}
        return rows if len(waiting) == 4 else None

    rows = e2e.wait_for("a waiting gang of each source in kubectl get gangs", listed, timeout=60)
    assert sorted(rows) == ["coscheduling", "kai", "volcano", "workload"], rows
    assert all(r[-1] == "WaitingForMembers" for r in rows.values()), rows

    status = subprocess.run([str(PLUGIN), "status", "-n", ns, "-o", "json", "--kubeconfig",
                             str(cluster.kubeconfig("admin"))], capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    gangs = {g["spec"]["gangName"]: g["status"] for g in json.loads(status.stdout)["items"]}
    for source, (group, _) in SOURCES.items():
        field = "spec.schedulingPolicy.gang.minCount" if source == "workload" else "spec.minMember"
        assert gangs[f"{source}:short"]["phase"] == "Waiting", gangs
        assert gangs[f"{source}:short"]["reason"] == f"4 of 5 members present (PodGroup {ns}/short ({group}) {field})"

    # The simulator, on the README's snapshot of this cluster, decides them as the reconciler did.
    resources = ",".join(r for r in SNAPSHOT_COMMAND.split()[2].split(",")
                         if r not in {k.plural for k in CUSTOM_KINDS})  # no such CRD here
    path = workload_stack.dir / f"snapshot-{ns}.json"
    path.write_text(cluster.kubectl("get", resources, "-A", "-o", "json", timeout=120).stdout)
    done = subprocess.run([sys.executable, "-m", "reconciler", "simulate", str(path), "--output", "json"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    simulated = {g["name"]: g for g in json.loads(done.stdout)["gangs"] if g["namespace"] == ns}
    objects = {o["spec"]["gangName"]: o["status"] for o in json.loads(
        cluster.kubectl("get", "gangs", "-n", ns, "-o", "json").stdout)["items"]}
    assert sorted(simulated) == sorted(objects) == sorted(f"{s}:short" for s in SOURCES)
    for name, status in objects.items():
        assert (simulated[name]["phase"], simulated[name]["reason"]) == (status["phase"], status["message"]), name


def test_a_troupe_gang_whose_pods_name_a_group_is_never_pinned_across_the_groups_key(workload_stack, ns):
    """The issue's failure: Troupe's keys name the gang, its pods also name a PodGroup that
    requires a subblock. No subblock has room for 4 (two busy hosts in each), a block has.
    Where the API server kept the group's constraint (TopologyAwareWorkloadScheduling on),
    Troupe holds the gang unschedulable instead of pinning it over two subblocks that
    kube-scheduler would refuse; where it dropped it, there is no constraint, and the gang
    runs over two subblocks of one block."""
    cluster = workload_stack.cluster
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    for subblock in ("gpu-b0-s0", "gpu-b0-s1", "gpu-b1-s0", "gpu-b1-s1"):
        for host in ("h0", "h1"):
            busy = e2e.pod_body(f"busy-{subblock}-{host}", gpus=8)
            busy["spec"]["nodeName"] = f"{subblock}-{host}"
            core.create_namespaced_pod(ns, busy)
    create_group(api, ns, "workload", "train", 4, subblock=True)
    group, version = SOURCES["workload"]
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(group, version, ns, "podgroups", "train")
    constrained = bool(stored["spec"].get("schedulingConstraints"))
    assert constrained == any("TopologyAwareWorkloadScheduling=true" in a for a in cluster.extra_args("kube-apiserver"))
    job = e2e.indexed_job("train", 4, e2e.gang_annotations("mine", 4, timeout=60), gpus=8)
    naming(job["spec"]["template"], "workload", "train")
    client.BatchV1Api(api).create_namespaced_job(ns, job)

    if not constrained:
        pods = e2e.running_job_pods(core, ns, "train", 4, timeout=120)
        assert len({core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods}) == 2
        return

    def unschedulable() -> list[str] | None:
        pods = e2e.job_pods(core, ns, "train")
        messages = [c.message for p in pods for c in (p.status.conditions or [])
                    if c.type == contract.GANG_CONDITION and c.reason == "Unschedulable"]
        return messages if len(pods) == 4 and len(messages) == 4 else None

    messages = e2e.wait_for("the gang unschedulable in one subblock", unschedulable, timeout=60)
    assert f"in one {SUBBLOCK}" in messages[0], messages[0]
    assert all(p.spec.scheduling_gates and not p.spec.node_name for p in e2e.job_pods(core, ns, "train")), \
        "nothing released, nothing pinned"


@pytest.fixture(scope="module")
def job_workload_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A cluster of its own with ``WorkloadWithJob`` on as well (alpha, 1.37): the Job
    controller makes a Workload and a PodGroup for every Job and names the group in its pods."""
    if WORKLOAD_VERSION != "v1beta1":
        pytest.skip("Job.spec.scheduling is served from Kubernetes 1.37")
    with Cluster(nodes=NODES_FILE, feature_gates={**TOPOLOGY_AWARE_WORKLOADS, "WorkloadWithJob": True},
                 runtime_config=WORKLOAD_API) as cluster:
        config = tmp_path_factory.mktemp("troupe") / "config.yaml"
        config.write_text("gangScheduleTimeoutJitterSeconds: 1\n")
        with Stack(cluster, config) as stack:
            yield stack


def test_a_job_with_spec_scheduling_runs_whole_in_the_one_subblock_with_room(job_workload_stack):
    """A Job that declares its gang in ``spec.scheduling`` (``WorkloadWithJob``): the Job
    controller makes the PodGroup (minCount 4, the subblock key) and names it in each pod it
    creates; the webhook gates them for it and Troupe pins them whole in the one subblock
    with room, as for a PodGroup its user wrote."""
    cluster = job_workload_stack.cluster
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    with e2e.temporary_namespace(core, "pgjob") as ns:
        make_busy(core, ns)
        job = e2e.indexed_job("train", 4, {}, gpus=8)
        job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 4}},
                                     "schedulingConstraints": {"topology": [{"key": SUBBLOCK}]}}
        client.BatchV1Api(api).create_namespaced_job(ns, job)
        pods = e2e.running_job_pods(core, ns, "train", 4, timeout=120)
        groups = {p.spec.scheduling_group.pod_group_name for p in pods if p.spec.scheduling_group}
        assert len(groups) == 1, [p.spec.scheduling_group for p in pods]
        stored = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "scheduling.k8s.io", "v1beta1", ns, "podgroups", groups.pop())
        assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}, stored["spec"]
        assert {core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods} == {"gpu-b1-s0"}
        assert all((p.metadata.annotations or {}).get(contract.ASSIGNED_NODE) == p.spec.node_name for p in pods), \
            "each member runs where Troupe pinned it"
