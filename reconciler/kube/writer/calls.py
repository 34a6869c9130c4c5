"""One request of a writer port against the API server (:class:`Calls`): a token of the rate
limit, the fence, the waits API Priority and Fairness asks for, and the API's errors turned
into the writer's (:func:`_raise_for`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, NoReturn

import urllib3
from kubernetes.client.exceptions import ApiException

from reconciler.kube.client import REQUEST_TIMEOUT, RateLimiter, error_message, read_whole
from reconciler.ports.base import (
    UNFENCED,
    Conflict,
    Fence,
    Gone,
    Refused,
    Unsure,
    WriteError,
)

#: Attempts of a request that API Priority and Fairness rejects (429), each after the
#: ``Retry-After`` it gives (at most :data:`APF_MAX_WAIT` seconds).
APF_RETRIES = 5
APF_MAX_WAIT = 5.0


class Calls:
    """The requests of every writer port of one reconciler: each takes a token from
    ``limiter`` (the configuration's ``kubeAPIQPS``/``kubeAPIBurst``, shared by all the
    ports), then passes ``fence`` (checked again at the socket when the API client was made
    with :func:`~reconciler.kube.client.api_client`'s ``fence``). A request that API
    Priority and Fairness turns away (429 with ``Retry-After``) is retried after the wait it
    asks for, up to :data:`APF_RETRIES` times (:meth:`call`); an eviction's 429 is a
    PodDisruptionBudget's refusal and is not retried (:meth:`call_eviction`)."""

    def __init__(self, limiter: RateLimiter, fence: Fence = UNFENCED) -> None:
        self.limiter = limiter
        self.fence = fence

    def send(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One request: a token of the rate limit, the fence, then ``fn``. Raises
        ``ApiException``, what the fence raises, and :class:`~reconciler.ports.base.Unsure`
        when the request may have gone out and no response came (a timeout, a connection
        dropped: urllib3's errors)."""
        self.limiter.wait()
        self.fence.check()
        try:
            return read_whole(fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs))
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unsure(f"no response: {type(e).__name__}: {e}") from e

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` through :meth:`send`, retried after the wait a 429 of
        API Priority and Fairness asks for (``Retry-After``, at most :data:`APF_MAX_WAIT`
        seconds, up to :data:`APF_RETRIES` times). Raises
        :class:`~reconciler.ports.base.Conflict`,
        :class:`~reconciler.ports.base.Gone`,
        :class:`~reconciler.ports.base.WriteError` naming ``what``."""
        for attempt in range(APF_RETRIES + 1):
            try:
                return self.send(fn, *args, **kwargs)
            except ApiException as e:
                if e.status == 429 and attempt < APF_RETRIES:
                    time.sleep(_retry_after(e) * (1 + random.random() / 4))
                    continue
                _raise_for(e, what)
        raise AssertionError("unreachable")  # pragma: no cover

    def call_eviction(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An eviction through :meth:`send`, not retried: its 429 is a
        PodDisruptionBudget's refusal (:class:`~reconciler.ports.base.Refused`).
        Raises as :meth:`call` too."""
        try:
            return self.send(fn, *args, **kwargs)
        except ApiException as e:
            if e.status == 429:
                raise Refused(f"{what}: {error_message(e)}") from e
            _raise_for(e, what)


def _raise_for(e: ApiException, what: str) -> NoReturn:
    """The writer's error for an API error of the request ``what``: ``Conflict`` (409),
    ``Gone`` (404), ``Unsure`` (5xx: the server may have applied it), else ``WriteError``."""
    if e.status == 409:
        raise Conflict(f"{what}: conflict: {error_message(e)}") from e
    if e.status == 404:
        raise Gone(f"{what}: not found") from e
    if e.status is not None and e.status >= 500:
        raise Unsure(f"{what}: {e.status} {error_message(e)}") from e
    raise WriteError(f"{what}: {e.status} {error_message(e)}") from e


def _retry_after(e: ApiException) -> float:
    """The wait, seconds, a 429 asks for (its ``Retry-After``; 1 when absent or unreadable),
    kept within 0.1 and :data:`APF_MAX_WAIT`."""
    headers = e.headers or {}
    try:
        wait = float(headers.get("Retry-After", 1))
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.1), APF_MAX_WAIT)
