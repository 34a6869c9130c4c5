"""Pods adopted from Volcano or KAI that name no group, at admission
(docs/decisions/065-adopted-pods-join-their-peers-groups.md): each belongs to the group its
peer's own controller would make from its owner, so it is gated when that group may need
more than the pod itself, adopted ungated when the group's minimum is 1 whatever the owner
says, and not adopted at all (a warning saying why) when Troupe cannot size the group; the
same over real HTTPS, with the real AdmissionReview JSON the API server sends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest

from tests.support.webhook_builders import (
    Server,
    admit,
    make_pod,
    make_review,
    review_over_https,
    start_server,
)
from troupe.adoption import KAI_SCHEDULER, VOLCANO_SCHEDULER
from troupe.config import Config
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME
from webhook.admission import mutate, patch_of

GATE = {"name": "troupe.io/placement"}
ADOPTING = Config(adopt_scheduler_names=(VOLCANO_SCHEDULER, KAI_SCHEDULER, "scheduler-plugins-scheduler"))


def owned(scheduler: str, kind: str | None, api_version: str = "apps/v1", labels: dict[str, str] | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod created for ``scheduler`` by an owner of ``kind`` (None: no owner), naming no group."""
    builder = make_pod("w-0").container()
    for key, value in (labels or {}).items():
        builder.label(key, value)
    for key, value in (annotations or {}).items():
        builder.annotate(key, value)
    pod = builder.obj()
    pod["spec"]["schedulerName"] = scheduler
    if kind is not None:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u-1", "controller": True}]
    return pod


#: Volcano's tutorial Deployment's pods: owned by its ReplicaSet, whose annotation (copied
#: from the Deployment) gives the group's minimum, which the webhook cannot read.
TUTORIAL_POD = owned(VOLCANO_SCHEDULER, "ReplicaSet", labels={"app": "my-app"})

GATED = [
    ("Volcano: a ReplicaSet's pod (a Deployment's)", TUTORIAL_POD),
    ("Volcano: a StatefulSet's pod", owned(VOLCANO_SCHEDULER, "StatefulSet")),
    ("Volcano: a DaemonSet's pod", owned(VOLCANO_SCHEDULER, "DaemonSet")),
    ("Volcano: a Job's pod", owned(VOLCANO_SCHEDULER, "Job", "batch/v1")),
    ("KAI: a Job's pod", owned(KAI_SCHEDULER, "Job", "batch/v1")),
    ("KAI: a PyTorchJob's pod", owned(KAI_SCHEDULER, "PyTorchJob", "kubeflow.org/v1")),
    ("KAI: a JobSet's pod", owned(KAI_SCHEDULER, "Job", "batch/v1", labels={"jobset.sigs.k8s.io/jobset-name": "js"})),
    ("KAI: a LeaderWorkerSet group's pod", owned(KAI_SCHEDULER, "StatefulSet", labels={
        "leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0"})),
    ("KAI: a LeaderWorkerSet's pod before LWS's own webhook labels its group", owned(
        KAI_SCHEDULER, "StatefulSet", labels={"leaderworkerset.sigs.k8s.io/name": "serve"})),
]

ALONE = [
    ("Volcano: a pod without an owner (its group is itself, minimum 1)", owned(VOLCANO_SCHEDULER, None)),
    ("Volcano: an owner whose annotations Volcano does not read", owned(VOLCANO_SCHEDULER, "Foo", "example.com/v1")),
    ("KAI: a pod without an owner", owned(KAI_SCHEDULER, None)),
    ("KAI: a Deployment's pod (a group per pod)", owned(KAI_SCHEDULER, "ReplicaSet")),
    ("KAI: a StatefulSet's pod (minimum 1)", owned(KAI_SCHEDULER, "StatefulSet")),
    ("a coscheduling profile's pod: no group without its label", owned("scheduler-plugins-scheduler", "ReplicaSet")),
]


@pytest.mark.parametrize(("case", "pod"), GATED, ids=[c for c, _ in GATED])
def test_an_adopted_pod_whose_peer_would_group_it_is_gated_and_handed_to_kube_scheduler(
        case: str, pod: dict[str, Any]) -> None:
    got = admit(pod, ADOPTING)
    assert got.allowed, got.response
    assert got.pod["spec"]["schedulerName"] == "default-scheduler"
    assert got.pod["metadata"]["annotations"][ORIGINAL_SCHEDULER_NAME] == pod["spec"]["schedulerName"]
    assert got.pod["spec"]["schedulingGates"] == [GATE]
    assert got.warnings == []
    again = admit(got.pod, ADOPTING)
    assert again.response == {"uid": "uid-1", "allowed": True}, "a reinvocation adds nothing"


@pytest.mark.parametrize(("case", "pod"), ALONE, ids=[c for c, _ in ALONE])
def test_an_adopted_pod_whose_peers_group_has_a_minimum_of_one_is_adopted_ungated(
        case: str, pod: dict[str, Any]) -> None:
    got = admit(pod, ADOPTING)
    assert got.allowed and got.pod["spec"]["schedulerName"] == "default-scheduler"
    assert "schedulingGates" not in got.pod["spec"]


def test_a_tfjob_pod_for_kai_is_not_adopted_and_the_warning_says_why() -> None:
    pod = owned(KAI_SCHEDULER, "TFJob", "kubeflow.org/v1", labels={"training.kubeflow.org/replica-type": "worker"})
    got = admit(pod, ADOPTING)
    assert got.allowed and got.ops == [], "left as written: kai-scheduler's"
    assert got.pod["spec"]["schedulerName"] == KAI_SCHEDULER
    assert got.warnings == [
        "not adopted from kai-scheduler: KAI's pod-grouper makes this pod's group from its top owner, here "
        "TFJob owner (kubeflow.org/v1) or above it, and Troupe cannot size that group yet (it sizes Jobs, JobSets, "
        "LeaderWorkerSets, PyTorchJobs, MPIJobs and RayClusters); adopted, the pod would be released alone, so it "
        "keeps spec.schedulerName kai-scheduler"]


