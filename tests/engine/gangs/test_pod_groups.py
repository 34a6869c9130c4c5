"""Gangs declared by pod groups (docs/decisions/056-pod-groups.md): a pod naming a group
belongs to the gang ``<namespace>/<source>:<group>`` unless Troupe's keys name one; the
group's minimum, level, priority and timeout are the gang's; a group that is not known
keeps the gang waiting with the reason; and whatever declares the gang, the group's
required level binds every plan.

Topology of the fixture (each node 4 GPUs; members ask 2)::

    block b0: subblock s0 [n0 n1]   subblock s1 [n2 n3]
    block b1: subblock s2 [n4 n5]   subblock s3 [n6 n7]
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.actions import Preempt
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import Gang, all_gangs
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.parts import BadObject, located, read_parts
from reconciler.engine.ledger.snapshot import Snapshot
from testbed.engine_builders import make_node, make_pod
from troupe.config import Config
from troupe.contract import PLANNED_AT

BLOCK, SUBBLOCK = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"
NODES = [make_node(f"n{i}").topology(f"b{i // 4}", f"s{i // 2}", f"h{i}").allocatable(gpu=4) for i in range(8)]
CONFIG = Config()
NOW = 1.7e9


def upstream(name: str = "train", min_count: int | None = 4, key: str | None = SUBBLOCK, **spec: Any) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    body: dict[str, Any] = {"schedulingPolicy": policy, **spec}
    if key is not None:
        body["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team"}, "spec": body}


def peer(api_version: str, name: str = "train", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name, "namespace": "team"}, "spec": spec}


def member(i: int, gpus: int = 2, group: str = "train") -> dict[str, Any]:
    pod = make_pod(f"train-{i}", "team").requests(gpu=gpus).index(i).gated().build()
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def busy(node: str) -> dict[str, Any]:
    return make_pod(f"busy-{node}", "team").requests(gpu=4).on(node).build()


def cluster(pods: list[dict[str, Any]], groups: list[dict[str, Any]],
            config: Config = CONFIG) -> tuple[Snapshot, dict[str, Gang]]:
    read = read_parts([*located("nodes", "Node", [n.build() for n in NODES]), *located("pods", "Pod", pods),
                       *located("groups", "PodGroup", groups)], config)
    snapshot = build_snapshot(read.parts)
    gangs = all_gangs(snapshot.pods.values(), config, read.parallelism, read.parts.workloads)
    return snapshot, {g.key: g for g in gangs}


def subblocks(snapshot: Snapshot, decision: Any) -> set[str]:
    assert decision.placement is not None
    return {snapshot.nodes[snapshot.index[a.node]].labels[SUBBLOCK] for a in decision.placement.assignments}


def test_pods_naming_an_upstream_group_are_its_gang_with_its_minimum_and_level() -> None:
    snapshot, gangs = cluster([member(i) for i in range(4)] + [busy("n1"), busy("n2"), busy("n4")], [upstream()])
    gang = gangs["team/workload:train"]
    assert (gang.size, gang.min_size, gang.topology.required_level) == (4, 4, SUBBLOCK)
    decision = decide(gang, snapshot, NOW)
    assert decision.phase is Phase.PLACED
    assert subblocks(snapshot, decision) == {"s3"}  # the one subblock with room around the busy hosts


def test_a_group_gang_waits_for_its_minimum_naming_where_the_count_comes_from() -> None:
    snapshot, gangs = cluster([member(i) for i in range(3)], [upstream()])
    decision = decide(gangs["team/workload:train"], snapshot, NOW)
    assert decision.phase is Phase.WAITING
    assert decision.reason == ("3 of 4 members present (PodGroup team/train (scheduling.k8s.io) "
                               "spec.schedulingPolicy.gang.minCount)")


def test_a_group_that_is_not_known_keeps_its_gang_waiting_with_the_reason() -> None:
    snapshot, gangs = cluster([member(i) for i in range(4)], [])
    decision = decide(gangs["team/workload:train"], snapshot, NOW)
    assert (decision.phase, decision.rule.name) == (Phase.WAITING, "WorkloadUnknown")
    assert decision.reason == ("4 members present; size unknown: PodGroup team/train (scheduling.k8s.io) not found "
                               "(not created yet, deleted, or not readable by the reconciler)")


def test_a_group_that_cannot_be_read_holds_its_gang_naming_the_field() -> None:
    snapshot, gangs = cluster([member(i) for i in range(4)], [upstream(min_count=0)])
    decision = decide(gangs["team/workload:train"], snapshot, NOW)
    assert decision.phase is Phase.HELD
    assert decision.reason == ("PodGroup team/train (scheduling.k8s.io): spec.schedulingPolicy.gang.minCount: must be "
                               "an integer from 1 to 2147483647, got 0 (held until it is fixed)")


def test_more_members_than_the_minimum_are_released_together_when_they_fit() -> None:
    snapshot, gangs = cluster([member(i, gpus=1) for i in range(6)], [upstream(key=BLOCK)])
    gang = gangs["team/workload:train"]
    assert (gang.size, gang.min_size) == (6, 4)
    decision = decide(gang, snapshot, NOW)
    assert decision.phase is Phase.PLACED and len(decision.placement.assignments) == 6


def test_a_basic_group_is_no_gang_its_members_go_as_they_fit() -> None:
    snapshot, gangs = cluster([member(0)], [upstream(min_count=None, key=None)])
    gang = gangs["team/workload:train"]
    assert (gang.size, gang.min_size) == (1, 1)
    assert decide(gang, snapshot, NOW).phase is Phase.PLACED


def test_the_groups_priority_and_timeout_are_the_gangs() -> None:
    _, gangs = cluster([member(i) for i in range(4)], [upstream(priority=500)])
    assert gangs["team/workload:train"].priority == 500
    _, gangs = cluster([_labelled(i) for i in range(4)],
                       [peer("scheduling.x-k8s.io/v1alpha1", minMember=4, scheduleTimeoutSeconds=60)])
    gang = gangs["team/coscheduling:train"]
    assert (gang.min_size, gang.timeout_seconds) == (4, 60)  # capped by gangScheduleTimeoutSecondsLimit (100)


def _labelled(i: int) -> dict[str, Any]:
    return make_pod(f"train-{i}", "team").requests(gpu=2).index(i).gated().label(
        "scheduling.x-k8s.io/pod-group", "train").build()


@pytest.mark.parametrize("api_version, key, spec, want", [
    ("scheduling.volcano.sh/v1beta1", ("annotate", "scheduling.k8s.io/group-name"),
     {"minMember": 4, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}, "team/volcano:train"),
    ("scheduling.run.ai/v2alpha2", ("annotate", "pod-group-name"),
     {"minMember": 4, "topologyConstraint": {"requiredTopologyLevel": SUBBLOCK}}, "team/kai:train"),
])
def test_the_peers_groups_bind_their_level(api_version: str, key: tuple[str, str], spec: dict[str, Any],
                                           want: str) -> None:
    pods = []
    for i in range(4):
        builder = make_pod(f"train-{i}", "team").requests(gpu=2).index(i).gated()
        getattr(builder, key[0])(key[1], "train")
        pods.append(builder.build())
    snapshot, gangs = cluster([*pods, busy("n1"), busy("n2"), busy("n4")], [peer(api_version, **spec)])
    decision = decide(gangs[want], snapshot, NOW)
    assert decision.phase is Phase.PLACED and subblocks(snapshot, decision) == {"s3"}


def troupe_member(i: int, size: int = 4) -> dict[str, Any]:
    pod = member(i)
    pod["metadata"]["annotations"] = {"troupe.io/gang-name": "mine", "troupe.io/gang-size": str(size)}
    return pod


def test_troupes_keys_name_the_gang_but_the_groups_level_binds_its_plan() -> None:
    # No subblock has room for 4 x 2 GPUs; block b0 has (n0 and n2 are free).
    blockers = [busy(n) for n in ("n1", "n3", "n5", "n6")]
    snapshot, gangs = cluster([troupe_member(i) for i in range(4)] + blockers, [upstream()])
    gang = gangs["team/mine"]
    assert (gang.size, gang.topology.required_level) == (4, SUBBLOCK)
    assert decide(gang, snapshot, NOW).phase is Phase.UNSCHEDULABLE  # never a plan kube-scheduler would refuse
    alone = [troupe_member(i) for i in range(4)]
    for pod in alone:
        del pod["spec"]["schedulingGroup"]
    snapshot, gangs = cluster(alone + blockers, [])
    assert decide(gangs["team/mine"], snapshot, NOW).phase is Phase.PLACED  # without the group: across subblocks


def test_troupes_keys_wait_for_the_group_their_members_name() -> None:
    snapshot, gangs = cluster([troupe_member(i) for i in range(4)], [])
    decision = decide(gangs["team/mine"], snapshot, NOW)
    assert (decision.phase, decision.rule.name) == (Phase.WAITING, "WorkloadUnknown")
    assert decision.reason.startswith("4 members present; waiting: PodGroup team/train (scheduling.k8s.io) not found")


def test_a_group_minimum_above_troupes_size_holds_the_gang() -> None:
    snapshot, gangs = cluster([troupe_member(i, size=3) for i in range(3)], [upstream(min_count=4)])
    decision = decide(gangs["team/mine"], snapshot, NOW)
    assert decision.phase is Phase.HELD
    assert "spec.schedulingPolicy.gang.minCount: 4 is more than the gang's 3 members" in decision.reason


def test_an_ungated_pod_naming_a_group_is_not_troupes() -> None:
    pod = member(0)
    del pod["spec"]["schedulingGates"]
    _, gangs = cluster([pod], [upstream()])
    assert gangs == {}


def test_a_group_of_an_api_troupe_does_not_read_is_refused_naming_it() -> None:
    with pytest.raises(BadObject, match=r"groups\[0\] \(PodGroup train\): apiVersion: not a pod group API"):
        cluster([], [peer("scheduling.example.com/v1")])


@settings(max_examples=60, deadline=None)
@given(busy_nodes=st.sets(st.integers(0, 7), max_size=5), size=st.integers(2, 6),
       level=st.sampled_from([BLOCK, SUBBLOCK, "kubernetes.io/hostname"]))
def test_a_plan_for_a_group_with_a_required_key_never_spans_two_domains_of_it(busy_nodes: set[int], size: int,
                                                                             level: str) -> None:
    pods = [member(i, gpus=1) for i in range(size)] + [busy(f"n{i}") for i in sorted(busy_nodes)]
    snapshot, gangs = cluster(pods, [upstream(min_count=size, key=level)])
    decision = decide(gangs["team/workload:train"], snapshot, NOW)
    if decision.phase is Phase.PLACED:
        domains = {snapshot.nodes[snapshot.index[a.node]].labels[level] for a in decision.placement.assignments}
        assert len(domains) == 1


def running(i: int, node: str, group: str = "low") -> dict[str, Any]:
    """A running member of the low-priority group gang ``group``, released by Troupe."""
    pod = make_pod(f"{group}-{i}", "team").requests(gpu=4).index(i).on(node).annotate(
        PLANNED_AT, "2026-01-01T00:00:00Z").build()
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


@pytest.mark.parametrize("mode, whole", [({"all": {}}, True), ({"single": {}}, False)])
def test_minimal_preemption_evicts_a_gang_whose_group_says_all_only_whole(mode: dict[str, Any], whole: bool) -> None:
    # The low gang runs on every node of block b0; the preemptor needs one subblock (2 nodes).
    low = [running(i, f"n{i}") for i in range(4)] + [busy(f"n{i}") for i in range(4, 8)]
    preemptor = [member(i, gpus=4, group="high") for i in range(2)]
    for pod in preemptor:
        pod["spec"]["priority"] = 100
    groups = [upstream("low", min_count=4, key=None, disruptionMode=mode), upstream("high", min_count=2)]
    snapshot, gangs = cluster(low + preemptor, groups)
    assert ("team/workload:low" in snapshot.whole_victims) is whole
    decision = decide(gangs["team/workload:high"], snapshot, NOW, Policy("minimal"))
    assert decision.phase is Phase.PREEMPTING
    evicted = sorted(v for a in decision.actions if isinstance(a, Preempt) for v in a.evict)
    assert len(evicted) == (4 if whole else 2), evicted


def test_a_group_listed_twice_is_refused_naming_where_it_was_first() -> None:
    with pytest.raises(BadObject, match=r"groups\[1\] \(PodGroup train\): duplicate of groups\[0\]"):
        cluster([], [upstream(), upstream()])
    with pytest.raises(BadObject, match=r"duplicate of groups\[0\]"):  # one group at two versions of its API
        cluster([], [upstream(), {**upstream(), "apiVersion": "scheduling.k8s.io/v1alpha2"}])
    _, gangs = cluster([member(0)], [upstream(min_count=1), peer("scheduling.x-k8s.io/v1alpha1", minMember=1)])
    assert "team/workload:train" in gangs  # the same name in another source's API is another group


def _preempting(low_priority: int, low_group_priority: int | None, high_priority: int,
                high_group_priority: int | None) -> Any:
    """The decision of gang ``high`` (2 members of 4 GPUs) on a cluster whose every node
    runs gang ``low``: members of the given ``spec.priority``, in pod groups stating the
    given priority (None: none)."""
    low = [running(i, f"n{i}") for i in range(8)]
    for pod in low:
        pod["spec"]["priority"] = low_priority
    high = [member(i, gpus=4, group="high") for i in range(2)]
    for pod in high:
        pod["spec"]["priority"] = high_priority
    stated = [{} if p is None else {"priority": p} for p in (low_group_priority, high_group_priority)]
    groups = [upstream("low", min_count=8, key=None, **stated[0]), upstream("high", min_count=2, **stated[1])]
    snapshot, gangs = cluster([*low, *high], groups)
    return decide(gangs["team/workload:high"], snapshot, NOW, Policy("minimal"))


def test_preemption_compares_the_gangs_one_priority_that_of_their_group_when_it_states_one() -> None:
    """KEP-5710 gives a pod the priority of its workload's group, as preemptor and as
    victim (docs/decisions/064-preemption-names-no-other-tenant.md)."""
    assert _preempting(0, None, 100, None).phase is Phase.PREEMPTING, "by the pods' own priorities"
    # The preemptor's group says 100 over members of priority 0: it preempts the gang of 50.
    preemptor = _preempting(50, None, 0, 100)
    assert preemptor.phase is Phase.PREEMPTING, preemptor.reason
    assert "priority <= 50" in preemptor.reason
    # The victims' group says 200 over members of priority 0: no gang of 100 evicts them.
    victim = _preempting(0, 200, 100, None)
    assert (victim.phase, victim.victims) == (Phase.UNSCHEDULABLE, ()), victim.reason
    # The group's priority wins either way: a group of 10 over members of 1000 is a victim.
    assert _preempting(1000, 10, 100, None).phase is Phase.PREEMPTING


def test_a_gang_of_troupes_keys_naming_a_group_takes_the_priority_the_group_states() -> None:
    pods = [member(i) for i in range(2)]
    for pod in pods:
        pod["metadata"].setdefault("annotations", {}).update({"troupe.io/gang-name": "named", "troupe.io/gang-size": "2"})
    _, gangs = cluster(pods, [upstream(min_count=2, priority=300)])
    assert gangs["team/named"].priority == 300, "one priority per gang, whoever declares it"
