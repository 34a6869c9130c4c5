"""Nodes that keep failing gang members, on the real control plane
(docs/decisions/041-failing-nodes.md): two members of two namespaces fail on one node (one
tenant's alone would not make it avoided, decision 049), each is recorded on the node once,
the node gets a ``NodeAvoided`` Event, and the next gang goes elsewhere.

The test brings three 8-GPU nodes of its own (label ``e2e-pool: avoid``) and makes its pods
fail by setting their phase, as a kubelet reports a crashed container with
``restartPolicy: Never``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support import e2e
from troupe import contract

POOL = {"e2e-pool": "avoid"}


@pytest.fixture
def pool(admin_core: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Three Ready 8-GPU nodes of one subblock; deleted after the test's pods."""
    names = [f"gpu-b6-s0-h{h}" for h in range(3)]
    e2e.create_gpu_nodes(admin_core, names, POOL)
    try:
        yield names
    finally:
        e2e.delete_nodes_after_pods(admin_core, namespace, names)


def solo(name: str, selector: dict[str, str]) -> dict[str, object]:
    """Pod ``<name>-0``, a gang of one asking a whole node of the ``selector``."""
    body = e2e.pod_body(f"{name}-0", e2e.gang_annotations(name, 1, timeout=60), gpus=8)
    body["spec"]["nodeSelector"] = dict(selector)
    body["spec"]["restartPolicy"] = "Never"
    return body


def recorded(core: client.CoreV1Api, node: str) -> list[dict[str, str]]:
    raw = (core.read_node(node).metadata.annotations or {}).get(contract.NODE_FAILURES)
    return json.loads(raw) if raw else []


def test_a_node_that_failed_two_members_is_avoided_by_the_next_gang(troupe, admin_core, namespace, pool):
    bad = pool[0]
    with e2e.temporary_namespace(admin_core, "e2e-other-tenant") as other:
        for name, where in (("first", namespace), ("second", other)):
            admin_core.create_namespaced_pod(where, solo(name, {**POOL, contract.HOSTNAME_LABEL: bad}))
            e2e.running_members(admin_core, where, name, 1)
            admin_core.patch_namespaced_pod_status(f"{name}-0", where, {"status": {"phase": "Failed"}})
            e2e.wait_for(f"{name}'s failure recorded on {bad}", lambda n=name, w=where: any(
                e["pod"] == f"{w}/{n}-0" for e in recorded(admin_core, bad)) or None, timeout=60)
        assert [e["pod"] for e in recorded(admin_core, bad)] == [f"{namespace}/first-0", f"{other}/second-0"], \
            "each failure recorded once"

        def avoided_event():
            events = admin_core.list_namespaced_event("default", field_selector=f"involvedObject.name={bad}").items
            return [e for e in events if e.reason == "NodeAvoided"] or None

        (event,) = e2e.wait_for("a NodeAvoided Event on the node", avoided_event, timeout=30)
        assert event.type == "Warning" and "new gang placements avoid this node" in event.message

    admin_core.create_namespaced_pod(namespace, solo("next", POOL))
    (pod,) = e2e.running_members(admin_core, namespace, "next", 1)
    assert pod.spec.node_name != bad, "the next gang goes to another node of the pool"
