"""``queueingStrategy: Backfill`` on the local control plane: Jobs' ``activeDeadlineSeconds``
enforced by the real Job controller, kube-scheduler binds
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md).

A cluster of this module's own: 4 subblocks of 8 whole-GPU kwok nodes (8 GPUs each)::

    block  gpu-b0                            gpu-b1
    sub    gpu-b0-s0      gpu-b0-s1          gpu-b1-s0      gpu-b1-s1
    hosts  h0 .. h7       h0 .. h7           h0 .. h7       h0 .. h7

Subblock gpu-b0-s0 runs four Jobs of 2 whole nodes with deadlines of 30 and 50 s; the other
three run Jobs without a limit. A gang of 8 whole nodes with a required subblock arrives: its
earliest start is when the last deadline of gpu-b0-s0 runs out. A new reconciler takes over,
and makes the same reservation. When the first Job there
ends, a Job of 1 node with a deadline that ends it before that start backfills there; a Job
with a longer deadline and one without any wait. The big gang starts at its reserved start.
"""

from __future__ import annotations

import datetime
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, temporary_namespace, wait_for

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
NODES = """apiVersion: troupe.dev/devcluster/v1
kind: FakeNodes
groups:
  - name: gpu
    topology: {blocks: 2, subblocksPerBlock: 2, hostsPerSubblock: 8}
    resources: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
    labels: {}
    taints: []
"""
#: How far from its computed start the big gang may start (s): the Job controller's sync
#: after a deadline, the pods' deletion, the reconciler's decision and kube-scheduler's binds.
SLACK = 15.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("backfill")
    (root / "nodes.yaml").write_text(NODES)
    config = root / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 1\nqueueingStrategy: Backfill\n")
    with Cluster(nodes=root / "nodes.yaml") as cluster, Stack(cluster, config, lease_seconds=4) as running:
        yield running


@pytest.fixture
def core(stack: Stack) -> client.CoreV1Api:
    return client.CoreV1Api(stack.cluster.api_client("admin"))


@pytest.fixture
def batch(stack: Stack) -> client.BatchV1Api:
    return client.BatchV1Api(stack.cluster.api_client("admin"))


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    with temporary_namespace(core, "backfill", timeout=90) as name:
        yield name


def job(name: str, size: int, deadline: int | None, subblock: str = "", required: bool = False) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node pods as one gang, ended by the Job controller
    ``deadline`` seconds after it starts (None: never), pinned to ``subblock`` if given."""
    annotations = gang_annotations(name, size)
    if required:
        annotations["troupe.io/topology-required-level"] = SUBBLOCK
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                            "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "8"},
                                                          "limits": {"nvidia.com/gpu": "8"}}}]}
    if subblock:
        spec["nodeSelector"] = {SUBBLOCK: subblock}
    body: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completionMode": "Indexed", "completions": size, "parallelism": size, "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"gang": name}, "annotations": annotations}, "spec": spec}},
    }
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    return body


def running(core: client.CoreV1Api, ns: str, gang: str, size: int) -> list[Any] | None:
    pods = [p for p in core.list_namespaced_pod(ns, label_selector=f"gang={gang}").items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return pods if len(pods) == size else None


def subblock_of(core: client.CoreV1Api, node: str) -> str:
    return str(core.read_node(node).metadata.labels[SUBBLOCK])


def ends_at(batch: client.BatchV1Api, ns: str, name: str) -> float:
    """When the Job controller ends Job ``name``: its ``status.startTime`` plus its deadline."""
    j = batch.read_namespaced_job(name, ns)
    return float(j.status.start_time.timestamp() + j.spec.active_deadline_seconds)


def message(core: client.CoreV1Api, ns: str, gang: str) -> str:
    """The Gang condition message of the gang's first pod (``""`` without one)."""
    for p in core.list_namespaced_pod(ns, label_selector=f"gang={gang}").items:
        for c in p.status.conditions or []:
            if c.type == "troupe.io/Gang":
                return str(c.message or "")
    return ""


