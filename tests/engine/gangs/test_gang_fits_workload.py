"""A named gang larger than the workload Kueue admits it with is held with the workload's
reason (docs/decisions/058-kueue-for-quota.md): Kueue admits each workload alone, so a
gang of 5 on a Job of 4 pods could never complete while the Job holds its quota."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import all_gangs, build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.parts import located, read_parts
from reconciler.engine.model import workloads as wl
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config

CONFIG = Config()
NOW = 1_800_000_000.0
QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
NODES = [make_node(f"h{h}").topology("b0", "b0-s0", f"h{h}").allocatable(cpu="32", gpu=8) for h in range(8)]


def job(name: str, parallelism: int, completions: int | None, labels: dict[str, str] | None = None,
        succeeded: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism}
    if completions is not None:
        spec["completions"] = completions
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels or {}}, "spec": spec,
            "status": {"succeeded": succeeded}}


def members(count: int, size: int, min_size: int | None = None) -> list[Any]:
    """``count`` pods of Job train, each of gang ``train`` of ``size``."""
    out = []
    for i in range(count):
        pod = make_pod(f"train-{i}", "ml").owned_by("Job", "train").gang("train", size).index(i).requests(gpu=1).gated()
        if min_size is not None:
            pod.annotate("troupe.io/gang-min-size", str(min_size))
        out.append(pod)
    return out


@pytest.mark.parametrize(("kind", "obj", "want_most", "want_from"), [
    ("Job", job("t", 4, 4), 4, "Job t: min(spec.parallelism, spec.completions)"),
    ("Job", job("t", 8, 4), 4, "Job t: min(spec.parallelism, spec.completions)"),
    ("Job", job("t", 4, 10, succeeded=8), 4, "Job t: min(spec.parallelism, spec.completions)"),
    ("JobSet", {"metadata": {"name": "js"}, "spec": {"replicatedJobs": [
        {"name": "driver", "template": {"spec": {}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 4}}}]}},
     9, "JobSet js: driver 1x1 + workers 2x4"),
    ("PyTorchJob", {"metadata": {"name": "pt"}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1}, "Worker": {"replicas": 3}}}}, 4, "PyTorchJob pt: Master 1 + Worker 3"),
    ("LeaderWorkerSet", {"metadata": {"name": "serve"}, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4}}},
     8, "LeaderWorkerSet serve: spec.replicas 2 x spec.leaderWorkerTemplate.size 4"),
], ids=["a Job of 4", "completions below parallelism", "completed pods are not taken off",
        "a JobSet: driver and two worker Jobs", "a PyTorchJob", "a LeaderWorkerSet: all its groups"])
def test_the_most_pods_a_workload_ever_runs_at_once_name_the_fields(kind: str, obj: dict[str, Any], want_most: int,
                                                                     want_from: str) -> None:
    assert wl.most_pods(kind, obj) == (want_most, want_from)


def test_a_gang_of_5_on_a_queued_job_of_4_is_held_naming_the_job_its_count_and_the_key() -> None:
    pods = members(4, 5)
    snapshot = snapshot_of(NODES, pods)
    workloads = wl.Workloads(wl.workloads_of("Job", [job("train", 4, 4, QUEUE)]))
    gang = build_gang("ml/train", list(snapshot.pods.values()), CONFIG, {}, workloads)
    want = ("annotation troupe.io/gang-size: 5 members, but Job ml/train runs at most 4 pods (Job train: "
            "min(spec.parallelism, spec.completions)); Kueue admits it alone (label kueue.x-k8s.io/queue-name: "
            "team-a), so the gang can never complete and the workload holds its quota (held until it is fixed: "
            "give the gang at most 4 members, or troupe.io/gang-size: auto)")
    assert gang.held == want
    decision = decide(gang, snapshot, NOW)
    assert (decision.phase, decision.reason) == (Phase.HELD, want)
    assert decision.release == ()


@pytest.mark.parametrize(("case", "obj", "size", "min_size", "want_rule"), [
    ("without Kueue a gang may span several workloads: it waits for the others' pods",
     job("train", 4, 4), 5, None, "MembersMissing"),
    ("a gang the queued Job fills", job("train", 4, 4, QUEUE), 4, None, "Placed"),
    ("a minimum the queued Job fills: released with 4, the fifth placed when it comes",
     job("train", 4, 4, QUEUE), 5, 4, "Placed"),
])
def test_a_gang_the_workload_can_complete_or_that_is_not_queued_is_not_held(case: str, obj: dict[str, Any], size: int,
                                                                            min_size: int | None,
                                                                            want_rule: str) -> None:
    snapshot = snapshot_of(NODES, members(4, size, min_size))
    gang = build_gang("ml/train", list(snapshot.pods.values()), CONFIG, {}, wl.Workloads(wl.workloads_of("Job", [obj])))
    assert gang.held == ""
    assert decide(gang, snapshot, NOW).rule.name == want_rule


def test_a_minimum_above_the_queued_job_names_the_minimum_key() -> None:
    snapshot = snapshot_of(NODES, members(2, 6, 3))
    workloads = wl.Workloads(wl.workloads_of("Job", [job("train", 2, None, QUEUE)]))
    gang = build_gang("ml/train", list(snapshot.pods.values()), CONFIG, {}, workloads)
    assert gang.held.startswith("annotation troupe.io/gang-min-size: 3 members, but Job ml/train runs at most 2 pods")


# --- every way a minimum is declared (docs/decisions/066-queued-minimum-by-every-source.md) ---
#: Each pod group source, a group object of minimum 5, how its pods name it, and the field
#: the reason names.
GROUPS_OF_5 = [
    ("upstream", {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                  "metadata": {"name": "g", "namespace": "ml"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}},
     "workload:g", "PodGroup ml/g (scheduling.k8s.io) spec.schedulingPolicy.gang.minCount"),
    ("volcano", {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                 "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 5}},
     "volcano:g", "PodGroup ml/g (scheduling.volcano.sh) spec.minMember"),
    ("coscheduling", {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 5}},
     "coscheduling:g", "PodGroup ml/g (scheduling.x-k8s.io) spec.minMember"),
    ("kai", {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 5}},
     "kai:g", "PodGroup ml/g (scheduling.run.ai) spec.minMember"),
]


def naming_group(pod: Any, source: str) -> Any:
    """``pod`` (a builder) naming group ``g`` the way ``source``'s users write it."""
    if source == "upstream":
        built = pod.build()
        built["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        return built
    if source == "coscheduling":
        return pod.label("scheduling.x-k8s.io/pod-group", "g")
    return pod.annotate({"volcano": "scheduling.k8s.io/group-name", "kai": "pod-group-name"}[source], "g")


def group_cluster(pods: list[Any], group: dict[str, Any], jobs: list[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """The snapshot and gangs (by key) of ``pods``, ``group`` and the Jobs ``jobs``."""
    read = read_parts([*located("nodes", "Node", [n.build() for n in NODES]),
                       *located("pods", "Pod", [p if isinstance(p, dict) else p.build() for p in pods]),
                       *located("groups", "PodGroup", [group]), *located("jobs", "Job", jobs)], CONFIG)
    snapshot = build_snapshot(read.parts)
    gangs = all_gangs(snapshot.pods.values(), CONFIG, read.parallelism, read.parts.workloads)
    return snapshot, {g.key: g for g in gangs}


@pytest.mark.parametrize(("source", "group", "gang_name", "field"), GROUPS_OF_5, ids=[g[0] for g in GROUPS_OF_5])
def test_a_group_of_minimum_5_on_a_queued_job_of_4_is_held_naming_the_group_and_the_job(
        source: str, group: dict[str, Any], gang_name: str, field: str) -> None:
    pods = [naming_group(make_pod(f"train-{i}", "ml").owned_by("Job", "train").index(i).requests(gpu=1).gated(), source)
            for i in range(4)]
    snapshot, gangs = group_cluster(pods, group, [job("train", 4, 4, QUEUE)])
    gang = gangs[f"ml/{gang_name}"]
    want = (f"{field}: 5 members, but Job ml/train runs at most 4 pods (Job train: min(spec.parallelism, "
            "spec.completions)); Kueue admits it alone (label kueue.x-k8s.io/queue-name: team-a), so the gang can "
            "never complete and the workload holds its quota (held until it is fixed: give the group a minimum of at "
            "most 4)")
    assert gang.held == want
    decision = decide(gang, snapshot, NOW)
    assert (decision.phase, decision.reason) == (Phase.HELD, want), "not Waiting (MembersMissing) for good"


def test_a_group_of_minimum_5_on_a_job_not_queued_waits_for_members_as_before() -> None:
    source, group, gang_name, _ = GROUPS_OF_5[1]
    pods = [naming_group(make_pod(f"train-{i}", "ml").owned_by("Job", "train").index(i).requests(gpu=1).gated(), source)
            for i in range(4)]
    snapshot, gangs = group_cluster(pods, group, [job("train", 4, 4)])
    gang = gangs[f"ml/{gang_name}"]
    assert gang.held == ""
    assert decide(gang, snapshot, NOW).rule.name == "MembersMissing"


def test_a_group_raising_a_troupe_gangs_minimum_above_its_queued_job_holds_it_naming_the_group() -> None:
    # Gang train: 8 members over two queued Jobs of 4 (a and b), minimum 4: each Job alone
    # fills that minimum, so Troupe's own keys pass; the group's minimum of 5 does not.
    pods = [naming_group(make_pod(f"{j}-{i}", "ml").owned_by("Job", j).gang("train", 8).index(i)
                         .annotate("troupe.io/gang-min-size", "4").requests(gpu=1).gated(), "volcano")
            for j in "ab" for i in range(4)][:4]  # Kueue admitted a; b is suspended, no pods yet
    snapshot, gangs = group_cluster(pods, GROUPS_OF_5[1][1], [job("a", 4, 4, QUEUE), job("b", 4, 4, QUEUE)])
    gang = gangs["ml/train"]
    assert gang.held.startswith("PodGroup ml/g (scheduling.volcano.sh) spec.minMember: 5 members, but Job ml/a runs "
                                "at most 4 pods"), gang.held
    assert decide(gang, snapshot, NOW).phase == Phase.HELD
