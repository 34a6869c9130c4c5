"""The API client every adapter of :mod:`reconciler.kube` shares: how it is built (TCP
keepalive, the leader's fence at the socket, request counting), the client-side rate
limiter, the request constants, the reading of an API error, and the one pager of list
requests.

Writes go through a client of their own whose connections check the leader's fence just
before a request's bytes leave (:func:`api_client` with ``fence``), so a replica frozen
between deciding to write and writing finds the fence closed when it resumes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import token_bucket
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from reconciler.daemon import metrics

#: TCP keepalive of every connection to the API server: probes after 30 s idle, every
#: 10 s, 3 unanswered end it (a dead peer is noticed within 60 s; client-go asks for 30 s
#: idle and Go's 15 s x 9 probes, 165 s).
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3
#: Connect and read timeouts of ordinary requests, seconds.
REQUEST_TIMEOUT = (5, 30)
#: Page size of list requests (objects).
LIST_PAGE = 500

#: Content types of the three kinds of PATCH the API server takes.
SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"

#: Methods that change nothing: the fence lets them through.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: One page of a list: its items and the List's ``metadata`` (``continue``,
#: ``resourceVersion``).
Page = tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]
#: A page as a decoder reads it (whole dicts, or objects cut to what the cache keeps).
PageT = TypeVar("PageT", bound=Page)


#: The shortest wait for a write's response, seconds: a write sent with less of the fence
#: left than this still gets a chance to be answered (the margin between the fence and a
#: takeover, ``leaseSeconds - renewSeconds``, is seconds).
MIN_WRITE_WAIT = 0.05


def _open_ended() -> float:
    return float("inf")


class _Fenced:
    """Mixed into urllib3's connections: the first bytes of a request that changes
    something go out only if ``fence()`` does not raise. The check sits right before the
    send, after the rate limiter, the serialisation and the pool: what stays between it and
    the socket is a few microseconds of Python. Its response is then awaited at most until
    the fence closes (``remaining()`` seconds from the send): a write the API server holds
    (a priority-and-fairness queue, a slow admission) is given up and its connection closed,
    which cancels the request on the server, before another replica may take over."""

    fence: Callable[[], None]
    remaining: Callable[[], float] = _open_ended
    _write = False
    _deadline: float | None = None

    def putrequest(self, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        self._write = method.upper() not in SAFE_METHODS
        self._deadline = None
        super().putrequest(method, url, *args, **kwargs)  # type: ignore[misc]

    def send(self, data: Any) -> None:
        if self._write:
            self._write = False
            type(self).fence()
            left = type(self).remaining()
            if left != float("inf"):
                self._deadline = time.monotonic() + max(left, MIN_WRITE_WAIT)
        super().send(data)  # type: ignore[misc]

    def getresponse(self) -> Any:
        if self._deadline is not None:
            left = max(self._deadline - time.monotonic(), MIN_WRITE_WAIT / 10)
            timeout = self.timeout  # type: ignore[has-type]
            if timeout is None or not isinstance(timeout, int | float) or timeout > left:
                self.timeout = left
        return super().getresponse()  # type: ignore[misc]


def fence_connections(api: client.ApiClient, fence: Callable[[], None],
                      remaining: Callable[[], float] | None = None) -> None:
    """Make every request of ``api`` that is not a GET/HEAD/OPTIONS call ``fence()`` just
    before its first byte is sent; what ``fence`` raises
    (:class:`~reconciler.ports.LostLeadership`) reaches the caller and nothing is
    sent. ``remaining()`` (seconds until the fence closes; None: never) bounds the wait for
    such a request's response: past it the read times out (urllib3's ``ReadTimeoutError``,
    not retried for a write). Call before the first request."""
    attrs: dict[str, Any] = {"fence": staticmethod(fence)}
    if remaining is not None:
        attrs["remaining"] = staticmethod(remaining)
    conns = {scheme: type(f"Fenced{base.__name__}", (_Fenced, base), attrs)
             for scheme, base in (("http", HTTPConnection), ("https", HTTPSConnection))}
    pools = {"http": type("FencedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": conns["http"]}),
             "https": type("FencedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": conns["https"]})}
    manager = api.rest_client.pool_manager
    manager.clear()
    manager.pool_classes_by_scheme = pools


def load_kubeconfig(kubeconfig: str | None, cfg: client.Configuration, context: str | None = None) -> None:
    """Fill ``cfg`` from ``kubeconfig`` (None: ``$KUBECONFIG``, else ``~/.kube/config``) and
    its ``context`` (None: the current one). Raises ``kubernetes.config.ConfigException``."""
    # The client's config loaders carry no annotations.
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg,  # type: ignore[no-untyped-call]
                            context=context)


def api_client(kubeconfig: str | None, pool_size: int | None = None, user_agent: str | None = None,
               fence: Callable[[], None] | None = None, retries: int | None = None,
               context: str | None = None, fence_remaining: Callable[[], float] | None = None) -> client.ApiClient:
    """An API client from ``kubeconfig``, or from the in-cluster service account when None,
    keeping up to ``pool_size`` connections to the API server open (default: the client's,
    5 per CPU): size it to the requests in flight. Every connection has TCP keepalive
    (:data:`KEEPALIVE_IDLE`...). ``user_agent`` names this process in the API server's
    audit log; ``fence`` guards every write and ``fence_remaining`` (seconds until the
    fence closes) bounds the wait for its response (:func:`fence_connections`); ``retries``
    bounds urllib3's own retries of a failed connection (default: urllib3's, 3);
    ``context`` names the kubeconfig context (default: its current one). Every request is
    counted by verb, resource and code (:func:`reconciler.daemon.metrics.instrument`).

    Raises ``kubernetes.config.ConfigException`` when neither works.
    """
    cfg = client.Configuration()
    if kubeconfig:
        load_kubeconfig(kubeconfig, cfg, context)
    else:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    cfg.socket_options = tcp_keepalive_socket_options(KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
    if retries is not None:
        cfg.retries = urllib3.Retry(total=retries, read=0, redirect=0, status=0)
    api = client.ApiClient(cfg)
    if user_agent:
        api.user_agent = user_agent
    if fence is not None:
        fence_connections(api, fence, fence_remaining)
    metrics.instrument(api)
    return api


def whoami(api: client.ApiClient) -> str:
    """The user name the API server sees for ``api`` (SelfSubjectReview, GA in 1.28).
    Raises ``ApiException``, and ``ValueError`` when the review names no user."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview"),
        _request_timeout=REQUEST_TIMEOUT,
    )
    user = review.status.user_info if review.status is not None else None
    if user is None:
        raise ValueError("the SelfSubjectReview names no user")
    return str(user.username)


