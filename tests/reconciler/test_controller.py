"""The gang controller on an in-memory cache and writer: what it decides and what it writes."""

from __future__ import annotations

import pytest

from reconciler.cache import ClusterCache
from reconciler.controller import GangController, ParseMemo
from reconciler.lifecycle import Phase
from reconciler.writer import Conflict, FakeWriter, PodRef
from tests.reconciler.builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

CONFIG = Config()


class Harness:
    """A cache and a FakeWriter holding the same pods, and a controller over them."""

    def __init__(self, nodes, pods, config=CONFIG):
        self.writer = FakeWriter()
        self.cache = ClusterCache(config)
        self.cache.replace_nodes(nodes)
        self.cache.replace_pods([self.writer.add(p) for p in pods])
        self.now = 0.0
        self.wall = 1_800_000_000.0
        self.controller = GangController(
            self.cache, self.writer, config, clock=lambda: self.now, wall_clock=lambda: self.wall)

    def pod(self, name, namespace="team-a"):
        return self.writer.pods[PodRef(namespace, name)]

    def add(self, pod):
        self.cache.pod_event("ADDED", self.writer.add(pod))

    def bind(self, name, namespace="team-a"):
        """What kube-scheduler does to a released pod: set spec.nodeName to its pin."""
        ref = PodRef(namespace, name)
        pod = self.writer.pods[ref]
        pod["spec"]["nodeName"] = pod["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]
        self.cache.pod_event("MODIFIED", self.writer.read_pod(ref))

    def sync_deletes(self):
        for ref in self.writer.deleted:
            self.cache.pod_event("DELETED", {"metadata": {"namespace": ref.namespace, "name": ref.name}})


#   block b1 / subblock s1: n1 n2      block b1 / subblock s2: n3 n4
#   each node: 4 GPUs
def four_nodes():
    return [make_node(f"n{i}").topology("b1", "s1" if i <= 2 else "s2", f"h{i}").gpus(4).build() for i in range(1, 5)]


def gang_pods(n, size=None, gpus=2, name="train"):
    return [make_pod(f"{name}-{i}").gang(name, size or n).index(i).gpus(gpus).gated().build() for i in range(n)]


def test_a_complete_gang_is_pinned_and_released_whole():
    h = Harness(four_nodes(), gang_pods(4))
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.RELEASED
    nodes = {}
    for i in range(4):
        pod = h.pod(f"train-{i}")
        assert "schedulingGates" not in pod["spec"] or pod["spec"]["schedulingGates"] == []
        node = pod["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]
        assert pod["metadata"]["annotations"][contract.ASSIGNED_NODE] == node
        assert pod["metadata"]["annotations"][contract.ASSIGNED_RANK] == str(i)
        nodes[i] = node
    # 4 members x 2 GPUs fit in one subblock (2 nodes x 4 GPUs); neighbouring ranks share nodes.
    assert nodes == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    assert [e.reason for e in h.writer.events] == ["GangReleased"] * 4


def test_every_member_is_pinned_before_any_is_ungated():
    h = Harness(four_nodes(), gang_pods(3))
    h.controller.reconcile("team-a/train")
    kinds = ["pin" if "nodeSelector" in (patch.get("spec") or {}) else "ungate" for _, patch in h.writer.patches]
    assert kinds == ["pin"] * 3 + ["ungate"] * 3


def test_a_gang_missing_a_member_waits_and_writes_nothing():
    h = Harness(four_nodes(), gang_pods(3, size=4))
    outcome = h.controller.reconcile("team-a/train")
    assert (outcome.phase, outcome.reason) == (Phase.WAITING, "3 of 4 members present")
    assert h.writer.patches == []
    h.add(make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build())
    assert h.controller.reconcile("team-a/train").phase is Phase.RELEASED


def test_completed_members_do_not_count():
    done = make_pod("train-3").gang("train", 4).index(3).gpus(2).build()
    done["status"]["phase"] = "Succeeded"
    h = Harness(four_nodes(), [*gang_pods(3, size=4), done])
    assert h.controller.reconcile("team-a/train").phase is Phase.WAITING


def test_members_that_disagree_are_held_with_a_warning_naming_the_key():
    pods = gang_pods(3, size=3)
    pods[2]["metadata"]["annotations"]["troupe.io/gang-size"] = "4"
    h = Harness(four_nodes(), pods)
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.HELD
    assert "troupe.io/gang-size: 3, 4" in outcome.reason
    assert h.writer.patches == []
    assert {e.reason for e in h.writer.events} == {"GangSpecMismatch"}
    assert len(h.writer.events) == 3
    h.controller.reconcile("team-a/train")
    assert len(h.writer.events) == 3, "the same warning is not repeated"


def test_a_gang_that_cannot_fit_is_unschedulable_and_backs_off():
    h = Harness(four_nodes(), gang_pods(3, gpus=8))
    first = h.controller.reconcile("team-a/train")
    assert first.phase is Phase.UNSCHEDULABLE
    assert "insufficient nvidia.com/gpu" in first.reason
    assert h.writer.patches == []
    second = h.controller.reconcile("team-a/train")
    assert second.requeue_after == 2 * first.requeue_after
    assert h.writer.events[0].reason == "GangUnschedulable" and h.writer.events[0].kind == "Warning"


def test_a_released_gang_uses_its_nodes_before_any_watch_event_arrives():
    pods = gang_pods(4, gpus=4, name="a") + gang_pods(1, gpus=1, name="b")
    h = Harness(four_nodes(), pods)
    assert h.controller.reconcile("team-a/a").phase is Phase.RELEASED
    outcome = h.controller.reconcile("team-a/b")
    assert outcome.phase is Phase.UNSCHEDULABLE, "gang a fills every GPU; b must not be double-booked"


def test_a_replacement_member_of_a_running_gang_is_released_on_its_own():
    running = [make_pod(f"train-{i}").gang("train", 4).index(i).gpus(2).running_on(f"n{i + 1}")
               .annotate(contract.ASSIGNED_NODE, f"n{i + 1}").build() for i in range(3)]
    replacement = make_pod("train-3").gang("train", 4).index(3).gpus(2).gated().build()
    h = Harness(four_nodes(), [*running, replacement])
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.RELEASED
    assert len(h.writer.patches) == 2, "only the replacement is pinned and ungated"
    assert h.pod("train-3")["spec"]["nodeSelector"][contract.HOSTNAME_LABEL] in {"n1", "n2", "n3", "n4"}


def test_other_components_gates_stay():
    pods = gang_pods(2)
    pods[0]["spec"]["schedulingGates"].append({"name": "example.com/quota"})
    h = Harness(four_nodes(), pods)
    h.controller.reconcile("team-a/train")
    assert h.pod("train-0")["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    assert "still gated by example.com/quota" in h.writer.events[0].message


def test_a_conflict_is_retried_after_a_fresh_read():
    h = Harness(four_nodes(), gang_pods(2))
    # Someone else changes train-0 after the cache saw it: the cached resourceVersion is stale.
    h.writer.patch_pod(PodRef("team-a", "train-0"), {"metadata": {"labels": {"x": "y"}}})
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.RELEASED
    assert h.pod("train-0")["spec"]["nodeSelector"][contract.HOSTNAME_LABEL]


def test_a_pod_ungated_by_someone_else_mid_release_stops_the_release():
    h = Harness(four_nodes(), gang_pods(2))
    original = h.writer.patch_pod

    def patch(ref, body):
        if ref.name == "train-1" and "nodeSelector" in (body.get("spec") or {}):
            h.writer.pods[ref]["spec"]["schedulingGates"] = []
            h.writer.pods[ref]["metadata"]["resourceVersion"] = "999999"
        return original(ref, body)

    h.writer.patch_pod = patch
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.RELEASING
    assert "ungated by someone else" in outcome.reason
    assert h.pod("train-0")["spec"]["schedulingGates"] == [{"name": contract.GATE}], "nothing was ungated"


def test_a_gke_auto_gang_is_released_once_it_settles():
    gate = contract.GKE_GATE_PREFIX + "job"
    pods = [make_pod(f"w-{i}").label("job-name", "w").index(i).gpus(1).gated(gate).build() for i in range(3)]
    h = Harness(four_nodes(), pods)
    key = "team-a/gke:job-name=w"
    first = h.controller.reconcile(key)
    assert first.phase is Phase.WAITING and first.requeue_after == pytest.approx(5)
    h.now += 5
    assert h.controller.reconcile(key).phase is Phase.RELEASED
    assert all(h.pod(f"w-{i}")["spec"]["schedulingGates"] == [] for i in range(3))


def test_the_fake_writer_refuses_a_stale_resource_version():
    w = FakeWriter()
    w.add(make_pod("p").build())
    with pytest.raises(Conflict):
        w.patch_pod(PodRef("team-a", "p"), {"metadata": {"resourceVersion": "1"}})


def test_a_node_that_cannot_be_read_is_left_out_instead_of_stopping_every_plan():
    registering = make_node("n9").build()
    del registering["status"]["allocatable"]
    h = Harness([*four_nodes(), registering], gang_pods(2))
    assert h.controller.reconcile("team-a/train").phase is Phase.RELEASED


def test_objects_are_parsed_once_while_unchanged():
    calls = []
    memo = ParseMemo("pod", lambda obj: calls.append(obj["metadata"]["name"]) or obj["metadata"]["name"])
    a, b = make_pod("a").build(), make_pod("b").build()
    assert memo.parse([a, b]) == ["a", "b"]
    assert memo.parse([a, b]) == ["a", "b"]
    assert calls == ["a", "b"]
    b2 = make_pod("b").build()  # an update: the cache replaces the object
    assert memo.parse([a, b2]) == ["a", "b"]
    assert calls == ["a", "b", "b"], "only the changed object is parsed again"


def test_a_device_group_member_stays_gated_until_devices_can_be_allocated():
    pods = gang_pods(2)
    pods[1]["metadata"]["annotations"][contract.DEVICE_GROUP] = "team-a-gpus"
    h = Harness(four_nodes(), pods)
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.HELD
    assert "SharedDeviceGroup team-a-gpus" in outcome.reason
    assert h.writer.patches == []
    assert {e.reason for e in h.writer.events} == {"SharedDeviceGroupPending"}


def owned(pods):
    for p in pods:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                             "uid": "job-uid", "controller": True}]
    return pods


NO_JITTER = Config(gang_schedule_timeout_jitter_seconds=0)


def test_a_released_gang_is_given_its_timeout_to_bind():
    h = Harness(four_nodes(), owned(gang_pods(2)), NO_JITTER)
    h.controller.reconcile("team-a/train")
    assert contract.RELEASED_AT in h.pod("train-0")["metadata"]["annotations"]
    h.bind("train-0")
    h.wall += 10
    outcome = h.controller.reconcile("team-a/train")
    assert (outcome.phase, outcome.reason) == (Phase.RELEASED, "1 of 2 members bound")
    assert outcome.requeue_after == pytest.approx(20), "30 s default timeout, 10 s gone"
    h.bind("train-1")
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.reason == "all 2 active members released and bound"
    assert outcome.requeue_after is None
    h.wall += 3600
    assert h.controller.reconcile("team-a/train").phase is Phase.RELEASED, "a bound gang never times out"


def test_a_gang_not_bound_in_time_is_rolled_back_and_its_next_release_backs_off():
    h = Harness(four_nodes(), owned(gang_pods(2)), NO_JITTER)
    h.controller.reconcile("team-a/train")
    h.bind("train-0")
    h.wall += 30
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.ROLLED_BACK
    assert outcome.reason.startswith("1 released member(s) not bound within 30s (+0s jitter); deleted 2 member(s)")
    assert sorted(r.name for r in h.writer.deleted) == ["train-0", "train-1"], "the whole gang restarts"
    marked = {ref.name: c for ref, c in h.writer.conditions}
    assert marked.keys() == {"train-0", "train-1"}, "each deleted member is marked as disrupted first"
    assert (marked["train-0"]["type"], marked["train-0"]["reason"]) == ("DisruptionTarget", "TroupeGangTimeout")
    assert outcome.requeue_after == 10
    assert {e.reason for e in h.writer.events} >= {"GangTimedOut"}
    # The Job recreates its pods, gated again by the webhook: they wait out the backoff.
    h.sync_deletes()
    for pod in owned(gang_pods(2, name="train")):
        pod["metadata"]["name"] += "-retry"
        h.add(pod)
    waiting = h.controller.reconcile("team-a/train")
    assert waiting.phase is Phase.WAITING and waiting.reason.startswith("backing off after 1 timeout(s)")
    h.now += 10
    assert h.controller.reconcile("team-a/train").phase is Phase.RELEASED


def test_an_ownerless_member_is_never_deleted_on_timeout():
    pods = gang_pods(2)
    owned(pods[:1])
    h = Harness(four_nodes(), pods, NO_JITTER)
    h.controller.reconcile("team-a/train")
    h.wall += 31
    outcome = h.controller.reconcile("team-a/train")
    assert outcome.phase is Phase.ROLLED_BACK
    assert h.writer.deleted == [PodRef("team-a", "train-0")]
    assert "ownerless, kept: train-1" in outcome.reason
    kept = [e for e in h.writer.events if e.pod.name == "train-1" and e.reason == "GangTimedOut"]
    assert "no controller owns this pod" in kept[0].message


def test_the_jitter_is_within_its_bound_and_the_same_after_a_restart():
    h = Harness(four_nodes(), owned(gang_pods(2)), Config(gang_schedule_timeout_jitter_seconds=30))
    h.controller.reconcile("team-a/train")
    first = h.controller.reconcile("team-a/train").requeue_after
    restarted = GangController(h.cache, h.writer, h.controller.config, clock=lambda: h.now, wall_clock=lambda: h.wall)
    again = restarted.reconcile("team-a/train").requeue_after
    assert 30 <= first <= 60
    assert again == first


def test_a_gke_auto_gang_owned_by_a_job_waits_for_the_jobs_parallelism():
    gate = contract.GKE_GATE_PREFIX + "job"
    job = {"metadata": {"namespace": "team-a", "name": "w"}, "spec": {"parallelism": 3}}
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "w", "uid": "j1", "controller": True}]
    pods = [make_pod(f"w-{i}").label("job-name", "w").index(i).gpus(1).gated(gate).build() for i in range(2)]
    for p in pods:
        p["metadata"]["ownerReferences"] = owner
    h = Harness(four_nodes(), pods)
    h.cache.replace_jobs([job])
    key = "team-a/gke:job-name=w"
    h.now += 60  # long past any settle period: only the Job's parallelism counts
    outcome = h.controller.reconcile(key)
    assert (outcome.phase, outcome.reason) == (Phase.WAITING, "2 of 3 members present (Job w parallelism)")
    third = make_pod("w-2").label("job-name", "w").index(2).gpus(1).gated(gate).build()
    third["metadata"]["ownerReferences"] = owner
    h.add(third)
    assert h.controller.reconcile(key).phase is Phase.RELEASED, "released at once, no settling"
