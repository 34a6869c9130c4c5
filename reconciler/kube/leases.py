"""The elector's Lease calls against a real API server (:class:`KubeLeases`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reconciler.daemon.election import LeaseConflict, LeaseError
from reconciler.kube.client import error_message


class KubeLeases:
    """The elector's Lease calls (:class:`reconciler.daemon.election.LeaseApi`) against a real API
    server: ``coordination.k8s.io/v1`` Lease ``namespace/name``, each request bounded by
    the timeout it is given (total, connection included). Give it a client of its own
    with no retries (``api_client(..., retries=0)``), so a timeout is the whole bound."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float) -> dict[str, Any] | None:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=timeout)
            return dict(json.loads(resp.data))
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name}: conflict: {error_message(e)}") from e
            raise LeaseError(f"Lease {self.namespace}/{self.name}: {e.status} {error_message(e)}") from e
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise LeaseError(f"Lease {self.namespace}/{self.name}: {type(e).__name__}: {e}") from e

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The Lease, or None when it does not exist."""
        return self._call(self.coordination.read_namespaced_lease, self.name, self.namespace, timeout=timeout)

    def create(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Create the Lease; returns it as stored."""
        out = self._call(self.coordination.create_namespaced_lease, self.namespace, dict(lease), timeout=timeout)
        if out is None:
            raise LeaseError(f"Lease {self.namespace}/{self.name}: namespace not found")
        return out

    def update(self, lease: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Replace the Lease (its resourceVersion is the precondition); returns it as stored."""
        out = self._call(self.coordination.replace_namespaced_lease, self.name, self.namespace, dict(lease),
                         timeout=timeout)
        if out is None:
            raise LeaseConflict(f"Lease {self.namespace}/{self.name}: deleted meanwhile")
        return out
