"""Gang-aware preemption carried out by the controller, with an in-memory writer: the
nomination written before any eviction, victims evicted through the Eviction API (a
PodDisruptionBudget's refusal makes it choose another gang), the gang released once its
victims are gone, and a restarted reconciler continuing from what is on the pods."""

from __future__ import annotations

import json

from reconciler.daemon.writer import PodRef
from reconciler.engine.lifecycle import Phase
from tests.support.controller_harness import CONFIG, Harness, four_nodes
from tests.support.reconciler_builders import make_pod
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
    assert (out.phase, out.decision.rule) == (Phase.PREEMPTING, "Preempting")
    assert sorted(r.name for r in h.writer.evicted) == ["a", "b"], "the lowest priority, the fewest gangs"
    first_patch = h.writer.patches[0]
    assert contract.NOMINATION in first_patch[1]["metadata"]["annotations"], "the nomination comes first"
    nomination = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.NOMINATION])
    assert sorted(nomination["nodes"].values()) == ["n1", "n2"]
    assert {e.reason for e in h.writer.events if e.pod.name in ("a", "b")} == {"Preempted"}
    assert all("to make room for gang team-a/train (priority 100)" in e.message
               for e in h.writer.events if e.reason == "Preempted")
    # The evicted pods are gone: the gang is released on the room they left.
    h.sync()
    out = h.reconcile()
    assert out.phase is Phase.PLACED
    assert sorted(h.node_of(f"train-{i}") for i in range(2)) == ["n1", "n2"]
    assert contract.NOMINATION not in h.pod("train-0")["metadata"]["annotations"], "the release ends the nomination"


def test_a_budget_that_refuses_an_eviction_makes_the_controller_choose_another_gang():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2", 10), low("c", "n3", 50), low("d", "n4", 50),
                               *high(size=1)], config=PREEMPTING)
    h.writer.protected.add("a")
    out = h.reconcile()
    assert out.retry and "eviction refused for team-a/pod:a" in out.reason
    assert h.writer.evicted == []
    nomination = json.loads(h.pod("train-0")["metadata"]["annotations"][contract.NOMINATION])
    assert nomination["refused"] == ["team-a/pod:a"]
    h.sync()
    out = h.reconcile()
    assert (out.phase, out.decision.victims) == (Phase.PREEMPTING, ("team-a/b",))
    assert [r.name for r in h.writer.evicted] == ["b"]


def test_a_restarted_reconciler_waits_for_the_victims_its_predecessor_evicted():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3", 50), low("d", "n4", 50), *high()],
                config=PREEMPTING)
    h.writer.protected.update({"a", "b"})  # evictions pending behind budgets: the victims stay
    h.reconcile()
    h.sync()
    h.writer.protected.clear()
    h.controller = h.new_controller()
    out = h.reconcile()
    assert out.phase is Phase.PREEMPTING
    assert out.decision.nomination is not None


def test_without_preemption_the_gang_just_waits():
    h = Harness(four_nodes(), [low("a", "n1"), low("b", "n2"), low("c", "n3"), low("d", "n4"), *high()], config=CONFIG)
    out = h.reconcile()
    assert out.phase is Phase.UNSCHEDULABLE
    assert h.writer.evicted == [] and h.writer.patches == []
    assert PodRef("team-a", "a") in h.writer.pods
