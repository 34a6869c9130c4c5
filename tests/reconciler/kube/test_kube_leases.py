"""The elector's Lease calls against the API (KubeLeases): what each answer becomes."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.daemon.election import LeaseConflict, LeaseError
from reconciler.kube.leases import KubeLeases


class Response:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class Coordination:
    """The Lease calls, each answering with what ``answer`` holds for its verb (an
    exception is raised); records the timeouts given."""

    def __init__(self, **answer):
        self.answer = answer
        self.timeouts = []

    def _reply(self, verb, kwargs):
        self.timeouts.append(kwargs["_request_timeout"])
        answer = self.answer[verb]
        if isinstance(answer, Exception):
            raise answer
        return Response(answer)

    def read_namespaced_lease(self, name, namespace, **kwargs):
        return self._reply("get", kwargs)

    def create_namespaced_lease(self, namespace, body, **kwargs):
        return self._reply("create", kwargs)

    def replace_namespaced_lease(self, name, namespace, body, **kwargs):
        return self._reply("update", kwargs)


def leases(**answer):
    out = KubeLeases(client.ApiClient(client.Configuration()), "troupe-system", "troupe-reconciler")
    out.coordination = Coordination(**answer)
    return out


LEASE = {"metadata": {"name": "troupe-reconciler", "resourceVersion": "5"}, "spec": {"holderIdentity": "a"}}


def test_a_lease_is_read_created_and_updated_within_the_timeout_given():
    api = leases(get=LEASE, create=LEASE, update=LEASE)
    assert api.get(timeout=2.0) == LEASE
    assert api.create(LEASE, timeout=3.0) == LEASE
    assert api.update(LEASE, timeout=4.0) == LEASE
    assert api.coordination.timeouts == [2.0, 3.0, 4.0]


def test_a_missing_lease_is_none_and_a_lease_deleted_under_an_update_a_conflict():
    assert leases(get=ApiException(status=404)).get(timeout=1.0) is None
    with pytest.raises(LeaseConflict, match="deleted meanwhile"):
        leases(update=ApiException(status=404)).update(LEASE, timeout=1.0)
    with pytest.raises(LeaseError, match="namespace not found"):
        leases(create=ApiException(status=404)).create(LEASE, timeout=1.0)


def test_a_lost_race_is_a_conflict_and_every_other_failure_a_lease_error():
    conflict = ApiException(status=409)
    conflict.body = b'{"message": "the object has been modified"}'
    with pytest.raises(LeaseConflict, match="conflict: the object has been modified"):
        leases(update=conflict).update(LEASE, timeout=1.0)
    with pytest.raises(LeaseError, match="troupe-system/troupe-reconciler: 500") as refused:
        leases(get=ApiException(status=500, reason="boom")).get(timeout=1.0)
    assert not isinstance(refused.value, LeaseConflict)
    with pytest.raises(LeaseError, match="ReadTimeoutError"):
        leases(get=urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")).get(timeout=1.0)
