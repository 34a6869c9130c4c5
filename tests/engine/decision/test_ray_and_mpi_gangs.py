"""RayClusters and MPIJobs as gangs, decided on plain data (docs/decisions/075-ray-and-mpi-workloads.md):
a RayCluster reserved from its head and worker templates, each KubeRay pod (which carries no
index) released onto a slot of its own group whatever order they come in, its minimum from
``minReplicas``; a RayJob makes no gang; an MPIJob's launcher, a batch Job's pod, joins its
workers' gang first in rank."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision import actions
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from testbed.as_created import RESERVATION_KEY, gangs_of, snapshot_of
from testbed.engine_builders import make_node
from troupe import contract
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NS = "ml"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def nodes(count: int = 8) -> list[NodeInfo]:
    """``count`` nodes of 8 GPUs and 16 cores, 4 per subblock."""
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(cpu="16", gpu=8).topology("b0", f"s{i // 4}", f"h{i}")
                                 .build()) for i in range(count)]


def template(requests: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": {"troupe.io/gang-size": contract.AUTO_SIZE,
                                         contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK}},
            "spec": {"containers": [{"name": "ray", "resources": {"requests": requests}}]}}


def ray_cluster(name: str = "rc", replicas: int = 4, minimum: int | None = None, record: Record | None = None,
                groups: int = 1) -> dict[str, Any]:
    """A RayCluster as KubeRay's samples write one: a head of 1 CPU and ``groups`` worker
    groups of ``replicas`` whole-node GPU workers each."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                            "creationTimestamp": "2027-01-15T08:00:00Z", "annotations": {}}
    if record is not None:
        meta["annotations"][contract.RESERVATION] = record.signed(
            ("RayCluster", NS, name), f"uid-{name}", RESERVATION_KEY).encode()
    workers = [{"groupName": f"g{i}", "replicas": replicas, "minReplicas": replicas if minimum is None else minimum,
                "maxReplicas": 10, "template": template({"cpu": "1", "nvidia.com/gpu": "8"})} for i in range(groups)]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
            "spec": {"headGroupSpec": {"template": template({"cpu": "1"})}, "workerGroupSpecs": workers}}


def ray_pod(cluster: dict[str, Any], group: str, suffix: str, *, node: str = "", planned_at: str = "",
            bound: bool = False) -> PodInfo:
    """A pod KubeRay makes for ``group`` (``headgroup`` for the head): labelled as KubeRay
    labels it, controlled by the RayCluster, gated unless released onto ``node``."""
    name = cluster["metadata"]["name"]
    head = group == "headgroup"
    spec_of = cluster["spec"]["headGroupSpec"] if head else next(
        g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == group)
    tpl = copy.deepcopy(spec_of["template"])
    meta = tpl["metadata"]
    meta.update({"name": f"{name}-{'head' if head else group + '-worker'}-{suffix}", "namespace": NS,
                 "uid": f"pod-{name}-{group}-{suffix}", "creationTimestamp": "2027-01-15T08:00:01Z",
                 "resourceVersion": "1",
                 "labels": {contract.RAY_CLUSTER_LABEL: name, contract.RAY_NODE_TYPE_LABEL: "head" if head else "worker",
                            contract.RAY_GROUP_LABEL: group, "ray.io/is-ray-node": "yes"},
                 "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                                      "uid": cluster["metadata"]["uid"], "controller": True}]})
    spec = tpl["spec"]
    if node:
        meta["annotations"].update({contract.ASSIGNED_NODE: node, contract.PLANNED_AT: planned_at,
                                    contract.RELEASED_AT: planned_at})
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        if bound:
            spec["nodeName"] = node
    else:
        spec["schedulingGates"] = [{"name": contract.GATE}]
    return PodInfo.from_object({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                                "status": {"phase": "Running" if bound else "Pending"}})


def world(cluster: dict[str, Any], pods: list[PodInfo] = (), count: int = 8) -> tuple[Snapshot, Gang]:
    known = wl.Workloads(wl.workloads_of("RayCluster", [cluster], RESERVATION_KEY))
    snapshot = snapshot_of(nodes(count), list(pods), known)
    return snapshot, gangs_of(snapshot, known, CONFIG)[f"{NS}/raycluster:{cluster['metadata']['name']}"]


def reserved(**kw: Any) -> tuple[dict[str, Any], Record]:
    snapshot, gang = world(ray_cluster(**kw))
    decision = decide(gang, snapshot, NOW)
    found = decision.find(actions.Reserve)
    assert found is not None, decision.reason
    return ray_cluster(record=found.record, **kw), found.record


def test_a_ray_cluster_is_sized_as_kuberay_counts_it():
    cluster = ray_cluster(replicas=4, minimum=2, groups=2)
    cluster["spec"]["workerGroupSpecs"][1].update(replicas=20, numOfHosts=2)  # clamped to maxReplicas 10
    w = wl.workload("RayCluster", cluster)
    assert w is not None
    assert (w.size, w.min_size) == (1 + 4 + 20, 1 + 2 + 4)
    assert w.size_from == "RayCluster rc: head 1 + g0 4 + g1 10x2"
    assert w.most_pods == 1 + 10 + 20
    cluster["spec"]["workerGroupSpecs"][1]["suspend"] = True
    assert wl.workload("RayCluster", cluster).size == 5, "a suspended group runs no worker"
    ranks = [s.name for s in w.slots]
    assert ranks[0] == "rc[head]" and ranks[1:5] == [f"rc[g0-{i}]" for i in range(4)]
    assert ranks[5:7] == ["rc[g1-0]", "rc[g1-1]"], "a multi-host replica's hosts together"


def test_a_ray_job_makes_no_gang_and_its_cluster_is_not_a_child_it_owns():
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": NS},
           "spec": {"rayClusterSpec": ray_cluster()["spec"]}}
    w = wl.workload("RayJob", job)
    assert w is not None and w.slots == () and w.most_pods == 1 + 10
    cluster = ray_cluster()
    cluster["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj",
                                               "controller": True}]
    assert not wl.workload("RayCluster", cluster).owned, "the RayJob's cluster makes the gang"
    submitter = {"metadata": {"name": "rj-submitter", "namespace": NS, "ownerReferences": cluster["metadata"]["ownerReferences"]},
                 "spec": {"template": {}}}
    assert wl.workload("Job", submitter).owned, "the submitter Job plans no gang of its own"


