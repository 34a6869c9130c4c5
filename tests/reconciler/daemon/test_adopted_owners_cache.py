"""The owners Volcano reads its groups' minimum from, in the reconciler
(reconciler/daemon/cache/workloads.py, reconciler/run/reconciler.py;
docs/decisions/065-adopted-pods-join-their-peers-groups.md): ReplicaSets, StatefulSets and
DaemonSets are watched only when a Volcano name is adopted, kept as their identity and that
one annotation; a Deployment's pods adopted from Volcano wait until their ReplicaSet is known,
then form one gang of its minimum, changed when the annotation changes."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from reconciler.daemon.cache import ClusterCache
from reconciler.run.reconciler import Reconciler
from testbed.engine_builders import make_node, make_pod
from troupe.adoption import OWNERS_UNREAD
from troupe.config import Config
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME

ADOPTING = Config(adopt_scheduler_names=("volcano", "kai-scheduler"))
RS_UID = "rs-uid"
GANG = f"ml/volcano:podgroup-{RS_UID}"


def replica_set(minimum: str | None = "2", rv: str = "5") -> dict[str, Any]:
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1000, "deployment.kubernetes.io/revision": "1"}
    if minimum is not None:
        annotations["scheduling.volcano.sh/group-min-member"] = minimum
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-7f9c", "namespace": "ml", "uid": RS_UID, "resourceVersion": rv,
                         "annotations": annotations},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


def tutorial_pod(i: int) -> dict[str, Any]:
    pod = make_pod(f"web-7f9c-{i}", "ml").requests(cpu="1").gated().annotate(ORIGINAL_SCHEDULER_NAME, "volcano").build()
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f9c", "uid": RS_UID, "controller": True}]
    return pod


def test_only_the_owners_identity_and_volcanos_annotation_are_kept() -> None:
    kept = ClusterCache(ADOPTING).workloads.retain_owner(replica_set())
    assert kept == {"metadata": {"name": "web-7f9c", "namespace": "ml", "uid": RS_UID, "resourceVersion": "5",
                                 "annotations": {"scheduling.volcano.sh/group-min-member": "2"}}}


def test_the_pods_wait_for_their_replica_set_then_take_its_minimum_as_it_changes() -> None:
    cache = ClusterCache(ADOPTING)
    cache.replace_nodes([make_node("n0").allocatable(cpu="8", gpu=0).build()])
    cache.replace_pods([cache.retain_pod(tutorial_pod(i)) for i in range(3)])
    waiting = cache.gang(GANG)
    assert waiting is not None and waiting.workload_missing == (
        "ReplicaSet ml/web-7f9c not found (deleted, or not readable by the reconciler)")
    index = cache.workloads
    index.replace_owners("ReplicaSet", [index.retain_owner(replica_set())])
    gang = cache.gang(GANG)
    assert gang is not None and (gang.workload_missing, gang.size, gang.min_size) == ("", 3, 2)
    index.owner_event("ReplicaSet", "MODIFIED", index.retain_owner(replica_set("3", rv="6")))
    gang = cache.gang(GANG)
    assert gang is not None and gang.min_size == 3
    index.owner_event("ReplicaSet", "DELETED", index.retain_owner(replica_set("3", rv="7")))
    gang = cache.gang(GANG)
    assert gang is not None and gang.workload_missing


def test_owners_are_watched_only_when_a_volcano_name_is_adopted_else_their_gangs_say_why() -> None:
    adopting = Reconciler(client.ApiClient(), ADOPTING)  # nothing is started: no request is made
    informers = {i.resource.name: i for i in adopting.owners}
    assert sorted(informers) == ["daemonsets", "replicasets", "statefulsets"]
    assert all(i in adopting.informers() for i in informers.values())
    adopting.cache.replace_pods([adopting.cache.retain_pod(tutorial_pod(i)) for i in range(2)])
    while (key := adopting.queue.get(timeout=0)) is not None:
        adopting.queue.done(key)
    informers["replicasets"].on_list([adopting.cache.workloads.retain_owner(replica_set())])
    queued = set()
    while (key := adopting.queue.get(timeout=0)) is not None:
        queued.add(key)
        adopting.queue.done(key)
    assert queued == {GANG}, "the waiting gang is decided again"
    gang = adopting.cache.gang(GANG)
    assert gang is not None and (gang.workload_missing, gang.min_size) == ("", 2)
    plain = Reconciler(client.ApiClient(), Config(adopt_scheduler_names=("kai-scheduler",)))
    assert plain.owners == []
    plain.cache.replace_pods([plain.cache.retain_pod(tutorial_pod(0))])
    gang = plain.cache.gang(GANG)
    assert gang is not None and gang.workload_missing == f"ReplicaSet ml/web-7f9c cannot be read: {OWNERS_UNREAD}"
