"""The ProvisioningRequests' writer port against the API server (:class:`KubeCapacityWrites`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from reconciler.engine.model.keys import PodKey
from reconciler.kube.writer.calls import Calls
from reconciler.kube.writer.events import EventSink
from reconciler.ports.base import Conflict, Gone
from reconciler.ports.capacity import PODTEMPLATE, CapacityWrites
from troupe import provisioning as pr


class KubeCapacityWrites(CapacityWrites):
    """The :class:`~reconciler.ports.capacity.CapacityWrites` primitives against a real
    API server, through ``calls`` (``fence`` is its fence): a get of a pod, a create and a
    delete (under a UID precondition) of a core/v1 PodTemplate or of an
    ``autoscaling.x-k8s.io/v1`` ProvisioningRequest. Events go out on ``events``'s thread."""

    def __init__(self, api: client.ApiClient, calls: Calls, events: EventSink) -> None:
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.calls, self.fence, self.events = calls, calls.fence, events

    def _read_pod(self, pod: PodKey) -> dict[str, Any]:
        resp = self.calls.call(f"get pod {pod}", self.core.read_namespaced_pod, pod.name, pod.namespace,
                               _preload_content=False)
        return dict(json.loads(resp.data))

    def _create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        what = f"create {kind} {namespace}/{body['metadata']['name']}"
        if kind == PODTEMPLATE:
            resp = self.calls.call(what, self.core.create_namespaced_pod_template, namespace, dict(body),
                                   _preload_content=False)
        else:
            resp = self.calls.call(what, self.custom.create_namespaced_custom_object, pr.GROUP, pr.VERSION, namespace,
                                   pr.PLURAL, dict(body), _preload_content=False)
        return dict(json.loads(resp.data))

    def _delete(self, kind: str, namespace: str, name: str, uid: str) -> None:
        options = {"preconditions": {"uid": uid}} if uid else {}
        what = f"delete {kind} {namespace}/{name}"
        try:
            if kind == PODTEMPLATE:
                self.calls.call(what, self.core.delete_namespaced_pod_template, name, namespace, body=options,
                                _preload_content=False)
            else:
                self.calls.call(what, self.custom.delete_namespaced_custom_object, pr.GROUP, pr.VERSION, namespace,
                                pr.PLURAL, name, body=options, _preload_content=False)
        except Conflict as e:  # another object of that name now: not ours to delete
            raise Gone(str(e)) from e

    def emit_event(self, regarding: PodKey, api_version: str, kind: str, event_type: str, reason: str,
                   message: str) -> None:
        """Queue a core/v1 Event; best effort: never raises, never blocks."""
        self.events.emit(regarding, None, event_type, reason, message, (api_version, kind))
