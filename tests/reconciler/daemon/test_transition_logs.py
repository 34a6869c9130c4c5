"""The line the controller logs when a gang changes phase, and the Events that go with it,
say what the decision observed: the rule that applied and its reason, never a text chosen by
the two phases. ``Placed -> Releasing`` follows a reservation written as often as a failed
write; ``Released -> RolledBack`` a member that failed as often as a timeout."""

from __future__ import annotations

import logging

import pytest

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from reconciler.ports import WriteError
from testbed.as_created import NAMESPACE, job_object, member_pod
from testbed.reconciler_builders import make_node, make_pod
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, gang_pods, own

CONTROLLER_LOG = "reconciler.daemon.controller"
FAILED_WRITE = "patch pod team-a/train-2: 500 etcdserver: request timed out"


def moves(caplog: pytest.LogCaptureFixture, to: Phase) -> list[logging.LogRecord]:
    """The controller's transition lines into phase ``to``."""
    return [r for r in caplog.records if r.name == CONTROLLER_LOG and f" -> {to.value} (" in r.getMessage()]


def test_a_release_as_created_logs_the_reservation_it_follows_and_claims_no_failed_write(caplog):
    # Regression: every release as created logged "Placed -> Releasing (some writes of the
    # release failed: their members' nodes stay reserved)" before any write was tried.
    caplog.set_level(logging.INFO, logger=CONTROLLER_LOG)
    job = job_object("train", 4)
    nodes = [make_node(f"n{i}").topology("b1", f"s{i // 4}", f"h{i}").gpus(8).build() for i in range(8)]
    h = Harness(nodes, [], NO_JITTER, jobs=[job])
    key = f"{NAMESPACE}/job:train"
    assert h.reconcile(key).phase is Phase.PLACED, "the reservation is written"
    for i in (0, 1):
        h.add(member_pod(job, i))

    out = h.reconcile(key)

    assert out.phase is Phase.RELEASING and out.released == 2
    [line] = moves(caplog, Phase.RELEASING)
    assert line.getMessage().startswith(
        f"gang {key}: Placed -> Releasing (ReleaseAsCreated): AsCreated: 4 node(s) reserved; 2 of 4 members exist, "
        "2 released, 0 bound")
    assert "fail" not in line.getMessage()
    assert line.fields == {"gang": key, "from": "Placed", "to": "Releasing", "rule": "ReleaseAsCreated"}
    assert not [e for e in h.cluster.events if "fail" in e.message], "no Event claims a failure either"


def test_a_release_whose_write_failed_is_finished_saying_which_write_failed(caplog):
    caplog.set_level(logging.INFO, logger=CONTROLLER_LOG)
    h = Harness(four_nodes(), gang_pods(4, gpus=4, owned=True), NO_JITTER)
    h.cluster.pods.fail["train-2"] = WriteError(FAILED_WRITE)
    assert h.reconcile().phase is Phase.PLACED
    h.sync()
    h.cluster.pods.fail.clear()

    out = h.reconcile()

    told = f"finishing a release after 1 of 4 write(s) failed (team-a/train-2: {FAILED_WRITE})"
    assert (out.phase, out.reason) == (
        Phase.RELEASING, f"{told}: 3 of 4 members released, 1 to go on their planned nodes")
    [line] = moves(caplog, Phase.RELEASING)
    assert f"Placed -> Releasing (ReleaseInProgress): {told}" in line.getMessage()
    assert line.fields["rule"] == "ReleaseInProgress"
    [event] = [e for e in h.cluster.events if e.reason == "GangReleased"]
    assert (event.regarding, event.message) == (
        PodKey("team-a", "train-2"), f"released 1 member(s) (rank 2) onto node n3: {out.reason}")

    h.sync()
    assert h.reconcile().phase is Phase.RELEASED
    assert h.controller.memories.of("team-a/train").unwritten == "", "forgotten once the release is whole"


def test_a_release_cut_short_by_a_restart_is_finished_without_guessing_why(caplog):
    caplog.set_level(logging.INFO, logger=CONTROLLER_LOG)
    h = Harness(four_nodes(), gang_pods(4, gpus=4, owned=True), NO_JITTER)
    h.cluster.pods.fail["train-2"] = WriteError(FAILED_WRITE)
    h.reconcile()
    h.sync()
    h.cluster.pods.fail.clear()
    h.controllers = h.new_controllers()  # this reconciler never saw the write fail

    out = h.reconcile()

    assert (out.phase, out.reason) == (
        Phase.RELEASING, "finishing a release: 3 of 4 members released, 1 to go on their planned nodes")
    [line] = moves(caplog, Phase.RELEASING)
    assert "(new) -> Releasing (ReleaseInProgress): finishing a release: 3 of 4" in line.getMessage()
    assert line.fields == {"gang": "team-a/train", "from": "", "to": "Releasing", "rule": "ReleaseInProgress"}


def test_a_restart_gang_whose_member_failed_logs_the_failure_not_a_timeout(caplog):
    # Regression: "Released -> RolledBack (released members were not all bound within the
    # timeout)" for a running member that failed.
    caplog.set_level(logging.INFO, logger=CONTROLLER_LOG)
    pods = [make_pod(f"train-{i}").gang("train", 4).index(i).gpus(2).gated()
            .annotate("troupe.io/gang-failure-policy", "RestartGang").build() for i in range(4)]
    h = Harness(four_nodes(), own(pods), NO_JITTER)
    assert h.reconcile().phase is Phase.PLACED
    h.sync()
    for i in range(4):
        h.bind(f"train-{i}")
    assert h.reconcile().phase is Phase.RELEASED
    failed = h.cluster.pods.objects[PodKey("team-a", "train-1")]
    failed["status"]["phase"] = "Failed"
    failed["metadata"]["resourceVersion"] = str(int(failed["metadata"]["resourceVersion"]) + 1)
    h.cache.pod_event("MODIFIED", failed)

    out = h.reconcile()

    assert out.phase is Phase.ROLLED_BACK
    [line] = moves(caplog, Phase.ROLLED_BACK)
    assert "Released -> RolledBack (MemberFailed): member train-1 failed" in line.getMessage()
    assert "timeout" not in line.getMessage() and "timed out" not in line.getMessage()
    assert line.fields["rule"] == "MemberFailed"
