"""The controller releasing a Job gang as created, over an in-memory cache and writer
(docs/decisions/034-release-as-created.md): the reservation written on the Job before any
member exists, each member released as it is created, a refused write, a restarted
reconciler that finishes on the recorded nodes, and the reservation removed at the end."""

from __future__ import annotations

import json

from reconciler.daemon.writer import WriteError
from reconciler.engine.gangs.lifecycle import Phase
from tests.support.as_created import NAMESPACE, job_object, member_pod
from tests.support.controller_harness import NO_JITTER, Harness
from tests.support.reconciler_builders import make_node
from troupe import contract

KEY = f"{NAMESPACE}/job:train"
JOB = ("Job", NAMESPACE, "train")


def eight_nodes():
    return [make_node(f"n{i}").topology("b1", f"s{i // 4}", f"h{i}").gpus(8).build() for i in range(8)]


def record(h: Harness) -> dict | None:
    raw = h.cluster.workloads.objects[JOB]["metadata"].get("annotations", {}).get(contract.RESERVATION)
    return json.loads(raw) if raw else None


def created(h: Harness, job: dict, *indexes: int) -> None:
    for i in indexes:
        h.add(member_pod(job, i))


def test_the_reservation_is_written_on_the_job_before_any_member_and_members_are_released_as_they_come():
    job = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])

    out = h.reconcile(KEY)
    assert out is not None and out.phase is Phase.PLACED and out.requeue_after == 0.0
    held = record(h)
    assert held is not None and held["gang"] == "job:train" and len(held["nodes"]) == 4
    assert [e.reason for e in h.cluster.events] == ["GangReserved"], "told on the Job"

    created(h, job, 0, 1)
    out = h.reconcile(KEY)
    assert out is not None and out.phase is Phase.RELEASING and out.released == 2
    assert [h.node_of("train-0-x", NAMESPACE), h.node_of("train-1-x", NAMESPACE)] == held["nodes"][:2]
    assert h.pod("train-0-x", NAMESPACE)["metadata"]["annotations"][contract.PLANNED_AT] == held["plannedAt"]

    created(h, job, 2, 3)
    h.reconcile(KEY)
    for i in range(4):
        h.bind(f"train-{i}-x", NAMESPACE)
    h.sync()
    out = h.reconcile(KEY)
    assert out is not None and out.phase is Phase.RELEASED
    assert record(h) is None, "removed once every member is bound"


def test_a_refused_reservation_write_reserves_nothing_and_is_retried():
    job = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])
    h.cluster.workloads.fail["train"] = WriteError("patch Job ml/train: 500 etcdserver: request timed out")

    out = h.reconcile(KEY)
    assert out is not None and out.retry and "reservation not written" in out.reason
    assert record(h) is None
    assert all(free == 8 for free in (h.cache.snapshot().free(f"n{i}").get("nvidia.com/gpu") for i in range(8)))

    del h.cluster.workloads.fail["train"]
    h.reconcile(KEY)
    assert record(h) is not None


def test_a_restarted_reconciler_releases_the_rest_onto_the_recorded_nodes():
    job = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])
    h.reconcile(KEY)
    created(h, job, 0)
    h.reconcile(KEY)
    held = record(h)
    assert held is not None

    h.controllers = h.new_controllers()  # a restart: nothing remembered, the record read from the Job
    created(h, job, 1, 2, 3)
    h.sync()
    out = h.reconcile(KEY)
    assert out is not None and out.released == 3
    assert [h.node_of(f"train-{i}-x", NAMESPACE) for i in range(4)] == held["nodes"]
    assert record(h) == held, "the same reservation, not a second one"


def test_another_gang_is_not_placed_on_a_reserved_node():
    job = job_object("train", 4)
    other = job_object("other", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job, other])
    h.reconcile(KEY)
    h.reconcile(f"{NAMESPACE}/job:other")
    first = record(h)
    raw = h.cluster.workloads.objects[("Job", NAMESPACE, "other")]["metadata"]["annotations"][contract.RESERVATION]
    assert first is not None and not set(first["nodes"]) & set(json.loads(raw)["nodes"])
