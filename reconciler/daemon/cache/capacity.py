"""The ProvisioningRequests the cluster holds (:class:`CapacityIndex`), read only when the
``provisioning`` key is on: each gang's request found by its name
(docs/decisions/080-provisioning-requests.md). Optional as the other custom kinds: a
cluster that does not serve ``autoscaling.x-k8s.io/v1`` has none, and says so."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.engine.gangs.capacity import Observed, parse_request, request_name


class CapacityIndex:
    """The requests by ``(namespace, name)``, parsed (:func:`parse_request`), and why the
    API is not read (``absent``: ``""`` while it is). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], Observed] = {}
        self.absent = ""

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Every request, as a list gives them."""
        parsed = [parse_request(obj) for obj in items]
        with self._lock:
            self._requests = {(r.namespace, r.name): r for r in parsed}
            self.absent = ""

    def event(self, kind: str, obj: Mapping[str, Any]) -> str:
        """A watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of one request; returns the
        key of the gang whose request's name it has, if any is known by name (``""``)."""
        found = parse_request(obj)
        with self._lock:
            if kind == "DELETED":
                self._requests.pop((found.namespace, found.name), None)
            else:
                self._requests[(found.namespace, found.name)] = found
        return found.namespace

    def unavailable(self, why: str) -> None:
        """The API is not served (the CRD is not installed): no request is known."""
        with self._lock:
            self._requests, self.absent = {}, why

    def of(self, gang_key: str) -> Observed | None:
        """The request of gang ``gang_key``'s name (:func:`request_name`), whoever made it."""
        namespace = gang_key.partition("/")[0]
        with self._lock:
            return self._requests.get((namespace, request_name(gang_key)))
