"""The gang controller on an in-memory cache and writer ports: what it decides and what it
writes, including writes that fail mid-release and reconcilers that restart."""

from __future__ import annotations

import json
import typing

import pytest

from reconciler.engine.decision import actions
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from reconciler.ports import WriteError
from testbed.reconciler_builders import make_node, make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, gang_pods, own
from troupe import contract
from troupe.config import Config

NAMES = [f"train-{i}" for i in range(4)]


def test_every_action_of_the_engine_has_its_handler():
    assert set(Harness(four_nodes(), []).controller.handlers) == set(typing.get_args(actions.Action))


def test_each_controller_is_given_the_port_of_the_kind_it_writes():
    h = Harness(four_nodes(), [])
    handler = {t: h.controller.handlers[t].__self__ for t in (actions.Release, actions.RollBack, actions.Preempt,
                                                               actions.Reserve, actions.RecordNodeFailures)}
    assert handler[actions.Release].pods is handler[actions.Preempt].pods is h.cluster.pods
    assert (handler[actions.RollBack].pods, handler[actions.RollBack].state) == (h.cluster.pods, h.cluster.state)
    assert handler[actions.Reserve].workloads is h.cluster.workloads
    assert handler[actions.RecordNodeFailures].nodes is h.controllers.taints.nodes is h.cluster.nodes
    assert h.controllers.groups.groups is h.cluster.groups and h.controllers.gang_objects.writer is h.cluster.gang_objects
    assert h.controllers.conditions.pods is h.cluster.pods


