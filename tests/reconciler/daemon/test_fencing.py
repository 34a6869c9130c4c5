"""Every write passes the leader's fence: at the writer port, before each wave of a release,
and at the socket of the real client, where a request built before the fence closed is
still stopped before its first byte (docs/decisions/016-bounded-failure-detection.md)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import urllib3
import yaml
from kubernetes import client

from reconciler import kube
from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.controller import GangController
from reconciler.engine.decision.actions import MemberRelease
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.records import Nomination
from reconciler.engine.model.reservations import Record
from reconciler.ports import LostLeadership
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import compose
from testbed.as_created import job_object
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config


class Fence:
    """A fence that stays open for ``confirms`` confirmations, then closes; counts both calls."""

    def __init__(self, confirms: int = 1 << 30) -> None:
        self.left = confirms
        self.checks = 0
        self.confirms = 0
        self.open = True

    def check(self) -> None:
        self.checks += 1
        if not self.open:
            raise LostLeadership("test: the Lease is held by b")

    def confirm(self) -> None:
        self.check()
        self.confirms += 1
        self.left -= 1
        if self.left < 0:
            self.open = False
            raise LostLeadership("test: the Lease is held by b")


def harness(members: int, concurrency: int, fence: Fence) -> tuple[GangController, FakeCluster]:
    config = Config(release_concurrency=concurrency)
    cluster = FakeCluster(fence)
    cache = ClusterCache(config)
    cache.replace_nodes([make_node(f"n{i}").topology("b1", "s1", f"h{i}").gpus(8).build() for i in range(members)])
    cache.replace_pods([cluster.pods.add(make_pod(f"w-{i}").gang("g", members).index(i).gpus(8).gated().build())
                        for i in range(members)])
    return compose(cache, cluster, config, wall_clock=lambda: 1_800_000_000.0).gangs, cluster


def released(cluster: FakeCluster) -> list[str]:
    return sorted(ref.name for ref, pod in cluster.pods.objects.items() if not pod["spec"].get("schedulingGates"))


@pytest.mark.parametrize(("members", "concurrency", "want_confirms"), [
    # the plan's member, then waves of 3 over the other 9: 1 + 3
    ("ten members, three in flight", 3, 4),
    ("ten members, all in flight at once", 16, 2),
])
def test_the_fence_is_confirmed_before_the_first_write_and_before_each_wave(members, concurrency, want_confirms):
    fence = Fence()
    controller, cluster = harness(10, concurrency, fence)
    outcome = controller.reconcile("team-a/g")
    assert not outcome.retry
    assert len(released(cluster)) == 10
    assert fence.confirms == want_confirms
    assert fence.checks >= 10 + want_confirms, "and every write checked it"


def test_a_release_stops_at_the_wave_whose_confirmation_fails():
    fence = Fence(confirms=2)  # the plan's member and the first wave; the Lease is gone before the second
    controller, cluster = harness(10, 3, fence)
    outcome = controller.reconcile("team-a/g")
    assert outcome.retry
    assert len(released(cluster)) == 4, "the first member and one wave of 3"
    assert "not written: test: the Lease is held by b" in outcome.reason
    assert not [e for e in cluster.events if e.reason == "GangReleased" and e.regarding.name not in released(cluster)]


def test_no_release_starts_when_the_fence_is_closed_and_no_event_goes_out():
    fence = Fence(confirms=0)
    controller, cluster = harness(4, 3, fence)
    outcome = controller.reconcile("team-a/g")
    assert outcome.retry and "release not started" in outcome.reason
    assert cluster.pods.patches == [] and cluster.events == []


def test_every_intent_of_every_writer_port_checks_the_fence():
    fence = Fence(confirms=0)
    cluster = FakeCluster(fence)
    pod = cluster.pods.add(make_pod("w-0").gpus(1).gated().build())
    cluster.nodes.add(make_node("n1").build())
    cluster.workloads.add("Job", job_object("train", 2))
    cluster.groups.add({"metadata": {"name": "g", "finalizers": []}})
    made = cluster.gang_objects.create_gang_object("ml", {"metadata": {"name": "train"}, "spec": {}})
    fence.open = False
    ref, uid, rv = PodKey.of(pod), "uid-w-0", pod["metadata"]["resourceVersion"]
    member = MemberRelease(ref, uid, rv, "n1", "n1", 0, "2027-01-15T08:00:00.000+00:00")
    job, record = ("Job", "ml", "train"), Record("train", "2027-01-15T08:00:00.000+00:00", ("n1", "n2"))
    nomination = Nomination("2027-01-15T08:00:00Z", {uid: "n1"})
    pods, nodes, workloads, objects, groups = (cluster.pods, cluster.nodes, cluster.workloads, cluster.gang_objects,
                                               cluster.groups)
    for write in (lambda: pods.release_member(member, [contract.GATE], "2027-01-15T08:00:01Z"),
                  lambda: pods.set_nomination(ref, nomination, rv), lambda: pods.clear_nomination(ref),
                  lambda: pods.clear_plan(ref), lambda: pods.evict(ref, uid), lambda: pods.may_evict(ref, uid),
                  lambda: pods.set_pod_condition(ref, {"type": "X", "status": "True"}),
                  lambda: pods.mark_disrupted_and_delete(ref, uid, "r", "m", "t"),
                  lambda: nodes.taint_node("n1"), lambda: nodes.untaint_node("n1"),
                  lambda: nodes.record_failures("n1", lambda before: "x"),
                  lambda: workloads.set_reservation(job, record, "uid-train"), lambda: workloads.drop_reservation(job, record),
                  lambda: objects.create_gang_object("ml", {"metadata": {"name": "other"}, "spec": {}}),
                  lambda: objects.set_gang_object_status("ml", "train", {"phase": "Waiting"}),
                  lambda: objects.delete_gang_object("ml", "train", made["metadata"]["uid"]),
                  lambda: groups.set_group_status("g", {"phase": "Pending"}),
                  lambda: groups.set_group_finalizers("g", [contract.DEVICE_GROUP_FINALIZER], "0"),
                  lambda: cluster.state.save_backoff("team-a/train", 1, 1_800_000_000.0)):
        with pytest.raises(LostLeadership):
            write()
    pods.emit_event(ref, uid, "Normal", "R", "m")
    nodes.emit_event("n1", "Normal", "R", "m")
    workloads.emit_event(job, "Normal", "R", "m")
    assert pods.patches == pods.conditions == pods.deleted == pods.evicted == pods.dry_runs == []
    assert nodes.patches == [] and workloads.patches == [] and objects.writes == [("create", "ml", "train")]
    assert "status" not in groups.objects["g"] and cluster.state.data == {} and cluster.events == []


# --- the real client: the fence at the socket, keepalive -------------------------------------
class Recorder(BaseHTTPRequestHandler):
    """An API server stand-in that records each request line and answers ``{}``."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._apply()

    def _apply(self) -> None:
        Recorder.seen.append(f"{self.command} {self.path.split('?')[0]}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _answer


class Slow(Recorder):
    """An API server stand-in that holds every write for :attr:`hold` seconds before it
    applies it (records it) and answers: a request waiting in a priority-and-fairness
    queue. A write whose client gave up by then is not applied (the API server cancels a
    request whose connection closed)."""

    hold: ClassVar[float] = 2.0

    def _slow(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        time.sleep(Slow.hold)
        self.connection.settimeout(0.01)
        try:
            if self.connection.recv(1, socket.MSG_PEEK) == b"":
                return  # the client closed the connection: the request is cancelled
        except (TimeoutError, BlockingIOError):
            pass
        except OSError:
            return
        self.connection.settimeout(None)
        self._apply()

    do_PATCH = do_POST = do_DELETE = do_PUT = _slow

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def api_server(tmp_path: Path, request: pytest.FixtureRequest):
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), getattr(request, "param", Recorder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    yield str(kubeconfig)
    server.shutdown()
    server.server_close()


def test_a_write_built_while_leading_is_stopped_at_the_socket_once_the_fence_closes(api_server):
    state = {"open": True}

    def fence() -> None:
        if not state["open"]:
            raise LostLeadership("the Lease is held by b")

    api = kube.api_client(api_server, fence=fence, user_agent="troupe-reconciler (a)")
    core = client.CoreV1Api(api)
    core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"x": "1"}}}, _preload_content=False)
    state["open"] = False  # frozen here, say, and resumed after the takeover
    with pytest.raises(LostLeadership):
        core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"x": "2"}}}, _preload_content=False)
    with pytest.raises(LostLeadership):
        core.delete_namespaced_pod("p", "ns", _preload_content=False)
    core.read_namespaced_pod("p", "ns", _preload_content=False)  # reads pass
    assert Recorder.seen == ["PATCH /api/v1/namespaces/ns/pods/p", "GET /api/v1/namespaces/ns/pods/p"]


