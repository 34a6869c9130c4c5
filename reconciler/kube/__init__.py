"""The reconciler's one port to the Kubernetes API: list+watch into plain dicts, and writes.

This is the only package of Troupe that imports the ``kubernetes`` client (enforced by
import-linter). Everything above it sees pods and nodes as plain dicts in the API's JSON
shape (camelCase keys), and writes through the writer ports of
:mod:`reconciler.ports`, which :mod:`.writer` implements against a real API server
(and :mod:`reconciler.ports.fake` in memory). One module per adapter:

- :mod:`.client`: the API client (TCP keepalive, the leader's fence at the socket), the
  rate limiter, the one pager of list requests;
- :mod:`.informer`: list+watch of one collection (:class:`Informer`,
  :class:`StreamingInformer`) and the collections the reconciler watches;
- :mod:`.writer`: the writer ports' primitives, one module per port (:class:`KubeWrites`
  makes the six), and their Events (:class:`EventSink`, built by the one :func:`event_body`);
- :mod:`.leases`: the elector's Lease calls (:class:`KubeLeases`);
- :mod:`.certificates`: the webhook certificates' store (:class:`KubeCertificateStore`);
- :mod:`.access`: who reads the reconciler's pages of gangs, asked of the API server
  (:class:`KubeReviews`);
- :mod:`.readonly`: the read-only client of ``kubectl troupe`` (:func:`read_cluster`).

The names other modules use are re-exported here: ``from reconciler import kube; kube.X``.
"""

from reconciler.kube.access import KubeReviews
from reconciler.kube.certificates import KubeCertificateStore, webhook_certificates
from reconciler.kube.client import (
    JSON_PATCH,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    LIST_PAGE,
    MERGE_PATCH,
    REQUEST_TIMEOUT,
    SAFE_METHODS,
    SMP,
    RateLimiter,
    api_client,
    fence_connections,
    list_pages,
    whoami,
)
from reconciler.kube.informer import (
    ABSENT_RETRY_SECONDS,
    BACKOFF_BASE_SECONDS,
    BACKOFF_MAX_SECONDS,
    MIN_WATCH_SECONDS,
    UNHEALTHY_AFTER_SECONDS,
    WATCH_JITTER,
    WATCH_READ_MARGIN,
    WATCH_READ_TIMEOUT,
    WATCH_SECONDS,
    EventHandler,
    Informer,
    Resource,
    ResyncHandler,
    StreamingInformer,
    apps_owners,
    custom_objects,
    jobs,
    nodes,
    pod_disruption_budgets,
    pods,
    shared_device_groups,
    volume_resources,
)
from reconciler.kube.leases import KubeLeases
from reconciler.kube.readonly import (
    ACTIVE_PODS,
    Overrides,
    plugin_client,
    read_cluster,
    read_config_map,
    unreachable,
    watched_resources,
)
from reconciler.kube.writer import APF_MAX_WAIT, APF_RETRIES, EventSink, KubeWrites, event_body

__all__ = [
    "ABSENT_RETRY_SECONDS",
    "ACTIVE_PODS",
    "APF_MAX_WAIT",
    "APF_RETRIES",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "JSON_PATCH",
    "KEEPALIVE_COUNT",
    "KEEPALIVE_IDLE",
    "KEEPALIVE_INTERVAL",
    "LIST_PAGE",
    "MERGE_PATCH",
    "MIN_WATCH_SECONDS",
    "REQUEST_TIMEOUT",
    "SAFE_METHODS",
    "SMP",
    "UNHEALTHY_AFTER_SECONDS",
    "WATCH_JITTER",
    "WATCH_READ_MARGIN",
    "WATCH_READ_TIMEOUT",
    "WATCH_SECONDS",
    "EventHandler",
    "EventSink",
    "Informer",
    "KubeCertificateStore",
    "KubeLeases",
    "KubeReviews",
    "KubeWrites",
    "Overrides",
    "RateLimiter",
    "Resource",
    "ResyncHandler",
    "StreamingInformer",
    "api_client",
    "apps_owners",
    "custom_objects",
    "event_body",
    "fence_connections",
    "jobs",
    "list_pages",
    "nodes",
    "plugin_client",
    "pod_disruption_budgets",
    "pods",
    "read_cluster",
    "read_config_map",
    "shared_device_groups",
    "unreachable",
    "volume_resources",
    "watched_resources",
    "webhook_certificates",
    "whoami",
]
