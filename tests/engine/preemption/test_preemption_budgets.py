"""PodDisruptionBudgets counted by ``atomic`` preemption: a victim gang is a candidate only
if every budget covering its pods allows as many disruptions as it covers of them
(docs/decisions/030-preemption-budgets-and-fences.md).

Nodes (8 GPUs each)::

    block b0 / subblock s0:  n0 n1          block b0 / subblock s1:  n2 n3

Gang ``a`` (priority 0) runs on n0, n1 and gang ``b`` (priority 10) on n2, n3: without
budgets the planner evicts ``a`` (the lowest priority goes first) for ``high``.
"""

from __future__ import annotations

import pytest

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.model.budgets import Budget, budget_refusal
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from testbed.engine_builders import budget, make_node, make_pod, snapshot_of
from troupe.config import Config

CONFIG = Config()
NOW = 1_800_000_000.0


def nodes():
    return [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(4)]


def running(gang, i, node, priority=0, phase="Running"):
    return (make_pod(f"{gang}-{i}").gang(gang, 2).index(i).label("gang", gang).requests(gpu=8).priority(priority)
            .on(node, phase))


def cluster(phase="Running"):
    return [running("a", 0, "n0", phase=phase), running("a", 1, "n1", phase=phase),
            running("b", 0, "n2", priority=10), running("b", 1, "n3", priority=10),
            *[make_pod(f"high-{i}").gang("high", 2).index(i).requests(gpu=8).priority(100).gated()
              for i in range(2)]]


def decide_high(budgets, mode="atomic", pods=None, nodes_of=None):
    snap = snapshot_of(nodes_of or nodes(), pods or cluster(), budgets=budgets)
    members = group_by_gang(snap.pods.values(), CONFIG)["default/high"]
    return decide(build_gang("default/high", members, CONFIG, {}), snap, NOW, Policy(mode))


def test_without_budgets_the_lowest_priority_gang_is_the_victim():
    d = decide_high([])
    assert d.phase is Phase.PREEMPTING and d.victims == ("default/a-0", "default/a-1")


def test_a_budget_allowing_fewer_disruptions_than_it_covers_leaves_the_gang_whole_and_another_is_the_victim():
    """A budget allowing one disruption over the two pods of ``a``: each dry run would
    pass, the second real eviction be refused. The plan takes ``b`` and says why."""
    d = decide_high([budget("keep-a", 1, {"gang": "a"})])
    assert d.phase is Phase.PREEMPTING, d.reason
    assert d.victims == ("default/b-0", "default/b-1")
    assert "default/a (PodDisruptionBudget default/keep-a allows 1 disruption(s) and covers 2" in d.reason


def test_a_budget_allowing_every_pod_it_covers_blocks_nothing():
    d = decide_high([budget("loose-a", 2, {"gang": "a"}), budget("other-ns", 0, {}, namespace="elsewhere")])
    assert d.victims == ("default/a-0", "default/a-1")
    assert "budgets" not in d.reason


def test_when_every_gang_is_held_by_a_budget_the_gang_waits_naming_the_budgets():
    d = decide_high([budget("keep-all", 0, {})])
    assert d.phase is Phase.UNSCHEDULABLE
    assert d.victims == ()
    assert "left whole by their budgets: default/a (PodDisruptionBudget default/keep-all" in d.reason
    assert "default/b (PodDisruptionBudget default/keep-all" in d.reason


def test_minimal_mode_does_not_count_budgets():
    """``minimal`` evicts pod by pod and takes a refusal as it comes (decision 020)."""
    assert decide_high([budget("keep-a", 1, {"gang": "a"})], mode="minimal").victims == ("default/a-0",
                                                                                        "default/a-1")


def test_pending_pods_are_evicted_whatever_the_budgets_say():
    """The Eviction API skips the budgets for a Pending pod (``canIgnorePDB``)."""
    d = decide_high([budget("keep-a", 0, {"gang": "a"})], pods=cluster(phase="Pending"))
    assert d.victims == ("default/a-0", "default/a-1")


def test_a_pod_covered_by_two_budgets_is_never_evicted():
    d = decide_high([budget("one", 5, {"gang": "a"}), budget("two", 5, {"batch.kubernetes.io/job-completion-index": "1"})])
    assert d.victims == ("default/b-0", "default/b-1")
    assert "pod default/a-1 is covered by 2 PodDisruptionBudgets (default/one, default/two)" in d.reason


