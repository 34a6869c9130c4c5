"""Release as created on the local control plane (docs/decisions/034-release-as-created.md).

A Job whose pod template opts into a gang of ``troupe.io/gang-size: auto`` has its nodes
reserved from the template as soon as the Job is seen, written on the Job as
``reconciler.troupe.io/reservation``; each member is released onto its rank's node as the
Job controller creates it. A ResourceQuota on pods holds back the Job's last members, so
that the reservation stands while the gang is still being created. The nodes of
examples/nodes.yaml, 8 GPUs each::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from tests.support.e2e import (
    indexed_job,
    job_pods,
    pod_body,
    quota,
    released,
    reservation,
    running_job_pods,
    temporary_namespace,
    wait_for,
)
from troupe import contract

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
AUTO = {"troupe.io/gang-size": "auto", contract.TOPOLOGY_PREFERRED_LEVEL: SUBBLOCK}


def test_a_job_gang_is_reserved_when_the_job_appears_and_each_member_runs_on_its_ranks_node(
        troupe, admin_api, admin_core, namespace):
    batch = client.BatchV1Api(admin_api)
    batch.create_namespaced_job(namespace, indexed_job("train", 8, AUTO, gpus=8))

    pods = running_job_pods(admin_core, namespace, "train", 8)
    record = None
    for e in admin_core.list_namespaced_event(namespace, field_selector="reason=GangReserved").items:
        record = e
    assert record is not None and record.involved_object.kind == "Job", "the reservation is told on the Job"
    planned = {p.metadata.annotations[contract.PLANNED_AT] for p in pods}
    assert len(planned) == 1, "every member released from the one reservation"
    nodes = [p.spec.node_name for p in pods]
    assert len(set(nodes)) == 8
    labels = {n.metadata.name: n.metadata.labels for n in admin_core.list_node().items}
    assert len({labels[n][SUBBLOCK] for n in nodes}) == 2, "the fewest subblocks that hold 8 whole nodes"
    ranks = [int(p.metadata.annotations[contract.ASSIGNED_RANK]) for p in pods]
    assert ranks == list(range(8)), "rank = completion index"

    def dropped() -> bool | None:
        return reservation(batch, namespace, "train") is None or None

    wait_for("the reservation removed once every member is bound", dropped, timeout=30)


def test_members_are_released_before_the_last_exists_and_no_other_gang_takes_a_reserved_node(
        troupe, admin_api, admin_core, namespace):
    batch = client.BatchV1Api(admin_api)
    quota(admin_core, namespace, 4)
    batch.create_namespaced_job(namespace, indexed_job("first", 8, AUTO, gpus=8))

    def half_released() -> list[Any] | None:
        pods = job_pods(admin_core, namespace, "first")
        return pods if len(released(pods)) == 4 else None

    wait_for("4 of the 8 members released (the quota holds the rest back)", half_released, timeout=60)
    held = reservation(batch, namespace, "first")
    assert held is not None and len(held["nodes"]) == 8, held
    second = dict(AUTO)
    batch.create_namespaced_job(namespace, indexed_job("second", 8, second, gpus=8))
    quota(admin_core, namespace, 20)  # the second Job's pods may come now; so may the first's

    others = running_job_pods(admin_core, namespace, "second", 8, timeout=120)
    firsts = running_job_pods(admin_core, namespace, "first", 8, timeout=120)
    assert not {p.spec.node_name for p in others} & set(held["nodes"]), "no reserved node taken"
    assert [p.spec.node_name for p in firsts] == held["nodes"], "each member of the first on its rank's node"


def test_a_gang_whose_last_members_never_come_is_rolled_back_whole_at_its_timeout(
        troupe, admin_api, admin_core, namespace):
    batch = client.BatchV1Api(admin_api)
    quota(admin_core, namespace, 3)
    job = indexed_job("stuck", 6, {**AUTO, "troupe.io/gang-schedule-timeout-seconds": "8"}, gpus=8)
    job["spec"]["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    batch.create_namespaced_job(namespace, job)

    def three_released() -> list[Any] | None:
        pods = job_pods(admin_core, namespace, "stuck")
        return pods if len(released(pods)) == 3 else None

    first = {p.metadata.uid for p in wait_for("3 of 6 members released", three_released, timeout=60)}
    held = reservation(batch, namespace, "stuck")
    assert held is not None and len(held["nodes"]) == 6

    def rolled_back() -> list[Any] | None:
        found = admin_core.list_namespaced_event(namespace, field_selector="reason=GangReservationDropped").items
        return found or None

    told = wait_for("the reservation dropped at its timeout", rolled_back, timeout=60)
    assert "rolled back" in told[0].message and told[0].involved_object.kind == "Job", told[0].message

    def gone() -> bool | None:
        return not ({p.metadata.uid for p in job_pods(admin_core, namespace, "stuck")
                     if not p.metadata.deletion_timestamp} & first) or None

    wait_for("the released members deleted with the reservation", gone, timeout=60)
    again = reservation(batch, namespace, "stuck")
    assert again is None or again["plannedAt"] > held["plannedAt"], "the rolled-back reservation is gone"


def test_a_pod_bound_to_a_reserved_node_before_any_member_is_released_moves_the_reservation_and_deletes_nothing(
        troupe, admin_api, admin_core, namespace):
    """A pod not Troupe's bound directly onto a reserved node while the quota holds every
    member back (what a reservation decided before the pod's watch event came sees too):
    the first member to come finds the reservation broken before anything is released, so
    it is dropped and made again around the pod, and a Job that fails at its first deleted
    pod (``backoffLimit: 0``) runs whole."""
    batch = client.BatchV1Api(admin_api)
    quota(admin_core, namespace, 0)
    batch.create_namespaced_job(namespace, indexed_job("train", 4, {
        **AUTO, "troupe.io/gang-schedule-timeout-seconds": "120"}, gpus=8))
    held = wait_for("the reservation written on the Job", lambda: reservation(batch, namespace, "train"), timeout=30)
    taken = held["nodes"][3]
    with temporary_namespace(admin_core, "busy") as other:
        body = pod_body("busy", gpus=8)
        body["spec"]["nodeName"] = taken
        admin_core.create_namespaced_pod(other, body)
        wait_for("the busy pod Running", lambda: admin_core.read_namespaced_pod("busy", other).status.phase == "Running")
        quota(admin_core, namespace, 4)

        pods = running_job_pods(admin_core, namespace, "train", 4, timeout=120)
        assert taken not in {p.spec.node_name for p in pods}
        dropped = [e.message for e in admin_core.list_namespaced_event(
            namespace, field_selector="reason=GangReservationDropped").items]
        assert any(f"the reserved node {taken} is overcommitted (nvidia.com/gpu: 8 short)" in m for m in dropped), dropped
        assert not admin_core.list_namespaced_event(namespace, field_selector="reason=GangReservationBroken").items
        job = batch.read_namespaced_job("train", namespace)
        assert not job.status.failed, "no member deleted"
        assert len({p.metadata.annotations[contract.PLANNED_AT] for p in pods}) == 1, "one release, the second reservation"


def watch_jobs(batch: client.BatchV1Api, namespace: str, seen: list[tuple[str, dict[str, str]]],
               stop: threading.Event) -> threading.Thread:
    """A thread appending ``(name, annotations)`` of every version of a Job of ``namespace``
    the API server sends on a watch to ``seen``, until ``stop``."""
    def follow() -> None:
        while not stop.is_set():
            w = watch.Watch()
            for event in w.stream(batch.list_namespaced_job, namespace, timeout_seconds=2):
                meta = event["object"].metadata
                seen.append((meta.name, dict(meta.annotations or {})))
                if stop.is_set():
                    w.stop()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread


#: Jobs of the deadline case: the Job controller's writes race Troupe's decisions, and about
#: half of such Jobs were reserved again before decision 067, so six make the case.
DEADLINE_JOBS = 6


def test_jobs_ended_by_their_deadline_are_never_reserved_again_nor_written_to(troupe, admin_api, admin_core, namespace):
    """The Job controller deletes the members of a Job past ``activeDeadlineSeconds`` before it
    writes its ``FailureTarget`` condition (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md):
    every gang stays Released, no reservation is written on a dead Job, nothing is dropped
    from one."""
    batch = client.BatchV1Api(admin_api)
    names = [f"deadline-{i}" for i in range(DEADLINE_JOBS)]
    for name in names:
        job = indexed_job(name, 2, {"troupe.io/gang-size": "auto"}, gpus=4)
        job["spec"]["activeDeadlineSeconds"] = 20
        batch.create_namespaced_job(namespace, job)
    for name in names:
        running_job_pods(admin_core, namespace, name, 2)
        wait_for(f"{name}'s reservation removed once both members are bound",
                 lambda name=name: reservation(batch, namespace, name) is None or None, timeout=30)
    seen: list[tuple[str, dict[str, str]]] = []
    stop = threading.Event()
    follower = watch_jobs(batch, namespace, seen, stop)

    def failed() -> bool | None:
        jobs = batch.list_namespaced_job(namespace).items
        return all(any(c.type == "Failed" and c.status == "True" for c in j.status.conditions or []) for j in jobs) or None

    wait_for("every Job failed", failed, timeout=120)
    time.sleep(3)  # a decision made on the last events has written by now, if it writes
    stop.set()
    follower.join(timeout=10)

    assert {name for name, _ in seen} == set(names), "the watch saw every Job from before its deadline on"
    assert not sorted({name for name, a in seen if contract.RESERVATION in a}), "no reservation written on a dead Job"
    reserved = admin_core.list_namespaced_event(namespace, field_selector="reason=GangReserved").items
    # one each at most: a gang whose members all exist at its first decision is released when complete
    assert sum(e.count or 1 for e in reserved) <= DEADLINE_JOBS, [e.message for e in reserved]
    assert not admin_core.list_namespaced_event(namespace, field_selector="reason=GangReservationDropped").items
    log = Path(troupe.process("troupe-reconciler").record.log).read_text().splitlines()
    moves = [line for line in log if f"{namespace}/job:deadline-" in line and " -> " in line]
    assert moves and not [m for m in moves if "Released -> Placed" in m or "ReservationDropped" in m], moves