def test_a_ray_cluster_is_reserved_whole_in_one_subblock_from_its_templates():
    snapshot, gang = world(ray_cluster())
    assert gang.as_created and gang.size == 5 and gang.members == ()

    decision = decide(gang, snapshot, NOW)

    assert decision.rule is lifecycle.RESERVED
    record = decision.find(actions.Reserve).record
    assert record.gang == "raycluster:rc" and len(record.nodes) == 5
    assert len({int(n[1:]) // 4 for n in record.nodes}) == 1, "one subblock"
    assert len(set(record.nodes[1:])) == 4, "a whole node per worker"


@settings(max_examples=30, deadline=None)
@given(order=st.permutations(["headgroup", "g0", "g0", "g0", "g0"]))
def test_each_kuberay_pod_takes_a_slot_of_its_own_group_whatever_order_they_come_in(order: list[str]):
    cluster, record = reserved()
    pods = [ray_pod(cluster, group, f"x{i}") for i, group in enumerate(order[:3])]
    snapshot, gang = world(cluster, pods)

    decision = decide(gang, snapshot, NOW + 2)

    assert decision.rule is lifecycle.RELEASE_AS_CREATED
    for release in decision.release:
        group = "headgroup" if "-head-" in release.pod else "g0"
        assert (release.rank == 0) == (group == "headgroup"), (release.pod, release.rank)
        assert release.node == record.nodes[release.rank]
    assert len({r.rank for r in decision.release}) == len(decision.release) == 3


def test_released_workers_fill_their_groups_slots_and_the_head_its_own():
    cluster, record = reserved()
    released = [ray_pod(cluster, "g0", f"w{i}", node=record.nodes[i + 1], planned_at=record.planned_at, bound=True)
                for i in range(4)]
    head = ray_pod(cluster, "headgroup", "h")
    snapshot, gang = world(cluster, [*released, head])

    decision = decide(gang, snapshot, NOW + 2)

    assert [(r.pod, r.rank, r.node) for r in decision.release] == [(head.key, 0, record.nodes[0])]


def test_a_cluster_without_room_for_every_worker_is_reserved_at_its_minimum():
    snapshot, gang = world(ray_cluster(replicas=4, minimum=2), count=3)
    assert (gang.size, gang.min_size) == (5, 3)

    decision = decide(gang, snapshot, NOW)

    assert decision.rule is lifecycle.RESERVED
    assert len(decision.find(actions.Reserve).record.nodes) == 3, "the head and the first two workers"
    assert "minimum 3" in decision.reason


def test_a_cluster_with_too_little_room_for_its_minimum_reserves_nothing_and_says_why():
    snapshot, gang = world(ray_cluster(replicas=4), count=3)

    decision = decide(gang, snapshot, NOW)

    assert decision.rule is lifecycle.UNPLACED and decision.find(actions.Reserve) is None
    assert "the reservation waits for room" in decision.reason


def mpi_pods(name: str = "pi", workers: int = 2) -> tuple[dict[str, Any], list[PodInfo]]:
    """An MPIJob and its pods as the MPI operator makes them: workers it controls, and the
    launcher through its launcher Job."""
    tpl = template({"cpu": "1", "nvidia.com/gpu": "8"})
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": name, "namespace": NS, "uid": "uid-pi", "creationTimestamp": "2027-01-15T08:00:00Z"},
           "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template({"cpu": "1"})},
                                        "Worker": {"replicas": workers, "template": tpl}}}}

    def pod(pod_name: str, labels: dict[str, str], owner: tuple[str, str, str]) -> PodInfo:
        return PodInfo.from_object({"metadata": {
            "name": pod_name, "namespace": NS, "uid": pod_name, "creationTimestamp": "2027-01-15T08:00:01Z",
            "labels": {contract.KUBEFLOW_JOB_NAME_LABEL: name, **labels},
            "annotations": {"troupe.io/gang-size": "auto"},
            "ownerReferences": [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": "u",
                                 "controller": True}]},
            "spec": {"schedulingGates": [{"name": contract.GATE}], "containers": [{"name": "c"}]}})
    launcher = pod(f"{name}-launcher-abcde", {contract.KUBEFLOW_JOB_ROLE: "launcher"},
                   ("batch/v1", "Job", f"{name}-launcher"))
    workers_ = [pod(f"{name}-worker-{i}", {contract.KUBEFLOW_JOB_ROLE: "worker", contract.KUBEFLOW_REPLICA_INDEX: str(i)},
                    ("kubeflow.org/v2beta1", "MPIJob", name)) for i in range(workers)]
    return job, [*workers_, launcher]


