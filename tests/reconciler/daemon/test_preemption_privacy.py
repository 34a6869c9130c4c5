"""Nothing the reconciler writes in a preemptor's namespace names another namespace's
objects, and nothing it writes on a victim names the preemptor's
(docs/decisions/064-preemption-names-no-other-tenant.md): the nomination keeps its victims
by UID, the reasons count victims of other namespaces instead of naming them, the Gang
object lists only its own namespace's victims, and the victims' Preempted Events say a gang
of another namespace. The controller runs on in-memory writer ports; every write is read
back: pod patches, conditions, Events and Gang objects.
"""

from __future__ import annotations

import json

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import Harness, four_nodes, written_in
from troupe import contract
from troupe.config import Config

MINIMAL = Config(gang_preemption_mode="minimal", gang_schedule_timeout_jitter_seconds=0)
ATOMIC = Config(gang_preemption_mode="atomic", gang_schedule_timeout_jitter_seconds=0)
PREEMPTOR, VICTIM, BYSTANDER = "team-c", "team-a", "team-b"


def victims(namespace=VICTIM, name="secret-job"):
    """A gang of 2 of ``namespace`` at priority 0, on n1 and n2 (all their GPUs), with UIDs
    that name nothing, as the API server's do."""
    pods = [make_pod(f"{name}-{i}", namespace).gang(name, 2).index(i).gpus(4).priority(0).running_on(f"n{i + 1}")
            .build() for i in range(2)]
    for i, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"5f0c2a1e-0000-4000-8000-00000000000{i}"
    return pods


def bystanders():
    """Pods above the preemptor's priority on n3 and n4: never victims."""
    return [make_pod(f"keep-{i}", BYSTANDER).gpus(4).priority(500).running_on(f"n{i}").build() for i in (3, 4)]


def preemptor(size=2):
    return [make_pod(f"urgent-{i}", PREEMPTOR).gang("urgent", size).index(i).gpus(4).priority(100).gated().build()
            for i in range(size)]


def gang_status(h: Harness, namespace=PREEMPTOR, name="urgent"):
    h.controllers.gang_objects.flush(everything=True)
    return h.cluster.gang_objects.objects[(namespace, name)]["status"]


def test_a_preemption_across_namespaces_names_neither_side_to_the_other():
    h = Harness(four_nodes(), [*victims(), *bystanders(), *preemptor()], config=MINIMAL)
    seen = []

    out = h.reconcile(f"{PREEMPTOR}/urgent")
    assert (out.phase, sorted(r.name for r in h.cluster.pods.evicted)) == (Phase.PREEMPTING,
                                                                           ["secret-job-0", "secret-job-1"])
    assert "evict 1 gang of another namespace (2 pods, priority <= 0)" in out.decision.reason
    nomination = json.loads(h.pod("urgent-0", PREEMPTOR)["metadata"]["annotations"][contract.NOMINATION])
    assert sorted(nomination["victims"]) == [p["metadata"]["uid"] for p in victims()], "by UID"
    status = gang_status(h)
    assert (status.get("victims"), status["victimsElsewhere"]) == (None, 2)
    seen.append(written_in(h, PREEMPTOR))
    preempted = [e.message for e in h.cluster.events if e.reason == "Preempted"]
    assert len(preempted) == 2 and all("a gang of another namespace (priority 100)" in m for m in preempted)
    h.sync()
    assert h.reconcile(f"{PREEMPTOR}/urgent").phase is Phase.PLACED
    seen.append(written_in(h, PREEMPTOR))

    for text in seen:
        for name in (VICTIM, "secret-job", BYSTANDER):
            assert name not in text, f"{name} written in {PREEMPTOR}: {text}"
    for name in (PREEMPTOR, "urgent"):
        assert name not in written_in(h, VICTIM)


def test_victims_in_the_preemptors_own_namespace_are_named_and_the_others_counted():
    own = [make_pod("own-low", PREEMPTOR).gpus(4).priority(0).running_on("n3").build()]
    h = Harness(four_nodes(), [*victims(), own[0], make_pod("keep", BYSTANDER).gpus(4).priority(500).running_on("n4")
                               .build(), *preemptor(size=3)], config=MINIMAL)

    out = h.reconcile(f"{PREEMPTOR}/urgent")

    assert out.phase is Phase.PREEMPTING, out.reason
    assert ("evict 2 gangs (3 pods, priority <= 0: team-c/pod:own-low and 1 gang of another namespace)"
            in out.decision.reason), out.decision.reason
    status = gang_status(h)
    assert (status["victims"], status["victimsElsewhere"]) == (["team-c/own-low"], 2)
    own_event = next(e.message for e in h.cluster.events if e.reason == "Preempted" and e.regarding.name == "own-low")
    assert "to make room for gang team-c/urgent (priority 100)" in own_event
    text = written_in(h, PREEMPTOR)
    assert VICTIM not in text and "secret-job" not in text


def test_a_refused_eviction_is_kept_by_uid_and_told_without_the_victims_names():
    h = Harness(four_nodes(), [*victims(), *bystanders(), *preemptor()], config=ATOMIC)
    h.cluster.pods.protected.add("secret-job-1")

    out = h.reconcile(f"{PREEMPTOR}/urgent")

    assert out.retry and h.cluster.pods.evicted == []
    nomination = json.loads(h.pod("urgent-0", PREEMPTOR)["metadata"]["annotations"][contract.NOMINATION])
    assert nomination["refused"] == [victims()[1]["metadata"]["uid"]]
    h.sync()
    out = h.reconcile(f"{PREEMPTOR}/urgent")
    assert out.phase is Phase.PREEMPTING and out.decision.rule.name == "EvictionRefused", out.reason
    assert "eviction of 1 gang of another namespace refused (PodDisruptionBudget)" in out.decision.reason
    text = written_in(h, PREEMPTOR)
    assert VICTIM not in text and "secret-job" not in text, text
    assert PodKey(VICTIM, "secret-job-0") in h.cluster.pods.objects, "the refused gang is left whole"