@pytest.mark.parametrize("api_server", [Slow], indirect=True)
def test_a_write_is_awaited_only_until_the_fence_closes_and_one_held_past_it_is_never_applied(api_server):
    """A write sent 0.3 s before the fence closes, which the API server holds for 2 s (a
    queue): the client gives up when the fence closes, closing the connection, so the
    server never applies it after a takeover (docs/decisions/030)."""
    closes_at = time.monotonic() + 0.3
    api = kube.api_client(api_server, fence=lambda: None, retries=0,
                          fence_remaining=lambda: max(0.0, closes_at - time.monotonic()))
    core = client.CoreV1Api(api)
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"x": "1"}}}, _preload_content=False,
                                  _request_timeout=kube.REQUEST_TIMEOUT)
    waited = time.monotonic() - started
    assert waited < 1.0, f"the write was awaited {waited:.2f}s, past the fence"
    core.read_namespaced_pod("p", "ns", _preload_content=False)  # reads are not bounded by the fence
    time.sleep(Slow.hold + 0.5)
    assert Recorder.seen == ["GET /api/v1/namespaces/ns/pods/p"], "the held write was never applied"
    unbounded = kube.api_client(api_server, fence=lambda: None, retries=0)
    client.CoreV1Api(unbounded).patch_namespaced_pod("p", "ns", {}, _preload_content=False)
    assert Recorder.seen[-1] == "PATCH /api/v1/namespaces/ns/pods/p", "without a lease a write is awaited"


def test_every_connection_has_tcp_keepalive_that_notices_a_dead_peer_within_a_minute(api_server):
    api = kube.api_client(api_server)
    resp = client.CoreV1Api(api).read_namespaced_pod("p", "ns", _preload_content=False)
    sock = resp.connection.sock
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
    interval = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
    count = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
    assert (idle, interval, count) == (kube.KEEPALIVE_IDLE, kube.KEEPALIVE_INTERVAL, kube.KEEPALIVE_COUNT)
    assert idle + interval * count <= 60
