"""The in-memory writer ports refuse what the API server refuses, one kind at a time, so a
controller test that passes on them does not pass only because the fake is lenient: stale
resourceVersions, UID preconditions, a gated pod's node selection, PodDisruptionBudgets, a
JSON patch's test, a name taken, unsupported operations, a ConfigMap's keys and size."""

from __future__ import annotations

import pytest

from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.records import Nomination
from reconciler.engine.model.reservations import Record
from reconciler.ports import Conflict, Gone, Refused, WriteError
from reconciler.ports.fake import (
    FakeCluster,
    FakeDeviceGroupWrites,
    FakeGangObjectWrites,
    FakeNodeWrites,
    FakePodWrites,
    FakeStateStore,
    FakeWorkloadWrites,
)
from reconciler.ports.fake.state import CONFIG_MAP_MAX_BYTES
from reconciler.ports.state import state_key
from testbed.as_created import job_object
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract

REF = PodKey("team-a", "w-0")
NOMINATION = Nomination("2027-01-15T08:00:00Z", {"uid-w-0": "n1"})


def test_pods_refuse_a_stale_version_a_changed_selection_another_uid_and_a_budget():
    pods = FakePodWrites()
    gated = pods.add(make_pod("w-0").gated().build())
    with pytest.raises(Conflict):
        pods.set_nomination(REF, NOMINATION, "1")  # the version the builder gave, replaced on add
    pods.set_nomination(REF, NOMINATION, gated["metadata"]["resourceVersion"])
    pin = {contract.HOSTNAME_LABEL: "n1"}
    pods._patch(REF, {"spec": {"nodeSelector": pin}})  # an addition to a gated pod: allowed
    with pytest.raises(WriteError, match="only additions"):
        pods._patch(REF, {"spec": {"nodeSelector": {contract.HOSTNAME_LABEL: "n2"}}})
    ungated = pods.add(make_pod("w-1").build())
    with pytest.raises(WriteError, match="only additions"):
        pods._patch(PodKey.of(ungated), {"spec": {"nodeSelector": pin}})
    with pytest.raises(Gone):
        pods.mark_disrupted_and_delete(REF, "uid-of-another-pod", "R", "m", "2027-01-15T08:00:00Z")
    assert REF in pods.objects and pods.deleted == []
    pods.protected.add("w-0")
    with pytest.raises(Refused):
        pods.may_evict(REF, "uid-w-0")
    with pytest.raises(Refused):
        pods.evict(REF, "uid-w-0")
    assert pods.evicted == [] and pods.dry_runs == [REF]
    with pytest.raises(Gone):
        pods.clear_plan(PodKey("team-a", "never-made"))


def test_nodes_refuse_a_stale_version_and_a_node_that_does_not_exist():
    nodes = FakeNodeWrites()
    stored = nodes.add(make_node("n1").build())
    nodes.taint_node("n1")  # the write moves the node's version on
    with pytest.raises(Conflict):
        nodes._patch_node("n1", {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]},
                                 "spec": {"taints": []}})
    assert nodes.objects["n1"]["spec"]["taints"] == [contract.nominated_taint()]
    with pytest.raises(Gone):
        nodes.taint_node("n2")
    with pytest.raises(Gone):
        nodes.record_failures("n2", lambda before: "x")


def test_workloads_refuse_to_drop_a_reservation_that_is_not_the_one_decided_on():
    workloads = FakeWorkloadWrites()
    workloads.add("Job", job_object("train", 2))
    job = ("Job", "ml", "train")
    older = Record("train", "2027-01-15T08:00:00.000+00:00", ("n1", "n2"))
    newer = Record("train", "2027-01-15T08:05:00.000+00:00", ("n3", "n4"))
    uid = workloads.objects[job]["metadata"]["uid"]
    workloads.set_reservation(job, newer, uid)
    with pytest.raises(Conflict):  # the JSON patch's test fails: a newer reservation stays
        workloads.drop_reservation(job, older)
    assert workloads.objects[job]["metadata"]["annotations"][contract.RESERVATION] == newer.encode()
    with pytest.raises(Gone):
        workloads.set_reservation(("Job", "ml", "gone"), newer, uid)


