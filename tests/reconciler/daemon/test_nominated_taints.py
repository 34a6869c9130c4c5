"""Troupe's taint on a preemptor's nominated nodes, carried out by the controller with the
in-memory writer (docs/decisions/033-nominated-nodes-are-tainted.md): written before any
eviction, kept until the members kube-scheduler binds there are bound, removed when the
nomination is cleared, runs out or no longer exists (a new leader's sweep), and never
written by a replica that lost the Lease."""

from __future__ import annotations

import json

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.timestamps import rfc3339
from reconciler.ports.base import UNFENCED, LostLeadership
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import Harness, four_nodes
from troupe import contract
from troupe.config import Config

PREEMPTING = Config(gang_preemption_mode="minimal", gang_schedule_timeout_jitter_seconds=0)
OURS = contract.nominated_taint()
#: A taint of someone else's on n1 that blocks nothing: it must outlive Troupe's.
PREFER = {"key": "example.com/maintenance", "effect": "PreferNoSchedule"}


def low(name, node, priority=0):
    """A running pod of its own (no gang, no toleration) using all 4 GPUs of ``node``."""
    return make_pod(name).gpus(4).priority(priority).running_on(node).build()


def high(size=2, priority=100):
    return [make_pod(f"train-{i}").gang("train", size).index(i).gpus(4).priority(priority).gated().build()
            for i in range(size)]


def tainted(h):
    """The nodes whose stored object carries Troupe's taint."""
    return sorted(name for name, node in h.cluster.nodes.objects.items() if OURS in (node.get("spec") or {}).get("taints", []))


def preempting(h):
    out = h.reconcile()
    assert (out.phase, sorted(r.name for r in h.cluster.pods.evicted)) == (Phase.PREEMPTING, ["a", "b"]), out.reason
    return out


def cluster(config=PREEMPTING, fence=UNFENCED):
    nodes = four_nodes()
    nodes[0]["spec"]["taints"] = [PREFER]
    return Harness(nodes, [low("a", "n1"), low("b", "n2"), low("c", "n3", 50), low("d", "n4", 50), *high()],
                   config=config, fence=fence)


def test_each_nominated_node_is_tainted_before_any_victim_is_evicted():
    h = cluster()
    seen_at_eviction = []
    evict = h.cluster.pods._evict

    def recording(ref, uid):
        seen_at_eviction.append((ref.name, tainted(h)))
        evict(ref, uid)

    h.cluster.pods._evict = recording
    preempting(h)
    assert sorted(seen_at_eviction) == [("a", ["n1", "n2"]), ("b", ["n1", "n2"])]
    assert [t.key for t in h.cache.node_info("n1").taints] == [PREFER["key"], contract.NOMINATED_TAINT_KEY], (
        "added after the node's own, and fed back to the cache at once")
    # AwaitingVictims carries the Preempt again: the nodes already carry the taint, nothing is rewritten.
    patches = len(h.cluster.nodes.patches)
    h.reconcile()
    assert len(h.cluster.nodes.patches) == patches


def test_the_taint_stays_until_the_released_members_are_bound_then_goes():
    h = cluster()
    preempting(h)
    h.sync()
    out = h.reconcile()
    assert out.phase is Phase.PLACED
    assert contract.NOMINATION not in h.pod("train-0")["metadata"]["annotations"]
    assert tainted(h) == ["n1", "n2"], "released, not yet bound: the room is still the gang's"
    h.bind("train-0")
    h.reconcile()
    assert tainted(h) == ["n2"]
    h.bind("train-1")
    h.reconcile()
    assert tainted(h) == []
    assert h.cluster.nodes.objects["n1"]["spec"]["taints"] == [PREFER], "other taints stay"


