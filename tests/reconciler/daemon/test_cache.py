"""The cluster cache rebuilds only what changed: the node table when a node changes in a way
a decision reads, a gang when one of its pods (or a Job) changes."""

from __future__ import annotations

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model.keys import PodKey
from testbed.engine_builders import budget
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config


def cache_with(nodes: int = 4, members: int = 3) -> ClusterCache:
    cache = ClusterCache(Config())
    cache.replace_nodes([make_node(f"n{i}").topology("b0", "s0", f"h{i}").gpus(8).build() for i in range(nodes)])
    cache.replace_pods([make_pod(f"w-{i}").gang("g", 4).index(i).gpus(1).gated().build() for i in range(members)])
    return cache


def test_a_node_heartbeat_changes_nothing_a_decision_reads():
    cache = cache_with()
    before = cache.snapshot()
    beat = make_node("n1").topology("b0", "s0", "h1").gpus(8).build()
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-23T10:00:00Z"
    beat["metadata"]["resourceVersion"] = "77"
    cache.node_event("MODIFIED", beat)
    assert cache.snapshot() is before, "no new snapshot for a heartbeat"
    assert cache.node_info("n1").ready
    assert cache.node_event("MODIFIED", beat) is False, "the same version again"


def test_a_node_change_that_matters_rebuilds_the_node_table_and_a_pod_change_does_not():
    cache = cache_with()
    table = cache.snapshot().table
    cache.pod_event("ADDED", make_pod("w-3").gang("g", 4).index(3).gpus(1).gated().build())
    after_pod = cache.snapshot()
    assert after_pod.table is table, "pods changed: the node table is shared"
    assert "team-a/w-3" in after_pod.pods
    cordoned = make_node("n1").topology("b0", "s0", "h1").gpus(8).build()
    cordoned["spec"]["unschedulable"] = True
    cache.node_event("MODIFIED", cordoned)
    after_node = cache.snapshot()
    assert after_node.table is not table
    assert after_node.nodes[after_node.index["n1"]].unschedulable
    cache.node_event("DELETED", cordoned)
    assert "n1" not in cache.snapshot().index


def test_a_gang_is_built_again_only_when_a_member_or_a_job_changes():
    cache = cache_with()
    first = cache.gang("team-a/g")
    assert first is not None and len(first.members) == 3
    assert cache.gang("team-a/g") is first, "nothing changed: the same value"
    cache.pod_event("ADDED", make_pod("other").gpus(1).build())
    assert cache.gang("team-a/g") is first, "a pod of no gang does not touch it"
    cache.pod_event("ADDED", make_pod("w-3").gang("g", 4).index(3).gpus(1).gated().build())
    second = cache.gang("team-a/g")
    assert second is not first and len(second.members) == 4
    cache.job_event("ADDED", {"metadata": {"namespace": "team-a", "name": "train"}, "spec": {"parallelism": 4}})
    assert cache.gang("team-a/g") is not second, "a Job's parallelism may size a gang"
    for i in range(4):
        cache.pod_event("DELETED", make_pod(f"w-{i}").build())
    assert cache.gang("team-a/g") is None


def _versioned(obj, rv):
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


def test_a_write_result_that_loses_the_race_with_the_deletion_does_not_bring_a_pod_back():
    cache = cache_with()
    pod = _versioned(make_pod("w-0").gang("g", 4).index(0).gpus(1).build(), 10)
    cache.pod_event("DELETED", _versioned(make_pod("w-0").build(), 12))
    cache.assume(pod)  # our update (rv 10) returned after the watch told of the deletion (rv 12)
    assert cache.pod_info(PodKey("team-a", "w-0")) is None
    again = _versioned(make_pod("w-0").gang("g", 4).index(0).gpus(1).gated().build(), 20)
    cache.pod_event("ADDED", again)  # a new pod of the same name
    assert cache.pod_info(PodKey("team-a", "w-0")).resource_version == "20"


def test_a_group_whose_last_finalizer_was_removed_is_not_brought_back_by_the_patch_result():
    cache = cache_with()
    group = {"apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
             "metadata": {"name": "g", "resourceVersion": "30", "deletionTimestamp": "2026-01-01T00:00:00Z"},
             "spec": {"resources": {"nvidia.com/gpu": 1}}}
    cache.group_event("ADDED", group)
    cache.group_event("DELETED", {**group, "metadata": {**group["metadata"], "resourceVersion": "31"}})
    cache.assume_group(group)
    assert cache.group("g") is None
    assert "g" not in cache.snapshot().groups


def test_a_groups_work_queue_key_is_typed_and_never_taken_for_a_gangs():
    from reconciler.daemon.cache import GroupKey, group_key, group_of_key
    key = group_key("team-a-gpus")
    assert isinstance(key, GroupKey) and group_of_key(key) == "team-a-gpus"
    assert group_of_key("team-a/train") is None
    assert group_of_key("sdg:team-a-gpus") is None, "a string that looks like a group key is a gang's"


def test_budgets_reach_the_snapshot_and_a_change_of_their_count_rebuilds_it():
    cache = ClusterCache(Config())
    cache.replace_nodes([make_node("n0").build()])
    empty = cache.snapshot()
    assert empty.budgets == ()
    cache.budgets.replace([budget("keep", 1, {"app": "x"}, namespace="team"),
                           {**budget("bad", 0, {}), "status": {"disruptionsAllowed": "many"}}])
    first = cache.snapshot()
    assert first is not empty
    assert [(b.key, b.disruptions_allowed) for b in first.budgets] == [("team/keep", 1)], "the bad one is left out"
    assert not cache.budgets.event("MODIFIED", budget("keep", 1, {"app": "x"}, namespace="team"))
    assert cache.snapshot() is first, "the same count: nothing a decision reads changed"
    assert cache.budgets.event("MODIFIED", budget("keep", 0, {"app": "x"}, namespace="team"))
    assert [b.disruptions_allowed for b in cache.snapshot().budgets] == [0]
    assert cache.budgets.event("DELETED", budget("keep", 0, {"app": "x"}, namespace="team"))
    assert cache.snapshot().budgets == ()
