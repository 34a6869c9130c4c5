"""What users see on the pods, and what a new leader reads back from the cluster: the
``troupe.io/Gang`` condition (written coalesced, late, only when it changes), Events not
repeated after a failover, and the rollback backoff kept across a restart."""

from __future__ import annotations

import pytest

from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.model.keys import PodKey
from reconciler.ports import WriteError, state_key
from tests.support.controller_harness import NO_JITTER, Harness, four_nodes, gang_pods
from troupe import contract


def gang_conditions(h: Harness, names):
    out = {}
    for name in names:
        [c] = [c for c in h.pod(name).get("status", {}).get("conditions", []) if c["type"] == contract.GANG_CONDITION]
        out[name] = (c["status"], c["reason"], c["message"])
    return out


def written(h: Harness) -> list[tuple[str, str]]:
    return [(ref.name, c["reason"]) for ref, c in h.cluster.pods.conditions if c["type"] == contract.GANG_CONDITION]


def test_every_gated_member_of_a_waiting_gang_shows_why_with_numbers():
    h = Harness(four_nodes(), gang_pods(3, size=4))
    assert h.reconcile().phase is Phase.WAITING
    assert h.controllers.conditions.flush(everything=True) == 3
    h.sync()
    assert gang_conditions(h, ["train-0", "train-1", "train-2"]) == {
        f"train-{i}": ("False", "WaitingForMembers", "3 of 4 members present") for i in range(3)}


def test_conditions_are_coalesced_so_a_forming_gang_costs_one_write_per_member():
    pods = gang_pods(8, size=8)
    h = Harness(four_nodes(), pods[:1])
    for pod in pods[1:7]:  # members arrive one by one, each decided: the count changes every time
        h.reconcile()
        h.add(pod)
    h.reconcile()
    h.controllers.conditions.flush(everything=True)
    assert sorted(written(h)) == sorted((f"train-{i}", "WaitingForMembers") for i in range(7))
    h.sync()
    assert gang_conditions(h, ["train-0"])["train-0"][2] == "7 of 8 members present"


def test_a_released_member_says_where_it_went_and_a_gang_released_at_once_writes_no_condition():
    h = Harness(four_nodes(), gang_pods(2))
    h.reconcile()
    h.controllers.conditions.flush(everything=True)
    assert written(h) == [], "never shown waiting: nothing to correct"
    h2 = Harness(four_nodes(), gang_pods(1, size=2))
    h2.reconcile()
    h2.controllers.conditions.flush(everything=True)
    h2.sync()
    h2.add(gang_pods(2)[1])
    assert h2.reconcile().phase is Phase.PLACED
    h2.controllers.conditions.flush(everything=True)
    h2.sync()
    status, reason, message = gang_conditions(h2, ["train-0"])["train-0"]
    assert (status, reason) == ("True", "Released")
    assert message.startswith("released onto node n") and message.endswith("as rank 0 of 2")


def test_a_new_leader_sends_no_event_the_pods_condition_already_tells():
    h = Harness(four_nodes(), gang_pods(4, gpus=8))  # 8 GPUs on 4-GPU nodes: never fits
    assert h.reconcile().phase is Phase.UNSCHEDULABLE
    h.controllers.conditions.flush(everything=True)
    h.sync()
    sent = len(h.cluster.events)
    assert sent == 1, "one Event for the gang, on its lead member"
    h.controllers = h.new_controllers()  # a failover: nothing in memory
    assert h.reconcile().phase is Phase.UNSCHEDULABLE
    assert len(h.cluster.events) == sent, "no duplicate Events"


