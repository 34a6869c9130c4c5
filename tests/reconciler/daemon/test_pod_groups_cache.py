"""The cache's pod groups (reconciler/daemon/cache/podgroups.py,
docs/decisions/056-pod-groups.md): kept parsed per API version, the preferred version's
object winning; a source none of whose versions is served is named with why; every change
makes the gangs built again, so a group that arrives after its pods lets them through."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.cache.podgroups import PodGroupIndex
from reconciler.run.reconciler import Reconciler
from testbed.engine_builders import make_node, make_pod
from troupe.config import Config

CONFIG = Config()


def upstream(min_count: int, version: str = "v1beta1", name: str = "g") -> dict[str, Any]:
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "7",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1000}},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def member(i: int) -> dict[str, Any]:
    pod = make_pod(f"m-{i}", "ml").requests(gpu=1).index(i).gated().build()
    pod["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    return pod


def test_the_preferred_version_wins_and_only_the_spec_is_kept() -> None:
    index = PodGroupIndex(CONFIG)
    index.replace("workload", "v1alpha2", [upstream(2, "v1alpha2")])
    index.replace("workload", "v1beta1", [index.retain(upstream(3))])
    assert index.retain(upstream(3))["metadata"] == {"name": "g", "namespace": "ml", "resourceVersion": "7"}
    _, groups, unavailable = index.view()
    assert groups[("workload", "ml", "g")].min_count == 3 and unavailable == {}
    index.event("workload", "v1beta1", "DELETED", upstream(3))
    assert index.view()[1][("workload", "ml", "g")].min_count == 2  # still served at v1alpha2


def test_a_source_none_of_whose_versions_is_served_is_named_with_why() -> None:
    index = PodGroupIndex(CONFIG)
    for version in ("v1beta1", "v1alpha3"):
        index.absent("workload", version, f"{version} not served")
    assert "workload" not in index.view()[2]
    index.absent("workload", "v1alpha2", "v1alpha2 not served")
    assert index.view()[2] == {"workload": "v1beta1 not served; v1alpha3 not served; v1alpha2 not served"}
    index.replace("workload", "v1alpha2", [])
    assert index.view()[2] == {}


def test_a_group_arriving_after_its_pods_changes_their_gang() -> None:
    cache = ClusterCache(CONFIG)
    cache.replace_nodes([make_node("n0").allocatable(gpu=8).build()])
    cache.replace_pods([cache.retain_pod(member(i)) for i in range(2)])
    waiting = cache.gang("ml/workload:g")
    assert waiting is not None and waiting.workload_missing.startswith("PodGroup ml/g (scheduling.k8s.io) not found")
    cache.pod_groups.event("workload", "v1beta1", "ADDED", upstream(2))
    gang = cache.gang("ml/workload:g")
    assert gang is not None and (gang.workload_missing, gang.size, gang.min_size) == ("", 2, 2)
    cache.pod_groups.event("workload", "v1beta1", "MODIFIED", upstream(3))  # minCount is mutable in 1.37
    gang = cache.gang("ml/workload:g")
    assert gang is not None and (gang.size, gang.min_size) == (3, 3)


def test_a_group_that_cannot_be_read_holds_its_gang() -> None:
    cache = ClusterCache(CONFIG)
    cache.replace_pods([cache.retain_pod(member(0))])
    cache.pod_groups.replace("workload", "v1beta1", [upstream(0)])
    gang = cache.gang("ml/workload:g")
    assert gang is not None and gang.held.startswith(
        "PodGroup ml/g (scheduling.k8s.io): spec.schedulingPolicy.gang.minCount: must be an integer")


def test_a_group_event_requeues_its_gang_and_the_waiting_gangs_of_its_namespace() -> None:
    """The reconciler's informers (one per API version, named with it): a group's event
    queues its own gang's key and the gangs of its namespace with a gated member; an API
    that is not served is noted, its gangs told why (docs/decisions/056-pod-groups.md)."""
    reconciler = Reconciler(client.ApiClient(), CONFIG)  # nothing is started: no request is made
    informers = {i.resource.name: i for i in reconciler.pod_groups}
    assert sorted(informers) == sorted(f"podgroups.{v}.{g}" for g, v in (
        ("scheduling.k8s.io", "v1beta1"), ("scheduling.k8s.io", "v1alpha3"), ("scheduling.k8s.io", "v1alpha2"),
        ("scheduling.volcano.sh", "v1beta1"), ("scheduling.x-k8s.io", "v1alpha1"), ("scheduling.run.ai", "v2alpha2")))
    reconciler.cache.replace_pods([reconciler.cache.retain_pod(member(0)), reconciler.cache.retain_pod(
        make_pod("other", "elsewhere").gated().build())])
    while (key := reconciler.queue.get(timeout=0)) is not None:
        reconciler.queue.done(key)
    informers["podgroups.v1beta1.scheduling.k8s.io"].on_event("ADDED", upstream(1))
    queued = set()
    while (key := reconciler.queue.get(timeout=0)) is not None:
        queued.add(key)
        reconciler.queue.done(key)
    assert queued == {"ml/workload:g"}
    gang = reconciler.cache.gang("ml/workload:g")
    assert gang is not None and (gang.size, gang.min_size) == (1, 1)
    for version in ("v1beta1", "v1alpha3", "v1alpha2"):
        reconciler.cache.pod_groups.absent("workload", version, f"{version}: 404")
    _, _, unavailable = reconciler.cache.pod_groups.view()
    assert unavailable == {"workload": "v1beta1: 404; v1alpha3: 404; v1alpha2: 404"}
