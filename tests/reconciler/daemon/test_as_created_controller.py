"""The controller releasing a Job gang as created, over an in-memory cache and writer
(docs/decisions/034-release-as-created.md): the reservation written on the Job before any
member exists, each member released as it is created, a refused write, a restarted
reconciler that finishes on the recorded nodes, and the reservation removed at the end."""

from __future__ import annotations

import json

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.reservations import Record, authentic
from reconciler.ports import WriteError
from testbed.as_created import NAMESPACE, RESERVATION_KEY, job_object, member_pod
from testbed.reconciler_builders import make_node
from tests.support.controller_harness import NO_JITTER, Harness
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


def test_the_reservation_written_is_signed_for_the_job_and_one_signed_under_another_key_holds_nothing():
    """The record the controller writes carries its signature for that Job's UID; a record
    signed under another key (a tenant's forgery, or a reconciler that ran without the
    chart's key) reserves no node, and the gang reserves anew over it
    (docs/decisions/049-hostile-tenants-third-round.md)."""
    forged = Record("job:train", "2027-01-15T07:00:00.000+00:00", tuple(f"n{i}" for i in range(4)))
    job = job_object("train", 4)
    job["metadata"]["annotations"][contract.RESERVATION] = forged.signed(JOB, "uid-train-train", b"not the key").encode()
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])
    assert h.cache.snapshot().free("n0").get("nvidia.com/gpu") == 8, "the forged record holds nothing"

    h.reconcile(KEY)
    held = record(h)
    assert held is not None and held["plannedAt"] != forged.planned_at
    written = Record(held["gang"], held["plannedAt"], tuple(held["nodes"]), held["sig"])
    assert authentic(written, JOB, "uid-train-train", RESERVATION_KEY)
    assert sum(h.cache.snapshot().free(f"n{i}").get("nvidia.com/gpu") == 0 for i in range(8)) == 4, "now held"


def test_a_record_on_a_workload_troupe_does_not_plan_is_removed_and_the_workload_told():
    """A tenant's plain Job (no gang) carrying a record, signed or not, holds nothing and
    the record is removed with a ``ReservationRemoved`` Warning; a Job Troupe plans keeps
    its own (docs/decisions/049-hostile-tenants-third-round.md)."""
    signed = Record("job:plain", "2027-01-15T08:00:00.000+00:00", ("n0", "n1"))
    plain = job_object("plain", 2, record=signed)
    plain["spec"]["template"]["metadata"]["annotations"] = {}  # not a gang: Troupe does not plan it
    forged = job_object("forged", 2)
    forged["spec"]["template"]["metadata"]["annotations"] = {}
    forged["metadata"]["annotations"][contract.RESERVATION] = "{not a record"
    train = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[plain, forged, train])
    h.reconcile(KEY)  # train reserves its own
    assert set(h.cache.stray_records()) == {("Job", NAMESPACE, "plain"), ("Job", NAMESPACE, "forged")}

    for name in ("plain", "forged"):
        assert h.controllers.reservations.remove_stray(("Job", NAMESPACE, name)) is False
        annotations = h.cluster.workloads.objects[("Job", NAMESPACE, name)]["metadata"]["annotations"]
        assert contract.RESERVATION not in annotations
    assert h.cache.stray_records() == {}
    told = [e for e in h.cluster.workloads.events if e.reason == "ReservationRemoved"]
    assert [e.regarding.name for e in told] == ["plain", "forged"]
    assert "is not a reservation record" in told[1].message
    assert record(h) is not None, "the planned Job's own record stays"
    assert h.controllers.reservations.remove_stray(JOB) is False and record(h) is not None


def deadline_job(record: Record | None = None, conditions: tuple[dict, ...] = ()) -> dict:
    """Job ``train`` of 2, started at the harness's time with a 60 s ``activeDeadlineSeconds``."""
    job = job_object("train", 2, record=record)
    job["spec"]["activeDeadlineSeconds"] = 60
    job["status"] = {"startTime": "2027-01-15T08:00:00Z", "active": 2, "conditions": list(conditions)}
    return job