def test_a_kuberay_or_mpi_pod_for_kai_is_adopted_and_gated_as_its_workloads_member() -> None:
    for kind, api_version in (("RayCluster", "ray.io/v1"), ("MPIJob", "kubeflow.org/v2beta1")):
        got = admit(owned(KAI_SCHEDULER, kind, api_version, labels={"ray.io/node-type": "worker"}), ADOPTING)
        assert got.allowed and got.warnings == [], kind
        assert got.pod["spec"]["schedulerName"] != KAI_SCHEDULER, kind
        assert got.pod["spec"]["schedulingGates"] == [GATE], kind


def test_a_tfjob_pod_with_troupes_topology_key_keeps_its_scheduler_and_is_gated_by_the_key() -> None:
    pod = owned(KAI_SCHEDULER, "TFJob", "kubeflow.org/v1",
                annotations={"troupe.io/topology-required-level": "cloud.google.com/gce-topology-subblock"})
    got = admit(pod, ADOPTING)
    assert got.pod["spec"]["schedulerName"] == KAI_SCHEDULER
    assert got.pod["spec"]["schedulingGates"] == [GATE], "Troupe's keys gate a pod whatever its scheduler"
    assert got.warnings and got.warnings[0].startswith("not adopted from kai-scheduler")


@pytest.mark.parametrize(("case", "pod", "want_annotations"), [
    ("Troupe's gang keys name the gang", owned(VOLCANO_SCHEDULER, "ReplicaSet", annotations={
        "troupe.io/gang-name": "g", "troupe.io/gang-size": "2"}), {"troupe.io/gang-name": "g"}),
    ("a group the pod names is its gang", owned(KAI_SCHEDULER, "RayCluster", "ray.io/v1", annotations={
        "pod-group-name": "ray-group"}), {"pod-group-name": "ray-group"}),
], ids=["troupe-keys", "named-group"])
def test_troupes_keys_and_a_named_group_come_before_a_peers_implicit_group(
        case: str, pod: dict[str, Any], want_annotations: dict[str, str]) -> None:
    got = admit(pod, ADOPTING)
    assert got.allowed and got.warnings == []
    assert got.pod["spec"]["schedulerName"] == "default-scheduler"
    assert got.pod["spec"]["schedulingGates"] == [GATE]
    for key, value in want_annotations.items():
        assert got.pod["metadata"]["annotations"][key] == value


def test_the_namespace_opt_in_sizes_a_kai_jobs_gang_from_the_job_as_troupe_does() -> None:
    pod = owned(KAI_SCHEDULER, "Job", "batch/v1")
    patched = jsonpatch.apply_patch(pod, patch_of(mutate(make_review(pod), ADOPTING, gang_mode_auto=True)))
    assert patched["metadata"]["annotations"]["troupe.io/gang-size"] == "auto", "the namespace's own request wins"
    assert patched["spec"]["schedulingGates"] == [GATE]


def test_a_peer_not_adopted_is_left_alone() -> None:
    got = admit(TUTORIAL_POD, Config(adopt_scheduler_names=(KAI_SCHEDULER,)))
    assert got.response == {"uid": "uid-1", "allowed": True}


# --- over real HTTPS ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def adopting_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real ``python -m webhook serve`` whose configuration adopts Volcano's and KAI's names."""
    s = start_server(tmp_path_factory.mktemp("webhook-peer-groups"),
                     config_yaml=f"adoptSchedulerNames: [{VOLCANO_SCHEDULER}, {KAI_SCHEDULER}]\n")
    try:
        yield s
    finally:
        s.stop()


def test_over_https_the_tutorials_pod_is_adopted_and_gated_and_a_reinvocation_adds_nothing(
        adopting_server: Server) -> None:
    answer = review_over_https(adopting_server, make_review(TUTORIAL_POD, uid="tutorial"))
    assert answer["response"]["uid"] == "tutorial" and answer["response"]["allowed"]
    patched = jsonpatch.apply_patch(TUTORIAL_POD, patch_of(answer))
    assert patched["spec"]["schedulerName"] == "default-scheduler"
    assert patched["metadata"]["annotations"][ORIGINAL_SCHEDULER_NAME] == VOLCANO_SCHEDULER
    assert patched["spec"]["schedulingGates"] == [GATE]
    again = review_over_https(adopting_server, make_review(patched, uid="again"))
    assert again["response"] == {"uid": "again", "allowed": True}


def test_over_https_kai_job_and_ray_pods_are_gated_and_a_tfjob_pod_is_left_with_a_warning(
        adopting_server: Server) -> None:
    for kind, api_version in (("Job", "batch/v1"), ("RayCluster", "ray.io/v1")):
        got = review_over_https(adopting_server, make_review(owned(KAI_SCHEDULER, kind, api_version), uid=kind))
        patched = jsonpatch.apply_patch(owned(KAI_SCHEDULER, kind, api_version), patch_of(got))
        assert patched["spec"]["schedulingGates"] == [GATE], kind
    tf = review_over_https(adopting_server, make_review(owned(KAI_SCHEDULER, "TFJob", "kubeflow.org/v1"), uid="tf"))
    response = tf["response"]
    assert response["allowed"] and "patch" not in response
    assert response["warnings"][0].startswith("not adopted from kai-scheduler: KAI's pod-grouper makes this pod's "
                                              "group from its top owner, here TFJob owner (kubeflow.org/v1)")
