"""A workload gang that grows and shrinks (issue 26, part 2): a Job whose parallelism is
raised gets its new members placed next to the running ones, inside the gang's required
domain, without touching them; a lowered parallelism frees what the Job controller deletes,
and the gang stays released. Stepped through the controller on an in-memory cache."""

from __future__ import annotations

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import Harness, four_nodes
from troupe import contract
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0, release_mode="WhenComplete")
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


def job(parallelism):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-job-train"},
            "spec": {"parallelism": parallelism, "completions": 8}}


def member(i):
    """The Job's pod of completion index ``i``: 1 GPU, its gang the Job's, in one subblock."""
    pod = make_pod(f"train-{i}").index(i).gpus(1).gated().build()
    pod["metadata"]["annotations"].update({"troupe.io/gang-size": "auto",
                                           contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                           "uid": "uid-job-train", "controller": True}]
    pod["metadata"]["labels"]["job-name"] = "train"
    return pod


def resize(h, parallelism):
    h.cache.job_event("MODIFIED", h.cluster.workloads.add("Job", job(parallelism)))


def run_all(h):
    h.sync()
    for ref, pod in sorted(h.cluster.pods.objects.items()):
        if not pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName"):
            h.bind(ref.name)


KEY = "team-a/job:train"


def test_a_job_that_grows_gets_its_new_members_next_to_the_running_ones_and_a_shrink_frees_the_rest():
    h = Harness(four_nodes(), [], CONFIG, jobs=[job(4)])
    for i in range(4):
        h.add(member(i))
    assert h.reconcile(KEY).phase is Phase.PLACED
    run_all(h)
    before = {f"train-{i}": h.node_of(f"train-{i}") for i in range(4)}
    home = {n[:2] for n in before.values()}
    assert h.reconcile(KEY).phase is Phase.RELEASED

    resize(h, 6)  # grows: the Job controller creates two more members
    assert h.reconcile(KEY).phase is Phase.RELEASED, "nothing to place before the new members exist"
    h.add(member(4))
    h.add(member(5))
    outcome = h.reconcile(KEY)
    assert (outcome.phase, outcome.decision.rule.name) == (Phase.PLACED, "Placed"), outcome.reason
    assert outcome.reason.startswith("replacement member(s) train-4, train-5: placed 2 members")
    run_all(h)
    assert {f"train-{i}": h.node_of(f"train-{i}") for i in range(4)} == before, "no running member moved"
    subblock = {h.cache.node_info(h.node_of(f"train-{i}")).labels[SUBBLOCK] for i in range(6)}
    assert len(subblock) == 1, "the new members joined the gang's subblock"
    assert home  # the running members' nodes were seen
    assert h.reconcile(KEY).reason.startswith("all 6 active members released and bound")

    resize(h, 3)  # shrinks: the Job controller deletes the highest indexes
    for i in (3, 4, 5):
        h.cluster.pods.objects.pop(PodKey("team-a", f"train-{i}"))
        h.cache.pod_event("DELETED", {"metadata": {"namespace": "team-a", "name": f"train-{i}"}})
    outcome = h.reconcile(KEY)
    assert outcome.phase is Phase.RELEASED
    assert outcome.reason == "all 3 active members released and bound (3 running)"
    snapshot = h.cache.snapshot()
    freed = {h.node_of(f"train-{i}") for i in range(3)}
    assert all(snapshot.pods.get(f"team-a/train-{i}") is None for i in (3, 4, 5)), "their room is free"
    assert freed <= set(before.values())