def test_the_backoff_of_a_rolled_back_gang_survives_a_new_leader():
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    h.reconcile()
    h.sync()
    h.bind("train-0")
    h.wall += 30
    assert h.reconcile().phase is Phase.ROLLED_BACK
    assert state_key("team-a/train") in h.cluster.state.data, "recorded before the members were deleted"
    h.sync()
    for pod in gang_pods(2, owned=True):
        pod["metadata"]["name"] += "-retry"
        pod["metadata"]["uid"] += "-retry"
        h.add(pod)
    h.wall += 4
    h.controllers = h.new_controllers()
    assert h.controllers.rollbacks.restore() == 1
    waiting = h.reconcile()
    assert (waiting.phase, waiting.reason) == (Phase.BACKING_OFF, "backing off after 1 timeout(s): 6s left")
    h.wall += 6
    assert h.reconcile().phase is Phase.PLACED
    h.sync()
    for name in ("train-0-retry", "train-1-retry"):
        h.bind(name)
    assert h.reconcile().phase is Phase.RELEASED
    assert h.cluster.state.data == {}, "the gang runs whole: its backoff is forgotten"


def test_a_condition_is_not_written_for_a_pod_that_is_gone():
    h = Harness(four_nodes(), gang_pods(3, size=4))
    h.reconcile()
    h.cluster.pods.objects.pop(PodKey("team-a", "train-2"))
    h.sync()
    h.controllers.conditions.flush(everything=True)
    assert sorted(written(h)) == [("train-0", "WaitingForMembers"), ("train-1", "WaitingForMembers")]


def test_a_rollback_cut_short_by_a_refused_delete_is_finished_by_a_new_leader():
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    h.reconcile()
    h.sync()
    h.bind("train-0")  # train-1 is never bound: the release times out
    h.wall += 30
    h.cluster.pods.fail["train-0"] = WriteError("500 refused")
    assert h.reconcile().phase is Phase.ROLLED_BACK
    assert [r.name for r in h.cluster.pods.deleted] == ["train-1"], "train-0's delete was refused: it still runs"
    h.cluster.pods.fail.clear()
    h.sync()
    h.controllers = h.new_controllers()  # the old leader dies with the rollback half done
    h.controllers.rollbacks.restore()
    out = h.reconcile()
    assert out.phase is Phase.ROLLED_BACK, out.reason
    assert out.reason.startswith("the release of ") and "rolled back; 1 member(s) of it still to delete" in out.reason
    assert sorted(r.name for r in h.cluster.pods.deleted) == ["train-0", "train-1"], "the gang never runs partly"


def test_a_member_whose_keys_were_changed_past_the_webhook_holds_its_gang_and_never_raises():
    pods = gang_pods(2)
    for pod in pods:  # an update the webhook did not see (it was down, or bypassed)
        pod["metadata"]["annotations"]["troupe.io/topology-required-level"] = "example.com/no-such-level"
    h = Harness(four_nodes(), pods)
    for _ in range(3):  # decided again and again: the same answer, no exception
        out = h.reconcile()
        assert out.phase is Phase.HELD
    assert "troupe.io/topology-required-level: must name a configured level" in out.reason
    assert h.cluster.pods.patches == []


def test_the_event_a_waiting_member_shows_follows_its_conditions_numbers():
    """A gang of 4 whose members come one by one: the lead's Event is sent with each
    (coalesced) write of its condition, so its latest Event says how many are there now."""
    pods = gang_pods(4)
    h = Harness(four_nodes(), pods[:1])
    h.reconcile()
    h.controllers.conditions.flush(everything=True)
    h.sync()
    for pod in pods[1:3]:
        h.add(pod)
        h.reconcile()
    h.controllers.conditions.flush(everything=True)
    waiting = [e.message for e in h.cluster.events if e.regarding.name == "train-0" and e.reason == "GangWaiting"]
    assert waiting == ["1 of 4 members present", "3 of 4 members present"], "2 of 4 was coalesced away"
    assert not [e for e in h.cluster.events if e.regarding.name != "train-0"], "one Event for the gang, on its lead"


