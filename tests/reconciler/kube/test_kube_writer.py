"""The writer ports' primitives against the API (reconciler.kube.writer): what a 429 does to a
write and to an eviction, what other errors become, which call a SharedDeviceGroup patch
takes; and the one Event builder, as the Event sink posts it."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.engine.model.keys import PodKey
from reconciler.kube.client import JSON_PATCH, MERGE_PATCH, RateLimiter
from reconciler.kube.writer import APF_RETRIES, EventSink, KubeWrites, event_body
from reconciler.kube.writer import calls as kube_calls
from reconciler.ports import Conflict, Gone, LostLeadership, Refused, Unsure, WriteError


class Response:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


def api_error(status, retry_after=None):
    e = ApiException(status=status, reason="Reason")
    e.body = json.dumps({"kind": "Status", "message": f"said {status}"}).encode()
    e.headers = {"Retry-After": retry_after} if retry_after is not None else None
    return e


class Answers:
    """A client function answering each call with the next of ``answers`` (an exception is
    raised); records the calls."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def sleeps(monkeypatch):
    """The waits the writer ports asked for (none is waited)."""
    waited = []
    monkeypatch.setattr(kube_calls.time, "sleep", waited.append)
    return waited


@pytest.fixture
def writes(sleeps):
    w = KubeWrites(client.ApiClient(client.Configuration()), RateLimiter(1000, 1000))
    yield w
    w.close()


def test_a_write_turned_away_by_priority_and_fairness_is_retried_after_the_wait_it_asks_for(writes, sleeps):
    read = Answers(api_error(429, retry_after="2"), api_error(429, retry_after="60"), Response({"metadata": {}}))
    writes.pods.core.read_namespaced_pod = read
    assert writes.pods._get(PodKey("ns", "p")) == {"metadata": {}}
    assert len(read.calls) == 3
    assert 2 <= sleeps[0] <= 2.5 and 5 <= sleeps[1] <= 6.25, "capped at 5 s, with up to 25% jitter"


def test_the_retries_of_a_429_are_bounded(writes, sleeps):
    writes.pods.core.read_namespaced_pod = Answers(*[api_error(429)] * (APF_RETRIES + 1))
    with pytest.raises(WriteError, match="read pod ns/p: 429 said 429"):
        writes.pods._get(PodKey("ns", "p"))
    assert len(sleeps) == APF_RETRIES


def test_an_eviction_refused_by_a_disruption_budget_is_not_retried(writes, sleeps):
    evict = Answers(api_error(429))
    writes.pods.core.create_namespaced_pod_eviction = evict
    with pytest.raises(Refused, match="evict pod ns/p: said 429"):
        writes.pods._evict(PodKey("ns", "p"), "uid-1")
    assert len(evict.calls) == 1 and sleeps == []


def test_an_eviction_of_a_replaced_pod_is_gone_and_of_a_missing_one_too(writes):
    writes.pods.core.create_namespaced_pod_eviction = Answers(api_error(409), api_error(404))
    with pytest.raises(Gone, match="replaced by a pod with another uid"):
        writes.pods._evict(PodKey("ns", "p"), "uid-1")
    with pytest.raises(Gone, match="not found"):
        writes.pods._evict(PodKey("ns", "p"), "uid-1")


def test_api_errors_become_the_writer_s_errors(writes):
    writes.pods.core.patch_namespaced_pod = Answers(api_error(409), api_error(404), api_error(422))
    with pytest.raises(Conflict, match="patch pod ns/p: conflict: said 409"):
        writes.pods._patch(PodKey("ns", "p"), {})
    with pytest.raises(Gone):
        writes.pods._patch(PodKey("ns", "p"), {})
    with pytest.raises(WriteError, match="patch pod ns/p: 422 said 422"):
        writes.pods._patch(PodKey("ns", "p"), {})


