"""Which nodes keep Troupe's nominated-node taint (:mod:`reconciler.engine.gangs.nominated`), and
how the engine's taint filter treats it: every pod the webhook gates tolerates it, no
other pod does (docs/decisions/033-nominated-nodes-are-tainted.md)."""

from __future__ import annotations

import json

from reconciler.engine.filters.profile import node_status
from reconciler.engine.gangs import nominated
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import rfc3339
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract

NOW = 1_800_000_000.0
MAX = 600


def node(name, *taints):
    obj = make_node(name).gpus(4).build()
    obj["spec"]["taints"] = list(taints)
    return NodeInfo.from_object(obj)


def nominee(at, node_of_member, gated=True):
    builder = make_pod("train-0").gang("train", 2).index(0)
    builder = builder.gated() if gated else builder
    builder.annotate(contract.NOMINATION, json.dumps({"at": rfc3339(at), "nodes": node_of_member}))
    return PodInfo.from_object(builder.build())


def released(name, node_name, at, bound=False):
    builder = (make_pod(name).gang("train", 2).annotate(contract.ASSIGNED_NODE, node_name)
               .annotate(contract.RELEASED_AT, rfc3339(at)))
    if bound:
        builder = builder.running_on(node_name)
    return PodInfo.from_object(builder.build())


def test_only_troupes_own_taint_with_its_effect_counts_as_tainted():
    nodes = [node("n1", contract.nominated_taint()), node("n2", {"key": contract.NOMINATED_TAINT_KEY,
                                                                "effect": "PreferNoSchedule"}),
             node("n3", {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}), node("n4")]
    assert nominated.tainted(nodes) == {"n1"}


def test_nominations_in_force_and_unbound_releases_keep_their_nodes_and_nothing_else_does():
    pods = [
        nominee(NOW - 10, {"uid-a": "n1", "uid-b": "n2"}),
        released("w-1", "n3", NOW - 5),                     # released, not yet bound: kept
        released("w-2", "n4", NOW - 5, bound=True),         # bound: its node needs no taint
        released("w-3", "n5", NOW - MAX - 1),               # released too long ago: a stuck member holds nothing
    ]
    assert nominated.wanted(pods, NOW, MAX) == {"n1", "n2", "n3"}
    assert nominated.wanted([nominee(NOW - MAX, {"uid-a": "n1"})], NOW, MAX) == set(), "it ran out"
    assert nominated.wanted([nominee(NOW - 10, {"uid-a": "n1"}, gated=False)], NOW, MAX) == set(), (
        "a nomination on a pod no longer gated holds nothing")


def test_a_gang_member_tolerates_the_taint_and_an_ordinary_pod_does_not():
    tainted = node("n1", contract.nominated_taint())
    member = PodInfo.from_object(make_pod("train-0").gang("train", 2).gated().build())
    replacement = PodInfo.from_object(make_pod("web-1").build())
    assert node_status(member.node_filter, tainted) is None
    refused = node_status(replacement.node_filter, tainted)
    assert refused is not None and refused.reasons == ("untolerated taint troupe.io/nominated",)
