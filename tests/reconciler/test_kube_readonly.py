"""The read-only client of kubectl troupe: every page of a list from the watch cache, what
an error becomes, the custom resources it may leave out, and the configuration it reads."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.kube import readonly


class Response:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}


class PodPages:
    """A pod list function of two pages; raises ``error`` instead when given one."""

    def __init__(self, error=None):
        self.error = error
        self.requests = []

    def __call__(self, **kwargs):
        self.requests.append(kwargs)
        if self.error is not None:
            raise self.error
        if kwargs["_continue"] is None:
            return Response({"kind": "PodList", "items": [pod("a"), pod("b")], "metadata": {"continue": "t1"}})
        return Response({"kind": "PodList", "items": [pod("c")], "metadata": {"resourceVersion": "9"}})


def test_every_page_is_listed_from_the_watch_cache_then_by_its_token():
    server = PodPages()
    items = readonly._list_all(server, "pods", field_selector=readonly.ACTIVE_PODS)
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert [(r.get("resource_version"), r["_continue"]) for r in server.requests] == [("0", None), (None, "t1")]
    assert all(r["field_selector"] == readonly.ACTIVE_PODS for r in server.requests)


def test_a_refused_list_is_a_permission_error_and_another_failure_an_os_error_naming_it():
    with pytest.raises(PermissionError, match="list pods: 403"):
        readonly._list_all(PodPages(ApiException(status=403, reason="Forbidden")), "pods")
    with pytest.raises(OSError, match="list nodes: 500"):
        readonly._list_all(PodPages(ApiException(status=500, reason="boom")), "nodes")


def test_a_collection_not_served_or_not_allowed_is_left_out_and_other_failures_are_not():
    for status in (403, 404):
        assert readonly._list_if_allowed(PodPages(ApiException(status=status)), "jobsets.jobset.x-k8s.io") == []
    with pytest.raises(OSError, match=r"list jobsets\.jobset\.x-k8s\.io: 500"):
        readonly._list_if_allowed(PodPages(ApiException(status=500, reason="boom")), "jobsets.jobset.x-k8s.io")
    assert [i["metadata"]["name"] for i in readonly._list_if_allowed(PodPages(), "pods")] == ["a", "b", "c"]


def test_the_configuration_is_read_from_its_config_map_and_is_none_when_unreadable(monkeypatch):
    answers = {}

    def read(self, name, namespace, **kwargs):
        answer = answers[(namespace, name)]
        if isinstance(answer, Exception):
            raise answer
        return Response(answer)

    monkeypatch.setattr(client.CoreV1Api, "read_namespaced_config_map", read)
    api = client.ApiClient(client.Configuration())
    answers[("troupe-system", "troupe")] = {"data": {"config.yaml": "gangTimeoutSeconds: 60\n"}}
    answers[("troupe-system", "other")] = {"data": {}}
    answers[("denied", "troupe")] = ApiException(status=403)
    answers[("broken", "troupe")] = ApiException(status=500, reason="boom")
    assert readonly.read_config_map(api, "troupe-system", "troupe", "config.yaml") == "gangTimeoutSeconds: 60\n"
    assert readonly.read_config_map(api, "troupe-system", "other", "config.yaml") is None
    assert readonly.read_config_map(api, "denied", "troupe", "config.yaml") is None
    with pytest.raises(OSError, match="read ConfigMap broken/troupe: 500"):
        readonly.read_config_map(api, "broken", "troupe", "config.yaml")
