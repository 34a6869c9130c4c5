"""The webhook certificates' store against the API (KubeCertificateStore): the Secrets and
the webhook configuration as read and as patched, and its Event about the serving Secret."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.daemon import certificates
from reconciler.kube.certificates import KubeCertificateStore
from reconciler.kube.client import MERGE_PATCH, SMP

SETTINGS = certificates.Settings(namespace="troupe-system", service="troupe-webhook",
                                 webhook_configuration="troupe", tls_secret="troupe-tls", ca_secret="troupe-ca")


class Response:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class Api:
    """The calls the store makes: reads answer from ``objects`` (404 when absent); writes
    and Events are recorded."""

    def __init__(self, **objects):
        self.objects = objects
        self.patches = []
        self.events = []

    def _read(self, name):
        if name not in self.objects:
            raise ApiException(status=404)
        return Response(self.objects[name])

    def read_namespaced_secret(self, name, namespace, **kwargs):
        return self._read(name)

    def read_mutating_webhook_configuration(self, name, **kwargs):
        return self._read(name)

    def patch_namespaced_secret(self, name, namespace, patch, **kwargs):
        self.patches.append((name, patch, kwargs["_content_type"]))

    def patch_mutating_webhook_configuration(self, name, patch, **kwargs):
        self.patches.append((name, patch, kwargs["_content_type"]))

    def create_namespaced_event(self, namespace, body, **kwargs):
        self.events.append((namespace, body))


def store(**objects):
    out = KubeCertificateStore(client.ApiClient(client.Configuration()), SETTINGS)
    out.core = out.admission = Api(**objects)
    return out


def b64(data):
    return base64.b64encode(data).decode()


def test_a_secret_is_read_decoded_and_a_missing_one_is_none():
    kube = store(**{"troupe-tls": {"metadata": {"resourceVersion": "3"}, "data": {"tls.crt": b64(b"CERT")}}})
    assert kube.read_secret("troupe-tls") == certificates.SecretState({"tls.crt": b"CERT"}, "3")
    assert kube.read_secret("troupe-ca") is None


def test_a_secret_is_written_under_the_version_read_and_keys_it_no_longer_has_are_removed():
    kube = store()
    kube.write_secret("troupe-tls", {"tls.crt": b"NEW"}, certificates.SecretState({"tls.crt": b"OLD", "old": b"x"}, "3"))
    ((name, patch, content_type),) = kube.core.patches
    assert (name, content_type) == ("troupe-tls", MERGE_PATCH)
    assert patch == {"metadata": {"resourceVersion": "3"}, "data": {"old": None, "tls.crt": b64(b"NEW")}}


def test_the_ca_bundle_of_every_webhook_is_read_and_written_with_its_stamp():
    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    kube = store(troupe={"metadata": {"resourceVersion": "8", "annotations": {certificates.BUNDLE_UPDATED_AT: at.isoformat()}},
                         "webhooks": [{"name": "pods.troupe.io", "clientConfig": {"caBundle": b64(b"CA")}},
                                      {"name": "groups.troupe.io", "clientConfig": {}}]})
    state = kube.read_config()
    assert state == certificates.ConfigState((b"CA", b""), at, "8", ("pods.troupe.io", "groups.troupe.io"))
    kube.write_ca_bundle(b"CA2", at, state)
    ((name, patch, content_type),) = kube.admission.patches
    assert (name, content_type) == ("troupe", SMP)
    assert patch["metadata"] == {"resourceVersion": "8", "annotations": {certificates.BUNDLE_UPDATED_AT: at.isoformat()}}
    assert patch["webhooks"] == [{"name": w, "clientConfig": {"caBundle": b64(b"CA2")}}
                                 for w in ("pods.troupe.io", "groups.troupe.io")]


def test_a_failed_read_names_the_object():
    kube = store()

    def refuse(*args, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    kube.core.read_namespaced_secret = refuse
    with pytest.raises(certificates.CertificateError, match="read Secret troupe-system/troupe-ca: 403 Forbidden"):
        kube.read_secret("troupe-ca")


def test_an_event_is_about_the_serving_secret_from_the_one_event_builder():
    kube = store()
    kube.emit("Warning", "CertificateRenewalFailed", "the CA Secret is unreadable")
    ((namespace, body),) = kube.core.events
    assert namespace == "troupe-system" and body.metadata.generate_name == "troupe-tls."
    assert body.involved_object.to_dict() == client.V1ObjectReference(
        kind="Secret", namespace="troupe-system", name="troupe-tls", api_version="v1").to_dict()
    assert (body.type, body.reason, body.source.component) == ("Warning", "CertificateRenewalFailed", "troupe-reconciler")