def test_a_nomination_that_runs_out_takes_its_taint_with_it():
    """The victims never terminate (a finalizer holds them): the nomination runs out, the
    decision clears it, and its nodes are untainted."""
    h = cluster()
    preempting(h)
    for name in ("a", "b"):  # the eviction started, the pods stay: terminating
        pod = h.cluster.pods.add(low(name, "n1" if name == "a" else "n2"))
        pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
        h.cache.pod_event("MODIFIED", pod)
    h.sync()
    out = h.reconcile()
    assert out.decision.rule.name == "AwaitingVictims" and tainted(h) == ["n1", "n2"], out.reason
    h.wall += 600 + 1
    h.reconcile()
    assert contract.NOMINATION not in h.pod("train-0")["metadata"]["annotations"]
    assert tainted(h) == []


def test_a_refused_eviction_moves_the_nomination_and_its_taint():
    """A budget refuses ``a``'s eviction: the next plan takes another node, and the one the
    refused nomination held is untainted once no nomination names it."""
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2", 10), low("c", "n3", 50), low("d", "n4", 50),
                               *high(size=1)], config=PREEMPTING)
    h.cluster.pods.protected.add("a")
    h.reconcile()
    assert tainted(h) == ["n1"]
    h.sync()
    out = h.reconcile()
    assert out.phase is Phase.PREEMPTING and [r.name for r in h.cluster.pods.evicted] == ["b"]
    nomination = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.NOMINATION])
    assert list(nomination["nodes"].values()) == ["n2"]
    assert tainted(h) == ["n2"]


def test_a_new_leader_removes_the_taints_no_nomination_holds_and_keeps_the_others():
    """The last leader died between the taint and the evictions of one preemption (n3:
    no nomination names it), while another preemption's nomination still stands (n1)."""
    h = Harness(four_nodes(), [low("c", "n3", 50), *high(size=1)], config=PREEMPTING)
    for name in ("n1", "n3"):
        h.cluster.nodes.taint_node(name)
    pod = h.cluster.pods.objects[PodKey("team-a", "train-0")]
    pod["metadata"]["annotations"][contract.NOMINATION] = json.dumps(
        {"at": rfc3339(h.wall - 5), "nodes": {pod["metadata"]["uid"]: "n1"}, "victims": [], "refused": []})
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    h.sync()
    leader = h.new_controllers()
    assert leader.taints.sweep() == 1
    assert tainted(h) == ["n1"]
    h.wall += 600
    assert leader.taints.sweep() == 1, "a nomination older than nominationMaxSeconds holds nothing"
    assert tainted(h) == []


class Fence:
    """Open until :meth:`close`."""

    def __init__(self):
        self.closed = False

    def check(self):
        if self.closed:
            raise LostLeadership("lease lost")

    def confirm(self):
        self.check()


def test_a_replica_that_loses_the_lease_after_the_nomination_neither_taints_nor_evicts():
    """The Lease is lost right after the nomination is written: no taint, no eviction, and
    the outcome says why (the next leader starts from the nomination on the pod)."""
    fence = Fence()
    h = cluster(fence=fence)
    set_nomination = h.cluster.pods.set_nomination

    def then_lose_the_lease(*args, **kwargs):
        written = set_nomination(*args, **kwargs)
        fence.closed = True
        return written

    h.cluster.pods.set_nomination = then_lose_the_lease
    out = h.reconcile()
    assert out.retry and "nominated nodes not tainted: lease lost" in out.reason, out.reason
    assert contract.NOMINATION in h.pod("train-0")["metadata"]["annotations"]
    assert tainted(h) == [] and h.cluster.pods.evicted == []


def test_a_gang_admitted_without_the_toleration_does_not_taint_its_own_nodes():
    """Members admitted before the webhook gave them the toleration could not go to a node
    tainted for them: the preemption goes on without the taint, as before it existed."""
    members = high()
    for pod in members:
        pod["spec"]["tolerations"] = []
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3", 50), low("d", "n4", 50), *members],
                config=PREEMPTING)
    preempting(h)
    assert tainted(h) == []
    h.sync()
    assert h.reconcile().phase is Phase.PLACED
