"""Hostile objects stay with themselves (issue 22, finding 1;
docs/decisions/029-hostile-objects-hold-their-gang.md): whatever a pod, node,
SharedDeviceGroup or workload holds, the cache takes it by the informers' path (their
``transform``, a list, watch events) without raising, and every gang then gets a
decision with a phase and a reason; a member whose rank index, record or selected
devices cannot be read holds its gang, naming the key and the value."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.decision.step import step
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from testbed.reconciler_builders import make_node, make_pod
from tests.support.hostile import (
    HUGE_NUMBER,
    MIB,
    hostile_group,
    hostile_node,
    hostile_pod,
    hostile_workload,
)
from troupe import contract, ranks
from troupe.config import Config
from troupe.errors import quoted

NOW = 1_800_000_000.0
CUSTOM_KINDS = ("JobSet", "LeaderWorkerSet", "PyTorchJob")


def good_nodes():
    return [make_node(f"good-{i}").gpus(4).build() for i in (1, 2)]


def good_gang(name="train", namespace="good"):
    return [make_pod(f"{name}-{i}", namespace).gang(name, 2).index(i).gpus(4).priority(1_000_000).gated().build()
            for i in range(2)]


def fill(cache, nodes=(), groups=(), workloads=(), pods=()):
    """Feed ``cache`` as the informers do: each object through the informer's transform,
    lists first, then the same objects again as watch events."""
    cache.replace_nodes(cache.retain_node(n) for n in nodes)
    cache.replace_groups([cache.retain_group(g) for g in groups])
    cache.replace_jobs([cache.retain_job(obj) for kind, obj in workloads if kind == "Job"])
    for kind in CUSTOM_KINDS:
        cache.replace_workloads(kind, [obj for k, obj in workloads if k == kind])
    for kind, obj in workloads:
        cache.workload_event(kind, "MODIFIED", obj)
    cache.replace_pods(cache.retain_pod(p) for p in pods)
    for pod in pods:
        cache.pod_event("MODIFIED", cache.retain_pod(pod))
    for node in nodes:
        cache.node_event("MODIFIED", cache.retain_node(node))
    for group in groups:
        cache.group_event("MODIFIED", cache.retain_group(group))


def decide_all(cache, config):
    """Every gang's step, in queue order, as a reconciler's warm-up takes them."""
    snapshot, queue, policy = cache.snapshot(), QueueState(config.queueing_strategy), Policy.from_config(config)
    gangs = [g for key in cache.gang_keys() if (g := cache.gang(key)) is not None]
    return {gang.key: step(gang, snapshot, NOW, policy, queue).decision
            for gang in sorted(gangs, key=lambda g: queue_order(g.key, g.priority, g.created))}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_no_hostile_object_raises_and_every_gang_gets_a_phase_and_a_reason(data):
    config = Config(gang_preemption_mode=data.draw(st.sampled_from(["off", "minimal", "atomic"])))
    pods = [data.draw(hostile_pod(i)) for i in range(data.draw(st.integers(1, 6)))]
    nodes = [data.draw(hostile_node(name)) for name in ("h1", "h2")]
    groups = [data.draw(hostile_group(name)) for name in ("a", "b")]
    workloads = data.draw(st.lists(hostile_workload(), max_size=3))
    counted = []
    cache = ClusterCache(config, on_unreadable=counted.append)

    fill(cache, good_nodes() + nodes, groups, workloads, good_gang() + pods)
    decisions = decide_all(cache, config)

    assert set(decisions) == set(cache.gang_keys())
    for key, decision in decisions.items():
        assert isinstance(decision.phase, Phase), key
        assert decision.reason.strip(), key
    assert decisions["good/train"].phase is Phase.PLACED, decisions["good/train"].reason
    assert len(counted) >= cache.unreadable.count()  # every object left out was counted


def rank_pods(value, key=contract.JOB_COMPLETION_INDEX):
    """Gang ``hostile/bad`` of two, member 1's ``key`` annotation holding ``value``."""
    pods = [make_pod(f"bad-{i}", "hostile").gang("bad", 2).gpus(1).gated().build() for i in range(2)]
    pods[0]["metadata"]["annotations"][key] = "0"
    pods[1]["metadata"]["annotations"][key] = value
    return pods


@pytest.mark.parametrize("value", [HUGE_NUMBER, "\u0663", "\uff13", "", "1\n", "x" * MIB])
def test_a_malformed_rank_index_holds_its_gang_naming_the_key_and_the_value_and_the_others_go_on(value):
    cache = ClusterCache(Config())
    fill(cache, good_nodes(), pods=good_gang() + rank_pods(value))

    decisions = decide_all(cache, Config())

    bad = decisions["hostile/bad"]
    assert bad.phase is Phase.HELD
    assert f"annotation {contract.JOB_COMPLETION_INDEX}: must be an index of at most 9 digits" in bad.reason
    assert quoted(value) in bad.reason
    assert len(bad.reason) < 1000
    assert decisions["good/train"].phase is Phase.PLACED


