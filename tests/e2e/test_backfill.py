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

`kubectl troupe plan` on the README's snapshot of a cluster whose subblocks' deadlines end at
different times prints the big gang's expected start; the reconciler then reserves that start
(its topology map outlines the subblock and gives the start) and keeps it. A gang whose pods outlive a limit no one enforces (Kueue's max-exec-time label
without Kueue) counts as ending now: the big gang's start is now, a short Job does not take the
nodes freed meanwhile, and the big gang starts as soon as that gang ends.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from reconciler.engine.model.limits import MAX_EXEC_TIME_LABEL
from reconciler.objects.kinds import SNAPSHOT_COMMAND
from tests.support.e2e import gang_annotations, temporary_namespace, wait_for
from troupe.workloadkinds import CUSTOM_KINDS

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
#: The plugin, as users run it.
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"


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


def job(name: str, size: int, deadline: int | None, subblock: str = "", required: bool = False,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node pods as one gang, ended by the Job controller
    ``deadline`` seconds after it starts (None: never), pinned to ``subblock`` if given, its
    pods labelled ``gang=<name>`` and ``labels``."""
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
                 "template": {"metadata": {"labels": {"gang": name, **(labels or {})}, "annotations": annotations},
                              "spec": spec}},
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
    """When the Job controller ends Job ``name``: its ``status.startTime`` plus its deadline
    (the Job controller may write the start after its pods already run: waited for)."""
    j = wait_for(f"Job {name}'s startTime", lambda: (j := batch.read_namespaced_job(name, ns)).status.start_time
                 and j, timeout=30)
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
    stack.start_reconciler("troupe-reconciler-takeover", stack.metrics_port)  # its map where the first one's was


def held_on_map(stack: Stack, gang: str) -> tuple[dict[str, Any], list[str]] | None:
    """The reconciler's topology map (``/topology/data.json``, as the admin): ``gang``'s row
    and the nodes marked held for it, once its row gives an expected start; else None."""
    request = urllib.request.Request(f"http://127.0.0.1:{stack.metrics_port}/topology/data.json",
                                     headers={"Authorization": f"Bearer {stack.cluster.token('admin')}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        data = json.load(r)
    row = next((g for g in data["gangs"] if g["gang"] == gang), None)
    if row is None or "expectedStart" not in row:
        return None
    nodes, domains = [], [data["tree"]]
    while domains:
        d = domains.pop()
        domains.extend(d.get("children", ()))
        nodes.extend(n["name"] for n in d.get("nodes", ()) if gang in n.get("held", ()))
    return row, sorted(nodes)


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


def test_plan_on_a_snapshot_prints_the_start_the_reconciler_then_keeps(stack, core, batch, ns, tmp_path):
    # Each subblock runs four Jobs of 2 nodes; gpu-b0-s0's deadlines end first.
    deadlines = {"gpu-b0-s0": 45, "gpu-b0-s1": 90, "gpu-b1-s0": 120, "gpu-b1-s1": None}
    fill = [(f"f{k}", subblock, deadline) for k, (subblock, deadline) in
            enumerate((s, d) for s, d in deadlines.items() for _ in range(4))]
    for name, subblock, deadline in fill:
        batch.create_namespaced_job(ns, job(name, 2, deadline, subblock))
    for name, _, _ in fill:
        wait_for(f"gang {name} running", lambda n=name: running(core, ns, n, 2), timeout=120)
    first = max(ends_at(batch, ns, name) for name, subblock, _ in fill if subblock == "gpu-b0-s0")

    # The README's snapshot of the cluster, and `kubectl troupe plan` of the big gang on it.
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    resources = ",".join(r for r in SNAPSHOT_COMMAND.split()[2].split(",")
                         if r not in {k.plural for k in CUSTOM_KINDS} and not r.startswith("podgroups."))
    dump = tmp_path / "snapshot.json"
    dump.write_text(stack.cluster.kubectl("get", resources, "-A", "-o", "json", timeout=120).stdout)
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump(job("big", 8, None, required=True)))
    done = subprocess.run([str(PLUGIN), "plan", "-f", str(manifest), "-n", ns, "--snapshot", str(dump), "--config",
                           str(stack.config_path), "--now", now, "-o", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (planned,) = json.loads(done.stdout)["gangs"]
    assert planned["reserved"] == f"{SUBBLOCK}=gpu-b0/gpu-b0-s0", planned
    expected = datetime.datetime.fromisoformat(planned["expectedStart"]).timestamp()
    assert abs(expected - first) < 1, f"plan expects {planned['expectedStart']}, the deadlines end at {clock(first)}"

    # The reconciler makes that reservation, and keeps it.
    batch.create_namespaced_job(ns, job("big", 8, None, required=True))
    reserved = f"reserved gce-topology-subblock=gpu-b0/gpu-b0-s0 (8 node(s)) from {clock(expected)}"
    wait_for("the plan's reservation told", lambda: reserved in message(core, ns, "big") or None, timeout=30)
    # The reconciler's map outlines the reserved subblock and gives the same start.
    row, held = wait_for("the reservation on the map", lambda: held_on_map(stack, f"{ns}/big"), timeout=30)
    assert held == sorted(f"gpu-b0-s0-h{h}" for h in range(8)), held
    assert row["reserved"] == planned["reserved"] and row["expectedStart"][:19] == planned["expectedStart"][:19], row
    big = wait_for("the big gang running", lambda: running(core, ns, "big", 8), timeout=120)
    began = max(p.status.start_time.timestamp() for p in big)
    assert {subblock_of(core, p.spec.node_name) for p in big} == {"gpu-b0-s0"}
    print(f"the big gang started {began - expected:+.1f} s from the start the plan printed")
    assert began - expected <= SLACK, f"started {began - expected:.1f} s after the start the plan printed"


def test_a_gang_past_a_limit_no_one_enforces_moves_the_start_to_now_and_nothing_backfills(stack, core, batch, ns):
    # gpu-b0-s0: Job late (6 nodes) whose pods carry Kueue's max-exec-time of 15 s, which no
    # Kueue enforces here, and Job done (2 nodes) ended by its deadline; elsewhere Jobs without a limit.
    batch.create_namespaced_job(ns, job("late", 6, None, "gpu-b0-s0", labels={MAX_EXEC_TIME_LABEL: "15"}))
    batch.create_namespaced_job(ns, job("done", 2, 25, "gpu-b0-s0"))
    others = {f"x{i}": f"gpu-b{i // 8}-s{i // 4 % 2}" for i in range(4, 16)}
    for name, subblock in others.items():
        batch.create_namespaced_job(ns, job(name, 2, None, subblock))
    for name, size in [("late", 6), ("done", 2), *((n, 2) for n in others)]:
        wait_for(f"gang {name} running", lambda n=name, s=size: running(core, ns, n, s), timeout=120)
    batch.create_namespaced_job(ns, job("big", 8, None, required=True))
    wait_for("the big gang's reservation told",
             lambda: "reserved gce-topology-subblock=gpu-b0/gpu-b0-s0 (8 node(s)) from " in message(core, ns, "big")
             or None, timeout=30)

    # Past its limit, Job late counts as ending now: 2 nodes free when done ends, and a Job
    # whose own deadline is short still does not take them (it would delay the big gang).
    wait_for("Job done ended", lambda: running(core, ns, "done", 0) is not None or None, timeout=60)
    late_start = min(p.status.start_time.timestamp() for p in running(core, ns, "late", 6) or [])
    assert datetime.datetime.now(datetime.UTC).timestamp() > late_start + 15
    batch.create_namespaced_job(ns, job("short", 1, 10))
    wait_for("the short Job decided", lambda: message(core, ns, "short") or None, timeout=30)
    time.sleep(5)
    pods = core.list_namespaced_pod(ns, label_selector="gang=short").items
    assert pods and all(p.spec.scheduling_gates for p in pods), f"short was released: {message(core, ns, 'short')!r}"
    assert "(in 0s)" in message(core, ns, "big"), message(core, ns, "big")

    # When late ends at last, the big gang starts at once, whole, in its reserved subblock.
    ended = datetime.datetime.now(datetime.UTC).timestamp()
    batch.delete_namespaced_job("late", ns, propagation_policy="Background")
    big = wait_for("the big gang running", lambda: running(core, ns, "big", 8), timeout=60)
    assert {subblock_of(core, p.spec.node_name) for p in big} == {"gpu-b0-s0"}
    began = max(p.status.start_time.timestamp() for p in big)
    print(f"the big gang started {began - ended:+.1f} s after the late Job was deleted")
    assert began - ended <= SLACK
    assert running(core, ns, "short", 0) is not None, "short ran before the big gang"
