"""The workload objects' writer port against the API server (:class:`KubeWorkloadWrites`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from reconciler.engine.model import workloads as wl
from reconciler.engine.model.keys import PodKey, WorkloadKey
from reconciler.kube.client import JSON_PATCH, MERGE_PATCH
from reconciler.kube.writer.calls import Calls
from reconciler.kube.writer.events import EventSink
from reconciler.ports.workloads import WorkloadWrites


class KubeWorkloadWrites(WorkloadWrites):
    """The :class:`~reconciler.ports.workloads.WorkloadWrites` primitive against a
    real API server, through ``calls`` (``fence`` is its fence): a patch of a batch/v1 Job, or
    of a custom workload object (JobSet, LeaderWorkerSet, PyTorchJob) by its kind's group,
    version and plural. Events go out on ``events``'s thread."""

    def __init__(self, api: client.ApiClient, calls: Calls, events: EventSink) -> None:
        self.batch, self.custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
        self.calls, self.fence, self.events = calls, calls.fence, events

    def _patch_workload(self, workload: WorkloadKey,
                        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        kind, namespace, name = workload
        content = MERGE_PATCH if isinstance(patch, Mapping) else JSON_PATCH
        what = f"patch {kind} {namespace}/{name}"
        k = wl.KIND_OF[kind]
        if not k.custom:
            resp = self.calls.call(what, self.batch.patch_namespaced_job, name, namespace, patch, _content_type=content,
                                   _preload_content=False)
        else:
            resp = self.calls.call(what, self.custom.patch_namespaced_custom_object, k.group, k.version, namespace,
                                   k.plural, name, patch, _content_type=content, _preload_content=False)
        return dict(json.loads(resp.data))

    def emit_event(self, workload: WorkloadKey, kind: str, reason: str, message: str) -> None:
        """Queue a core/v1 Event on a workload object; best effort: never raises, never blocks."""
        api_version = wl.KIND_OF[workload[0]].api_version if workload[0] in wl.KIND_OF else "v1"
        self.events.emit(PodKey(workload[1], workload[2]), None, kind, reason, message, (api_version, workload[0]))
