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

import json
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
from tests.support.dra_e2e import H100, claim_spec, create, with_claim
from tests.support.e2e import dra_nodes, gang_annotations, pod_body, temporary_namespace, wait_for
from troupe.contract import NOMINATION

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


def reconfigure(stack: Stack, mode: str, extra: str = "") -> None:
    """Run the reconciler with ``gangPreemptionMode: mode`` and the configuration lines
    ``extra`` (a new replica takes over)."""
    stack.config_path.write_text(f'gangScheduleTimeoutJitterSeconds: 1\ngangPreemptionMode: "{mode}"\n{extra}')
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


def fill(api: Any, core: client.CoreV1Api, ns: str, gangs: dict[str, int], priority: str = "troupe-e2e-low") -> None:
    """Low-priority gangs (name -> size) of single-pod Jobs running, filling their nodes."""
    batch = client.BatchV1Api(api)
    for name, size in gangs.items():
        for job in gang_of_jobs(name, size, priority):
            batch.create_namespaced_job(ns, job)
        wait_for(f"gang {name} running", lambda n=name, s=size: running(core, ns, n, s), timeout=120)


def evicted(core: client.CoreV1Api, ns: str) -> list[str]:
    """Names of the pods of ``ns`` that got a Preempted Event."""
    return sorted({e.involved_object.name for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"})


def evicted_at_least(core: client.CoreV1Api, ns: str, count: int) -> list[str]:
    """:func:`evicted` once it names ``count`` pods or more. The reconciler sends its Events
    after the evictions and off its hot path, so the preemptor may be Running before the
    last Preempted Event is written."""
    def enough() -> list[str] | None:
        found = evicted(core, ns)
        return found if len(found) >= count else None

    return wait_for(f"{count} Preempted Events in {ns}", enough, timeout=30)


def subblock_of(core: client.CoreV1Api, node: str) -> str:
    return core.read_node(node).metadata.labels[SUBBLOCK]


@pytest.mark.parametrize("mode", ["minimal", "atomic"])
def test_a_high_priority_gang_of_4_preempts_and_runs_and_the_victims_come_back_gated(stack, api, core, ns, mode):
    reconfigure(stack, mode)
    fill(api, core, ns, {"low-a": 8, "low-b": 8})  # every node busy
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    high = wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=120)
    want = 4 if mode == "minimal" else 8
    victims = evicted_at_least(core, ns, want)
    victim_gangs = {v.rsplit("-", 3)[0] for v in victims}  # pod low-a-3-0-x7k2q of Job low-a-3
    assert len(victim_gangs) == 1, f"one gang disrupted, got {victims}"
    assert len(victims) == want, victims
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


def test_a_preemption_across_namespaces_names_neither_namespace_to_the_other(stack, api, core, ns):
    """A gang of another namespace evicts this one's gangs: its Events, its pods and its Gang
    object count them without naming this namespace or their gangs, and the victims'
    Preempted Events do not name its namespace (docs/decisions/064-preemption-names-no-other-tenant.md)."""
    reconfigure(stack, "minimal")
    fill(api, core, ns, {"low-a": 8, "low-b": 8})  # every node busy
    with temporary_namespace(core, "urgent", timeout=90) as other:
        client.BatchV1Api(api).create_namespaced_job(other, gang_job("high", 4, "troupe-e2e-high"))
        wait_for("gang high running", lambda: running(core, other, "high", 4), timeout=120)
        evicted_at_least(core, ns, 4)
        told = [e.message for e in core.list_namespaced_event(other).items if e.reason == "GangPreempting"]
        assert told and "evict 1 gang of another namespace (4 pods, priority <= 10)" in told[0], told
        gangs = json.loads(stack.cluster.kubectl("get", "gangs", "-n", other, "-o", "json").stdout)["items"]
        written = json.dumps([[e.message for e in core.list_namespaced_event(other).items],
                              [(p.metadata.annotations, [c.message for c in p.status.conditions or []])
                               for p in core.list_namespaced_pod(other).items], gangs], default=str)
        for name in (ns, "low-a", "low-b"):
            assert name not in written, f"{name} written in {other}"
        preempted = [e.message for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"]
        assert preempted and all("to make room for a gang of another namespace (priority 1000)" in m
                                 and other not in m for m in preempted), preempted


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
    victims = evicted_at_least(core, ns, 4)
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


# --- budgets, nominations, replacements (docs/decisions/027 and 030) -----------------------
def priority_class(api: Any, value: int) -> str:
    """The PriorityClass ``troupe-e2e-<value>``, created once per cluster, and visible to the
    API server's Priority admission plugin (its informer lags the create: a pod created at
    once may be refused with "no PriorityClass with name ... was found"), checked by a
    dry-run pod create."""
    name = f"troupe-e2e-{value}"
    try:
        client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": name}, "value": value})
    except client.ApiException as e:
        if e.status != 409:
            raise
    probe = {"metadata": {"name": "priority-probe"},
             "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "x"}]}}

    def admitted() -> bool:
        try:
            client.CoreV1Api(api).create_namespaced_pod("default", probe, dry_run="All")
        except client.ApiException as e:
            if e.status == 403 and "PriorityClass" in str(e.body):
                return False
            raise
        return True

    wait_for(f"PriorityClass {name} seen by admission", admitted, timeout=10, interval=0.1)
    return name


def budget(api: Any, ns: str, name: str, selector: dict[str, str], min_available: int, covers: int) -> None:
    """A PodDisruptionBudget of ``minAvailable`` over the pods ``selector`` matches, once the
    disruption controller has counted the ``covers`` pods it covers."""
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": name}, "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}}})
    wait_for(f"budget {name} counted", lambda: (
        (st := policy.read_namespaced_pod_disruption_budget(name, ns).status) is not None
        and st.expected_pods == covers and st.current_healthy == covers))


