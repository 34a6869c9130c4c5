"""Gang objects (gangs.troupe.io) kept by the controller: made with the gang, their status and
conditions through each step, coalesced to one write a second per gang within a budget,
deleted with the gang, swept by a new leader (docs/decisions/043-gang-objects.md)."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.daemon.gangobjects import KEY_ANNOTATION, TAKEN_BACKOFF_SECONDS, GangObjects
from reconciler.engine.decision.gangobject import object_name, same_status, with_times
from reconciler.ports import LostLeadership, WriteError
from reconciler.ports.fake import FakeGangObjectWrites
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import CONFIG, Harness, four_nodes, gang_pods, own


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def harness(pods, config=CONFIG):
    h = Harness(four_nodes(), pods, config)
    clock = Clock()
    h.controllers.gang_objects.clock = clock
    return h, clock


def conditions(obj):
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_a_waiting_gang_gets_an_object_named_as_the_gang_that_counts_its_members():
    h, _ = harness(gang_pods(3, size=4))
    h.reconcile()
    assert h.controllers.gang_objects.flush() == 1
    obj = h.cluster.gang_objects.objects[("team-a", "train")]
    assert obj["spec"] == {"gangName": "train"}
    assert obj["metadata"]["annotations"][KEY_ANNOTATION] == "team-a/train"
    s = obj["status"]
    assert (s["phase"], s["reason"], s["message"]) == ("Waiting", "WaitingForMembers", "3 of 4 members present")
    assert (s["members"], s["present"], s["gated"], s["size"]) == ("3/4", 3, 3, 4)
    assert conditions(obj) == {"Waiting": ("True", "WaitingForMembers"), "Released": ("False", "WaitingForMembers"),
                               "Bound": ("False", "WaitingForMembers"),
                               "Reconciling": ("True", "WaitingForMembers"), "Stalled": ("False", "AsExpected")}
    assert all(c["lastTransitionTime"].endswith("Z") for c in s["conditions"])
    assert h.cluster.gang_objects.writes == [("create", "team-a", "train"), ("status", "team-a", "train")]


def test_a_released_gang_becomes_bound_with_its_domain_and_keeps_its_first_transition_times():
    h, clock = harness(own(gang_pods(4), "train"))
    h.reconcile()
    h.controllers.gang_objects.flush()
    first = h.cluster.gang_objects.objects[("team-a", "train")]["status"]
    # Decided before its writes: the members are being released.
    assert (first["phase"], first["reason"]) == ("Placed", "Releasing")
    assert conditions({"status": first})["Waiting"] == ("False", "Released")
    assert conditions({"status": first})["Bound"] == ("False", "Releasing")
    h.sync()
    for i in range(4):
        h.bind(f"train-{i}")
    h.wall += 5
    h.reconcile()
    assert h.controllers.gang_objects.flush() == 0, "one write a second per gang"
    clock.now += 1
    assert h.controllers.gang_objects.flush() == 1
    obj = h.cluster.gang_objects.objects[("team-a", "train")]
    s = obj["status"]
    assert (s["phase"], s["reason"], s["bound"], s["running"]) == ("Released", "Running", 4, 4)
    assert s["domain"] == "cloud.google.com/gce-topology-subblock=s1"
    assert s["domains"][0].startswith("cloud.google.com/gce-topology-block=")
    c = {x["type"]: x for x in s["conditions"]}
    assert (c["Bound"]["status"], c["Reconciling"]["status"]) == ("True", "False")
    before = {x["type"]: x for x in first["conditions"]}
    assert c["Waiting"]["lastTransitionTime"] == before["Waiting"]["lastTransitionTime"], "no transition"
    assert c["Bound"]["lastTransitionTime"] != before["Bound"]["lastTransitionTime"]
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                                   "uid": "uid-job-train", "controller": False,
                                                   "blockOwnerDeletion": False}]


def test_a_gang_whose_count_changes_with_every_member_costs_one_write_a_second():
    h, clock = harness(gang_pods(1, size=8))
    for i in range(1, 8):
        h.reconcile()
        h.controllers.gang_objects.flush()
        h.add(make_pod(f"train-{i}").gang("train", 8).index(i).gpus(1).gated().build())
        clock.now += 0.2
    h.reconcile()
    clock.now += 1
    h.controllers.gang_objects.flush()
    statuses = [w for w in h.cluster.gang_objects.writes if w[0] == "status"]
    assert len(statuses) == 3, statuses  # at 100.0, 101.0 and the last one
    assert h.cluster.gang_objects.objects[("team-a", "train")]["status"]["phase"] == "Placed"


def test_a_held_gang_is_stalled():
    pods = gang_pods(2)
    pods[1]["metadata"]["annotations"]["troupe.io/gang-size"] = "3"
    h, _ = harness(pods)
    h.reconcile()
    h.controllers.gang_objects.flush()
    obj = h.cluster.gang_objects.objects[("team-a", "train")]
    assert obj["status"]["phase"] == "Held"
    assert conditions(obj)["Stalled"] == ("True", "Held")


def test_a_gang_with_no_pod_left_has_its_object_deleted_and_a_new_leader_sweeps_what_is_left():
    h, _ = harness(gang_pods(2, size=3))
    h.reconcile()
    h.controllers.gang_objects.flush()
    for i in range(2):
        h.cluster.pods.objects.pop(next(r for r in h.cluster.pods.objects if r.name == f"train-{i}"))
    h.sync()
    assert h.reconcile() is None
    h.controllers.gang_objects.flush()
    assert h.cluster.gang_objects.objects == {}
    # An object left by an earlier leader for a gang that no longer exists.
    h.cluster.gang_objects.objects[("team-a", "old")] = {"metadata": {"name": "old", "namespace": "team-a", "uid": "u1",
                                                              "annotations": {KEY_ANNOTATION: "team-a/old"}}}
    fresh = GangObjects(h.cluster.gang_objects)
    assert fresh.load() == 1 and fresh.sweep(h.cache.gang_keys()) == 1
    fresh.flush()
    assert h.cluster.gang_objects.objects == {}


def test_a_new_leader_rewrites_no_object_that_is_current():
    h, _ = harness(gang_pods(3, size=4))
    h.reconcile()
    h.controllers.gang_objects.flush()
    writes = len(h.cluster.gang_objects.writes)
    h.controllers = h.new_controllers()
    assert h.controllers.gang_objects.load() == 1
    h.reconcile()
    assert h.controllers.gang_objects.flush(everything=True) == 0
    assert len(h.cluster.gang_objects.writes) == writes


def test_disabled_makes_nothing_and_deletes_what_an_earlier_configuration_left():
    h, _ = harness(gang_pods(3, size=4))
    h.reconcile()
    h.controllers.gang_objects.flush()
    objects = GangObjects(h.cluster.gang_objects, enabled=False)
    objects.load()
    assert objects.sweep(["team-a/train"]) == 1
    objects.flush()
    objects.want("team-a/train", "train", "train", [], {"phase": "Waiting"})
    assert objects.flush() == 0 and h.cluster.gang_objects.objects == {}


def test_writes_stay_within_the_budget_oldest_first_and_a_failed_one_is_tried_again():
    writer = FakeGangObjectWrites()
    clock = Clock()
    objects = GangObjects(writer, budget=5, clock=clock, wall=lambda: 1_800_000_000.0)
    for i in range(12):
        objects.want(f"ns/g{i}", f"g{i}", f"g{i}", [], {"phase": "Waiting", "conditions": []})
        clock.now += 0.001
    writer.fail["g0"] = WriteError("refused")
    assert objects.flush() == 4  # 5 tries, g0's refused
    assert objects.failed == 1
    del writer.fail["g0"]
    clock.now += 1.0
    assert objects.flush() == 5
    clock.now += 1.0
    assert objects.flush() == 3
    assert len(writer.objects) == 12


def test_an_object_deleted_behind_the_reconcilers_back_is_made_again():
    h, clock = harness(gang_pods(3, size=4))
    h.reconcile()
    h.controllers.gang_objects.flush()
    del h.cluster.gang_objects.objects[("team-a", "train")]
    h.add(make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build())
    h.reconcile()
    clock.now += 1
    h.controllers.gang_objects.flush()
    clock.now += 1
    h.controllers.gang_objects.flush()
    assert ("team-a", "train") in h.cluster.gang_objects.objects


@pytest.mark.parametrize(("name", "expected"), [
    ("train", "train"), ("a.b-c", "a.b-c"), ("Train_X", None), ("gke:job-name=w", None)])
def test_object_names_are_the_gang_name_or_a_clean_name_with_a_hash(name, expected):
    h, _ = harness(gang_pods(1))
    gang = h.controller.gang("team-a/train")
    got = object_name(dataclasses.replace(gang, name=name, key=f"team-a/{name}"))
    if expected is not None:
        assert got == expected
    else:
        assert len(got) <= 253 and got.rsplit("-", 1)[1].isalnum() and got == got.lower() and ":" not in got


def test_times_are_kept_when_nothing_changes_and_same_status_ignores_them():
    a = {"phase": "Waiting", "conditions": [{"type": "Bound", "status": "False", "reason": "X", "message": "m"}]}
    first = with_times(a, [], 1_800_000_000.0)
    later = with_times(a, first["conditions"], 1_800_000_100.0)
    assert later["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:00:00Z" != later["updateTime"]
    assert same_status(first, a) and same_status(later, first)
    assert not same_status(first, {**a, "phase": "Released"})


def test_a_replica_that_lost_its_lease_writes_nothing_and_keeps_what_it_wanted():
    writer = FakeGangObjectWrites()
    objects = GangObjects(writer, clock=Clock(), wall=lambda: 1_800_000_000.0)
    objects.want("ns/g", "g", "g", [], {"phase": "Waiting", "conditions": []})
    writer.fail["g"] = LostLeadership("the Lease is another replica's")
    with pytest.raises(LostLeadership):
        objects.flush(everything=True)
    assert writer.objects == {} and len(objects) == 1
    del writer.fail["g"]
    assert objects.flush(everything=True) == 1


def test_no_gang_can_be_named_after_another_gangs_object():
    """A hashed object name is public (``kubectl get gangs``): a gang named as it gets a name
    of its own, not the other gang's object (docs/decisions/049)."""
    h, _ = harness(gang_pods(1))
    gang = h.controller.gang("team-a/train")
    victim = object_name(dataclasses.replace(gang, name="Train_X", key="team-a/Train_X"))
    assert len(victim.rsplit("-", 1)[1]) == 16
    squatter = object_name(dataclasses.replace(gang, name=victim, key=f"team-a/{victim}"))
    assert squatter != victim and squatter.startswith(victim + "-")