def test_workloads_refuse_a_reservation_signed_for_another_uid():
    """A Job deleted and made again under the same name is another object: the record
    written for the first one (its UID in the patch) is refused, as kube-apiserver refuses
    a patch whose ``metadata.uid`` differs."""
    workloads = FakeWorkloadWrites()
    workloads.add("Job", job_object("train", 2))
    job = ("Job", "ml", "train")
    with pytest.raises(Conflict, match="UID in precondition"):
        workloads.set_reservation(job, Record("train", "2027-01-15T08:00:00.000+00:00", ("n1", "n2")), "uid-of-the-first")
    assert contract.RESERVATION not in workloads.objects[job]["metadata"]["annotations"]


def test_gang_objects_refuse_a_name_taken_and_writes_to_an_object_that_is_gone():
    objects = FakeGangObjectWrites()
    made = objects.create_gang_object("ml", {"metadata": {"name": "train"}, "spec": {"gangName": "train"}})
    with pytest.raises(Conflict):
        objects.create_gang_object("ml", {"metadata": {"name": "train"}, "spec": {"gangName": "other"}})
    with pytest.raises(Gone):
        objects.delete_gang_object("ml", "train", "uid-of-another-object")
    objects.delete_gang_object("ml", "train", made["metadata"]["uid"])
    with pytest.raises(Gone):
        objects.set_gang_object_status("ml", "train", {"phase": "Waiting"})
    assert objects.writes == [("create", "ml", "train"), ("delete", "ml", "train")]


def test_groups_refuse_a_stale_version_an_unsupported_operation_and_a_group_that_does_not_exist():
    groups = FakeDeviceGroupWrites()
    stored = groups.add({"metadata": {"name": "g", "finalizers": []}, "spec": {}})
    groups.set_group_finalizers("g", [contract.DEVICE_GROUP_FINALIZER], stored["metadata"]["resourceVersion"])
    with pytest.raises(Conflict):
        groups.set_group_finalizers("g", [], stored["metadata"]["resourceVersion"])
    with pytest.raises(WriteError, match="unsupported operation"):
        groups._patch_group_status("g", [{"op": "remove", "path": "/status"}])
    with pytest.raises(Gone):
        groups.set_group_status("other", {"phase": "Pending"})
    assert groups.objects["g"]["metadata"]["finalizers"] == [contract.DEVICE_GROUP_FINALIZER]


def test_a_group_being_deleted_is_gone_once_its_last_finalizer_is():
    groups = FakeDeviceGroupWrites()
    stored = groups.add({"metadata": {"name": "g", "finalizers": [contract.DEVICE_GROUP_FINALIZER],
                                      "deletionTimestamp": "2027-01-15T08:00:00Z"}})
    groups.set_group_finalizers("g", [], stored["metadata"]["resourceVersion"])
    assert "g" not in groups.objects


def test_the_state_refuses_a_key_a_config_map_cannot_hold_and_more_than_a_mebibyte():
    state = FakeStateStore()
    with pytest.raises(WriteError, match="valid config key"):
        state._write_state({"team-a/train": "{}"})
    state.save_backoff("team-a/train", 1, 1_800_000_000.0)
    assert list(state.data) == [state_key("team-a/train")]
    with pytest.raises(WriteError, match="at most"):
        state._write_state({"big": "x" * CONFIG_MAP_MAX_BYTES})
    assert list(state.data) == [state_key("team-a/train")], "a refused write changes nothing"


def test_the_fakes_of_one_cluster_share_one_version_counter_and_one_list_of_events():
    cluster = FakeCluster()
    node = cluster.nodes.add(make_node("n1").build())
    pod = cluster.pods.add(make_pod("w-0").build())
    assert int(pod["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
    cluster.pods.emit_event(REF, "uid-w-0", "Normal", "A", "about a pod")
    cluster.nodes.emit_event("n1", "Warning", "B", "about a node")
    cluster.workloads.emit_event(("Job", "ml", "train"), "Normal", "C", "about a Job")
    assert [(e.object_kind, e.regarding, e.reason) for e in cluster.events] == [
        ("Pod", REF, "A"), ("Node", PodKey("", "n1"), "B"), ("Job", PodKey("ml", "train"), "C")]
