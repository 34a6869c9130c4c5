"""The webhook certificates' store against the API server (:class:`KubeCertificateStore`)
and the manager that keeps them, woken by watches of what it stores
(:func:`webhook_certificates`)."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.daemon import certificates
from reconciler.kube.client import MERGE_PATCH, REQUEST_TIMEOUT, SMP, error_message
from reconciler.kube.informer import Informer, Resource
from reconciler.kube.writer import event_body

log = logging.getLogger(__name__)


class KubeCertificateStore:
    """:class:`reconciler.daemon.certificates.CertificateStore` against the API server: the two
    Secrets of ``settings.namespace`` (read with ``get``, written with a merge patch that
    carries the resourceVersion read, so a concurrent writer makes it fail with 409) and the
    MutatingWebhookConfiguration (a strategic merge patch of each webhook's
    ``clientConfig.caBundle``, by webhook name, also under the resourceVersion read).
    RBAC: ``get``/``list``/``watch``/``patch`` of those objects by name
    (``charts/troupe/templates/certificates.yaml``)."""

    def __init__(self, api: client.ApiClient, settings: certificates.Settings) -> None:
        self.core = client.CoreV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)
        self.settings = settings

    @staticmethod
    def _read(what: str, read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        """The object as a dict, None when it does not exist; other errors name ``what``."""
        try:
            resp = read(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise certificates.CertificateError(f"read {what}: {e.status} {error_message(e)}") from e
        return dict(json.loads(resp.data))

    def read_secret(self, name: str) -> certificates.SecretState | None:
        ns = self.settings.namespace
        body = self._read(f"Secret {ns}/{name}", self.core.read_namespaced_secret, name, ns)
        if body is None:
            return None
        data = {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}
        return certificates.SecretState(data, body["metadata"]["resourceVersion"])

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: certificates.SecretState) -> None:
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": previous.resource_version},
            "data": {**{k: None for k in previous.data if k not in data},
                     **{k: base64.b64encode(v).decode() for k, v in data.items()}},
        }
        try:
            self.core.patch_namespaced_secret(name, self.settings.namespace, patch, _content_type=MERGE_PATCH,
                                              _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            raise certificates.CertificateError(f"write Secret {self.settings.namespace}/{name}: {e.status} {error_message(e)}") from e

    def read_config(self) -> certificates.ConfigState | None:
        name = self.settings.webhook_configuration
        body = self._read(f"MutatingWebhookConfiguration {name}", self.admission.read_mutating_webhook_configuration, name)
        if body is None:
            return None
        names = tuple(w["name"] for w in body.get("webhooks") or [])
        bundles = tuple(base64.b64decode((w.get("clientConfig") or {}).get("caBundle") or "")
                        for w in body.get("webhooks") or [])
        stamp = ((body["metadata"].get("annotations") or {}).get(certificates.BUNDLE_UPDATED_AT))
        try:
            at = dt.datetime.fromisoformat(stamp) if stamp else None
        except ValueError:
            at = None
        return certificates.ConfigState(bundles, at, body["metadata"]["resourceVersion"], names)

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: certificates.ConfigState) -> None:
        name = self.settings.webhook_configuration
        encoded = base64.b64encode(bundle).decode()
        patch = {
            "metadata": {"resourceVersion": previous.resource_version,
                         "annotations": {certificates.BUNDLE_UPDATED_AT: at.isoformat()}},
            "webhooks": [{"name": w, "clientConfig": {"caBundle": encoded}} for w in previous.webhook_names],
        }
        try:
            self.admission.patch_mutating_webhook_configuration(name, patch, _content_type=SMP, _preload_content=False,
                                                                _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            raise certificates.CertificateError(f"write caBundle of MutatingWebhookConfiguration {name}: {e.status} {error_message(e)}") from e

    def emit(self, kind: str, reason: str, message: str) -> None:
        s = self.settings
        body = event_body(client.V1ObjectReference(kind="Secret", namespace=s.namespace, name=s.tls_secret,
                                                   api_version="v1"),
                          kind, reason, message, "troupe-reconciler", dt.datetime.now(dt.UTC))
        try:
            self.core.create_namespaced_event(s.namespace, body, _request_timeout=REQUEST_TIMEOUT, _preload_content=False)
        except Exception as e:  # noqa: BLE001  best effort: the log has it too
            log.warning("event %s on Secret %s/%s not recorded: %s", reason, s.namespace, s.tls_secret, e)


def webhook_certificates(api: client.ApiClient, settings: certificates.Settings) -> certificates.CertificateManager:
    """The :class:`~reconciler.daemon.certificates.CertificateManager` for ``settings`` on ``api``, with
    watches of the two Secrets and the webhook configuration (each by a ``metadata.name``
    field selector, which RBAC authorizes against ``resourceNames``) that wake it on any change."""
    manager = certificates.CertificateManager(KubeCertificateStore(api, settings), settings)
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)

    def watch(resource: Resource) -> Informer:
        return Informer(resource, lambda _items: manager.wake(), lambda _kind, _obj: manager.wake())

    for secret in (settings.ca_secret, settings.tls_secret):
        manager.watchers.append(watch(Resource(f"secret {secret}", functools.partial(
            core.list_namespaced_secret, settings.namespace, field_selector=f"metadata.name={secret}"))))
    manager.watchers.append(watch(Resource(f"mutatingwebhookconfiguration {settings.webhook_configuration}",
                                           functools.partial(admission.list_mutating_webhook_configuration,
                                                             field_selector=f"metadata.name={settings.webhook_configuration}"))))
    return manager