def takeover(stack: Stack) -> None:
    """Stop the running reconciler and start another replica, which takes the lease over."""
    for started in list(stack._started):
        if started.record.name.startswith("troupe-reconciler") and started.popen.poll() is None:
            os.kill(started.record.pid, signal.SIGTERM)
            started.popen.wait(timeout=30)
    stack.start_reconciler("troupe-reconciler-takeover")


def clock(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%H:%M:%S")


def test_a_big_gang_starts_at_its_reserved_start_and_only_a_job_that_ends_by_then_backfills(stack, core, batch, ns):
    fill = {"a": ("gpu-b0-s0", 30), "b": ("gpu-b0-s0", 50), "c": ("gpu-b0-s0", 50), "d": ("gpu-b0-s0", 50)}
    fill |= {f"x{i}": (f"gpu-b{i // 8}-s{i // 4 % 2}", None) for i in range(4, 16)}
    for name, (subblock, deadline) in fill.items():
        batch.create_namespaced_job(ns, job(name, 2, deadline, subblock))
    for name in fill:
        wait_for(f"gang {name} running", lambda n=name: running(core, ns, n, 2), timeout=120)
    start = max(ends_at(batch, ns, n) for n in "bcd")

    batch.create_namespaced_job(ns, job("big", 8, None, required=True))
    reserved = f"reserved gce-topology-subblock=gpu-b0/gpu-b0-s0 (8 node(s)) from {clock(start)}"
    wait_for("the big gang's reservation told", lambda: reserved in message(core, ns, "big") or None, timeout=30)

    # A new leader takes over: it remembers nothing, and makes the same reservation.
    takeover(stack)
    wait_for("the new leader's reservation told", lambda: reserved in message(core, ns, "big") or None, timeout=30)

    # a's deadline frees 2 nodes of gpu-b0-s0 before the reservation's start
    wait_for("Job a ended", lambda: running(core, ns, "a", 0) is not None or None, timeout=60)
    now = datetime.datetime.now(datetime.UTC).timestamp()
    short = max(1, int(start - now - 6))  # ends by the start, with a few seconds to spare
    assert short >= 3, f"too little time left before the start: {start - now:.1f} s"
    batch.create_namespaced_job(ns, job("short", 1, short))
    batch.create_namespaced_job(ns, job("long", 1, 600))
    batch.create_namespaced_job(ns, job("forever", 1, None))
    pods = wait_for("the short Job backfilled", lambda: running(core, ns, "short", 1), timeout=30)
    assert subblock_of(core, pods[0].spec.node_name) == "gpu-b0-s0"
    told = [e.message for e in core.list_namespaced_event(ns).items if "backfilled onto 1 node(s)" in (e.message or "")]
    assert told and "reserved for gang" in told[0] and "/big from " in told[0], told

    try:
        big = wait_for("the big gang running", lambda: running(core, ns, "big", 8), timeout=90)
    except AssertionError as e:
        pods = [(p.metadata.name, p.status.phase, p.spec.node_name, bool(p.spec.scheduling_gates))
                for p in core.list_namespaced_pod(ns).items]
        raise AssertionError(f"{e}; big: {message(core, ns, 'big')!r}; pods: {pods}") from None
    began = max(p.status.start_time.timestamp() for p in big)
    assert {subblock_of(core, p.spec.node_name) for p in big} == {"gpu-b0-s0"}
    print(f"the big gang started {began - start:+.1f} s from its reserved start")
    assert began - start <= SLACK, f"started {began - start:.1f} s after its reserved start"
    for name in ("long", "forever"):
        assert running(core, ns, name, 0) is not None, f"{name} ran before the big gang"
        pods = core.list_namespaced_pod(ns, label_selector=f"gang={name}").items
        assert pods and all(p.spec.scheduling_gates for p in pods), f"{name} was released"
