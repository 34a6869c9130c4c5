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


def test_a_volume_kind_that_may_not_be_listed_leaves_all_three_out_with_one_note_and_namespaces_stay(monkeypatch):
    """kubectl troupe reads what the cache reads for the volume filters and namespace
    selectors; one this user may not list is a note, not a failure, and a catalog without
    its claims would refuse every pod with one, so the volume filters are skipped."""
    def fake_list(list_fn, what, **kwargs):
        if what == "persistentvolumes":
            raise PermissionError(f"list {what}: 403 forbidden") from ApiException(status=403)
        return [{"kind": "Any", "metadata": {"name": what}}]

    monkeypatch.setattr(readonly, "_list_all", fake_list)
    notes = []
    objects = readonly.read_cluster(client.ApiClient(), notes=notes)
    kinds = {kind for _, kind, _ in objects}
    assert notes == ["note: cannot list persistentvolumes: 403 forbidden: the volume filters are skipped"]
    assert {"Namespace", "Node", "Pod"} <= kinds
    assert not kinds & {"PersistentVolumeClaim", "PersistentVolume", "CSINode"}


def test_claims_volumes_csinodes_and_namespaces_are_listed(monkeypatch):
    monkeypatch.setattr(readonly, "_list_all", lambda list_fn, what, **kwargs: [{"metadata": {"name": what}}])
    notes = []
    kinds = {kind for _, kind, _ in readonly.read_cluster(client.ApiClient(), notes=notes)}
    assert {"Namespace", "PersistentVolumeClaim", "PersistentVolume", "CSINode"} <= kinds
    assert notes == []


def test_pod_groups_are_listed_where_served_each_object_once(monkeypatch):
    """kubectl troupe on a live cluster reads the pod groups of every source
    (docs/decisions/056-pod-groups.md); an API server serving two versions of the upstream
    API lists one object at both, kept once, from the preferred version."""
    def fake_list(list_fn, what, **kwargs):
        if what.startswith("podgroups."):
            group = what.split(".", 2)[2]
            if group == "scheduling.volcano.sh":
                raise OSError(f"list {what}: 404") from ApiException(status=404)
            return [{"metadata": {"name": "g", "namespace": "ml"}}]  # a built-in API's list: no apiVersion
        return []

    monkeypatch.setattr(readonly, "_list_all", fake_list)
    groups = [(where, obj["apiVersion"]) for where, kind, obj in readonly.read_cluster(client.ApiClient())
              if kind == "PodGroup"]
    assert groups == [("podgroups.v1beta1.scheduling.k8s.io item 0", "scheduling.k8s.io/v1beta1"),
                      ("podgroups.v1alpha1.scheduling.x-k8s.io item 0", "scheduling.x-k8s.io/v1alpha1"),
                      ("podgroups.v2alpha2.scheduling.run.ai item 0", "scheduling.run.ai/v2alpha2")]