@pytest.mark.parametrize(("key", "value", "says"), [
    (contract.PLAN, json.dumps({"plannedAt": 5, "nodes": {}}), "not a plan record the reconciler wrote"),
    (contract.NOMINATION, "[" * 100_000, "not a nomination record the reconciler wrote"),
    (contract.SELECTED_DEVICES, json.dumps({"nvidia.com/gpu": HUGE_NUMBER}), "not a device ID"),
    (contract.SELECTED_DEVICES, "{\"a\":" * 100_000, "maximum recursion depth"),
])
def test_an_unreadable_record_holds_its_gang_naming_the_key(key, value, says):
    pods = [make_pod(f"bad-{i}", "hostile").gang("bad", 2).gpus(1).gated().build() for i in range(2)]
    pods[1]["metadata"]["annotations"][key] = value
    cache = ClusterCache(Config())
    fill(cache, good_nodes(), pods=good_gang() + pods)

    decisions = decide_all(cache, Config())

    assert decisions["hostile/bad"].phase is Phase.HELD
    assert f"member bad-1: annotation {key}: " in decisions["hostile/bad"].reason
    assert says in decisions["hostile/bad"].reason
    assert decisions["good/train"].phase is Phase.PLACED


def test_whatever_reading_one_object_raises_stays_with_it_logged_and_counted_once(monkeypatch, caplog):
    from reconciler.engine.model import pods as cluster

    real = cluster.PodInfo.from_object

    def from_object(obj):
        if obj["metadata"]["name"] == "bad-1":
            raise KeyError("x" * MIB)  # not an ObjectError: a reader's bug meets an odd object
        return real(obj)

    monkeypatch.setattr(cluster.PodInfo, "from_object", staticmethod(from_object))
    counted = []
    cache = ClusterCache(Config(), on_unreadable=counted.append)
    pods = good_gang() + rank_pods("1")
    fill(cache, good_nodes(), pods=pods)
    cache.replace_pods(cache.retain_pod(p) for p in pods)  # a relist: the same versions

    assert counted == ["pod"]
    assert "KeyError" in cache.unreadable.why("pod", "hostile/bad-1")
    assert len([r for r in caplog.records if "hostile/bad-1" in r.getMessage()]) == 1
    assert all(len(r.getMessage()) < 1000 for r in caplog.records)
    assert decide_all(cache, Config())["good/train"].phase is Phase.PLACED


def test_a_member_whose_object_cannot_be_read_holds_its_gang_naming_the_field_and_the_relist_goes_on():
    """A memory request of 5,000 digits: the API server keeps it as it is, and Python's
    ``int()`` refuses it. The pod stays a member of its gang, held, and counts for no
    capacity; the other gangs and the list go on."""
    pods = [make_pod(f"bad-{i}", "hostile").gang("bad", 2).gpus(1).gated().build() for i in range(2)]
    pods[1]["spec"]["containers"][0]["resources"]["requests"]["memory"] = HUGE_NUMBER
    counted = []
    cache = ClusterCache(Config(), on_unreadable=counted.append)
    fill(cache, good_nodes(), pods=good_gang() + pods)
    cache.replace_pods(cache.retain_pod(p) for p in good_gang() + pods)  # a relist

    decisions = decide_all(cache, Config())

    bad = decisions["hostile/bad"]
    assert bad.phase is Phase.HELD
    assert "member bad-1: the pod cannot be read: spec.containers[0].resources.requests.memory" in bad.reason
    assert "(5000 characters)" in bad.reason
    assert len(bad.reason) < 1000
    assert counted == ["pod"]
    assert [p.name for p in cache.snapshot().pods.values() if p.namespace == "hostile"] == ["bad-0"], "no capacity counted"
    assert decisions["good/train"].phase is Phase.PLACED


@pytest.mark.parametrize(("labels", "annotations", "held"), [
    ({contract.JOB_COMPLETION_INDEX: "1"}, {contract.KUBEFLOW_REPLICA_INDEX: HUGE_NUMBER}, ""),  # not read
    ({contract.JOB_COMPLETION_INDEX: "1"}, {contract.JOB_COMPLETION_INDEX: HUGE_NUMBER}, ""),  # the label wins
    ({contract.JOB_COMPLETION_INDEX: "1", contract.JOBSET_GLOBAL_INDEX_LABEL: "\uff13"}, {},
     f"label {contract.JOBSET_GLOBAL_INDEX_LABEL}"),
    ({}, {contract.KUBEFLOW_REPLICA_INDEX: "-1"}, f"annotation {contract.KUBEFLOW_REPLICA_INDEX}"),
    ({contract.LWS_WORKER_INDEX_LABEL: "\u0663"}, {}, f"label {contract.LWS_WORKER_INDEX_LABEL}"),
])
def test_only_the_rank_keys_read_hold_the_gang(labels, annotations, held):
    assert ranks.rank_problem(labels, annotations).startswith(held)
    assert bool(ranks.rank_problem(labels, annotations)) == bool(held)


def test_a_budget_or_a_volume_object_that_cannot_be_read_stays_with_itself(monkeypatch):
    from reconciler.daemon.cache import volumes
    from reconciler.engine.model import budgets

    def explode(obj):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(budgets.Budget, "from_object", staticmethod(explode))
    monkeypatch.setitem(volumes._KINDS, "namespaces", (volumes._KINDS["namespaces"][0], explode))
    counted = []
    cache = ClusterCache(Config(), on_unreadable=counted.append)
    fill(cache, good_nodes(), pods=good_gang())
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "keep", "namespace": "good", "resourceVersion": "1"},
              "spec": {"selector": {}}, "status": {"disruptionsAllowed": 0}}
    cache.budgets.replace([budget])
    assert not cache.budgets.event("ADDED", budget)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "good", "resourceVersion": "1"}}
    cache.volumes.replace("namespaces", [namespace])
    cache.volumes.event("namespaces", "MODIFIED", namespace)
    assert sorted(set(counted)) == ["namespaces", "poddisruptionbudget"]
    assert "ValueError" in cache.unreadable.why("poddisruptionbudget", "good/keep")
    assert decide_all(cache, Config())["good/train"].phase is Phase.PLACED
