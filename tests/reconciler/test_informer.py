"""The informer's list+watch protocol on a scripted transport: resume, 410 Gone, errors."""

from __future__ import annotations

import json
import threading

from reconciler.kube import Informer, Resource
from tests.e2e.helpers import wait_for


class FakeResponse:
    """What ``_preload_content=False`` returns: ``data`` for a list, ``stream()`` for a watch."""

    def __init__(self, body=None, events=()):
        self.data = json.dumps(body).encode() if body is not None else b""
        self._lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.closed = False

    def stream(self, amt=None, decode_content=False):
        yield self._lines

    def close(self):
        self.closed = True

    def release_conn(self):
        pass


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