def test_recorded_backoffs_of_gangs_that_are_gone_are_pruned_once_they_ran_out():
    h = Harness(four_nodes(), gang_pods(2, owned=True), NO_JITTER)
    h.cluster.state.save_backoff("team-a/train", 1, h.wall - 1, ("2027-01-15T07:59:00.000+00:00",))  # ran out; gang here
    h.cluster.state.save_backoff("team-a/gone", 2, h.wall - 1, ("2027-01-15T07:00:00.000+00:00",))  # ran out; no pod
    h.cluster.state.save_backoff("team-a/later", 1, h.wall + 60)  # no pod yet: its owner may be recreating them
    h.controllers = h.new_controllers()
    assert h.controllers.rollbacks.restore() == 2
    assert sorted(h.cluster.state.load_backoffs()) == ["team-a/later", "team-a/train"], "the gone gang's entry is pruned"


def test_a_gang_forgotten_after_its_backoff_takes_its_recorded_entry_with_it():
    h = Harness(four_nodes(), [], NO_JITTER)
    h.cluster.state.save_backoff("team-a/train", 1, h.wall + 5)
    h.controllers.rollbacks.restore()
    h.controller.forget("team-a/train")
    assert "team-a/train" in h.cluster.state.load_backoffs(), "kept while the backoff runs"
    h.wall += 6
    h.controller.forget("team-a/train")
    assert h.cluster.state.load_backoffs() == {}


def test_the_state_config_map_keeps_at_most_its_bound_dropping_the_longest_expired_first(monkeypatch):
    from reconciler.ports import state
    monkeypatch.setattr(state, "MAX_STATE_ENTRIES", 3)
    h = Harness(four_nodes(), [], NO_JITTER)
    for i, deadline in enumerate((50.0, 10.0, 30.0, 40.0)):
        h.cluster.state.save_backoff(f"ns/g{i}", 1, deadline)
    assert sorted(h.cluster.state.load_backoffs()) == ["ns/g0", "ns/g2", "ns/g3"], "g1 ran out first: it went"
    assert len(h.cluster.state.data) == 3


def test_one_tenant_rolling_back_many_gangs_evicts_its_own_entries_before_anothers(monkeypatch):
    """Past the bound, entries go from the namespace that holds the most: a tenant that
    rolls back gang after gang does not push another tenant's backoff out, even one that
    runs out sooner (docs/decisions/049-hostile-tenants-third-round.md)."""
    from reconciler.ports import state
    monkeypatch.setattr(state, "MAX_STATE_ENTRIES", 4)
    h = Harness(four_nodes(), [], NO_JITTER)
    h.cluster.state.save_backoff("victim/train", 1, 10.0)
    for i in range(20):
        h.cluster.state.save_backoff(f"flood/g{i}", 1, 100.0 + i)
    kept = sorted(h.cluster.state.load_backoffs())
    assert kept == ["flood/g17", "flood/g18", "flood/g19", "victim/train"]


def test_a_save_reads_the_config_map_once_not_each_time(monkeypatch):
    """The store keeps what it wrote: a save is one patch, not a read of up to 800 KB and a
    patch; a new leader reads it, and a failed write makes the next save read it again."""
    h = Harness(four_nodes(), [], NO_JITTER)
    store = h.cluster.state
    before = store.reads
    for i in range(50):
        store.save_backoff(f"ns/g{i}", 1, 100.0 + i)
    assert store.reads - before <= 1
    assert len(store.load_backoffs()) == 50 and store.reads - before == 2, "a new leader reads it"

    def refused(changes):
        raise WriteError("patch configmap: 500 etcdserver: request timed out")

    monkeypatch.setattr(store, "_write_state", refused)
    with pytest.raises(WriteError):
        store.save_backoff("ns/g0", 2, 200.0)
    monkeypatch.undo()
    store.data["gang-0000000000"] = '{"gang":"ns/other","timeouts":1,"notBefore":1.0,"releases":[]}'
    store.save_backoff("ns/g1", 2, 200.0)
    assert store.reads - before == 3, "read again after a refused write"
    assert "ns/other" in store.load_backoffs()
