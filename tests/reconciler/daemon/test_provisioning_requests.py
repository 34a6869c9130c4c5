"""The gang controller and a gang's ProvisioningRequest, on the in-memory cache and ports:
the request and its PodTemplate written once, the owner told, the members released with the
consume annotations on the room it brought, the request deleted once they are bound
(docs/decisions/080-provisioning-requests.md)."""

from __future__ import annotations

import copy

from reconciler.engine.decision import actions
from reconciler.engine.gangs.capacity import request_name
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.ports import WriteError
from reconciler.ports.capacity import ATTEMPT, PODTEMPLATE, PROVISIONINGREQUEST
from testbed.reconciler_builders import make_node
from tests.support.controller_harness import Harness, four_nodes, gang_pods
from troupe import contract
from troupe.config import Config
from troupe.provisioning import (
    ATOMIC_SCALE_UP,
    CLASS_POD_ANNOTATION,
    CONSUME_ANNOTATION,
    Provisioning,
)

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0, provisioning=Provisioning())
NAME = request_name("team-a/train")


def harness(config=CONFIG, owned=True):
    # eight members of 4 GPUs: twice the four nodes there are
    return Harness(four_nodes(), gang_pods(8, gpus=4, owned=owned), config)


def requests(h):
    return {k: v for k, v in h.cluster.capacity.objects.items() if k[0] == PROVISIONINGREQUEST}


def answer(h, *conditions, at="2027-01-15T08:00:00Z"):
    """What cluster-autoscaler does to the request: its conditions set; the watch delivers it."""
    obj = copy.deepcopy(h.cluster.capacity.objects[(PROVISIONINGREQUEST, "team-a", NAME)])
    obj["metadata"]["creationTimestamp"] = at
    obj["status"] = {"conditions": [{"type": c, "status": "True", "reason": c, "message": m, "lastTransitionTime": at}
                                    for c, m in conditions]}
    h.cluster.capacity.objects[(PROVISIONINGREQUEST, "team-a", NAME)] = obj
    h.cache.capacity.event("MODIFIED", obj)


def test_a_gang_that_does_not_fit_gets_one_request_and_one_template():
    h = harness()
    out = h.reconcile()
    assert out.phase is Phase.UNSCHEDULABLE and out.reason.startswith(f"ProvisioningRequest {NAME}: asked for 8 pod(s)")
    (key, request), = requests(h).items()
    assert key == (PROVISIONINGREQUEST, "team-a", NAME)
    assert request["spec"]["provisioningClassName"] == ATOMIC_SCALE_UP
    (pod_set,) = request["spec"]["podSets"]
    assert pod_set["count"] == 8
    template = h.cluster.capacity.objects[(PODTEMPLATE, "team-a", pod_set["podTemplateRef"]["name"])]
    assert template["template"]["spec"]["containers"][0]["resources"] == h.pod("train-0")["spec"]["containers"][0]["resources"]
    assert "schedulingGates" not in template["template"]["spec"]
    for obj in (request, template):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-job-train"
    assert request["metadata"]["annotations"][ATTEMPT] == "1"
    assert any(e.reason == "ProvisioningRequested" and e.object_kind == "Job" for e in h.cluster.events)
    h.cache.capacity.event("ADDED", request)
    h.reconcile()
    assert len(requests(h)) == 1  # asked once: the next decision waits on it


def test_the_gang_waits_with_each_state_then_runs_on_the_added_nodes_and_the_request_goes():
    h = harness()
    h.reconcile()
    h.cache.capacity.event("ADDED", h.cluster.capacity.objects[(PROVISIONINGREQUEST, "team-a", NAME)])
    answer(h, ("Accepted", ""))
    assert h.reconcile().reason.startswith(f"ProvisioningRequest {NAME}: Accepted")
    added = [make_node(f"n{i}").topology("b1", "s3", f"h{i}").gpus(4).build() for i in range(5, 9)]
    for node in added:
        h.cache.node_event("ADDED", h.cluster.nodes.add(node))
    answer(h, ("Accepted", ""), ("Provisioned", ""))
    out = h.reconcile()
    assert out.phase is Phase.PLACED
    for i in range(8):
        annotations = h.pod(f"train-{i}")["metadata"]["annotations"]
        assert (annotations[CONSUME_ANNOTATION], annotations[CLASS_POD_ANNOTATION]) == (NAME, ATOMIC_SCALE_UP)
    assert len(requests(h)) == 1  # kept until they are bound
    for i in range(8):
        h.bind(f"train-{i}")
    h.reconcile()
    assert requests(h) == {} and not [k for k in h.cluster.capacity.objects if k[0] == PODTEMPLATE]


def test_failed_leaves_the_gang_waiting_with_the_message():
    h = harness()
    h.reconcile()
    answer(h, ("Failed", "zone out of a3-highgpu"))
    out = h.reconcile()
    assert out.phase is Phase.UNSCHEDULABLE
    assert f"ProvisioningRequest {NAME}: Failed: zone out of a3-highgpu" in out.reason
    gang = h.controller.gang("team-a/train")
    assert gang is not None and gang.capacity_request is not None


def test_off_or_ownerless_asks_nothing():
    for h in (harness(Config(gang_schedule_timeout_jitter_seconds=0)), harness(owned=False)):
        out = h.reconcile()
        assert out.phase is Phase.UNSCHEDULABLE and requests(h) == {}
        assert "ProvisioningRequest" not in out.reason


def test_the_request_write_failing_is_retried():

    h = harness()
    h.cluster.capacity.fail[NAME] = WriteError("admission webhook denied")
    out = h.reconcile()
    assert out.retry and "not made: admission webhook denied" in out.reason
    del h.cluster.capacity.fail[NAME]
    h.reconcile()
    assert len(requests(h)) == 1


def test_the_handlers_are_the_capacity_port():
    h = harness()
    handler = h.controller.handlers[actions.RequestCapacity].__self__
    assert handler.writes is h.cluster.capacity
    h.reconcile()
    request = requests(h)[(PROVISIONINGREQUEST, "team-a", NAME)]
    assert request["metadata"]["annotations"][contract.GANG_KEY_ANNOTATION] == "team-a/train"