def plain_pod(name: str, node: str, priority: str, grace: int = 0) -> dict[str, Any]:
    """A whole-node pod outside any gang, bound to ``node``."""
    body = pod_body(name, gpus=8, labels={"app": name})
    body["spec"].update(nodeName=node, priorityClassName=priority, terminationGracePeriodSeconds=grace)
    return body


@pytest.mark.parametrize("protect", ["one-pod-refused", "one-disruption-over-eight"])
def test_atomic_leaves_a_gang_a_budget_protects_whole_and_evicts_another(stack, api, core, ns, protect):
    """Finding 7 of the second hardening review, and the budget counted (decision 030).
    ``low-a`` (priority 10) is the cheaper victim, ``low-b`` (priority 20) the other.
    ``one-pod-refused``: a budget refuses one pod of ``low-a``. ``one-disruption-over-eight``:
    a budget allows one disruption over its eight pods, so every dry-run eviction of them
    passes and the real evictions after the first are refused. Either way none of
    ``low-a``'s pods is evicted and ``low-b`` is the victim, whole."""
    reconfigure(stack, "atomic")
    fill(api, core, ns, {"low-a": 8})
    fill(api, core, ns, {"low-b": 8}, priority=priority_class(api, 20))
    name = "keep-one" if protect == "one-pod-refused" else "keep-seven"
    if protect == "one-pod-refused":
        budget(api, ns, name, {"job-name": "low-a-3"}, min_available=1, covers=1)
    else:
        budget(api, ns, name, {"gang": "low-a"}, min_available=7, covers=8)
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=150)
    victims = evicted_at_least(core, ns, 8)
    assert [v for v in victims if v.startswith("low-a-")] == [], "no pod of the protected gang was evicted"
    assert len([v for v in victims if v.startswith("low-b-")]) == 8, victims
    assert running(core, ns, "low-a", 8), "the protected gang runs whole"
    messages = [e.message for e in core.list_namespaced_event(ns).items if e.reason == "GangPreempting"]
    assert any(f"left whole by their budgets: {ns}/low-a (PodDisruptionBudget {ns}/{name}" in m
               for m in messages), messages


def test_a_higher_priority_gang_takes_the_room_of_a_lower_priority_nomination_which_is_capped(stack, api, core, ns):
    """Finding 5 of the second hardening review. Gang ``low`` (priority 50, two nodes)
    evicts ``a`` from n1 and nominates n1 and nX, but a budget refuses ``b`` on nX, whose
    grace period is 2^31-1 s. ``m`` (priority 75) runs on n2, every other node runs a pod
    of priority 1000. Gang ``high`` (priority 100, two nodes) must not starve behind
    ``low``'s nomination: it plans on n1 and evicts ``m``. And ``low``'s nomination is held
    at most ``nominationMaxSeconds`` (10 s), whatever ``b``'s grace period says."""
    reconfigure(stack, "minimal", "nominationMaxSeconds: 10\n")
    names = sorted(n.metadata.name for n in core.list_node().items)
    n1, n_x, n2, others = names[0], names[1], names[2], names[3:]
    for i, node in enumerate(others):
        core.create_namespaced_pod(ns, plain_pod(f"top-{i}", node, "troupe-e2e-high"))
    core.create_namespaced_pod(ns, plain_pod("a", n1, "troupe-e2e-low"))
    core.create_namespaced_pod(ns, plain_pod("b", n_x, "troupe-e2e-low", grace=2**31 - 1))
    core.create_namespaced_pod(ns, plain_pod("m", n2, priority_class(api, 75)))
    wait_for("every node busy", lambda: len([p for p in core.list_namespaced_pod(ns).items
                                             if p.status.phase == "Running"]) == len(names))
    budget(api, ns, "keep-b", {"app": "b"}, min_available=1, covers=1)
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(ns, gang_job("low", 2, priority_class(api, 50)))

    def nomination() -> str | None:
        for pod in pods_of(core, ns, "low"):
            record = (pod.metadata.annotations or {}).get(NOMINATION)
            if record and pod.spec.scheduling_gates:
                return json.loads(record)["at"]
        return None

    first = wait_for("low's nomination", nomination, timeout=60)
    made = time.monotonic()
    wait_for("a evicted for low", lambda: not [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "a"])
    batch.create_namespaced_job(ns, gang_job("high", 2, priority_class(api, 100)))
    high = wait_for("gang high running", lambda: running(core, ns, "high", 2), timeout=90)
    assert sorted(p.spec.node_name for p in high) == sorted([n1, n2]), "high took the room low's nomination held"
    assert "b" in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, "the budget kept b"
    wait_for("low's first nomination to run out", lambda: nomination() != first, timeout=40)
    assert time.monotonic() - made < 10 + 25, "held about nominationMaxSeconds, not b's grace period"


