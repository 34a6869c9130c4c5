"""Prometheus metrics of the webhook, in prometheus-client's multiprocess mode under gunicorn.

``python -m webhook serve`` sets ``PROMETHEUS_MULTIPROC_DIR`` before this module is first
imported (the mode is chosen at import), so every worker writes its values there and
``/metrics`` in any worker reports the sum. Without the variable (tests, a plain Flask run)
the default in-process registry is used.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

#: Admission reviews answered, by ``operation`` (CREATE, UPDATE, other, unknown) and
#: ``outcome`` (allowed: no patch, patched, denied, error: malformed request or a bug).
ADMISSIONS = Counter(
    "troupe_webhook_admissions_total",
    "Admission reviews answered by Troupe's webhook, by operation and outcome.",
    ["operation", "outcome"],
)
#: Time from request received to response built, seconds, by ``operation``.
LATENCY = Histogram(
    "troupe_webhook_admission_duration_seconds",
    "Time Troupe's webhook took to answer an admission review, in seconds.",
    ["operation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)

#: Connections the server closed on its own, by ``reason`` (``webhook.server.CLOSE_REASONS``:
#: a deadline ran out, the connection cap, a malformed request, no certificate yet...).
#: Many ``handshake_timeout``/``request_timeout``/``evicted`` mean slow or hostile clients.
CONNECTIONS_CLOSED = Counter(
    "troupe_webhook_connections_closed_total",
    "Connections Troupe's webhook closed on its own, by reason.",
    ["reason"],
)

_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def operation_label(value: object) -> str:
    """A bounded label value for an operation (no label explosion from bad requests)."""
    return value if isinstance(value, str) and value in _OPERATIONS else "unknown"


_children: dict[tuple[str, str], tuple[Any, Any]] = {}


def record(operation: str, outcome: str, seconds: float) -> None:
    """Count one admission and observe its latency (``operation`` from
    :func:`operation_label`, so the label sets stay few and their children are cached)."""
    pair = _children.get((operation, outcome))
    if pair is None:
        pair = _children[(operation, outcome)] = (ADMISSIONS.labels(operation, outcome), LATENCY.labels(operation))
    pair[0].inc()
    pair[1].observe(seconds)


def connection_closed(reason: str) -> None:
    """Count one connection closed by the server for ``reason`` (a bounded set)."""
    CONNECTIONS_CLOSED.labels(reason).inc()


def declare_close_reasons(reasons: tuple[str, ...]) -> None:
    """Make every close reason's series exist at 0 in this process, so that
    ``troupe_webhook_connections_closed_total`` is served (and graphed as 0) before the
    first close: in multiprocess mode a series nobody touched is not exported at all."""
    for reason in reasons:
        CONNECTIONS_CLOSED.labels(reason)


def multiprocess_dir() -> str | None:
    """The multiprocess directory in use, or None in single-process mode."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition() -> tuple[bytes, str]:
    """The text exposition of all metrics (summed over workers) and its content type."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated upstream
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
