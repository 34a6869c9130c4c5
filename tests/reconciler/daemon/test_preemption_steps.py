"""Gang-aware preemption carried out by the controller, with an in-memory writer: the
nomination written before any eviction, victims evicted through the Eviction API (a
PodDisruptionBudget's refusal makes it choose another gang), the gang released once its
victims are gone, and a restarted reconciler continuing from what is on the pods."""

from __future__ import annotations

import json

from reconciler.engine.decision.actions import Preempt
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import CONFIG, Harness, four_nodes
from troupe import contract
from troupe.config import Config

PREEMPTING = Config(gang_preemption_mode="minimal", gang_schedule_timeout_jitter_seconds=0)


def low(name, node, priority=0):
    """A running pod of its own (a gang of one for Troupe) using all 4 GPUs of ``node``."""
    return make_pod(name).gpus(4).priority(priority).running_on(node).build()


def high(size=2, priority=100):
    return [make_pod(f"train-{i}").gang("train", size).index(i).gpus(4).priority(priority).gated().build()
            for i in range(size)]


def test_the_nomination_is_written_before_the_victims_are_evicted_and_the_gang_follows_them():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3", 50), low("d", "n4", 50), *high()],
                config=PREEMPTING)
    out = h.reconcile()
    assert (out.phase, out.decision.rule.name) == (Phase.PREEMPTING, "Preempting")
    assert sorted(r.name for r in h.cluster.pods.evicted) == ["a", "b"], "the lowest priority, the fewest gangs"
    first_patch = h.cluster.pods.patches[0]
    assert contract.NOMINATION in first_patch[1]["metadata"]["annotations"], "the nomination comes first"
    nomination = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.NOMINATION])
    assert sorted(nomination["nodes"].values()) == ["n1", "n2"]
    assert {e.reason for e in h.cluster.events if e.regarding.name in ("a", "b")} == {"Preempted"}
    assert [(e.regarding.name, e.reason) for e in h.cluster.events if e.reason == "GangPreempting"] == [
        ("train-0", "GangPreempting")], "one Event for the gang, sent as it preempts, on its lead"
    assert all("to make room for gang team-a/train (priority 100)" in e.message
               for e in h.cluster.events if e.reason == "Preempted")
    # The evicted pods are gone: the gang is released on the room they left.
    h.sync()
    out = h.reconcile()
    assert out.phase is Phase.PLACED
    assert sorted(h.node_of(f"train-{i}") for i in range(2)) == ["n1", "n2"]
    assert contract.NOMINATION not in h.pod("train-0")["metadata"]["annotations"], "the release ends the nomination"


def test_a_budget_that_refuses_an_eviction_makes_the_controller_choose_another_gang():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2", 10), low("c", "n3", 50), low("d", "n4", 50),
                               *high(size=1)], config=PREEMPTING)
    h.cluster.pods.protected.add("a")
    out = h.reconcile()
    assert out.retry and "eviction refused for team-a/pod:a" in out.reason
    assert h.cluster.pods.evicted == []
    nomination = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.NOMINATION])
    assert nomination["refused"] == ["uid-a"], "the refused pod, by UID"
    h.sync()
    out = h.reconcile()
    assert (out.phase, out.decision.victims) == (Phase.PREEMPTING, ("team-a/b",))
    assert [r.name for r in h.cluster.pods.evicted] == ["b"]


def test_in_atomic_a_victim_gang_with_one_protected_pod_is_left_whole_and_another_gang_is_chosen():
    """A budget protects one pod of gang ``two``: atomic evicts a victim gang whole or not at
    all, so neither of its pods goes (a dry run asks first), and the next plan takes ``one``."""
    two = [make_pod(f"two-{i}").gang("two", 2).index(i).gpus(4).priority(0).running_on(f"n{i + 1}").build()
           for i in range(2)]
    one = make_pod("one-0").gang("one", 1).gpus(4).priority(10).running_on("n3").build()
    h = Harness(four_nodes(), [*two, one, low("d", "n4", 50), *high(size=1)],
                config=Config(gang_preemption_mode="atomic", gang_schedule_timeout_jitter_seconds=0))
    h.cluster.pods.protected.add("two-1")
    out = h.reconcile()
    assert out.retry and "eviction refused for team-a/two" in out.reason, out.reason
    assert h.cluster.pods.evicted == [], "no pod of the refused gang is evicted, not even the one its budget allows"
    assert sorted(r.name for r in h.cluster.pods.dry_runs) == ["two-0", "two-1"]
    h.sync()
    out = h.reconcile()
    assert (out.phase, out.decision.victims) == (Phase.PREEMPTING, ("team-a/one-0",))
    assert [r.name for r in h.cluster.pods.evicted] == ["one-0"]


def test_a_restarted_reconciler_waits_for_the_victims_its_predecessor_evicted():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3", 50), low("d", "n4", 50), *high()],
                config=PREEMPTING)
    h.cluster.pods.protected.update({"a", "b"})  # evictions pending behind budgets: the victims stay
    h.reconcile()
    h.sync()
    h.cluster.pods.protected.clear()
    h.controllers = h.new_controllers()
    out = h.reconcile()
    assert out.phase is Phase.PREEMPTING
    assert out.decision.find(Preempt).nomination is not None


def test_without_preemption_the_gang_just_waits():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3"), low("d", "n4"), *high()], config=CONFIG)
    out = h.reconcile()
    assert out.phase is Phase.UNSCHEDULABLE
    assert h.cluster.pods.evicted == [] and h.cluster.pods.patches == []
    assert PodKey("team-a", "a") in h.cluster.pods.objects