def deployment(name: str, replicas: int, priority: str) -> dict[str, Any]:
    """A Deployment of ``replicas`` whole-node pods outside any gang."""
    template = pod_body("unused", gpus=8, labels={"app": name})
    template = {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]}
    template["spec"]["priorityClassName"] = priority
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}}


def test_a_victims_replacement_from_a_deployment_does_not_take_the_room_the_preemptor_holds(stack, api, core, ns):
    """The victims are pods of a Deployment (priority 10) on every node; gang ``high``
    (priority 1000, four nodes) evicts four of them. Their ReplicaSet recreates them at
    once, and kube-scheduler, which cannot see Troupe's nomination, may bind a replacement
    to a freed node before Troupe releases ``high`` onto it (decision 030). The room must
    stay ``high``'s: four evictions, no more (none of a replacement by Troupe's next plan or
    by kube-scheduler's own preemption): Troupe's taint keeps the replacements off the
    nominated nodes (decision 033), and is gone once the gang's members are bound."""
    reconfigure(stack, "minimal")
    client.AppsV1Api(api).create_namespaced_deployment(ns, deployment("web", 16, "troupe-e2e-low"))
    wait_for("web on every node", lambda: len([p for p in core.list_namespaced_pod(ns, label_selector="app=web").items
                                               if p.status.phase == "Running"]) == 16, timeout=90)
    client.BatchV1Api(api).create_namespaced_job(ns, gang_job("high", 4, "troupe-e2e-high"))
    wait_for("gang high running", lambda: running(core, ns, "high", 4), timeout=150)
    preempted = [e for e in core.list_namespaced_event(ns).items if e.reason == "Preempted"]
    by = sorted({f"{e.source.component or e.reporting_component}: {e.involved_object.name}" for e in preempted})
    assert len({e.involved_object.name for e in preempted}) == 4, f"replacements displaced too: {by}"
    # the room was held by Troupe's taint (decision 033); it goes once the members are bound
    wait_for("no node tainted troupe.io/nominated", lambda: not [
        n.metadata.name for n in core.list_node().items
        if any(t.key == "troupe.io/nominated" for t in (n.spec.taints or []))], timeout=30)


def dra_gang_job(name: str, priority: str) -> dict[str, Any]:
    """One member of a gang of two whose pod claims 8 DRA devices (ResourceClaimTemplate
    ``eight``) instead of extended GPUs: a single-pod Job, as :func:`gang_of_jobs` makes."""
    job = gang_job(name, 1, priority)
    del job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    del job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
    return with_claim(job, template="eight")


def test_preemption_frees_dra_devices_for_a_higher_priority_gang(stack, api, core, ns):
    reconfigure(stack, "minimal")
    with dra_nodes(api, ns, 2, H100) as nodes:
        create(api, ns, "resourceclaimtemplates", "eight", claim_spec(8))
        batch = client.BatchV1Api(api)
        for gang, priority in (("low", "troupe-e2e-low"), ("high", "troupe-e2e-high")):
            for i in range(2):
                job = dra_gang_job(gang, priority)
                job["metadata"]["name"] = f"{gang}-{i}"
                job["spec"]["template"]["metadata"]["annotations"] = gang_annotations(gang, 2)
                batch.create_namespaced_job(ns, job)
            if gang == "low":
                low = wait_for("gang low running on the DRA nodes", lambda: running(core, ns, "low", 2), timeout=90)
                assert sorted(p.spec.node_name for p in low) == nodes
        high = wait_for("gang high running", lambda: running(core, ns, "high", 2), timeout=150)
        assert sorted(p.spec.node_name for p in high) == nodes, "on the devices the victims freed"
        assert evicted(core, ns) and all(v.startswith("low-") for v in evicted(core, ns)), evicted(core, ns)
