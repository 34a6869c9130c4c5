"""Pods adopted from Volcano or KAI that name no group, ganged as their peer's own controller
groups them (docs/decisions/065-adopted-pods-join-their-peers-groups.md).

Volcano: the group ``podgroup-<owner uid>`` of the pods' controlling owner, its minimum the
owner's ``scheduling.volcano.sh/group-min-member`` (a Deployment's, copied to its
ReplicaSet); KAI: the pods' top owner, a JobSet, LeaderWorkerSet group or PyTorchJob sized as
Troupe sizes those workloads, a Job's pods one gang of its parallelism.

Nodes: 4 hosts of 4 CPUs in one subblock; the tutorial's pods ask 1 CPU each::

    b0 / s0: h0 [....]  h1 [....]  h2 [....]  h3 [....]
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import Gang, all_gangs
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.parts import located, read_parts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.pods import PodInfo
from testbed.engine_builders import make_node, make_pod
from troupe.config import Config
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME

CONFIG = Config(adopt_scheduler_names=("volcano", "kai-scheduler"))
NOW = 1.8e9
NODES = [make_node(f"h{i}").topology("b0", "s0", f"h{i}").allocatable(cpu="4", gpu=0) for i in range(4)]
RS_UID = "09e95eb0-e520-4b50-a15c-c14cad844674"


def adopted(name: str, scheduler: str, owner: tuple[str, str, str, str] | None, cpu: str = "1",
            **annotations: str) -> dict[str, Any]:
    """A pod as the webhook leaves one adopted from ``scheduler``: ``default-scheduler``, the
    original name kept, Troupe's gate; ``owner``: ``(apiVersion, kind, name, uid)``."""
    builder = make_pod(name, "ml").requests(cpu=cpu).gated().annotate(ORIGINAL_SCHEDULER_NAME, scheduler)
    for key, value in annotations.items():
        builder.annotate(key, value)
    pod = builder.build()
    pod["metadata"]["uid"] = f"uid-{name}"
    if owner is not None:
        api_version, kind, owner_name, uid = owner
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": owner_name, "uid": uid, "controller": True}]
    return pod


def replica_set(annotations: dict[str, str] | None = None, uid: str = RS_UID) -> dict[str, Any]:
    """The ReplicaSet of Volcano's tutorial Deployment, the Deployment's annotations copied to it."""
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "my-app-deployment-74644c8849", "namespace": "ml", "uid": uid,
                         "annotations": annotations if annotations is not None else
                         {"scheduling.volcano.sh/group-min-member": "2"}},
            "spec": {"replicas": 3}}


RS = ("apps/v1", "ReplicaSet", "my-app-deployment-74644c8849", RS_UID)


def tutorial_pods(count: int = 3) -> list[dict[str, Any]]:
    return [adopted(f"my-app-deployment-74644c8849-{i}", "volcano", RS) for i in range(count)]


def busy(node: str, cpu: str) -> dict[str, Any]:
    return make_pod(f"busy-{node}", "ml").requests(cpu=cpu).on(node).build()


def cluster(pods: list[dict[str, Any]], others: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
            config: Config = CONFIG) -> tuple[Snapshot, dict[str, Gang]]:
    read = read_parts([*located("nodes", "Node", [n.build() for n in NODES]), *located("pods", "Pod", pods),
                       *((f"objects[{i}]", kind, obj) for i, (kind, obj) in enumerate(others))], config)
    snapshot = build_snapshot(read.parts)
    gangs = all_gangs(snapshot.pods.values(), config, read.parallelism, read.parts.workloads)
    return snapshot, {g.key: g for g in gangs}


# --- Volcano --------------------------------------------------------------------------------

def test_the_tutorials_pods_are_one_gang_named_as_volcano_names_it_with_the_deployments_minimum() -> None:
    snapshot, gangs = cluster(tutorial_pods(), [("ReplicaSet", replica_set())])
    gang = gangs[f"ml/volcano:podgroup-{RS_UID}"]
    assert (gang.size, gang.min_size) == (3, 2)
    assert gang.size_from == ("annotation scheduling.volcano.sh/group-min-member of ReplicaSet "
                              "ml/my-app-deployment-74644c8849")
    decision = decide(gang, snapshot, NOW)
    assert decision.phase == Phase.PLACED and len(decision.release) == 3, "whole"


def test_the_tutorials_pods_release_nothing_while_only_one_fits() -> None:
    room_for_one = [busy("h0", "3"), busy("h1", "4"), busy("h2", "4"), busy("h3", "4")]
    snapshot, gangs = cluster([*tutorial_pods(), *room_for_one], [("ReplicaSet", replica_set())])
    decision = decide(gangs[f"ml/volcano:podgroup-{RS_UID}"], snapshot, NOW)
    assert decision.phase == Phase.UNSCHEDULABLE and decision.release == (), "never one alone"


