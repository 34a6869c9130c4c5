"""The reconciler's metrics: API requests by verb, resource and code where they leave the
client; gang releases, rollbacks and their timings derived from each reconcile's outcome."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from reconciler.daemon import metrics
from reconciler.daemon.controller import Outcome
from reconciler.engine.decision.actions import MemberRelease, Release, Status
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Observation, Phase
from testbed.engine_builders import make_pod


@pytest.mark.parametrize(("method", "url", "want"), [
    ("GET", "https://h/api/v1/pods?limit=500", ("list", "pods")),
    ("GET", "https://h/api/v1/pods?watch=True&resourceVersion=7", ("watch", "pods")),
    ("GET", "https://h/api/v1/namespaces/ml/pods/w-0", ("get", "pods")),
    ("GET", "https://h/api/v1/namespaces/ml", ("get", "namespaces")),
    ("GET", "https://h/api/v1/nodes", ("list", "nodes")),
    ("PATCH", "https://h/api/v1/namespaces/ml/pods/w-0/status", ("patch", "pods/status")),
    ("POST", "https://h/api/v1/namespaces/ml/pods/w-0/eviction", ("create", "pods/eviction")),
    ("POST", "https://h/api/v1/namespaces/ml/events", ("create", "events")),
    ("PUT", "https://h/apis/coordination.k8s.io/v1/namespaces/t/leases/troupe", ("update", "leases")),
    ("DELETE", "https://h/api/v1/namespaces/ml/pods/w-0", ("delete", "pods")),
    ("DELETE", "https://h/api/v1/namespaces/ml/pods", ("deletecollection", "pods")),
    ("GET", "https://h/apis/jobset.x-k8s.io/v1alpha2/jobsets", ("list", "jobsets")),
    ("POST", "https://h/apis/authentication.k8s.io/v1/selfsubjectreviews", ("create", "selfsubjectreviews")),
    ("GET", "https://h/version", ("get", "other")),
])
def test_a_request_is_named_by_its_kubernetes_verb_and_resource(method, url, want):
    assert metrics.request_verb(method, url) == want


class _Api(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/api/v1/nodes"):
            body, code = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}, 200
        else:
            body, code = {"kind": "Status", "code": 404, "message": "not found"}, 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def count(verb, resource, code):
    return REGISTRY.get_sample_value("troupe_kube_api_requests_total",
                                     {"verb": verb, "resource": resource, "code": code}) or 0.0


def test_every_request_of_an_instrumented_client_is_counted_by_verb_resource_and_code():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{server.server_port}"
        api = client.ApiClient(cfg)
        metrics.instrument(api)
        core = client.CoreV1Api(api)
        before = count("list", "nodes", "200"), count("get", "pods", "404")
        core.list_node()
        with pytest.raises(client.ApiException):
            core.read_namespaced_pod("w-0", "ml")
        assert (count("list", "nodes", "200"), count("get", "pods", "404")) == (before[0] + 1, before[1] + 1)
    finally:
        server.shutdown()
        server.server_close()
    closed = client.Configuration()
    closed.host = f"http://127.0.0.1:{server.server_port}"
    closed.retries = 0
    api = client.ApiClient(closed)
    metrics.instrument(api)
    errors = count("list", "nodes", "error")
    with pytest.raises(Exception):  # noqa: B017  urllib3's connection error, whichever class
        client.CoreV1Api(api).list_node(_request_timeout=1)
    assert count("list", "nodes", "error") == errors + 1


# --- gang timings ---------------------------------------------------------------------------
def sample(name):
    return REGISTRY.get_sample_value(name) or 0.0


def gang(released_at=""):
    members = []
    for i, created in enumerate(("2026-03-01T10:00:00Z", "2026-03-01T10:00:10Z")):
        b = make_pod(f"w-{i}", "ml").gang("g", 2).created(created)
        if released_at:
            b = b.annotate("reconciler.troupe.io/released-at", released_at).on(f"n{i}")
        members.append(b.info())
    return Gang("ml/g", "ml", "g", tuple(members), 2, 30, 0)


RULES = {Phase.PLACED: lifecycle.PLACED, Phase.RELEASED: lifecycle.ALL_RELEASED, Phase.ROLLED_BACK: lifecycle.TIMED_OUT}


def outcome(phase, obs, release=(), retry=False):
    actions = (Release(tuple(release)),) if release else ()
    decision = Decision("ml/g", RULES[phase], Status(()), obs, actions)
    return Outcome(phase, "", retry=retry, decision=decision, released=0 if retry else len(release),
                   rolled_back=phase is Phase.ROLLED_BACK)


T0 = 1772359210.0  # 2026-03-01T10:00:10Z: the gang's newest member was created


def test_a_release_is_timed_from_complete_to_written_and_from_released_to_all_bound():
    m = metrics.GangMetrics()
    releases, waited = sample("troupe_gang_releases_total"), sample("troupe_gang_complete_to_released_seconds_sum")
    bound_sum = sample("troupe_gang_released_to_bound_seconds_sum")
    bound_count = sample("troupe_gang_released_to_bound_seconds_count")
    member = MemberRelease("ml/w-0", "u", "1", "n0", "n0", 0, "t")
    placed = Observation("ml/g", active=2, size=2, gated=2)
    m.observe("ml/g", outcome(Phase.PLACED, placed, (member,)), lambda: gang(), T0 + 4)
    assert sample("troupe_gang_releases_total") == releases + 1
    assert sample("troupe_gang_complete_to_released_seconds_sum") == pytest.approx(waited + 4)
    half = Observation("ml/g", active=2, size=2, released=2, bound=1)
    m.observe("ml/g", outcome(Phase.RELEASED, half), lambda: gang("2026-03-01T10:00:14.000+00:00"), T0 + 5)
    assert sample("troupe_gang_released_to_bound_seconds_count") == bound_count
    whole = Observation("ml/g", active=2, size=2, released=2, bound=2)
    m.observe("ml/g", outcome(Phase.RELEASED, whole), lambda: gang("2026-03-01T10:00:14.000+00:00"), T0 + 7.5)
    assert sample("troupe_gang_released_to_bound_seconds_count") == bound_count + 1
    assert sample("troupe_gang_released_to_bound_seconds_sum") == pytest.approx(bound_sum + 3.5)
    m.observe("ml/g", outcome(Phase.RELEASED, whole), lambda: gang("2026-03-01T10:00:14.000+00:00"), T0 + 60)
    assert sample("troupe_gang_released_to_bound_seconds_count") == bound_count + 1  # once per release


def test_a_new_leader_times_the_binding_of_a_release_its_predecessor_made():
    m = metrics.GangMetrics()
    count = sample("troupe_gang_released_to_bound_seconds_count")
    m.observe("ml/g", outcome(Phase.RELEASED, Observation("ml/g", 2, 2, released=2, bound=0)), lambda: None, T0)
    m.observe("ml/g", outcome(Phase.RELEASED, Observation("ml/g", 2, 2, released=2, bound=2)),
              lambda: gang("2026-03-01T10:00:14.000+00:00"), T0 + 6)
    assert sample("troupe_gang_released_to_bound_seconds_count") == count + 1


def test_a_gang_found_running_whole_is_not_timed_and_a_failed_release_is_not_counted():
    m = metrics.GangMetrics()
    count, releases = sample("troupe_gang_released_to_bound_seconds_count"), sample("troupe_gang_releases_total")
    m.observe("ml/g", outcome(Phase.RELEASED, Observation("ml/g", 2, 2, released=2, bound=2)), lambda: gang(), T0)
    member = MemberRelease("ml/w-0", "u", "1", "n0", "n0", 0, "t")
    m.observe("ml/g", outcome(Phase.PLACED, Observation("ml/g", 2, 2, gated=2), (member,), retry=True),
              lambda: gang(), T0)
    assert (sample("troupe_gang_released_to_bound_seconds_count"), sample("troupe_gang_releases_total")) == (
        count, releases)


def test_rollbacks_are_counted_once_the_rollback_is_done():
    m = metrics.GangMetrics()
    before = sample("troupe_gang_rollbacks_total")
    obs = Observation("ml/g", 2, 2, released=2, expired=2)
    m.observe("ml/g", outcome(Phase.ROLLED_BACK, obs, retry=True), lambda: gang(), T0)
    m.observe("ml/g", outcome(Phase.ROLLED_BACK, obs), lambda: gang(), T0)
    assert sample("troupe_gang_rollbacks_total") == before + 1


# --- by namespace ----------------------------------------------------------------------------
def gated_gang(namespace, name, created):
    members = tuple(make_pod(f"{name}-{i}", namespace).gang(name, 2).created(c).gated().info()
                    for i, c in enumerate(created))
    return Gang(f"{namespace}/{name}", namespace, name, members, 2, 30, 0)


def waiting(key, gated=2, released=0):
    obs = Observation(key, active=2, size=2, gated=gated, released=released)
    return Outcome(Phase.UNSCHEDULABLE, "", decision=Decision(key, lifecycle.UNPLACED, Status(()), obs, ()))


def since(namespace):
    return REGISTRY.get_sample_value("troupe_gang_waiting_since_timestamp_seconds", {"namespace": namespace})


def test_a_namespace_reports_since_when_its_longest_waiting_gang_waits_until_none_waits():
    m = metrics.GangMetrics()
    a = gated_gang("tenant-w", "a", ("2026-03-01T10:00:00Z", "2026-03-01T10:00:10Z"))
    b = gated_gang("tenant-w", "b", ("2026-03-01T09:00:00Z", "2026-03-01T09:30:00Z"))
    m.observe(a.key, waiting(a.key), lambda: a, T0)
    assert since("tenant-w") == T0 - 10  # a's oldest gated member: 10:00:00
    m.observe(b.key, waiting(b.key), lambda: b, T0)
    assert since("tenant-w") == T0 - 10 - 3600  # b waits longer, since 09:00:00
    m.observe(b.key, outcome(Phase.PLACED, Observation(b.key, 2, 2, gated=2), (MemberRelease(
        "tenant-w/b-0", "u", "1", "n0", "n0", 0, "t"),)), lambda: b, T0)
    assert since("tenant-w") == T0 - 10  # b released: a is the longest-waiting again
    m.forget(a.key)
    assert since("tenant-w") is None  # nothing waits: no series an alert could read as stale


def test_namespace_labels_are_bounded_and_the_rest_are_other():
    labels = metrics.NamespaceLabels(limit=2)
    assert [labels.label(n) for n in ("a", "b", "c", "a", "d", "b")] == ["a", "b", "other", "a", "other", "b"]


def test_rollbacks_are_counted_by_namespace_too():
    m = metrics.GangMetrics(metrics.NamespaceLabels(limit=1))
    def count(namespace):
        return REGISTRY.get_sample_value("troupe_gang_rollbacks_by_namespace_total", {"namespace": namespace}) or 0.0
    before = count("tenant-r"), count("other")
    obs = Observation("tenant-r/g", 2, 2, released=2, expired=2)
    m.observe("tenant-r/g", outcome(Phase.ROLLED_BACK, obs), lambda: gang(), T0)
    m.observe("tenant-s/g", outcome(Phase.ROLLED_BACK, obs), lambda: gang(), T0)
    assert (count("tenant-r"), count("other")) == (before[0] + 1, before[1] + 1)
