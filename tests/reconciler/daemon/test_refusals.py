"""The controller and kube-scheduler's refusals: a pinned member refused on its node rolls the
release back at once, the node is recorded in the state ConfigMap (a new leader avoids it too),
and the gang is released again off that node without a backoff (docs/decisions/032)."""

from __future__ import annotations

import json

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, gang_pods

MESSAGE = ("0/4 nodes are available: 1 node(s) had no available disk, 3 node(s) didn't match Pod's node "
           "affinity/selector.")


def refuse(h: Harness, name: str, reason: str = "Unschedulable") -> str:
    """What kube-scheduler does to a pinned pod that fails a filter on its node: it stays
    unbound with PodScheduled=False. Returns the node it is pinned to."""
    ref = PodKey("team-a", name)
    pod = h.cluster.pods.objects[ref]
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": reason, "message": MESSAGE}]
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
    h.cache.pod_event("MODIFIED", h.cluster.pods.read(ref))
    return str(h.node_of(name))


def recreate(h: Harness, suffix: str) -> None:
    """The Job recreates the deleted members, gated again by the webhook, a second later
    (the gang, meanwhile without pods, is reconciled once: what it avoids is not forgotten)."""
    h.sync()
    assert h.reconcile() is None
    h.wall += 1
    for pod in gang_pods(2, gpus=4, owned=True):
        pod["metadata"]["name"] += suffix
        pod["metadata"]["uid"] += suffix
        h.add(pod)


def released_refused(h: Harness) -> str:
    """Release the gang; kube-scheduler binds train-0 and refuses train-1 (first for another
    reason than ``Unschedulable``, which changes nothing). Returns train-1's node."""
    h.reconcile()
    h.sync()
    h.bind("train-0")
    refuse(h, "train-1", reason="SchedulerError")
    h.wall += 10
    assert h.reconcile().phase is Phase.RELEASED
    assert h.cluster.pods.deleted == [] and h.cluster.state.data == {}
    return refuse(h, "train-1")


def test_a_refused_member_rolls_its_release_back_and_the_gang_is_released_again_off_that_node_at_once():
    h = Harness(four_nodes(), gang_pods(2, gpus=4, owned=True), NO_JITTER)
    node = released_refused(h)
    outcome = h.reconcile()
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.ROLLED_BACK, "Refused")
    assert sorted(r.name for r in h.cluster.pods.deleted) == ["train-0", "train-1"]
    refused = [e for e in h.cluster.events if e.reason == "GangRefused"]
    assert len(refused) == 1 and refused[0].kind == "Warning"
    assert refused[0].message.startswith(f"kube-scheduler refused member train-1 on node {node}: {MESSAGE}")
    assert outcome.requeue_after == 0, "no backoff: the next plan differs"
    [entry] = [json.loads(v) for v in h.cluster.state.data.values()]
    assert (entry["gang"], entry["timeouts"], list(entry["avoid"])) == ("team-a/train", 0, [node])
    assert entry["avoid"][node][0] == h.wall + 600
    recreate(h, "-b")
    again = h.reconcile()
    assert again.phase is Phase.PLACED, "released again well before the timeout, with no backoff"
    assert node not in {m.node for m in again.decision.release}
    assert f"avoiding node {node} (kube-scheduler refused member train-1 on node {node}: " in again.reason
    [told] = [e for e in h.cluster.events if e.reason == "GangReleased"][-1:]
    assert told.regarding.name == "train-0-b" and f"avoiding node {node} (kube-scheduler refused" in told.message


def test_a_new_leader_reads_the_avoided_node_back_and_the_exclusion_ends_when_the_gang_runs_whole():
    h = Harness(four_nodes(), gang_pods(2, gpus=4, owned=True), NO_JITTER)
    node = released_refused(h)
    h.reconcile()
    recreate(h, "-b")
    h.controllers = h.new_controllers()  # a failover: nothing in memory
    assert h.controllers.rollbacks.restore() == 1
    placed = h.reconcile()
    assert placed.phase is Phase.PLACED and node not in {m.node for m in placed.decision.release}
    h.sync()
    h.bind("train-0-b")
    h.bind("train-1-b")
    assert h.reconcile().phase is Phase.RELEASED
    assert h.cluster.state.data == {}, "the gang runs whole: every node may be tried again"
    assert h.controller.gang("team-a/train").avoid == {}


def test_the_state_config_map_keeps_its_byte_bound_dropping_what_runs_out_first(monkeypatch):
    from reconciler.ports import state
    h = Harness(four_nodes(), [], NO_JITTER)
    reason = "kube-scheduler refused member w-1 on node n: " + "x" * 200
    for i, until in enumerate((500.0, 100.0, 300.0)):
        h.cluster.state.save_backoff(f"ns/g{i}", 0, 0.0, (), {f"node-{j}": (until, reason) for j in range(4)})
    size = sum(len(k) + len(v) for k, v in h.cluster.state.data.items())
    monkeypatch.setattr(state, "MAX_STATE_BYTES", size)  # room for these three, not for a fourth
    h.cluster.state.save_backoff("ns/g3", 0, 0.0, (), {"node-0": (400.0, reason)})
    assert sorted(h.cluster.state.load_backoffs()) == ["ns/g0", "ns/g2", "ns/g3"], "g1's nodes were avoided the shortest"
    assert h.cluster.state.load_backoffs()["ns/g3"] == (0, 0.0, (), {"node-0": (400.0, reason)})
