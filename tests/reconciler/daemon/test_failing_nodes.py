"""Nodes that keep failing gang members, through the controller
(docs/decisions/041-failing-nodes.md): each failure is written on its node once, the second
within the window, of a member of another namespace, makes the node avoided (a Warning Event
on the node, a metric; one tenant's members alone never do, decision 049), new gangs
go elsewhere, fall back to it only when nothing else fits (saying so), and use it again
after the cooldown. The record lives on the node: a restarted reconciler avoids it too."""

from __future__ import annotations

import json

from prometheus_client import REGISTRY

from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes
from troupe import contract


def solo(name, gpus=4, namespace="team-a"):
    """A gang of one, ``name``, asking a whole node's 4 GPUs."""
    return make_pod(name, namespace).gang(name, 1).gpus(gpus).gated().build()


def run(h, name, namespace="team-a"):
    """Place gang ``name`` (one member), bind it; the node it went to."""
    h.add(solo(name, namespace=namespace))
    outcome = h.reconcile(f"{namespace}/{name}")
    h.sync()
    h.bind(name, namespace)
    return h.node_of(name, namespace), outcome


def fail(h, name, namespace="team-a"):
    pod = h.cluster.pods.objects[PodKey(namespace, name)]
    pod["status"]["phase"] = "Failed"
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    h.cache.pod_event("MODIFIED", pod)
    h.reconcile(f"{namespace}/{name}")
    h.sync()


def record(h, node):
    return json.loads(h.cluster.nodes.objects[node]["metadata"].get("annotations", {}).get(contract.NODE_FAILURES, "[]"))


def counter(name):
    return REGISTRY.get_sample_value(name) or 0.0


def test_a_node_that_failed_two_members_is_avoided_by_the_next_gangs_until_the_cooldown():
    h = Harness(four_nodes(), [], NO_JITTER)
    avoidances = counter("troupe_node_avoidances_total")
    first, _ = run(h, "a")
    fail(h, "a")
    assert [e["pod"] for e in record(h, first)] == ["team-a/a"]
    assert not [e for e in h.cluster.events if e.reason == "NodeAvoided"], "one failure is not a pattern"
    fail(h, "a")  # reconciled again: recorded once
    assert len(record(h, first)) == 1

    same, _ = run(h, "a2")
    assert same == first
    fail(h, "a2")
    assert not [e for e in h.cluster.events if e.reason == "NodeAvoided"], "two failures, but of one namespace"

    again, _ = run(h, "b", "team-b")
    assert again == first, "not avoided yet: the same node is the best place"
    fail(h, "b", "team-b")
    assert [e["pod"] for e in record(h, first)] == ["team-a/a", "team-a/a2", "team-b/b"]
    events = [e for e in h.cluster.events if e.reason == "NodeAvoided"]
    assert len(events) == 1 and events[0].regarding == PodKey("", first) and events[0].object_kind == "Node" and events[0].kind == "Warning"
    assert "new gang placements avoid this node" in events[0].message
    assert counter("troupe_node_avoidances_total") == avoidances + 1

    elsewhere, outcome = run(h, "c")
    assert elsewhere != first and "avoided" not in outcome.reason
    restarted = h.new_controllers().gangs
    h.add(solo("c2"))
    assert restarted.reconcile("team-a/c2").decision.release[0].node != first, "the record is on the node"

    for n in ("n1", "n2", "n3", "n4"):  # every other node full
        if n != first:
            blocker = make_pod(f"busy-{n}").gpus(4).build()
            blocker["spec"]["nodeName"] = n
            blocker["status"]["phase"] = "Running"
            h.add(blocker)
    for name in ("c", "c2"):
        h.cluster.pods.objects.pop(PodKey("team-a", name), None)
        h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": name}})
    h.add(solo("d"))
    outcome = h.reconcile("team-a/d")
    assert outcome.decision.release[0].node == first
    assert "avoided after repeated member failures, as nothing else fits" in outcome.reason

    h.wall += 3600  # past the cooldown
    h.sync()
    h.cluster.pods.objects.pop(PodKey("team-a", "d"))
    h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": "d"}})
    h.add(solo("e"))
    outcome = h.reconcile("team-a/e")
    assert outcome.decision.release[0].node == first and "avoided" not in outcome.reason