def test_a_name_another_gangs_object_holds_costs_one_get_and_a_minutes_wait_and_one_of_its_own_is_adopted():
    """A create refused because the name is taken reads that one object, never every
    namespace's (a list per conflict cost the whole cluster's objects each second), and a
    gang whose name another gang's object holds waits a minute before it tries again; an
    object already this gang's (a write the reconciler lost track of) is adopted."""
    writer = FakeGangObjectWrites()
    clock = Clock()
    objects = GangObjects(writer, clock=clock, wall=lambda: 1_800_000_000.0)
    writer.objects[("ns", "g")] = {"metadata": {"name": "g", "namespace": "ns", "uid": "uid-other",
                                                "annotations": {KEY_ANNOTATION: "ns/other"}}}
    objects.want("ns/g", "g", "g", [], {"phase": "Waiting", "conditions": []})
    assert objects.flush() == 0 and objects.failed == 1
    assert writer.reads == [("get", "ns", "g")]
    clock.now += TAKEN_BACKOFF_SECONDS - 1
    assert objects.flush() == 0 and objects.failed == 1, "not tried again within the minute"
    clock.now += 1
    writer.objects[("ns", "g")]["metadata"]["annotations"][KEY_ANNOTATION] = "ns/g"
    assert objects.flush() == 1
    assert writer.reads == [("get", "ns", "g")] * 2 and ("list", "", "") not in writer.reads
    assert writer.objects[("ns", "g")]["metadata"]["uid"] == "uid-other", "adopted, not made again"
    assert writer.objects[("ns", "g")]["status"]["phase"] == "Waiting"