def test_with_room_for_two_the_minimum_starts_and_the_third_waits_for_room() -> None:
    room_for_two = [busy("h0", "3"), busy("h1", "3"), busy("h2", "4"), busy("h3", "4")]
    snapshot, gangs = cluster([*tutorial_pods(), *room_for_two], [("ReplicaSet", replica_set())])
    decision = decide(gangs[f"ml/volcano:podgroup-{RS_UID}"], snapshot, NOW)
    assert decision.phase == Phase.PLACED and len(decision.release) == 2, "its minimum, together"


def test_a_first_member_alone_waits_for_the_minimum() -> None:
    snapshot, gangs = cluster(tutorial_pods(1), [("ReplicaSet", replica_set())])
    decision = decide(gangs[f"ml/volcano:podgroup-{RS_UID}"], snapshot, NOW)
    assert decision.rule.name == "MembersMissing" and decision.release == ()


def test_while_the_owner_is_not_known_the_gang_waits_naming_it() -> None:
    snapshot, gangs = cluster(tutorial_pods(), [])
    gang = gangs[f"ml/volcano:podgroup-{RS_UID}"]
    decision = decide(gang, snapshot, NOW)
    assert decision.rule.name == "WorkloadUnknown" and decision.release == ()
    assert decision.reason == ("3 members present; size unknown: ReplicaSet ml/my-app-deployment-74644c8849 not found "
                               "(deleted, or not readable by the reconciler)")


def test_an_owner_of_the_same_name_but_another_uid_is_not_the_owner() -> None:
    _, gangs = cluster(tutorial_pods(), [("ReplicaSet", replica_set(uid="another"))])
    assert gangs[f"ml/volcano:podgroup-{RS_UID}"].workload_missing


@pytest.mark.parametrize(("annotations", "want_min"), [({}, 1), ({"scheduling.volcano.sh/group-min-member": "x"}, 1),
                                                       ({"scheduling.volcano.sh/group-min-member": "3"}, 3)],
                         ids=["no annotation", "unreadable", "three"])
def test_the_minimum_is_volcanos_reading_of_the_owners_annotation(annotations: dict[str, str], want_min: int) -> None:
    _, gangs = cluster(tutorial_pods(), [("ReplicaSet", replica_set(annotations))])
    assert gangs[f"ml/volcano:podgroup-{RS_UID}"].min_size == want_min


def test_a_jobs_annotation_gives_its_pods_minimum_and_a_queued_job_too_small_holds_them() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "train", "namespace": "ml", "uid": "job-uid", "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        "annotations": {"scheduling.volcano.sh/group-min-member": "5"}}, "spec": {"parallelism": 4, "completions": 4}}
    pods = [adopted(f"train-{i}", "volcano", ("batch/v1", "Job", "train", "job-uid")) for i in range(4)]
    snapshot, gangs = cluster(pods, [("Job", job)])
    gang = gangs["ml/volcano:podgroup-job-uid"]
    assert gang.held.startswith(
        "annotation scheduling.volcano.sh/group-min-member of Job ml/train: 5 members, but Job ml/train runs at most "
        "4 pods"), gang.held
    assert decide(gang, snapshot, NOW).phase == Phase.HELD


def test_a_pod_without_owner_gated_by_a_topology_key_is_its_own_group_of_minimum_one() -> None:
    pod = adopted("solo", "volcano", None, **{"troupe.io/topology-required-level": "cloud.google.com/gce-topology-host"})
    snapshot, gangs = cluster([pod])
    gang = gangs["ml/volcano:podgroup-uid-solo"]
    assert (gang.size, gang.min_size) == (1, 1)
    assert decide(gang, snapshot, NOW).phase == Phase.PLACED


def test_troupes_gang_keys_come_first() -> None:
    pods = [adopted(f"w-{i}", "volcano", RS, **{"troupe.io/gang-name": "mine", "troupe.io/gang-size": "3"})
            for i in range(3)]
    _, gangs = cluster(pods, [("ReplicaSet", replica_set())])
    assert list(gangs) == ["ml/mine"]