def read_whole(resp: Any) -> Any:
    """``resp``, its body read whole when it is a raw response (``_preload_content=False``)
    that the caller may not read: an unread response closes its connection when it is let
    go, and the next request opens another (a TLS handshake on both sides), where a read
    one goes back to the pool. The body stays with the response (``resp.data``)."""
    if callable(getattr(resp, "release_conn", None)):
        _ = resp.data
    return resp


def error_message(e: ApiException) -> str:
    """What the API server said of a failed request: the ``message`` of its ``Status``
    body, else the body as text, else the HTTP reason."""
    body = e.body.decode() if isinstance(e.body, bytes) else e.body
    try:
        return str(json.loads(body).get("message", body)) if body else str(e.reason)
    except (ValueError, AttributeError):
        return str(body)


def list_pages(list_fn: Callable[..., Any], decode: Callable[[bytes], PageT],
               start_version: str | None = None, **kwargs: Any) -> Iterator[PageT]:
    """Every page of one list request, of :data:`LIST_PAGE` objects, each fetched only when
    the one before has been consumed and followed by the ``continue`` token it carries (the
    token keeps the pages of one list consistent). ``list_fn`` is a list function of the
    client (called with ``_preload_content=False``, plus ``kwargs``: a field selector...);
    ``decode`` reads a page's bytes into ``(items, metadata)``; ``start_version`` is the
    first page's ``resourceVersion`` (``"0"``: from the API server's watch cache, no quorum
    read of etcd; None: the latest, read from etcd); ``_request_timeout`` in ``kwargs``
    replaces :data:`REQUEST_TIMEOUT`. Raises what ``list_fn`` raises."""
    version: dict[str, str] = {"resource_version": start_version} if start_version is not None else {}
    timeout = kwargs.pop("_request_timeout", REQUEST_TIMEOUT)
    cont: str | None = None
    while True:
        resp = list_fn(limit=LIST_PAGE, _continue=cont, _preload_content=False,
                       _request_timeout=timeout, **version, **kwargs)
        page = decode(resp.data)
        del resp
        yield page
        cont = page[1].get("continue")
        if not cont:
            return
        version = {}


class RateLimiter:
    """Client-side rate limit on API requests, as client-go's token bucket: ``qps``
    tokens a second, at most ``burst`` at once (the ``token_bucket`` library's bucket).
    :meth:`wait` blocks until a token is free. Thread-safe."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self._limiter = token_bucket.Limiter(qps, burst, token_bucket.MemoryStorage())
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Take one token, sleeping while the bucket is empty."""
        while True:
            with self._lock:
                if self._limiter.consume(b"api"):
                    return
            time.sleep(1.0 / self.qps)
