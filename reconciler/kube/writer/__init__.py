"""The writer ports against a real API server, one module per port
(:mod:`reconciler.ports` says what each writes), over what they share: each request's
rate limit, fence and retries (:mod:`.calls`) and the Events sent from a background thread
(:mod:`.events`). :class:`KubeWrites` makes the seven of one reconciler."""

from __future__ import annotations

from kubernetes import client

from reconciler import ports
from reconciler.kube.client import RateLimiter
from reconciler.kube.writer.calls import APF_MAX_WAIT, APF_RETRIES, Calls
from reconciler.kube.writer.capacity import KubeCapacityWrites
from reconciler.kube.writer.devicegroups import KubeDeviceGroupWrites
from reconciler.kube.writer.events import EventSink, event_body
from reconciler.kube.writer.gangobjects import KubeGangObjectWrites
from reconciler.kube.writer.nodes import KubeNodeWrites
from reconciler.kube.writer.pods import KubePodWrites
from reconciler.kube.writer.state import KubeStateStore
from reconciler.kube.writer.workloads import KubeWorkloadWrites
from reconciler.ports.base import UNFENCED, Fence

__all__ = [
    "APF_MAX_WAIT",
    "APF_RETRIES",
    "Calls",
    "EventSink",
    "KubeCapacityWrites",
    "KubeDeviceGroupWrites",
    "KubeGangObjectWrites",
    "KubeNodeWrites",
    "KubePodWrites",
    "KubeStateStore",
    "KubeWorkloadWrites",
    "KubeWrites",
    "event_body",
]


class KubeWrites:
    """The seven writer ports of one reconciler (a :class:`~reconciler.ports.Writes`)
    over the API client ``api``: their requests share ``limiter`` (the configuration's
    ``kubeAPIQPS``/``kubeAPIBurst``) and pass ``fence`` (checked again at the socket when
    ``api`` was made with :func:`~reconciler.kube.client.api_client`'s ``fence``); the pods',
    nodes' and workloads' Events go out on one background thread (``events``), reported by
    ``component``. ``state`` is the ``(namespace, name)`` of the ConfigMap that keeps the
    reconciler's own state (None: none is kept)."""

    def __init__(self, api: client.ApiClient, limiter: RateLimiter, component: str = "troupe-reconciler",
                 fence: Fence = UNFENCED, state: tuple[str, str] | None = None) -> None:
        self.fence = fence
        calls = Calls(limiter, fence)
        self.events = EventSink(client.CoreV1Api(api), limiter, component, fence=fence)
        self.pods: ports.PodWrites = KubePodWrites(api, calls, self.events)
        self.nodes: ports.NodeWrites = KubeNodeWrites(api, calls, self.events)
        self.workloads: ports.WorkloadWrites = KubeWorkloadWrites(api, calls, self.events)
        self.gang_objects: ports.GangObjectWrites = KubeGangObjectWrites(api, calls)
        self.groups: ports.DeviceGroupWrites = KubeDeviceGroupWrites(api, calls)
        self.state: ports.StateStore = KubeStateStore(api, calls, state)
        self.capacity: ports.CapacityWrites = KubeCapacityWrites(api, calls, self.events)

    def close(self) -> None:
        """Send the Events still queued (for a few seconds at most), then stop."""
        self.events.close()