def test_a_group_and_its_status_are_patched_through_their_own_calls_with_the_patch_s_content_type(writes):
    group = Response({"metadata": {"name": "g"}})
    writes.groups.custom.patch_cluster_custom_object = main = Answers(group)
    writes.groups.custom.patch_cluster_custom_object_status = status = Answers(group)
    assert writes.groups._patch_group("g", {"metadata": {"finalizers": []}}) == {"metadata": {"name": "g"}}
    assert writes.groups._patch_group_status("g", [{"op": "add", "path": "/status", "value": {}}]) == {"metadata": {"name": "g"}}
    (main_args, main_kwargs), = main.calls
    (status_args, status_kwargs), = status.calls
    assert main_args[-2:] == ("g", {"metadata": {"finalizers": []}}) and main_kwargs["_content_type"] == MERGE_PATCH
    assert status_args[-2] == "g" and status_kwargs["_content_type"] == JSON_PATCH


def test_a_closed_fence_stops_a_write_of_every_port_before_it_is_sent():
    class Closed:
        def check(self):
            raise LostLeadership("the Lease is held by b")

    writes = KubeWrites(client.ApiClient(client.Configuration()), RateLimiter(1000, 1000), fence=Closed(),
                        state=("troupe", "state"))
    sent = Answers()
    writes.pods.core.patch_namespaced_pod = writes.nodes.core.patch_node = sent
    writes.workloads.batch.patch_namespaced_job = writes.gang_objects.custom.create_namespaced_custom_object = sent
    writes.groups.custom.patch_cluster_custom_object = writes.state.core.patch_namespaced_config_map = sent
    try:
        for write in (lambda: writes.pods._patch(PodKey("ns", "p"), {}), lambda: writes.nodes._patch_node("n1", {}),
                      lambda: writes.workloads._patch_workload(("Job", "ns", "j"), {}),
                      lambda: writes.gang_objects._create_gang_object("ns", {"metadata": {"name": "g"}}),
                      lambda: writes.groups._patch_group("g", {}), lambda: writes.state._write_state({"k": "v"})):
            with pytest.raises(LostLeadership):
                write()
    finally:
        writes.close()
    assert sent.calls == []


def test_the_event_builder_names_the_object_and_cuts_the_message_to_1024_characters():
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    regarding = client.V1ObjectReference(kind="Pod", namespace="ns", name="w-0", uid="u-1", api_version="v1")
    body = event_body(regarding, "Warning", "GangTimedOut", "x" * 2000, "troupe-reconciler", now)
    assert body.metadata.generate_name == "w-0." and body.metadata.namespace == "ns"
    assert body.involved_object is regarding
    assert (body.type, body.reason, len(body.message)) == ("Warning", "GangTimedOut", 1024)
    assert body.source.component == body.reporting_component == body.reporting_instance == "troupe-reconciler"
    assert (body.first_timestamp, body.last_timestamp, body.count) == (now, now, 1)


class Events:
    def __init__(self):
        self.posted = []

    def create_namespaced_event(self, namespace, body, **kwargs):
        self.posted.append((namespace, body))


def test_the_event_sink_posts_an_event_about_the_pod_and_drops_one_the_fence_refuses():
    class FenceClosingAfterOneCheck:
        checks = 0

        def check(self):
            self.checks += 1
            if self.checks > 1:
                raise LostLeadership("not the leader")

    core = Events()
    sink = EventSink(core, RateLimiter(1000, 1000), "troupe-reconciler", fence=FenceClosingAfterOneCheck())
    sink.emit(PodKey("ns", "w-0"), "u-1", "Normal", "GangReleased", "released")
    sink.emit(PodKey("ns", "w-1"), "u-2", "Normal", "GangReleased", "released")
    sink.close()  # after the queued Events
    ((namespace, body),) = core.posted
    assert namespace == "ns" and body.involved_object.to_dict() == client.V1ObjectReference(
        kind="Pod", namespace="ns", name="w-0", uid="u-1", api_version="v1").to_dict()
    assert (body.type, body.reason, body.message) == ("Normal", "GangReleased", "released")
    assert sink.fenced == 1


