"""A workload that has finished, or is finishing, is never planned again and never gets a
reservation (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md).

The Job controller ends a Job in this order (kube-controller-manager's job_controller.go,
``syncJob``): past ``activeDeadlineSeconds`` since ``status.startTime`` (or past its backoff
limit) it deletes the active pods, and only then writes the ``FailureTarget`` condition
(reason ``DeadlineExceeded``), in a later sync when a deletion is not confirmed yet; the pods
stay, terminating, until it has written it. In between, the Job's members are gone from the
gang (being deleted) while the Job reads as active: a gang released as created was reserved
again from the pod template, and the record written on the dead Job. The deadline is known
from the Job itself: past it, the Job is finishing.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision import actions
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs import lifecycle
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.membership import planned_gangs
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.reservations import Record
from reconciler.engine.model.timestamps import rfc3339
from testbed.as_created import (
    NAMESPACE,
    gangs_of,
    job_object,
    member_pod,
    snapshot_of,
    workloads_of,
)
from testbed.engine_builders import make_node
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0)
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
STARTED = "2027-01-15T08:00:00Z"  # NOW
DEADLINE = 120
KEY = f"{NAMESPACE}/job:train"


def nodes() -> list[NodeInfo]:
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(gpu=8).topology("b0", "s0", f"h{i}").build())
            for i in range(4)]


def deadline_job(size: int = 2, *, conditions: list[dict[str, Any]] = (), record: Record | None = None,
                 suspend: bool = False) -> dict[str, Any]:
    """Job ``train`` of ``size`` whole-node members, started at NOW with a deadline of
    :data:`DEADLINE` seconds, with ``conditions`` and ``record``."""
    job = job_object("train", size, record=record, suspend=suspend)
    job["spec"]["activeDeadlineSeconds"] = DEADLINE
    job["status"] = {"startTime": STARTED, "active": size, "conditions": list(conditions)}
    return job


def ran(job: dict[str, Any], size: int, *, deleting: bool) -> list[dict[str, Any]]:
    """The Job's members, released and running (``deleting``: the Job controller deleted them,
    its finalizer keeps them until it has written the Job's condition)."""
    pods = [member_pod(job, i, gated=False, node=f"n{i}", planned_at="2027-01-15T08:00:01.000+00:00", bound=True,
                       phase="Running") for i in range(size)]
    for pod in pods:
        if deleting:
            pod["metadata"]["deletionTimestamp"] = rfc3339(NOW + DEADLINE)
            pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    return pods


def decision_at(job: dict[str, Any], pods: list[dict[str, Any]], now: float) -> Any:
    known = workloads_of(job)
    snapshot = snapshot_of(nodes(), [PodInfo.from_object(p) for p in pods], known)
    gang = gangs_of(snapshot, known, CONFIG).get(KEY)
    return None if gang is None else decide(gang, snapshot, now)


def test_a_job_past_its_deadline_whose_members_are_being_deleted_is_not_reserved_again():
    job = deadline_job()
    before = decision_at(job, [], NOW + DEADLINE - 1)
    assert before is not None and before.find(actions.Reserve) is not None, "before its deadline it is reserved"

    decision = decision_at(job, ran(job, 2, deleting=True), NOW + DEADLINE)

    assert decision is not None and decision.find(actions.Reserve) is None, decision.reason
    assert decision.rule is lifecycle.NO_MEMBERS and decision.phase is lifecycle.Phase.WAITING
    assert not decision.actions, "nothing written: not to the Job, not to its pods"


def test_a_record_on_a_job_past_its_deadline_is_neither_released_onto_nor_dropped():
    record = Record("job:train", "2027-01-15T08:00:01.000+00:00", ("n0", "n1"))
    job = deadline_job(record=record)

    decision = decision_at(job, [], NOW + DEADLINE + 1)

    assert decision is not None and decision.rule is lifecycle.NO_MEMBERS, decision.reason
    assert not decision.actions, "the Job controller is failing it: nothing written to it"


FINISHED = [{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"},
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]


@pytest.mark.parametrize("condition", FINISHED, ids=lambda c: c["type"])
@pytest.mark.parametrize("with_record", [False, True], ids=["no-record", "a-record"])
def test_a_finished_job_is_never_planned_with_or_without_a_record(condition, with_record):
    record = Record("job:train", "2027-01-15T08:00:01.000+00:00", ("n0", "n1")) if with_record else None
    job = deadline_job(conditions=[condition], record=record)

    assert planned_gangs(workloads_of(job), CONFIG) == {}
    decision = decision_at(job, ran(job, 2, deleting=True), NOW + 5)
    assert decision is None or not decision.actions, decision.reason


def test_a_suspended_job_keeps_no_deadline_and_drops_its_reservation_as_before():
    record = Record("job:train", "2027-01-15T08:00:01.000+00:00", ("n0", "n1"))
    job = deadline_job(record=record, suspend=True)
    assert workloads_of(job).objects[("Job", NAMESPACE, "train")].ends_at is None, "a suspended Job has no deadline"

    decision = decision_at(job, [], NOW + 5)

    assert decision is not None and decision.rule is lifecycle.RESERVATION_DROPPED
    assert "suspended" in decision.reason


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 4), past=st.floats(0, 10_000), deleting=st.sets(st.integers(0, 3)),
       gone=st.sets(st.integers(0, 3)), with_record=st.booleans())
def test_no_job_past_its_deadline_is_ever_reserved_or_written(size, past, deleting, gone, with_record):
    """Whatever of its members are still there, being deleted or gone, and whether it holds a
    record: at or past its deadline a Job gets no reservation and nothing is written to it."""
    record = Record("job:train", "2027-01-15T08:00:01.000+00:00", tuple(f"n{i}" for i in range(size)))
    job = deadline_job(size, record=record if with_record else None)
    pods = [p for i, p in enumerate(ran(job, size, deleting=False)) if i not in gone]
    for i, pod in enumerate(pods):
        if i in deleting:
            pod["metadata"]["deletionTimestamp"] = rfc3339(NOW + DEADLINE)

    decision = decision_at(job, pods, NOW + DEADLINE + past)

    assert decision is not None
    assert not any(isinstance(a, actions.Reserve | actions.DropReservation) for a in decision.actions), decision.reason


def test_a_kubeflow_jobs_deadline_is_its_run_policys_counted_from_its_start():
    """The training operator's ``PastActiveDeadline``: ``spec.runPolicy.activeDeadlineSeconds``
    since ``status.startTime``."""
    template = job_object("train", 1)["spec"]["template"]
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "pt", "namespace": NAMESPACE, "uid": "uid-pt"},
           "spec": {"runPolicy": {"activeDeadlineSeconds": 300},
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
           "status": {"startTime": STARTED}}
    found = wl.workload("PyTorchJob", job)
    assert found is not None and found.ends_at == NOW + 300
    job["spec"]["runPolicy"]["suspend"] = True
    assert wl.workload("PyTorchJob", job).ends_at is None
    del job["status"]
    job["spec"]["runPolicy"]["suspend"] = False
    assert wl.workload("PyTorchJob", job).ends_at is None, "not started"