# --- releasing ---------------------------------------------------------------------------------
def test_a_complete_gang_is_released_whole_with_one_write_per_member():
    h = Harness(four_nodes(), gang_pods(4))
    outcome = h.reconcile()
    assert outcome.phase is Phase.PLACED and not outcome.retry
    assert outcome.reason == "placed 4 members in cloud.google.com/gce-topology-subblock=b1/s1"
    assert len(h.cluster.pods.patches) == 4, "pin, annotations and the gate go in one update"
    nodes = {}
    for i in range(4):
        pod = h.pod(f"train-{i}")
        assert pod["spec"]["schedulingGates"] == []
        nodes[i] = pod["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]
        ann = pod["metadata"]["annotations"]
        assert (ann[contract.ASSIGNED_NODE], ann[contract.ASSIGNED_RANK]) == (nodes[i], str(i))
        assert ann[contract.PLANNED_AT] == "2027-01-15T08:00:00.000+00:00"
        assert ann[contract.RELEASED_AT] == "2027-01-15T08:00:00.000+00:00"
    # 4 members x 2 GPUs fit in one subblock (2 nodes x 4 GPUs); neighbouring ranks share nodes.
    assert nodes == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    assert [(e.reason, e.regarding.name) for e in h.cluster.events] == [("GangReleased", "train-0")], \
        "one Event for the gang's release, on its first member: each member's condition tells its own part"
    assert h.cluster.events[0].message.startswith("released 4 member(s) (ranks 0-3) onto 2 nodes: placed 4 members")
    h.sync()
    assert h.reconcile().phase is Phase.RELEASED


def test_the_plan_is_written_first_on_the_first_member_and_names_every_member():
    h = Harness(four_nodes(), gang_pods(3))
    h.reconcile()
    first_ref, first_patch = h.cluster.pods.patches[0]
    assert first_ref.name == "train-0"
    plan = json.loads(first_patch["metadata"]["annotations"][contract.PLAN])
    assert plan == {"plannedAt": "2027-01-15T08:00:00.000+00:00",
                    "nodes": {"uid-train-0": "n1", "uid-train-1": "n1", "uid-train-2": "n2"}}
    assert all(contract.PLAN not in p["metadata"]["annotations"] for _, p in h.cluster.pods.patches[1:])


def test_a_gang_of_one_needs_no_plan_record():
    h = Harness(four_nodes(), gang_pods(1))
    h.reconcile()
    assert contract.PLAN not in h.cluster.pods.patches[0][1]["metadata"]["annotations"]


def test_a_gang_missing_a_member_waits_and_writes_nothing():
    h = Harness(four_nodes(), gang_pods(3, size=4))
    outcome = h.reconcile()
    assert (outcome.phase, outcome.reason) == (Phase.WAITING, "3 of 4 members present")
    assert h.cluster.pods.patches == []
    h.add(make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build())
    assert h.reconcile().phase is Phase.PLACED


def test_completed_members_do_not_count():
    done = make_pod("train-3").gang("train", 4).index(3).gpus(2).build()
    done["status"]["phase"] = "Succeeded"
    h = Harness(four_nodes(), [*gang_pods(3, size=4), done])
    assert h.reconcile().phase is Phase.WAITING


def test_members_that_disagree_are_held_with_a_warning_naming_the_key():
    pods = gang_pods(3, size=3)
    pods[2]["metadata"]["annotations"]["troupe.io/gang-size"] = "4"
    h = Harness(four_nodes(), pods)
    outcome = h.reconcile()
    assert outcome.phase is Phase.HELD
    assert "troupe.io/gang-size: 3, 4" in outcome.reason
    assert h.cluster.pods.patches == []
    h.controllers.conditions.flush(everything=True)  # each Event goes with its member's condition
    assert {e.reason for e in h.cluster.events} == {"GangSpecMismatch"}
    assert len(h.cluster.events) == 3
    h.sync()
    h.reconcile()
    h.controllers.conditions.flush(everything=True)
    assert len(h.cluster.events) == 3, "the same warning is not repeated"


def test_a_member_with_a_malformed_size_holds_its_gang_instead_of_being_ignored():
    pods = gang_pods(2)
    pods[1]["metadata"]["annotations"]["troupe.io/gang-size"] = "two"
    h = Harness(four_nodes(), pods)
    outcome = h.reconcile()
    assert outcome.phase is Phase.HELD
    assert outcome.reason == ("member train-1: annotation troupe.io/gang-size: must be an integer >= 1, "
                              "got 'two' (held until it is fixed)")


def test_a_gang_that_cannot_fit_is_unschedulable_and_asks_the_queue_to_back_off():
    h = Harness(four_nodes(), gang_pods(3, gpus=8))
    outcome = h.reconcile()
    assert outcome.phase is Phase.UNSCHEDULABLE and outcome.retry
    assert "insufficient nvidia.com/gpu" in outcome.reason
    assert outcome.decision.code == "UnschedulableAndUnresolvable"
    assert h.cluster.pods.patches == []
    h.controllers.conditions.flush(everything=True)
    assert [(e.regarding.name, e.reason, e.kind) for e in h.cluster.events] == [("train-0", "GangUnschedulable", "Warning")], \
        "one Event for the gang, on its lead member, with its condition"


def test_a_released_gang_uses_its_nodes_before_any_watch_event_arrives():
    pods = gang_pods(4, gpus=4, name="a") + gang_pods(1, gpus=1, name="b")
    h = Harness(four_nodes(), pods)
    assert h.reconcile("team-a/a").phase is Phase.PLACED
    outcome = h.reconcile("team-a/b")
    assert outcome.phase is Phase.UNSCHEDULABLE, "gang a fills every GPU; b must not be double-booked"


def test_other_components_gates_stay():
    pods = gang_pods(2)
    pods[0]["spec"]["schedulingGates"].append({"name": "example.com/quota"})
    h = Harness(four_nodes(), pods)
    h.reconcile()
    assert h.pod("train-0")["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    assert "still gated by example.com/quota" in h.cluster.events[0].message


def test_a_conflict_is_retried_after_a_fresh_read():
    h = Harness(four_nodes(), gang_pods(2))
    h.cluster.pods.touch(PodKey("team-a", "train-0"), x="y")  # the cached resourceVersion is now stale
    outcome = h.reconcile()
    assert outcome.phase is Phase.PLACED and not outcome.retry
    assert h.node_of("train-0") == "n1"
    assert h.pod("train-0")["metadata"]["labels"]["x"] == "y", "someone else's change is kept"


def test_a_member_pinned_elsewhere_is_never_pinned_again():
    h = Harness(four_nodes(), gang_pods(2))
    # Another (stale) writer pinned train-1 to n4 after this cache saw it.
    pod = h.cluster.pods.objects[PodKey("team-a", "train-1")]
    pod["spec"]["nodeSelector"] = {contract.HOSTNAME_LABEL: "n4"}
    pod["metadata"]["annotations"][contract.ASSIGNED_NODE] = "n4"
    pod["metadata"]["resourceVersion"] = "999999"
    outcome = h.reconcile()
    assert outcome.retry and "pinned to n4" in outcome.reason
    assert h.node_of("train-1") == "n4"


def test_a_node_that_cannot_be_read_is_left_out_instead_of_stopping_every_plan():
    registering = make_node("n9").build()
    del registering["status"]["allocatable"]
    h = Harness([*four_nodes(), registering], gang_pods(2))
    assert h.reconcile().phase is Phase.PLACED


def shared_nodes():
    """n1..n4 of :func:`four_nodes`, opted in to shared device groups."""
    nodes = four_nodes()
    for n in nodes:
        n["metadata"]["labels"][contract.DEVICE_MODE_LABEL] = contract.DEVICE_MODE_SHARED
    return nodes


def device_group(name="team-a-gpus", gpus=2, **status):
    group = {"apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
             "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"resources": {"nvidia.com/gpu": gpus}}}
    if status:
        group["status"] = status
    return group


def group_pod(name, group="team-a-gpus"):
    return make_pod(name).annotate(contract.DEVICE_GROUP, group).gated().build()


def test_a_member_of_a_group_that_does_not_exist_is_held_and_told_why():
    pods = gang_pods(2)
    pods[1]["metadata"]["annotations"][contract.DEVICE_GROUP] = "team-a-gpus"
    h = Harness(four_nodes(), pods)
    outcome = h.reconcile()
    assert outcome.phase is Phase.HELD
    assert outcome.reason == ("member train-1: SharedDeviceGroup team-a-gpus does not exist "
                              "(create it, or fix deviceshare.io/group)")
    assert h.cluster.pods.patches == []
    h.controllers.conditions.flush(everything=True)
    assert {e.reason for e in h.cluster.events} == {"SharedDeviceGroupUnavailable"}


def test_a_group_pod_is_released_with_its_devices_and_the_group_is_bound():
    h = Harness(shared_nodes(), [group_pod("infer")], groups=[device_group()])
    outcome = h.reconcile("team-a/pod:infer")
    assert outcome.phase is Phase.PLACED
    annotations = h.pod("infer")["metadata"]["annotations"]
    assert json.loads(annotations[contract.SELECTED_DEVICES]) == {"nvidia.com/gpu": "0,1"}
    assert annotations["deviceshare.io/env.NVIDIA_VISIBLE_DEVICES"] == "0,1"
    group = h.cluster.groups.objects["team-a-gpus"]
    assert group["metadata"]["finalizers"] == [contract.DEVICE_GROUP_FINALIZER]
    node = h.node_of("infer")
    assert {k: v for k, v in group["status"].items() if k != "conditions"} == {
        "phase": "Bound", "nodeName": node, "selectedDevices": {"nvidia.com/gpu": "0,1"}}
    [condition] = group["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Allocated", "True", "Allocated")
    assert condition["message"] == f"nvidia.com/gpu 0,1 on node {node}"
    # Nothing changed: the status is not written again.
    rv = group["metadata"]["resourceVersion"]
    assert h.controllers.groups.reconcile("team-a-gpus") is False
    assert h.cluster.groups.objects["team-a-gpus"]["metadata"]["resourceVersion"] == rv


def test_a_group_that_fits_nowhere_is_pending_with_the_shortage():
    h = Harness(shared_nodes(), [group_pod("infer")], groups=[device_group(gpus=6)])
    assert h.reconcile("team-a/pod:infer").phase is Phase.UNSCHEDULABLE
    h.controllers.groups.reconcile("team-a-gpus")
    status = h.cluster.groups.objects["team-a-gpus"]["status"]
    assert status["phase"] == "Pending"
    [condition] = status["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "InsufficientDevices")
    assert condition["message"].startswith(
        "SharedDeviceGroup team-a-gpus (6 nvidia.com/gpu): no shared node has 6 free nvidia.com/gpu; largest free: 4")


def test_a_deleted_group_keeps_its_finalizer_until_none_of_its_pods_runs():
    h = Harness(shared_nodes(), [group_pod("infer")], groups=[device_group()])
    h.reconcile("team-a/pod:infer")
    h.sync()
    h.bind("infer")
    group = h.cluster.groups.objects["team-a-gpus"]
    group["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    h.cache.group_event("MODIFIED", group)
    assert h.controllers.groups.reconcile("team-a-gpus") is False
    assert "team-a-gpus" in h.cluster.groups.objects  # its pod still runs with the devices
    pod = h.pod("infer")
    pod["status"]["phase"] = "Succeeded"
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    h.cache.pod_event("MODIFIED", pod)
    h.controllers.groups.reconcile("team-a-gpus")
    assert "team-a-gpus" not in h.cluster.groups.objects  # finalizer removed: the API server deletes it


def test_a_group_of_memory_is_pending_with_the_reason_on_the_group_and_its_pod_held():
    group = device_group()
    group["spec"]["resources"] = {"memory": 1}
    h = Harness(shared_nodes(), [group_pod("infer")], groups=[group])
    assert h.reconcile("team-a/pod:infer").phase is Phase.HELD
    assert h.controllers.groups.reconcile("team-a-gpus") is False
    status = h.cluster.groups.objects["team-a-gpus"]["status"]
    [condition] = status["conditions"]
    assert (status["phase"], condition["type"], condition["status"], condition["reason"]) == (
        "Pending", "Allocated", "False", "InvalidSpec")
    assert condition["message"].startswith("spec.resources.memory: must be a counted device")
    writes = len(h.cluster.pods.patches)
    h.controllers.groups.reconcile("team-a-gpus")
    assert len(h.cluster.pods.patches) == writes, "said once"


# --- auto-gangs and gangs of one --------------------------------------------------------------
GKE_GATE = contract.GKE_GATE_PREFIX + "job"


def gke_pod(i, created="2027-01-15T07:59:58Z"):
    pod = make_pod(f"w-{i}").label("job-name", "w").index(i).gpus(1).gated(GKE_GATE).build()
    pod["metadata"]["creationTimestamp"] = created
    return pod


def test_a_gke_auto_gang_is_released_once_no_member_has_come_for_the_settle_period():
    h = Harness(four_nodes(), [gke_pod(i) for i in range(3)])
    key = "team-a/gke:job-name=w"
    first = h.reconcile(key)
    assert (first.phase, first.reason) == (Phase.WAITING, "3 members present, settling for 3s more")
    assert first.requeue_after == pytest.approx(3)
    h.wall += 3
    assert h.reconcile(key).phase is Phase.PLACED
    assert all(h.pod(f"w-{i}")["spec"]["schedulingGates"] == [] for i in range(3))


def test_a_gke_auto_gang_owned_by_a_job_waits_for_the_jobs_parallelism():
    job = {"metadata": {"namespace": "team-a", "name": "w"}, "spec": {"parallelism": 3}}
    h = Harness(four_nodes(), own([gke_pod(i, created="2026-01-01T00:00:00Z") for i in range(2)], "w"))
    h.cache.replace_jobs([job])
    key = "team-a/gke:job-name=w"
    outcome = h.reconcile(key)
    assert (outcome.phase, outcome.reason) == (Phase.WAITING, "2 of 3 members present (Job w parallelism)")
    h.add(own([gke_pod(2)], "w")[0])
    assert h.reconcile(key).phase is Phase.PLACED, "released at once, no settling"


def test_pods_of_one_job_with_only_a_topology_request_are_each_placed_alone():
    # Regression: such a pod was keyed as a gang of one by the cache but sized by its Job
    # (parallelism 4) by the controller, and waited forever for "1 of 4 members".
    pods = own([make_pod(f"w-{i}").index(i).gpus(1).gated()
                .annotate(contract.TOPOLOGY_REQUIRED_LEVEL, "cloud.google.com/gce-topology-subblock").build()
                for i in range(4)], "w")
    h = Harness(four_nodes(), pods)
    h.cache.replace_jobs([{"metadata": {"namespace": "team-a", "name": "w"}, "spec": {"parallelism": 4}}])
    assert sorted(h.cache.gang_keys()) == [f"team-a/pod:w-{i}" for i in range(4)]
    outcome = h.reconcile("team-a/pod:w-0")
    assert (outcome.phase, outcome.reason) == (
        Phase.PLACED, "placed 1 members in cloud.google.com/gce-topology-subblock=b1/s1")
    assert h.gated("w-0", "w-1", "w-2", "w-3") == ["w-1", "w-2", "w-3"], "each on its own decision"


# --- a release cut short --------------------------------------------------------------------
def test_a_refused_write_mid_release_leaves_the_rest_reserved_and_the_next_reconcile_finishes_it():
    # Regression: A's member 2 failed to be ungated; A's pinned-but-gated members held no
    # capacity, so gang B was placed on A's nodes and ran; A stayed half-released for an
    # hour, and was rolled back the moment B ended.
    h = Harness(four_nodes(), gang_pods(4, gpus=4, owned=True) + gang_pods(2, gpus=4, name="b"), NO_JITTER)
    h.cluster.pods.fail["train-2"] = WriteError("patch pod team-a/train-2: 500 etcdserver: request timed out")
    outcome = h.reconcile()
    assert outcome.phase is Phase.PLACED and outcome.retry
    assert "1 of 4 write(s) failed, retried on their reserved nodes" in outcome.reason
    h.sync()
    assert h.gated(*NAMES) == ["train-2"]
    b = h.reconcile("team-a/b")
    assert b.phase is Phase.UNSCHEDULABLE, "A's reserved node is not given to B"
    assert h.gated("b-0", "b-1") == ["b-0", "b-1"]
    # A new reconciler (restart or failover) sees the same reservation.
    h.controllers = h.new_controllers()
    assert h.controller.reconcile("team-a/b").phase is Phase.UNSCHEDULABLE
    h.cluster.pods.fail.clear()
    h.wall += 20
    outcome = h.reconcile()
    assert (outcome.phase, outcome.reason) == (
        Phase.RELEASING, "finishing a release: 3 of 4 members released, 1 to go on their planned nodes")
    assert h.node_of("train-2") == "n3", "on the node the plan reserved"
    assert h.pod("train-2")["metadata"]["annotations"][contract.PLANNED_AT] == "2027-01-15T08:00:00.000+00:00"
    h.sync()
    for name in NAMES:
        h.bind(name)
    h.wall += 29  # 49 s after the plan, 29 s after the release completed: within the 30 s timeout
    outcome = h.reconcile()
    assert (outcome.phase, outcome.reason) == (Phase.RELEASED, "all 4 active members released and bound (4 running)")
    assert h.cluster.pods.deleted == [], "the clock ran from the release's completion, not from the first pin"


def test_a_release_that_cannot_be_finished_within_the_timeout_is_rolled_back_whole():
    h = Harness(four_nodes(), gang_pods(4, gpus=4, owned=True), NO_JITTER)
    h.cluster.pods.fail["train-3"] = WriteError("patch pod team-a/train-3: 403 forbidden")
    h.reconcile()
    h.sync()
    for name in ("train-0", "train-1", "train-2"):
        h.bind(name)
    h.wall += 29
    assert h.reconcile().phase is Phase.RELEASING, "still refused: the release cannot be finished"
    h.cluster.pods.fail.clear()
    h.sync()
    h.wall += 1
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert outcome.reason.startswith(
        "release of 4 member(s) not complete within 30s (+0s jitter): 1 still gated; deleted 4 member(s)")
    assert sorted(r.name for r in h.cluster.pods.deleted) == NAMES, "never left half-released"


def test_a_release_whose_planned_node_is_gone_is_rolled_back_at_once():
    h = Harness(four_nodes(), gang_pods(4, gpus=4, owned=True))
    h.cluster.pods.fail["train-3"] = WriteError("500")
    h.reconcile()
    h.sync()
    h.cache.node_event("DELETED", {"metadata": {"name": "n4"}})
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert outcome.reason.startswith("the planned node n4 of member train-3 no longer exists")


def test_a_release_whose_planned_node_was_cordoned_is_rolled_back_at_once_and_placed_again_elsewhere():
    h = Harness([*four_nodes(), *[make_node(f"n{i}").topology("b1", "s3", f"h{i}").gpus(4).build() for i in (5, 6)]],
                gang_pods(2, gpus=4, owned=True))
    h.cluster.pods.fail["train-1"] = WriteError("500")
    h.reconcile()
    h.sync()
    cordoned_node = h.pod("train-0")["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]
    reserved = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.PLAN])["nodes"]
    [held] = [n for uid, n in reserved.items() if uid == h.pod("train-1")["metadata"]["uid"]]
    node = make_node(held).topology("b1", "s1" if held in ("n1", "n2") else "s2", f"h{held[1]}").gpus(4).build()
    node["spec"]["unschedulable"] = True
    h.cache.node_event("MODIFIED", node)
    h.cluster.pods.fail.clear()
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert outcome.reason.startswith(f"the planned node {held} of member train-1 was cordoned before it was bound")
    assert sorted(r.name for r in h.cluster.pods.deleted) == ["train-0", "train-1"]
    # The Job recreates them; after the backoff they go elsewhere, never onto the cordoned node.
    h.sync()
    for pod in gang_pods(2, gpus=4, owned=True):
        pod["metadata"]["name"] += "-b"
        pod["metadata"]["uid"] = pod["metadata"]["uid"] + "-b"
        h.add(pod)
    h.wall += 11
    out = h.reconcile()
    assert out.phase is Phase.PLACED
    assert held not in {m.node for m in out.decision.release} and cordoned_node is not None


# --- replacements ---------------------------------------------------------------------------
def running(i, node, planned="2027-01-15T07:00:00.000+00:00"):
    return (make_pod(f"train-{i}").gang("train", 4).index(i).gpus(2).running_on(node)
            .annotate(contract.ASSIGNED_NODE, node).annotate(contract.PLANNED_AT, planned)
            .annotate(contract.RELEASED_AT, planned).build())


def test_a_replacement_member_of_a_running_gang_is_released_on_its_own_next_to_its_gang():
    pods = [running(0, "n3"), running(1, "n3"), running(2, "n4"),
            make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build()]
    h = Harness(four_nodes(), own(pods), NO_JITTER)
    outcome = h.reconcile()
    assert outcome.phase is Phase.PLACED
    assert outcome.reason == "replacement member(s) train-3: placed 1 members in node n4"
    assert len(h.cluster.pods.patches) == 1, "only the replacement is written"
    assert h.pod("train-3")["metadata"]["annotations"][contract.ASSIGNED_RANK] == "3"


def test_a_replacement_that_does_not_fit_is_unschedulable_and_never_raises():
    # Regression: Released -> Unschedulable was an illegal move: a stack trace every 5 s.
    h = Harness(four_nodes(), own([running(i, f"n{i + 1}") for i in range(4)]))
    assert h.reconcile().phase is Phase.RELEASED
    h.cache.pod_event("DELETED", h.cluster.pods.objects.pop(PodKey("team-a", "train-3")))
    h.add(own([make_pod("train-3").gang("train", 4).index(3).gpus(8).gated().build()])[0])
    outcome = h.reconcile()
    assert outcome.phase is Phase.UNSCHEDULABLE and outcome.retry
    assert outcome.reason.startswith("replacement member(s) train-3: fits 0 of 1 members")
    assert h.controller.illegal_moves == 0
    h.wall += 3600
    assert h.reconcile().phase is Phase.UNSCHEDULABLE, "the running members are never rolled back for it"
    assert h.cluster.pods.deleted == []


def test_a_replacement_that_disagrees_is_held_and_the_gang_keeps_running():
    h = Harness(four_nodes(), own([running(i, f"n{i + 1}") for i in range(4)]))
    assert h.reconcile().phase is Phase.RELEASED
    h.cache.pod_event("DELETED", h.cluster.pods.objects.pop(PodKey("team-a", "train-3")))
    h.add(own([make_pod("train-3").gang("train", 5).index(3).gpus(2).gated().build()])[0])
    outcome = h.reconcile()
    assert outcome.phase is Phase.HELD and "troupe.io/gang-size: 4, 5" in outcome.reason
    assert h.controller.illegal_moves == 0


def test_a_replacement_not_bound_in_time_is_rolled_back_alone():
    pods = [running(0, "n1"), running(1, "n1"), running(2, "n2"),
            make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build()]
    h = Harness(four_nodes(), own(pods), NO_JITTER)
    assert h.reconcile().phase is Phase.PLACED
    h.sync()
    h.wall += 30
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert [r.name for r in h.cluster.pods.deleted] == ["train-3"], "members already running are never rolled back by it"


# --- timeouts and rollback --------------------------------------------------------------------
def test_a_released_gang_is_given_its_timeout_to_bind_from_the_end_of_its_release():
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    h.reconcile()
    h.sync()
    h.bind("train-0")
    h.wall += 10
    outcome = h.reconcile()
    assert (outcome.phase, outcome.reason) == (Phase.RELEASED, "1 of 2 released members bound")
    assert outcome.requeue_after == pytest.approx(20), "30 s default timeout, 10 s gone"
    h.bind("train-1")
    outcome = h.reconcile()
    assert outcome.reason == "all 2 active members released and bound (2 running)"
    assert outcome.requeue_after is None
    h.wall += 3600
    assert h.reconcile().phase is Phase.RELEASED, "a bound gang never times out"


def test_a_release_asks_to_be_looked_at_again_when_its_timeout_can_first_run_out():
    # The release's own watch events may bring nothing new to a cache that assumed the
    # written pods: without a deadline of its own the gang would never time out.
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    outcome = h.reconcile()
    assert outcome.phase is Phase.PLACED
    assert outcome.requeue_after == pytest.approx(30), "30 s default timeout, counted from the plan"


def test_a_gang_not_bound_in_time_is_rolled_back_and_its_next_release_backs_off():
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    h.reconcile()
    h.sync()
    h.bind("train-0")
    h.wall += 30
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert outcome.reason.startswith("1 released member(s) not bound within 30s (+0s jitter); deleted 2 member(s)")
    assert sorted(r.name for r in h.cluster.pods.deleted) == ["train-0", "train-1"], "the whole gang restarts"
    marked = {ref.name: c for ref, c in h.cluster.pods.conditions}
    assert marked.keys() == {"train-0", "train-1"}, "each deleted member is marked as disrupted first"
    assert (marked["train-0"]["type"], marked["train-0"]["reason"]) == ("DisruptionTarget", "TroupeGangTimeout")
    assert outcome.requeue_after == 10
    assert {e.reason for e in h.cluster.events} >= {"GangTimedOut"}
    # The Job recreates its pods, gated again by the webhook: they wait out the backoff.
    h.sync()
    for pod in gang_pods(2, owned=True):
        pod["metadata"]["name"] += "-retry"
        pod["metadata"]["uid"] += "-retry"
        h.add(pod)
    waiting = h.reconcile()
    assert (waiting.phase, waiting.reason) == (Phase.BACKING_OFF, "backing off after 1 timeout(s): 10s left")
    h.wall += 10
    assert h.reconcile().phase is Phase.PLACED


def test_an_ownerless_member_is_never_deleted_on_timeout_and_its_plan_record_is_dropped():
    pods = gang_pods(2)
    own(pods[1:])
    h = Harness(four_nodes(), pods, NO_JITTER)
    h.reconcile()
    h.sync()
    h.wall += 31
    outcome = h.reconcile()
    assert outcome.phase is Phase.ROLLED_BACK
    assert h.cluster.pods.deleted == [PodKey("team-a", "train-1")]
    assert "ownerless, kept: train-0" in outcome.reason
    kept = [e for e in h.cluster.events if e.regarding.name == "train-0" and e.reason == "GangTimedOut"]
    assert "no controller owns this pod" in kept[0].message
    assert contract.PLAN not in h.pod("train-0")["metadata"]["annotations"], "it reserves nothing any more"


def test_the_jitter_is_within_its_bound_and_the_same_after_a_restart():
    h = Harness(four_nodes(), gang_pods(2, owned=True), Config(gang_schedule_timeout_jitter_seconds=30))
    h.reconcile()
    h.sync()
    first = h.reconcile().requeue_after
    h.controllers = h.new_controllers()
    again = h.reconcile().requeue_after
    assert 30 <= first <= 60
    assert again == first


# --- restarts -------------------------------------------------------------------------------
@pytest.mark.parametrize(("setup", "want"), [
    ("waiting", Phase.WAITING), ("held", Phase.HELD), ("unschedulable", Phase.UNSCHEDULABLE),
    ("releasing", Phase.RELEASING), ("released", Phase.RELEASED),
])
def test_a_restarted_controller_finds_each_gang_in_the_phase_the_cluster_shows(setup, want):
    if setup == "waiting":
        pods = gang_pods(3, size=4)
    elif setup == "held":
        pods = gang_pods(2)
        pods[1]["metadata"]["annotations"]["troupe.io/gang-size"] = "3"
    elif setup == "unschedulable":
        pods = gang_pods(3, gpus=8)
    else:
        pods = gang_pods(4, gpus=4)
    h = Harness(four_nodes(), pods)
    if setup == "releasing":
        h.cluster.pods.fail["train-3"] = WriteError("500")
    h.reconcile()
    h.sync()
    h.cluster.pods.fail.clear()
    h.controllers = h.new_controllers()
    assert h.reconcile().phase is want
