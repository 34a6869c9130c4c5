"""The informer's list+watch protocol on a scripted transport: resume, 410 Gone, errors, backoff,
streamed lists, and what it reports for liveness."""

from __future__ import annotations

import itertools
import threading

import pytest
from kubernetes.client.rest import ApiException

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model.keys import PodKey
from reconciler.kube import Informer, Resource, StreamingInformer
from tests.support.e2e import wait_for
from tests.support.fake_api import FakeResponse
from troupe.config import Config


def pod(name, rv):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class Server:
    """A scripted API server: each watch request takes the next script entry."""

    def __init__(self, watches):
        self.lists = 0
        self.watch_requests = []
        self._watches = list(watches)
        self.done = threading.Event()

    def __call__(self, watch=False, resource_version=None, **kwargs):
        if not watch:
            self.lists += 1
            rv = str(100 * self.lists)
            return FakeResponse({"items": [pod(f"listed-{self.lists}", rv)], "metadata": {"resourceVersion": rv}})
        self.watch_requests.append(resource_version)
        if not self._watches:
            self.done.set()
            return FakeResponse(events=[])
        step = self._watches.pop(0)
        if isinstance(step, Exception):
            raise step
        return FakeResponse(events=step)


def run(server):
    lists, events = [], []
    inf = Informer(Resource("pods", server), lambda items: lists.append(items), lambda k, o: events.append((k, o)))
    inf._stop.wait = lambda delay: False  # no real backoff sleeps in tests
    inf.start()
    wait_for("the script to run out", server.done.is_set, timeout=10)
    inf.stop()
    return inf, lists, events


def test_a_watch_resumes_from_the_last_resource_version_bookmarks_included():
    server = Server([
        [{"type": "ADDED", "object": pod("a", "101")}, {"type": "BOOKMARK", "object": pod("", "150")}],
        [{"type": "MODIFIED", "object": pod("a", "160")}],
    ])
    _inf, _lists, events = run(server)
    assert server.lists == 1
    assert server.watch_requests[:3] == ["100", "150", "160"]
    assert [(k, o["metadata"]["name"]) for k, o in events] == [("ADDED", "a"), ("MODIFIED", "a")], "bookmarks are not events"


def test_410_gone_makes_it_list_again_and_watch_from_the_new_list():
    server = Server([
        [{"type": "ADDED", "object": pod("a", "101")}],
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version: 101 (300)"}}],
        [{"type": "ADDED", "object": pod("b", "201")}],
    ])
    inf, lists, _events = run(server)
    assert server.lists == 2 and inf.relists == 2
    assert [i["metadata"]["name"] for i in lists[1]] == ["listed-2"]
    assert server.watch_requests[:3] == ["100", "101", "200"], "after the re-list it watches from the list's version"


def test_a_broken_connection_is_retried_from_where_it_was():
    server = Server([
        [{"type": "ADDED", "object": pod("a", "105")}],
        ConnectionResetError("peer reset"),
        [{"type": "DELETED", "object": pod("a", "106")}],
    ])
    _inf, _lists, events = run(server)
    assert server.lists == 1, "a network error does not cost a re-list"
    assert server.watch_requests[:3] == ["100", "105", "105"]
    assert [k for k, _ in events] == ["ADDED", "DELETED"]


class Script:
    """A scripted API server answering each request with the next step: a list body, a
    list of watch events, or an exception. Records every request's keyword arguments."""

    def __init__(self, steps, then=None):
        self.steps = list(steps)
        self.then = then
        self.requests = []
        self.done = threading.Event()

    def __call__(self, **kwargs):
        self.requests.append(kwargs)
        step = self.steps.pop(0) if self.steps else self.then
        if not self.steps:
            self.done.set()
        if isinstance(step, Exception):
            raise step
        if kwargs.get("watch"):
            return FakeResponse(events=step or [])
        return FakeResponse(step)


def listing(*names, rv="100"):
    return {"items": [pod(n, rv) for n in names], "metadata": {"resourceVersion": rv}}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def informer(script, clock=None, **kwargs):
    lists, events, delays = [], [], []
    inf = Informer(Resource("pods", script), lambda items: lists.append(list(items)),
                   lambda k, o: events.append((k, o)), clock=clock or Clock(), **kwargs)
    inf._stop.wait = lambda delay: delays.append(delay) or False
    return inf, lists, events, delays


def test_a_watch_that_ends_at_once_is_retried_with_growing_backoff_not_in_a_loop():
    script = Script([listing("a")] + [[] for _ in range(6)])
    inf, _lists, _events, delays = informer(script)
    inf.start()
    wait_for("six empty watches", script.done.is_set, timeout=10)
    inf.stop()
    assert inf.short_watches >= 5
    assert all(1 <= d / base <= 1.25 for d, base in zip(delays[:5], (1, 2, 4, 8, 16), strict=True)), delays
    assert inf.last_error == "the watch ended at once, having delivered nothing"


def test_a_watch_asks_the_server_to_end_it_within_60_to_90s_and_reads_15s_longer():
    script = Script([listing("a"), [{"type": "BOOKMARK", "object": pod("", "150")}]] + [[] for _ in range(20)])
    inf, *_ = informer(script)
    inf.start()
    wait_for("the script to run out", script.done.is_set, timeout=10)
    inf.stop()
    watches = [r for r in script.requests if r.get("watch")]
    assert watches
    for r in watches:
        assert 60 <= r["timeout_seconds"] < 90
        assert r["_request_timeout"][1] == r["timeout_seconds"] + 15, "a dead connection is noticed within 105 s"


