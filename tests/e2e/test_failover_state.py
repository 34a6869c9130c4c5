"""Nothing lives only in the leader's memory, and the reconciler rides out its API server.

A cluster and Troupe of this module's own (a leader is killed, the API server restarted),
two reconciler replicas electing a leader with a 4 s Lease.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import (
    gang_annotations,
    indexed_job,
    job_pods,
    new_namespace,
    pod_body,
    quota,
    released,
    reservation,
    running_job_pods,
    wait_for,
)
from troupe import contract

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("failover") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 0\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, config, lease_seconds=4) as stack:
        stack.start_reconciler("troupe-reconciler-2")
        yield stack


@pytest.fixture
def core(pair: Stack) -> client.CoreV1Api:
    return client.CoreV1Api(pair.cluster.api_client("admin"))


class HeldMembers:
    """A controller the test plays: it keeps two members of gang ``name`` present, each
    owned by a ConfigMap and carrying another component's scheduling gate as well. Troupe
    releases them, kube-scheduler never binds them, so every release times out (5 s) and is
    rolled back; this controller recreates a deleted member at once (a Job waits for its
    own pod backoff first, which would hide Troupe's)."""

    def __init__(self, core: client.CoreV1Api, namespace: str, name: str) -> None:
        self.core, self.namespace, self.name = core, namespace, name
        owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
        self.owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner.metadata.uid,
                      "controller": True}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _member(self, index: int) -> dict[str, Any]:
        pod = pod_body(f"{self.name}-{index}", gang_annotations(self.name, 2, timeout=5), gpus=1,
                       labels={"member": str(index)})
        del pod["metadata"]["name"]
        pod["metadata"]["generateName"] = f"{self.name}-{index}-"
        pod["metadata"]["ownerReferences"] = [self.owner]
        pod["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        return pod

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            present = {p.metadata.labels.get("member") for p in self.core.list_namespaced_pod(self.namespace).items
                       if not p.metadata.deletion_timestamp}
            for index in range(2):
                if str(index) not in present:
                    self.core.create_namespaced_pod(self.namespace, self._member(index))

    def __enter__(self) -> HeldMembers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def leader(stack: Stack) -> Any:
    """The replica holding the Lease (by its identity in the Lease)."""
    lease = client.CoordinationV1Api(stack.cluster.api_client("admin")).read_namespaced_lease(
        "troupe-reconciler", "troupe-system")
    holder = lease.spec.holder_identity or ""
    for started in stack._started:
        if (started.record.name.startswith("troupe-reconciler") and started.popen.poll() is None
                and holder and holder.split("_")[-1] in Path(started.record.log).read_text()):
            return started
    raise AssertionError(f"no running replica holds the Lease ({holder!r})")


def backing_off_events(core: client.CoreV1Api, namespace: str) -> dict[str, int]:
    """GangBackingOff Events in ``namespace``, counted per pod (an Event's ``count`` included)."""
    per_pod: dict[str, int] = {}
    for event in core.list_namespaced_event(namespace).items:
        if event.reason == "GangBackingOff":
            name = event.involved_object.name
            per_pod[name] = per_pod.get(name, 0) + (event.count or 1)
    return per_pod


def epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp()


def test_a_new_leader_keeps_a_backing_off_gangs_deadline_and_repeats_no_event(pair, core):
    namespace = new_namespace(core, "fo")
    with HeldMembers(core, namespace, "stuck"):
        def backing_off() -> list[Any]:
            pods = [p for p in core.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp]
            conditions = [next((c for c in p.status.conditions or [] if c.type == contract.GANG_CONDITION), None)
                          for p in pods]
            return pods if len(pods) == 2 and all(c is not None and c.reason == "BackingOff" for c in conditions) else []

        pods = wait_for("the recreated members backing off", backing_off, timeout=90)
        state = core.read_namespaced_config_map("troupe-reconciler-state", "troupe-system").data or {}
        [entry] = [json.loads(v) for v in state.values() if json.loads(v)["gang"] == f"{namespace}/stuck"]
        not_before = entry["notBefore"]
        assert not_before > time.time(), "killed while the backoff runs"
        # Under load the first backoff may run out before both recreated members show it:
        # the test then catches a later one, so it counts the Events the new leader adds.
        before = backing_off_events(core, namespace)
        assert sum(before.values()) >= 1, "the old leader told of the backoff"
        os.kill(leader(pair).record.pid, signal.SIGKILL)

        def released() -> list[Any]:
            fresh = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.uid in {q.metadata.uid for q in pods}]
            return [p for p in fresh if (p.metadata.annotations or {}).get(contract.PLANNED_AT)]

        again = wait_for("the members released again by the new leader", released, timeout=60)
        planned = min(epoch(p.metadata.annotations[contract.PLANNED_AT]) for p in again)
        print(f"backoff until {not_before:.3f}, released again at {planned:.3f} ({planned - not_before:+.3f}s)")
        assert planned >= not_before - 1.0, "the new leader kept the old leader's deadline"
        assert planned - not_before < 10.0
        after = backing_off_events(core, namespace)
        assert after == before, f"the new leader repeated no GangBackingOff: {before} then {after}"