def test_an_mpi_launcher_joins_its_workers_gang_first_in_rank():
    job, pods = mpi_pods()
    assert {wl.group(p) for p in pods} == {("mpijob:pi", ("MPIJob", NS, "pi"))}
    assert sorted(pods, key=lambda p: p.rank)[0].name == "pi-launcher-abcde"
    w = wl.workload("MPIJob", job)
    assert (w.size, w.size_from) == (3, "MPIJob pi: launcher 1 + workers 2")
    assert [s.name for s in w.slots] == ["pi[launcher-0]", "pi[worker-0]", "pi[worker-1]"]
    launcher_job = {"metadata": {"name": "pi-launcher", "namespace": NS, "ownerReferences": [
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "controller": True}]}, "spec": {}}
    assert wl.workload("Job", launcher_job).owned, "the launcher Job plans no gang of its own"


def test_a_launcher_label_on_a_pod_of_another_job_joins_nothing():
    stray = PodInfo.from_object({"metadata": {
        "name": "x", "namespace": NS, "labels": {contract.KUBEFLOW_JOB_NAME_LABEL: "pi",
                                                 contract.KUBEFLOW_JOB_ROLE: "launcher"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "mine", "uid": "u", "controller": True}]},
        "spec": {"containers": [{"name": "c"}]}})
    assert wl.group(stray) == ("job:mine", ("Job", NS, "mine"))


def test_a_kuberay_pod_adopted_from_kai_gangs_by_its_raycluster_as_kais_pod_grouper_does():
    from reconciler.engine.model.declared.adopted import implicit_gang_id
    from troupe.podgroups import ORIGINAL_SCHEDULER_NAME

    cluster = ray_cluster()
    pod = ray_pod(cluster, "g0", "a")
    adopted = PodInfo.from_object({"metadata": {
        "name": pod.name, "namespace": NS, "labels": dict(pod.labels),
        "annotations": {ORIGINAL_SCHEDULER_NAME: "kai-scheduler"},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "uid-rc",
                             "controller": True}]},
        "spec": {"schedulingGates": [{"name": contract.GATE}], "containers": [{"name": "c"}]}})
    assert implicit_gang_id(adopted) == "raycluster:rc"
