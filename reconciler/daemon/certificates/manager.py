"""The running side of the webhook's certificates: :class:`CertificateManager` runs
:func:`~reconciler.daemon.certificates.rules.plan` against a :class:`CertificateStore`,
the small port that :class:`reconciler.kube.KubeCertificateStore` implements against the
API server and :class:`~reconciler.daemon.certificates.fake.FakeCertificateStore` in memory,
and reports the certificates' expiry and the syncs' failures as metrics.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client import Counter, Gauge

from reconciler.daemon.certificates import rules
from reconciler.daemon.certificates.rules import CertificateError, ConfigState, SecretState

log = logging.getLogger("reconciler.daemon.certificates")

EXPIRY = Gauge("troupe_webhook_certificate_expiry_timestamp_seconds",
               "Expiry of the webhook's current CA and serving certificate, Unix seconds.", ["certificate"])
ISSUED = Counter("troupe_webhook_certificates_issued_total",
                 "CAs and serving certificates the reconciler made for the webhook.", ["certificate"])
BUNDLE_SIZE = Gauge("troupe_webhook_ca_bundle_certificates",
                    "CAs in the webhook configuration's caBundle (the current one and unexpired retired ones).")
SYNC_ERRORS = Counter("troupe_webhook_certificate_sync_errors_total",
                      "Certificate syncs that failed (API errors, conflicts); each is retried with backoff.")



class CertificateStore(Protocol):
    """The port to the objects :func:`~.rules.plan` reads and writes. Every write carries the
    resourceVersion it was read at and raises :class:`CertificateError` when it fails
    (including a conflict: another writer came first)."""

    def read_secret(self, name: str) -> SecretState | None:
        """The Secret ``name`` of the release namespace, or None when it does not exist."""

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: SecretState) -> None:
        """Set the data of the Secret ``name`` (read as ``previous``) to exactly ``data``."""

    def read_config(self) -> ConfigState | None:
        """The webhook configuration, or None when it does not exist."""

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: ConfigState) -> None:
        """Set every webhook's ``caBundle`` to ``bundle`` and :data:`~.rules.BUNDLE_UPDATED_AT` to ``at``."""

    def emit(self, kind: str, reason: str, message: str) -> None:
        """Record an Event on the serving Secret (``kind`` Normal or Warning); never raises."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertificateManager:
    """Keeps the webhook's certificates current: :meth:`sync` reads, plans and writes once;
    :meth:`start` runs syncs on a thread until :meth:`stop`, each when the last one's
    ``next_check`` comes, when :meth:`wake` is called (a watched object changed), or after a
    failure with backoff (1 s doubling to ``max_backoff`` seconds). ``watchers`` (objects with
    ``start()``/``stop()``, e.g. informers calling :meth:`wake`) start and stop with it.
    ``clock`` returns aware UTC datetimes."""

    def __init__(self, store: CertificateStore, settings: rules.Settings,
                 clock: Callable[[], dt.datetime] = _utcnow, watchers: Iterable[object] = (),
                 max_backoff: float = 60.0) -> None:
        self.store, self.settings, self.clock = store, settings, clock
        self.watchers = list(watchers)
        self.max_backoff = max_backoff
        self.last: rules.Plan | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sync(self) -> rules.Plan:
        """One pass: read the three objects, :func:`~.rules.plan`, write in the safe order.

        Raises :class:`CertificateError` when a read or a write fails; nothing later in the
        order is written then, and the next pass starts from what is really there.
        """
        s = self.settings
        observed = rules.Observed(self.store.read_secret(s.ca_secret), self.store.read_secret(s.tls_secret),
                            self.store.read_config())
        for what, state in ((s.ca_secret, observed.ca), (s.tls_secret, observed.tls)):
            if state is None:
                raise CertificateError(
                    f"Secret {s.namespace}/{what} does not exist; the chart creates it empty "
                    "(`helm upgrade` restores it) and the reconciler fills it")
        assert observed.ca is not None and observed.tls is not None
        now = self.clock()
        decided = rules.plan(observed, s, now)
        if decided.ca_secret is not None:
            self.store.write_secret(s.ca_secret, decided.ca_secret, observed.ca)
        if decided.ca_bundle is not None and observed.config is not None:
            self.store.write_ca_bundle(decided.ca_bundle, now, observed.config)
        if decided.tls_secret is not None:
            self.store.write_secret(s.tls_secret, decided.tls_secret, observed.tls)
        for kind in decided.issued:
            ISSUED.labels(kind).inc()
        for note in decided.notes:
            log.info("webhook certificates: %s", note)
        if decided.notes:
            self.store.emit("Normal", "CertificatesUpdated", "; ".join(decided.notes))
        if decided.waiting and (self.last is None or self.last.waiting != decided.waiting):
            log.info("webhook certificates: waiting: %s", decided.waiting)
        if decided.ca_expiry is not None:
            EXPIRY.labels("ca").set(decided.ca_expiry.timestamp())
        if decided.serving_expiry is not None:
            EXPIRY.labels("serving").set(decided.serving_expiry.timestamp())
        BUNDLE_SIZE.set(decided.bundle_size)
        self.last = decided
        return decided

    def wake(self) -> None:
        """Sync again now (a watched object changed)."""
        self._wake.set()

    def start(self) -> None:
        """Start the watchers and the sync thread."""
        for w in self.watchers:
            w.start()  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._run, name="webhook-certificates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the sync thread and the watchers (a pass in flight finishes its current write)."""
        self._stop.set()
        self._wake.set()
        for w in self.watchers:
            w.stop()  # type: ignore[attr-defined]
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                decided = self.sync()
            except Exception as e:  # noqa: BLE001  a failed pass is retried; the reason is logged and counted
                SYNC_ERRORS.inc()
                log.warning("webhook certificates: %s; retrying in %.0fs", e, backoff)
                self.store.emit("Warning", "CertificateSyncFailed", str(e))
                wait = backoff
                backoff = min(backoff * 2, self.max_backoff)
            else:
                backoff = 1.0
                wait = max(0.5, (decided.next_check - self.clock()).total_seconds())
            self._wake.wait(min(wait, 3600.0))