def test_gangs_waiting_while_the_api_server_is_down_are_released_after_it_returns(pair, core):
    namespace = new_namespace(core, "api")
    # Every GPU taken by one blocker per node: the gang waits for room.
    blockers = [f"blocker-{i}" for i in range(16)]
    for name in blockers:
        core.create_namespaced_pod(namespace, pod_body(name, gpus=8))
    wait_for("the blockers running", lambda: sum(1 for p in core.list_namespaced_pod(namespace).items
                                                 if p.status.phase == "Running") == 16, timeout=90)
    for i in range(2):
        core.create_namespaced_pod(namespace, pod_body(f"w-{i}", gang_annotations("after", 2), gpus=8))
    wait_for("the gang Unschedulable", lambda: any(
        e.reason == "GangUnschedulable" for e in core.list_namespaced_event(namespace).items), timeout=30)
    pair.cluster.restart("kube-apiserver", down_seconds=10)
    core = client.CoreV1Api(pair.cluster.api_client("admin"))
    # A replica that could not renew the Lease through the outage exits (its pod restarts as
    # a follower): restart those, as a Deployment's kubelet would.
    for started in list(pair._started):
        if started.record.name.startswith("troupe-reconciler") and started.popen.poll() is not None:
            pair.start_reconciler(f"{started.record.name}-restarted")
    for name in blockers[:2]:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    bound = wait_for("the gang bound after the API server returned", lambda: all(
        core.read_namespaced_pod(f"w-{i}", namespace).spec.node_name for i in range(2)), timeout=120)
    assert bound


def test_a_leader_killed_between_a_reservation_and_its_last_release_leaves_the_rest_to_the_next_on_the_same_nodes(
        pair, core):
    """Release as created (docs/decisions/034): the reservation lives on the Job, so the next
    leader releases the members still to come onto the nodes the killed one reserved."""
    pair.start_reconciler("troupe-reconciler-ascreated")  # a follower to take over
    namespace = new_namespace(core, "ascreated")
    batch = client.BatchV1Api(pair.cluster.api_client("admin"))
    quota(core, namespace, 3)
    # CPU only: the blockers of the test before keep every GPU of the module's cluster.
    batch.create_namespaced_job(namespace, indexed_job("train", 6, {"troupe.io/gang-size": "auto"}, gpus=0))

    def half() -> list[Any] | None:
        pods = job_pods(core, namespace, "train")
        return pods if len(released(pods)) == 3 else None

    wait_for("3 of 6 members released before the last exist", half, timeout=60)
    held = reservation(batch, namespace, "train")
    assert held is not None and len(held["nodes"]) == 6
    os.kill(leader(pair).record.pid, signal.SIGKILL)
    quota(core, namespace, 20)

    pods = running_job_pods(core, namespace, "train", 6, timeout=120)
    assert [p.spec.node_name for p in pods] == held["nodes"], "every rank on the node the killed leader reserved"
    assert {p.metadata.annotations[contract.PLANNED_AT] for p in pods} == {held["plannedAt"]}, "one reservation"