def test_a_dry_run_eviction_asks_the_eviction_api_with_dry_run_all_and_a_refusal_is_said(writes):
    evict = Answers(None, api_error(429))
    writes.pods.core.create_namespaced_pod_eviction = evict
    writes.pods.may_evict(PodKey("ns", "p"), "uid-1")
    assert evict.calls[0][1]["dry_run"] == "All"
    with pytest.raises(Refused, match="dry-run evict pod ns/p: said 429"):
        writes.pods.may_evict(PodKey("ns", "p"), "uid-1")


def test_the_nominated_taint_is_added_and_removed_by_a_merge_patch_of_the_whole_list_under_a_version(writes):
    """``spec.taints`` has no merge key: the writer sends the node's whole list, changed only
    in Troupe's taint, with the version it read; a conflict is read again and retried."""
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    ours = {"key": "troupe.io/nominated", "effect": "NoSchedule"}
    read = Answers(Response({"metadata": {"resourceVersion": "7"}, "spec": {"taints": [other]}}),
                   Response({"metadata": {"resourceVersion": "8"}, "spec": {"taints": [other]}}))
    patch = Answers(api_error(409), Response({"metadata": {"name": "n1"}}))
    writes.nodes.core.read_node, writes.nodes.core.patch_node = read, patch
    assert writes.nodes.taint_node("n1") == {"metadata": {"name": "n1"}}
    [(first_args, _), (args, kwargs)] = patch.calls
    assert first_args[1]["metadata"]["resourceVersion"] == "7"
    assert args[1] == {"metadata": {"resourceVersion": "8"}, "spec": {"taints": [other, ours]}}
    assert kwargs["_content_type"] == MERGE_PATCH
    writes.nodes.core.read_node = Answers(Response({"metadata": {"resourceVersion": "9"}, "spec": {"taints": [other, ours]}}),
                                    Response({"metadata": {"resourceVersion": "9"}, "spec": {"taints": [other]}}))
    writes.nodes.core.patch_node = removal = Answers(Response({"metadata": {"name": "n1"}}))
    assert writes.nodes.untaint_node("n1") == {"metadata": {"name": "n1"}}
    assert removal.calls[0][0][1]["spec"] == {"taints": [other]}
    assert writes.nodes.untaint_node("n1") is None, "nothing to remove: nothing written"


class RawResponse:
    """What a call with ``_preload_content=False`` returns: its body read only on ``data``."""

    def __init__(self) -> None:
        self.reads = 0

    @property
    def data(self) -> bytes:
        self.reads += 1
        return b"{}"

    def release_conn(self) -> None:
        """Part of urllib3's response."""


def test_every_raw_response_is_read_whole_so_its_connection_goes_back_to_the_pool():
    """An unread raw response closes its connection when let go, and the next request opens
    another (a TLS handshake on both sides: docs/decisions/068-release-pipeline.md)."""
    calls = kube_calls.Calls(RateLimiter(1000, 1000))
    resp = RawResponse()
    assert calls.call("patch status of pod a/b", lambda **_: resp) is resp
    assert resp.reads == 1
    model = client.V1ConfigMap(data={"k": "v"})  # a model (preloaded) is returned as it is
    assert calls.call("read configmap", lambda **_: model) is model


def test_api_errors_of_unknown_outcome_are_unsure():
    calls = kube_calls.Calls(RateLimiter(1000, 1000))
    for status in (500, 503, 504):
        def fail(status: int = status, **_: object) -> None:
            raise ApiException(status=status, reason="timeout")
        with pytest.raises(Unsure):
            calls.call("patch pod a/b", fail)

    def dropped(**_: object) -> None:
        raise urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")
    with pytest.raises(Unsure, match="ReadTimeoutError"):
        calls.call("patch pod a/b", dropped)