def test_a_job_past_its_deadline_gets_nothing_written_while_its_controller_fails_it():
    """The Job controller deletes the members of a Job past ``activeDeadlineSeconds`` before
    it writes ``FailureTarget``: in between, and after, nothing is written to the Job: no
    reservation from its template, no drop of one, no Event (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md)."""
    job = deadline_job()
    pods = [member_pod(job, i, gated=False, node=f"n{i}", planned_at="2027-01-15T08:00:01.000+00:00", bound=True,
                       phase="Running") for i in range(2)]
    for pod in pods:  # deleted by the Job controller; its finalizer keeps them until the condition is written
        pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:01:00Z"
        pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    h = Harness(eight_nodes(), pods, NO_JITTER, jobs=[job])
    h.wall += 60

    out = h.reconcile(KEY)

    assert out is None or out.phase is not Phase.PLACED, out
    assert h.cluster.workloads.patches == [] and h.cluster.workloads.events == []
    assert record(h) is None

    h.cluster.workloads.objects[JOB]["status"]["conditions"] = [
        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]
    for pod in pods:
        h.cluster.pods.objects.pop(PodKey(NAMESPACE, pod["metadata"]["name"]))
    h.sync()
    assert h.reconcile(KEY) is None or record(h) is None
    assert h.cluster.workloads.patches == [] and h.cluster.workloads.events == []


def test_a_record_on_a_finished_job_is_left_with_it_not_dropped_nor_removed_as_stray():
    """A record the gang still held when its Job finished holds nothing; it is deleted with the
    Job, and nothing is written to the Job the Job controller is finishing."""
    held = Record("job:train", "2027-01-15T08:00:01.000+00:00", ("n0", "n1"))
    job = deadline_job(held, ({"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},))
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])

    h.reconcile(KEY)

    assert h.cache.stray_records() == {} and h.controllers.reservations.remove_stray(JOB) is False
    assert h.cluster.workloads.patches == [] and h.cluster.workloads.events == []
    assert all(h.cache.snapshot().free(f"n{i}").get("nvidia.com/gpu") == 8 for i in range(8)), "it holds nothing"


# --- the reservation in flight (docs/decisions/068-release-pipeline.md) ----------------------------
def test_a_reservation_in_flight_holds_its_nodes_and_the_worker_decides_on():
    job, other = job_object("train", 4), job_object("other", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job, other])
    h.cluster.workloads.gate.clear()  # the reservation's write waits on its way
    first = h.controller.reconcile(KEY, wait=False)
    assert first is not None and first.pending is not None and not first.pending.done()
    assumed = h.cache.workloads.view()[2].objects[JOB].record
    assert assumed is not None and len(assumed.nodes) == 4, "held as carrying the record it is writing"
    second = h.controller.reconcile(f"{NAMESPACE}/job:other", wait=False)
    h.cluster.workloads.gate.set()
    assert first.pending.result(timeout=10).requeue_after == 0.0
    second.pending.result(timeout=10)
    nodes = [json.loads(h.cluster.workloads.objects[("Job", NAMESPACE, n)]["metadata"]["annotations"]
                        [contract.RESERVATION])["nodes"] for n in ("train", "other")]
    assert not set(nodes[0]) & set(nodes[1]), "the second gang is not reserved where the first one's record goes"
    assert nodes[0] == list(assumed.nodes)


def test_an_event_of_the_job_before_its_reservation_lands_keeps_the_record_assumed():
    job = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])
    h.cluster.workloads.gate.clear()
    pending = h.controller.reconcile(KEY, wait=False).pending
    status = json.loads(json.dumps(job))
    status["metadata"]["resourceVersion"] = "5000"
    status["status"] = {"active": 0}  # the Job controller's status write, before the record lands
    h.cache.job_event("MODIFIED", status)
    assert h.cache.workloads.view()[2].objects[JOB].record is not None
    h.cluster.workloads.gate.set()
    pending.result(timeout=10)
    h.sync()
    assert h.cache.workloads.view()[2].objects[JOB].record is not None, "landed: the Job itself carries it now"


def test_a_refused_reservation_in_flight_is_forgotten():
    job = job_object("train", 4)
    h = Harness(eight_nodes(), [], NO_JITTER, jobs=[job])
    h.cluster.workloads.fail["train"] = WriteError("patch Job ml/train: 403 forbidden")
    out = h.controller.reconcile(KEY, wait=False).pending.result(timeout=10)
    assert out.retry and h.cache.workloads.view()[2].objects[JOB].record is None
    assert all(h.cache.snapshot().free(f"n{i}").get("nvidia.com/gpu") == 8 for i in range(8))
