"""The work queue: dedup, one worker per key, delays on an injected clock."""

import threading

import pytest

from reconciler.daemon.queue import ShutDown, WorkQueue


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_key_added_twice_is_queued_once():
    q = WorkQueue(FakeClock())
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert [q.get(timeout=0), q.get(timeout=0)] == ["a", "b"]
    assert q.get(timeout=0) is None


def test_a_key_added_while_in_flight_comes_back_after_done():
    q = WorkQueue(FakeClock())
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    assert q.get(timeout=0) is None, "never handed to a second worker while in flight"
    q.done("a")
    assert q.get(timeout=0) == "a"


def test_a_delayed_key_waits_for_its_deadline_and_the_earlier_deadline_wins():
    clock = FakeClock()
    q = WorkQueue(clock)
    q.add_after("a", 10)
    q.add_after("a", 5)
    q.add_after("a", 30)
    assert q.get(timeout=0) is None
    clock.now += 5
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now += 100
    assert q.get(timeout=0) is None, "the replaced deadlines do not fire again"


def test_an_immediate_add_cancels_a_pending_delay():
    clock = FakeClock()
    q = WorkQueue(clock)
    q.add_after("a", 10)
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now += 20
    assert q.get(timeout=0) is None


def test_shutdown_wakes_a_blocked_worker():
    q = WorkQueue()
    raised = threading.Event()

    def worker():
        try:
            q.get()
        except ShutDown:
            raised.set()

    t = threading.Thread(target=worker)
    t.start()
    q.shutdown()
    t.join(timeout=5)
    assert raised.is_set()
    with pytest.raises(ShutDown):
        q.get(timeout=0)


def test_higher_priority_keys_go_first():
    priorities = {"low": 0, "high": 100, "mid": 10}
    q = WorkQueue(FakeClock(), order=lambda k: (priorities[k], "ns"))
    for k in ("low", "high", "mid"):
        q.add(k)
    assert [q.get(timeout=0) for _ in range(3)] == ["high", "mid", "low"]


def test_tenants_of_one_priority_take_turns_so_a_flood_in_one_does_not_starve_another():
    q = WorkQueue(FakeClock(), order=lambda k: (0, k.split("/")[0]))
    for i in range(500):
        q.add(f"flood/g{i}")
    q.add("quiet/fits")
    first = [q.get(timeout=0) for _ in range(2)]
    assert first == ["flood/g0", "quiet/fits"], "the other namespace's key is second, not 501st"
    assert len(q) == 499
