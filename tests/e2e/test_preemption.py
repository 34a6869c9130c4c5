"""Gang-aware preemption on the local control plane: real PriorityClasses, Indexed Jobs, the
Eviction API and PodDisruptionBudgets; kube-scheduler binds.

A cluster and Troupe of this module's own: each test runs the reconciler with its own
``gangPreemptionMode`` (restarting it). The 16 nodes of examples/nodes.yaml, 8 GPUs each::

    block  gpu-b0                         gpu-b1
    sub    gpu-b0-s0     gpu-b0-s1        gpu-b1-s0     gpu-b1-s1
    hosts  h0 h1 h2 h3   h0 h1 h2 h3      h0 h1 h2 h3   h0 h1 h2 h3

The cluster is filled by low-priority gangs of whole-node pods (Indexed Jobs whose pod
failure policy ignores disruptions, so that evicted members are recreated, gated again);
a high-priority gang of 4 whole-node members then needs room.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, temporary_namespace, wait_for

REPO = Path(__file__).resolve().parents[2]
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("preempt") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 1\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, config, lease_seconds=4) as running:
        scheduling = client.SchedulingV1Api(cluster.api_client("admin"))
        for name, value in (("troupe-e2e-low", 10), ("troupe-e2e-high", 1000)):
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        yield running


RUNS = iter(range(1000))


def reconfigure(stack: Stack, mode: str) -> None:
    """Run the reconciler with ``gangPreemptionMode: mode`` (a new replica takes over)."""
    stack.config_path.write_text(f'gangScheduleTimeoutJitterSeconds: 1\ngangPreemptionMode: "{mode}"\n')
    for started in list(stack._started):
        if started.record.name.startswith("troupe-reconciler") and started.popen.poll() is None:
            os.kill(started.record.pid, signal.SIGTERM)
            started.popen.wait(timeout=30)
    stack.start_reconciler(f"troupe-reconciler-{mode}-{next(RUNS)}")


@pytest.fixture
def api(stack: Stack) -> Any:
    return stack.cluster.api_client("admin")


@pytest.fixture
def core(api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    with temporary_namespace(core, "pre", timeout=90) as name:
        yield name


def gang_job(name: str, size: int, priority: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node pods (8 GPUs) as one gang; a disrupted member
    (evicted, rolled back) is recreated, not counted as a failure."""
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": size, "parallelism": size, "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {
                "metadata": {"labels": {"gang": name},
                             "annotations": {**gang_annotations(name, size), **(annotations or {})}},
                "spec": {"restartPolicy": "Never", "priorityClassName": priority, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "8"},
                                                       "limits": {"nvidia.com/gpu": "8"}}}]},
            },
        },
    }


def gang_of_jobs(name: str, size: int, priority: str) -> list[dict[str, Any]]:
    """One gang of ``size`` whole-node pods, each the one pod of a Job of its own: an evicted
    member is recreated by its Job after the Job controller's first backoff (10 s), where an
    Indexed Job that lost several pods backs off for minutes."""
    jobs = []
    for i in range(size):
        job = gang_job(name, 1, priority)
        job["metadata"]["name"] = f"{name}-{i}"
        job["spec"]["template"]["metadata"]["annotations"] = gang_annotations(name, size)
        jobs.append(job)
    return jobs


def pods_of(core: client.CoreV1Api, ns: str, gang: str) -> list[Any]:
    return core.list_namespaced_pod(ns, label_selector=f"gang={gang}").items


