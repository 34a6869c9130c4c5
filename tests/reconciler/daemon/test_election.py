"""The Lease elector and its fence, on a fake Lease API and a fake clock: who may write, and
until when (docs/decisions/016-bounded-failure-detection.md)."""

from __future__ import annotations

import copy
import threading

import pytest

from reconciler.daemon.election import (
    CONFIRM_FRESH_SECONDS,
    LEASE_REQUEST_SECONDS,
    Elector,
    LeaderElection,
    LeaseConflict,
    LeaseError,
)
from reconciler.ports import LostLeadership

ELECTION = LeaderElection("troupe-system", "troupe-reconciler", lease_seconds=15, renew_seconds=10, retry_seconds=2)


class Clock:
    """Monotonic seconds that move only when told (or when an elector waits)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.stop = False

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return self.stop


class Leases:
    """The Lease in memory, with the API server's rules: create fails if it exists, an
    update whose resourceVersion is stale fails with a conflict. ``down`` makes every call
    fail as a partitioned replica's would. Records (caller, verb, timeout)."""

    def __init__(self) -> None:
        self.lease: dict | None = None
        self.rv = 0
        self.calls: list[tuple[str, str, float]] = []
        self.down: set[str] = set()

    def client(self, who: str) -> LeaseClient:
        return LeaseClient(self, who)


class LeaseClient:
    def __init__(self, store: Leases, who: str) -> None:
        self.store, self.who = store, who

    def _call(self, verb: str, timeout: float) -> None:
        self.store.calls.append((self.who, verb, timeout))
        if self.who in self.store.down:
            raise LeaseError("connection timed out")

    def _stored(self, lease: dict) -> dict:
        self.store.rv += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self.store.rv)
        self.store.lease = stored
        return copy.deepcopy(stored)

    def get(self, timeout: float) -> dict | None:
        self._call("get", timeout)
        return copy.deepcopy(self.store.lease)

    def create(self, lease: dict, timeout: float) -> dict:
        self._call("create", timeout)
        if self.store.lease is not None:
            raise LeaseConflict("already exists")
        return self._stored(lease)

    def update(self, lease: dict, timeout: float) -> dict:
        self._call("update", timeout)
        if self.store.lease is None or lease["metadata"].get("resourceVersion") != self.store.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("the object has been modified")
        return self._stored(lease)


def elector(store: Leases, who: str, clock: Clock, **kwargs) -> Elector:
    return Elector(store.client(who), ELECTION, who, clock=clock, wall=lambda: 1_800_000_000.0 + clock.now,
                   wait=clock.wait, **kwargs)


def holder(store: Leases) -> str | None:
    return (store.lease or {}).get("spec", {}).get("holderIdentity")


def writes(store: Leases, who: str) -> list[str]:
    return [verb for w, verb, _ in store.calls if w == who and verb in ("create", "update")]


def test_the_first_candidate_creates_the_lease_and_leads_and_its_fence_opens():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    with pytest.raises(LostLeadership, match="does not hold the Lease"):
        a.check()
    assert a.try_acquire_or_renew()
    a.check()
    a.confirm()
    spec = store.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("a", 15, 0)


def test_a_renewal_is_one_update_keeping_the_acquire_time():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    acquired = store.lease["spec"]["acquireTime"]
    store.calls.clear()
    clock.now += 2
    assert a.try_acquire_or_renew()
    assert [verb for _, verb, _ in store.calls] == ["update"], "optimistic: no read first"
    assert store.lease["spec"]["acquireTime"] == acquired
    assert store.lease["spec"]["renewTime"] > acquired