def pod(labels, namespace="default"):
    return PodInfo(namespace, "p", labels=labels, phase="Running")


def test_a_budget_selects_as_the_api_server_does():
    empty = Budget.from_object(budget("all", 3, {}))
    assert empty.covers(pod({})) and empty.covers(pod({"x": "y"})), "an empty selector selects the namespace"
    assert not empty.covers(pod({}, namespace="other"))
    none = Budget.from_object(budget("none", 3, selector=False))
    assert not none.covers(pod({})), "no selector selects nothing (policy/v1)"
    exprs = Budget.from_object(budget("e", 0, {"app": "x"}, expressions=[
        {"key": "tier", "operator": "In", "values": ["a", "b"]}, {"key": "canary", "operator": "DoesNotExist"}]))
    assert exprs.covers(pod({"app": "x", "tier": "b"}))
    assert not exprs.covers(pod({"app": "x", "tier": "c"}))
    assert not exprs.covers(pod({"app": "x", "tier": "a", "canary": ""}))
    assert not exprs.covers(pod({"tier": "a"}))
    assert Budget.from_object(budget("new", None, {})).disruptions_allowed == 0, "no status yet: nothing allowed"


@pytest.mark.parametrize("bad, field", [
    ({"status": {"disruptionsAllowed": -1}}, "status.disruptionsAllowed"),
    ({"status": {"disruptionsAllowed": "1"}}, "status.disruptionsAllowed"),
    ({"spec": {"selector": {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}}},
     "spec.selector.matchExpressions[0].operator"),
    ({"spec": {"selector": {"matchLabels": {"k": 1}}}}, "spec.selector.matchLabels.k"),
])
def test_a_malformed_budget_is_an_object_error_naming_the_field(bad, field):
    obj = {**budget("bad", 0, {}), **bad}
    with pytest.raises(ObjectError) as raised:
        Budget.from_object(obj)
    assert raised.value.field == field


def test_budget_refusal_counts_the_pods_of_the_gang_a_budget_covers():
    pods = [PodInfo("default", f"p{i}", labels={"gang": "g", "i": str(i)}, phase="Running") for i in range(8)]
    one = Budget.from_object(budget("one", 1, {"gang": "g"}))
    assert budget_refusal(pods, [one]) == \
        "PodDisruptionBudget default/one allows 1 disruption(s) and covers 8 of the gang's pods"
    assert budget_refusal(pods[:1], [one]) == ""
    assert budget_refusal(pods, [Budget.from_object(budget("eight", 8, {"gang": "g"}))]) == ""


def test_gangs_that_pass_their_budget_one_by_one_but_not_together_are_not_evicted_together():
    """Six nodes, three gangs of two (priority 0): ``a`` on n0, n1, ``b`` on n2, n3, ``c``
    on n4, n5; ``high`` needs four nodes. One budget allows 3 disruptions over ``a`` and
    ``b``: each passes alone, the two together (4 pods) do not. The plan takes ``c`` and
    one of them, and says which gang it left out."""
    six = [make_node(f"n{i}").topology("b0", f"b0-s{i // 2}", f"n{i}").allocatable(gpu=8) for i in range(6)]
    pods = [make_pod(f"{g}-{i}").gang(g, 2).index(i).label("tier", "batch" if g != "c" else "other")
            .requests(gpu=8).on(f"n{2 * k + i}") for k, g in enumerate("abc") for i in range(2)]
    pods += [make_pod(f"high-{i}").gang("high", 4).index(i).requests(gpu=8).priority(100).gated() for i in range(4)]
    d = decide_high([budget("batch", 3, {"tier": "batch"})], pods=pods, nodes_of=six)
    assert d.phase is Phase.PREEMPTING, d.reason
    gangs = {v.split("/")[1].split("-")[0] for v in d.victims}
    assert "c" in gangs and len(gangs) == 2 and gangs != {"a", "b"}, d.victims
    assert "(PodDisruptionBudget default/batch allows 3 disruption(s) over 2 gangs of the plan)" in d.reason
    assert decide_high([budget("batch", 4, {"tier": "batch"})], pods=pods, nodes_of=six).victims[:4] == (
        "default/a-0", "default/a-1", "default/b-0", "default/b-1"), "a budget allowing both lets both go"