def running(core: client.CoreV1Api, ns: str, gang: str, size: int) -> list[Any] | None:
    pods = [p for p in pods_of(core, ns, gang) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return pods if len(pods) == size else None


def fill(api: Any, core: client.CoreV1Api, ns: str, gangs: dict[str, int]) -> None:
    """Low-priority gangs (name -> size) of single-pod Jobs running, filling their nodes."""
    batch = client.BatchV1Api(api)
    for name, size in gangs.items():
        for job in gang_of_jobs(name, size, "troupe-e2e-low"):
            batch.create_namespaced_job(ns, job)
        wait_for(f"gang {name} running", lambda n=name, s=size: running(core, ns, n, s), timeout=120)


def evicted(core: client.CoreV1Api, ns: str) -> list[str]:
    """Names of the pods of ``ns`` that got a Preempted Event."""
    return sorted({e.involved_object.name for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"})


def subblock_of(core: client.CoreV1Api, node: str) -> str:
    return core.read_node(node).metadata.labels[SUBBLOCK]


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_a_high_priority_gang_of_4_preempts_and_runs_and_the_victims_come_back_gated(stack, api, core, ns, mode):
    reconfigure(stack, mode)
    fill(api, core, ns, {"low-a": 8, "low-b": 8})  # every node busy
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    high = wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=120)
    victims = evicted(core, ns)
    victim_gangs = {v.rsplit("-", 3)[0] for v in victims}  # pod low-a-3-0-x7k2q of Job low-a-3
    assert len(victim_gangs) == 1, f"one gang disrupted, got {victims}"
    assert len(victims) == (4 if mode == "minimal" else 8), victims
    assert len({subblock_of(core, p.spec.node_name) for p in high}) == 1, "the gang lands in one subblock"
    (victim,) = victim_gangs
    # The victim's Job recreates the evicted members; they come back gated and wait.
    wait_for(f"{victim}'s recreated members gated", lambda: len(
        [p for p in pods_of(core, ns, victim) if p.spec.scheduling_gates and not p.metadata.deletion_timestamp])
        == len(victims), timeout=60)
    time.sleep(3)  # give the reconciler a chance to (wrongly) release them
    still = [p for p in pods_of(core, ns, victim) if p.spec.scheduling_gates]
    assert len(still) == len(victims)
    preempting = [e for e in core.list_namespaced_event(ns).items if e.reason == "GangPreempting"]
    assert preempting and victim in preempting[0].message


def test_a_budget_that_forbids_evicting_one_gang_makes_troupe_pick_another(stack, api, core, ns):
    reconfigure(stack, "minimal")
    fill(api, core, ns, {"low-a": 8, "low-b": 8})
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "keep-low-a"},
        "spec": {"minAvailable": 8, "selector": {"matchLabels": {"gang": "low-a"}}}})
    time.sleep(2)  # the disruption controller computes the budget's status
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=150)
    victims = evicted(core, ns)
    assert victims and all(v.startswith("low-b-") for v in victims), victims
    assert running(core, ns, "low-a", 8), "the protected gang runs whole"


def test_a_gang_with_a_required_subblock_preempts_only_inside_one_subblock(stack, api, core, ns):
    reconfigure(stack, "minimal")
    # Two-node gangs, one per subblock half: low-0..low-7, two whole-node pods each.
    fill(api, core, ns, {f"low-{i}": 2 for i in range(8)})
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high",
                                                              {"troupe.io/topology-required-level": SUBBLOCK}))
    high = wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=150)
    where = {subblock_of(core, p.spec.node_name) for p in high}
    assert len(where) == 1
    victims = evicted(core, ns)
    assert len({v.rsplit("-", 3)[0] for v in victims}) == 2, "two 2-node gangs make one 4-node subblock"
    events = core.list_namespaced_event(ns).items
    victim_nodes = {e.message.split("evicted from node ", 1)[1].split(" ", 1)[0] for e in events if e.reason == "Preempted"}
    assert {subblock_of(core, n) for n in victim_nodes} == where, "every victim from the gang's subblock"


def test_off_never_evicts(stack, api, core, ns):
    reconfigure(stack, "off")
    fill(api, core, ns, {"low-a": 8, "low-b": 8})
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    wait_for("gang high gated", lambda: len([p for p in pods_of(core, ns, "high") if p.spec.scheduling_gates]) == 4)
    time.sleep(5)
    assert evicted(core, ns) == []
    assert running(core, ns, "low-a", 8) and running(core, ns, "low-b", 8)
    assert all(p.spec.scheduling_gates for p in pods_of(core, ns, "high"))