def test_a_follower_waits_a_whole_lease_on_its_own_clock_whatever_the_renew_time_says():
    store, clock = Leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    store.lease["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"  # a holder whose wall clock is far behind
    assert not b.try_acquire_or_renew(), "b has only just seen this record"
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    clock.now += 0.2
    assert b.try_acquire_or_renew(), "unchanged for 15 s as b measured it"
    assert holder(store) == "b" and store.lease["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_writing_at_the_renew_deadline_before_anyone_may_take_over():
    store, clock = Leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    renewed = clock.now
    b.try_acquire_or_renew()  # b sees a's record at once: the earliest it can start counting
    store.down.add("a")  # a is cut off from the API server; b is not
    fence_closed = taken = None
    while taken is None:
        clock.now += 0.5
        a.try_acquire_or_renew()
        if fence_closed is None and not a.leading:
            fence_closed = clock.now
        if b.try_acquire_or_renew():
            taken = clock.now
    assert fence_closed == pytest.approx(renewed + ELECTION.renew_seconds)
    assert taken - fence_closed >= ELECTION.lease_seconds - ELECTION.renew_seconds, "5 s between the two"


def test_the_fence_says_how_long_it_stays_open_which_bounds_the_wait_for_a_write():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    assert a.remaining() == 0.0, "not leading: closed"
    a.try_acquire_or_renew()
    assert a.remaining() == pytest.approx(10.0)
    clock.now += 9.7
    assert a.remaining() == pytest.approx(0.3)
    a.check()
    clock.now += 0.4
    assert a.remaining() == 0.0
    with pytest.raises(LostLeadership):
        a.check()


def test_every_lease_request_is_bounded_by_what_is_left_of_the_renew_deadline():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    assert store.calls[-1][2] == LEASE_REQUEST_SECONDS
    store.down.add("a")
    clock.now += 8.5
    a.try_acquire_or_renew()
    timeouts = [t for _, _, t in store.calls[-2:]]
    assert timeouts == [pytest.approx(1.5), pytest.approx(1.5)], "1.5 s left of the 10 s deadline"


def test_a_leader_frozen_past_its_deadline_finds_its_fence_closed_and_writes_nothing_to_the_lease():
    store, clock = Leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.now += 20  # SIGSTOP on a; b takes over meanwhile
    assert b.try_acquire_or_renew()
    store.calls.clear()
    with pytest.raises(LostLeadership, match="past the 10s renew deadline"):
        a.check()
    with pytest.raises(LostLeadership):
        a.confirm()
    assert not a.try_acquire_or_renew()
    assert writes(store, "a") in ([], ["update"]), "at most the optimistic renewal, refused as stale"
    assert holder(store) == "b"
    assert not a.leading


def test_confirm_reads_the_lease_back_and_closes_the_fence_when_someone_else_holds_it():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.lease["spec"]["holderIdentity"] = "intruder"  # edited by hand, say
    with pytest.raises(LostLeadership, match="now held by intruder"):
        a.confirm()
    with pytest.raises(LostLeadership):
        a.check()


def test_confirmations_within_a_second_share_one_read_and_a_later_one_reads_again():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.calls.clear()
    a.confirm()
    clock.now += CONFIRM_FRESH_SECONDS / 2
    a.confirm()  # a release starting half a second after another: the read stands
    assert [verb for _, verb, _ in store.calls] == ["get"]
    store.lease["spec"]["holderIdentity"] = "intruder"
    clock.now += CONFIRM_FRESH_SECONDS / 2
    with pytest.raises(LostLeadership, match="now held by intruder"):
        a.confirm()
    assert [verb for _, verb, _ in store.calls] == ["get", "get"]
    with pytest.raises(LostLeadership):
        a.confirm()  # lost for good: no read stands for it
    with pytest.raises(LostLeadership):
        a.check()


def test_confirmations_that_start_while_a_read_is_in_flight_take_its_answer():
    """Releases written at once (docs/decisions/068-release-pipeline.md) confirm at once: one
    read-back goes out, the others wait for it and take its answer."""
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.calls.clear()
    entered, go = threading.Event(), threading.Event()
    client = a.api
    plain_get = client.get

    def slow_get(timeout: float) -> dict | None:
        entered.set()
        go.wait(5)
        return plain_get(timeout)

    client.get = slow_get
    first = threading.Thread(target=a.confirm)
    first.start()
    assert entered.wait(5)
    others = [threading.Thread(target=a.confirm) for _ in range(8)]
    for t in others:
        t.start()
    go.set()
    for t in (first, *others):
        t.join(5)
    assert [verb for _, verb, _ in store.calls] == ["get"], "one read for nine confirmations"


def test_confirm_refuses_when_the_lease_cannot_be_read():
    store, clock = Leases(), Clock()
    a = elector(store, "a", clock)
    a.try_acquire_or_renew()
    store.down.add("a")
    with pytest.raises(LostLeadership, match="could not be read back"):
        a.confirm()


def test_a_released_lease_is_taken_by_a_follower_at_its_next_try():
    store, clock = Leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert holder(store) is None and store.lease["spec"]["leaseDurationSeconds"] == 1
    with pytest.raises(LostLeadership):
        a.check()
    clock.now += ELECTION.retry_seconds
    assert b.try_acquire_or_renew(), "no holder: no need to wait for the lease to expire"
    assert store.lease["spec"]["leaseTransitions"] == 1


def test_release_writes_nothing_when_another_replica_holds_the_lease():
    store, clock = Leases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.now += 30
    b.try_acquire_or_renew()
    store.calls.clear()
    assert not a.release() or holder(store) == "b"
    assert holder(store) == "b"


def test_the_run_loop_leads_renews_and_calls_on_stopped_once_when_renewals_fail():
    store, clock = Leases(), Clock()
    started, stopped = threading.Event(), []
    renewals_before_cut = 3

    def wait(seconds: float) -> bool:
        clock.now += seconds
        if a.renewals >= renewals_before_cut:
            store.down.add("a")
        return False

    a = Elector(store.client("a"), ELECTION, "a", on_started=started.set, on_stopped=lambda: stopped.append(1),
                clock=clock, wall=lambda: 0.0, wait=wait)
    a.run()
    assert started.wait(5)
    assert stopped == [1]
    assert a.renewals == renewals_before_cut
    with pytest.raises(LostLeadership):
        a.check()


def test_a_failure_to_start_leading_gives_the_lease_up():
    store, clock = Leases(), Clock()
    stopped = threading.Event()

    def fail() -> None:
        raise TimeoutError("pods not listed within 60s")

    a = elector(store, "a", clock, on_started=fail, on_stopped=stopped.set)
    clock_wait = clock.wait
    a.wait = lambda s: clock_wait(s) or stopped.is_set()
    a.run()
    assert stopped.wait(5)
    assert not a.leading