def test_an_informer_stuck_on_403s_makes_liveness_fail_after_a_minute_with_the_reason():
    forbidden = ApiException(status=403, reason="Forbidden")
    clock = Clock()
    script = Script([forbidden] * 4, then=forbidden)
    inf, *_ = informer(script, clock=clock)
    inf.start()
    wait_for("four refused lists", script.done.is_set, timeout=10)
    assert not inf.synced.is_set()
    assert inf.problem() == "", "a minute's grace: an RBAC change may be on its way"
    clock.now += 61
    assert inf.problem() == "pods: no list or watch has succeeded for 61s; last error: API error 403 Forbidden"
    inf.stop()


def test_a_list_that_succeeds_again_clears_the_problem():
    clock = Clock()
    inf, lists, *_ = informer(Script([]), clock=clock)
    inf._failed("API error 403 Forbidden")
    clock.now += 120
    assert inf.problem().startswith("pods: no list or watch has succeeded for 120s")
    inf.resource.list_fn = Script([listing("a")])
    inf._list()
    assert inf.problem() == "" and lists == [[pod("a", "100")]]


def test_a_dead_informer_thread_is_a_problem():
    inf, *_ = informer(Script([]))
    inf._run = lambda: None  # the thread ends at once, as one killed by a BaseException would
    inf._thread = threading.Thread(target=inf._run)
    inf.start()
    inf._thread.join()
    assert inf.problem() == "the pods informer thread has died"


def test_the_transform_is_applied_to_every_listed_object_and_every_event():
    script = Script([listing("a", "b"), [{"type": "ADDED", "object": pod("c", "101")}]])
    seen = []

    def strip(obj):
        seen.append(obj["metadata"]["name"])
        return {"metadata": {"name": obj["metadata"]["name"], "namespace": "ns"}}

    inf, lists, events, _ = informer(script, transform=strip)
    inf.start()
    wait_for("the script to run out", script.done.is_set, timeout=10)
    wait_for("the event", lambda: events, timeout=10)
    inf.stop()
    assert lists[0] == [{"metadata": {"name": "a", "namespace": "ns"}}, {"metadata": {"name": "b", "namespace": "ns"}}]
    assert events == [("ADDED", {"metadata": {"name": "c", "namespace": "ns"}})]
    assert seen[:3] == ["a", "b", "c"]


def test_a_streamed_list_fetches_each_page_only_when_the_handler_gets_to_it():
    pages = [{"items": [pod(f"p{i}-{k}", "100") for k in range(2)], "metadata": {"resourceVersion": "100",
              **({"continue": str(i + 1)} if i < 2 else {})}} for i in range(3)]
    script = Script(pages)
    requested_when = []

    def on_list(items):
        assert not isinstance(items, list)
        for item in items:
            requested_when.append((item["metadata"]["name"], len(script.requests)))
            if item["metadata"]["name"] == "p1-0":
                return  # a handler that stops early: the list is still completed

    inf = StreamingInformer(Resource("pods", script), on_list, lambda k, o: None)
    inf._list()
    assert requested_when == [("p0-0", 1), ("p0-1", 1), ("p1-0", 2)], "one page in memory at a time"
    assert len(script.requests) == 3 and inf.resource_version == "100" and inf.synced.is_set()


def test_a_streamed_list_cut_short_by_stop_drops_nothing_from_the_cache():
    names = [f"p{i}-{k}" for i in range(3) for k in range(2)]
    cache = ClusterCache(Config())
    cache.replace_pods([pod(n, "50") for n in names])
    pages = [{"items": [pod(f"p{i}-{k}", "100") for k in range(2)], "metadata": {"resourceVersion": "100",
              **({"continue": str(i + 1)} if i < 2 else {})}} for i in range(3)]
    script = Script(pages)
    inf = StreamingInformer(Resource("pods", script), cache.replace_pods, lambda k, o: None)
    first_page = script.__call__

    def stop_after_first_page(**kwargs):
        inf._stop.set()
        return first_page(**kwargs)

    inf.resource.list_fn = stop_after_first_page
    with pytest.raises(InterruptedError):
        inf._list()
    assert all(cache.pod_info(PodKey("ns", n)) is not None for n in names), "not taken for a list without them"


def restarts(reason, resource="metered"):
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("troupe_informer_watch_restarts_total",
                                     {"resource": resource, "reason": reason}) or 0.0


def test_every_list_and_every_restarted_watch_is_counted_with_why_the_last_one_ended():
    from prometheus_client import REGISTRY

    server = Server([
        [{"type": "ADDED", "object": pod("a", "101")}],                        # ended by the server: timeout
        [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],    # expired: listed again
        ApiException(status=500, reason="boom"),                               # error
    ])
    before = {r: restarts(r) for r in ("timeout", "expired", "error")}
    lists = REGISTRY.get_sample_value("troupe_informer_lists_total", {"resource": "metered"}) or 0.0
    inf = Informer(Resource("metered", server), lambda items: None, lambda k, o: None)
    inf._stop.wait = lambda delay: False
    inf.clock = itertools.count(0, 5).__next__  # every watch lasts long enough not to count as empty
    inf.start()
    wait_for("the script to run out", server.done.is_set, timeout=10)
    inf.stop()
    # (the scripted server then answers with watches that end at once, until it is stopped)
    counted = {r: restarts(r) - before[r] for r in before}
    assert (counted["expired"], counted["error"]) == (1, 1) and counted["timeout"] >= 1
    assert REGISTRY.get_sample_value("troupe_informer_lists_total", {"resource": "metered"}) == lists + 2
    stamp = REGISTRY.get_sample_value("troupe_informer_last_list_timestamp_seconds", {"resource": "metered"})
    assert stamp is not None and stamp > 1.7e9