def test_an_adopted_pod_troupe_did_not_gate_is_not_troupes() -> None:
    pod = PodInfo.from_object(adopted("w-0", "volcano", RS))
    ungated = PodInfo.from_object({**adopted("w-1", "volcano", RS),
                                   "spec": {**adopted("w-1", "volcano", RS)["spec"], "schedulingGates": []}})
    assert pod.gang_annotations[ORIGINAL_SCHEDULER_NAME] == "volcano", "kept by the pod's parse"
    assert gang_key(pod, CONFIG) == f"ml/volcano:podgroup-{RS_UID}"
    assert gang_key(ungated, CONFIG) is None


# --- KAI ------------------------------------------------------------------------------------

def pytorch_job(name: str = "pt", workers: int = 3) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": workers}}}}


def test_a_kai_pytorchjobs_pods_are_its_workload_gang() -> None:
    pods = [adopted(f"pt-worker-{i}", "kai-scheduler", ("kubeflow.org/v1", "PyTorchJob", "pt", "pt-uid"))
            for i in range(3)]
    snapshot, gangs = cluster(pods, [("PyTorchJob", pytorch_job())])
    gang = gangs["ml/pytorchjob:pt"]
    assert gang.size == 4 and gang.size_from == "PyTorchJob pt: Master 1 + Worker 3"
    decision = decide(gang, snapshot, NOW)
    assert decision.rule.name == "MembersMissing" and decision.release == (), "3 of 4: none alone"


def job(name: str, controller: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"{name}-uid"}
    if controller is not None:
        meta["ownerReferences"] = [{"apiVersion": controller[0], "kind": controller[1], "name": "launcher-owner",
                                    "uid": "o-uid", "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"parallelism": 4}}


def job_pods(name: str, count: int) -> list[dict[str, Any]]:
    return [adopted(f"{name}-{i}", "kai-scheduler", ("batch/v1", "Job", name, f"{name}-uid")) for i in range(count)]


def test_a_kai_jobs_pods_are_one_gang_of_its_parallelism() -> None:
    snapshot, gangs = cluster(job_pods("batch", 4), [("Job", job("batch"))])
    assert sorted(gangs) == ["ml/job:batch"]
    gang = gangs["ml/job:batch"]
    assert (gang.size, gang.size_from) == (4, "Job batch parallelism")
    assert decide(gang, snapshot, NOW).phase == Phase.PLACED


def test_a_kai_jobs_pods_are_never_released_fewer_than_the_job_runs() -> None:
    snapshot, gangs = cluster(job_pods("batch", 3), [("Job", job("batch"))])
    decision = decide(gangs["ml/job:batch"], snapshot, NOW)
    assert decision.rule.name == "MembersMissing" and decision.release == (), "3 of 4: none alone"


def test_a_kai_job_under_a_cronjob_is_its_own_gang_too() -> None:
    _, gangs = cluster(job_pods("nightly", 2), [("Job", job("nightly", ("batch/v1", "CronJob")))])
    assert sorted(gangs) == ["ml/job:nightly"] and gangs["ml/job:nightly"].held == ""


def test_a_kai_job_whose_top_owner_troupe_cannot_size_is_held_naming_it() -> None:
    snapshot, gangs = cluster(job_pods("chief", 1), [("Job", job("chief", ("kubeflow.org/v1", "TFJob")))])
    gang = gangs["ml/job:chief"]
    assert gang.held.startswith("adopted from kai-scheduler: KAI's pod-grouper groups the pods of Job ml/chief by "
                                "its top owner, here TFJob launcher-owner (kubeflow.org/v1)"), gang.held
    assert decide(gang, snapshot, NOW).phase == Phase.HELD


def test_a_kai_jobs_gang_waits_while_its_job_is_not_known() -> None:
    snapshot, gangs = cluster(job_pods("batch", 1))
    decision = decide(gangs["ml/job:batch"], snapshot, NOW)
    assert decision.rule.name == "WorkloadUnknown" and decision.release == ()


# --- a property -----------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(1, 5), minimum=st.integers(1, 6), free=st.lists(st.integers(0, 4), min_size=4, max_size=4))
def test_a_volcano_owners_pods_are_never_released_fewer_than_its_minimum_at_first(
        replicas: int, minimum: int, free: list[int]) -> None:
    pods = tutorial_pods(replicas)
    load = [busy(f"h{i}", str(4 - f)) for i, f in enumerate(free) if f < 4]
    snapshot, gangs = cluster([*pods, *load],
                              [("ReplicaSet", replica_set({"scheduling.volcano.sh/group-min-member": str(minimum)}))])
    decision = decide(gangs[f"ml/volcano:podgroup-{RS_UID}"], snapshot, NOW)
    released = len(decision.release)
    assert released == 0 or released >= minimum, "the minimum first, together, or nothing"
    assert released <= min(replicas, sum(free))
