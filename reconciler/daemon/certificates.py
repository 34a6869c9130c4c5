"""Self-managed webhook certificates: a CA and the webhook's serving certificate, made with
:mod:`certs`, kept in two Secrets of the release namespace, the CA bundle kept in step in
the MutatingWebhookConfiguration's ``caBundle``, and both renewed before they expire.

Rules and their reasons: ``docs/decisions/010-webhook-certificates.md``. In short:

- The CA Secret (``--webhook-ca-secret``) holds the current CA (``tls.crt``, ``tls.key``)
  and the trust bundle (``ca.crt``: the current CA first, then every retired CA that has
  not expired). The serving Secret (``--webhook-tls-secret``, mounted by the webhook) holds
  the serving pair (``tls.crt``, ``tls.key``) and the same bundle (``ca.crt``); it never
  holds the CA's key.
- The CA is replaced when a certificate it signs now would be cut short (its remaining
  validity is below the serving validity). A retired CA stays in the bundle until it
  expires, so a replica still serving a certificate it signed keeps being trusted.
- The serving certificate is replaced when missing, unreadable, not for the wanted names,
  not signed by the current CA, or within ``renew_before`` of its expiry. A valid one is
  replaced by one signed by a new CA only after that CA has been in the webhook
  configuration's ``caBundle`` for ``settle`` (the API servers read the configuration from
  a watch: a fraction of a second).
- Writes go in the order CA Secret, webhook configuration, serving Secret, each with the
  resourceVersion it was read at, so a crash between two leaves nothing that fails to
  verify, and two leaders (a handover) cannot both win.

:func:`plan` decides (no I/O; it makes keys and reads no clock); :class:`CertificateManager`
runs it against a :class:`CertificateStore`, the small port that
:class:`reconciler.kube.KubeCertificateStore` implements against the API server and
:class:`FakeCertificateStore` in memory.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from prometheus_client import Counter, Gauge

import certs

log = logging.getLogger("reconciler.daemon.certificates")

#: Keys of both Secrets (the ``kubernetes.io/tls`` names, plus ``ca.crt`` as cert-manager writes it).
CERT_KEY = "tls.crt"
PRIVATE_KEY_KEY = "tls.key"
CA_KEY = "ca.crt"
#: Annotation on the webhook configuration: when its ``caBundle`` was last written (RFC 3339).
BUNDLE_UPDATED_AT = "troupe.io/ca-bundle-updated-at"

EXPIRY = Gauge("troupe_webhook_certificate_expiry_timestamp_seconds",
               "Expiry of the webhook's current CA and serving certificate, Unix seconds.", ["certificate"])
ISSUED = Counter("troupe_webhook_certificates_issued_total",
                 "CAs and serving certificates the reconciler made for the webhook.", ["certificate"])
BUNDLE_SIZE = Gauge("troupe_webhook_ca_bundle_certificates",
                    "CAs in the webhook configuration's caBundle (the current one and unexpired retired ones).")
SYNC_ERRORS = Counter("troupe_webhook_certificate_sync_errors_total",
                      "Certificate syncs that failed (API errors, conflicts); each is retried with backoff.")


#: A time later than any certificate's expiry.
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


class CertificateError(RuntimeError):
    """A certificate object could not be read or written; the message names it."""


@dataclass(frozen=True)
class Settings:
    """Where the webhook's certificates live and how long they last.

    ``namespace``/``service``: the webhook's Service; the serving certificate's DNS names are
    ``service``, ``service.namespace``, ``service.namespace.svc`` and
    ``service.namespace.svc.cluster.local`` (what the API server checks for a service
    reference: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#service-reference),
    plus ``extra_sans`` (DNS names or IPs, e.g. for a webhook reached by URL). Both Secrets
    are in ``namespace``. Durations: ``validity`` of a serving certificate, renewed when less
    than ``renew_before`` is left; ``ca_validity`` of a CA; ``settle``, how long a new CA sits
    in the ``caBundle`` before a certificate it signed replaces a valid one.

    Raises ``ValueError`` naming the flag when a name is empty or the durations do not nest
    (0 < settle < renew_before < validity < ca_validity).
    """

    namespace: str
    service: str
    webhook_configuration: str
    tls_secret: str
    ca_secret: str
    extra_sans: tuple[str, ...] = ()
    validity: dt.timedelta = dt.timedelta(days=90)
    renew_before: dt.timedelta = dt.timedelta(days=30)
    ca_validity: dt.timedelta = dt.timedelta(days=365)
    settle: dt.timedelta = dt.timedelta(seconds=10)

    def __post_init__(self) -> None:
        for flag, value in (("--webhook-service", self.service), ("--webhook-service namespace", self.namespace),
                            ("--webhook-configuration", self.webhook_configuration),
                            ("--webhook-tls-secret", self.tls_secret), ("--webhook-ca-secret", self.ca_secret)):
            if not value:
                raise ValueError(f"{flag}: must not be empty")
        if self.tls_secret == self.ca_secret:
            raise ValueError(f"--webhook-ca-secret: must differ from --webhook-tls-secret ({self.tls_secret!r}): "
                             "the webhook mounts the serving Secret and must not get the CA's key")
        order = (("--webhook-cert-settle-seconds", self.settle), ("--webhook-cert-renew-before-seconds", self.renew_before),
                 ("--webhook-cert-validity-seconds", self.validity), ("--webhook-ca-validity-seconds", self.ca_validity))
        if self.settle <= dt.timedelta(0):
            raise ValueError(f"--webhook-cert-settle-seconds: must be positive, got {self.settle.total_seconds():g}")
        for (lower, low), (upper, high) in itertools.pairwise(order):
            if not low < high:
                raise ValueError(f"{upper}: must be more than {lower} ({low.total_seconds():g}), "
                                 f"got {high.total_seconds():g}")

    @property
    def sans(self) -> tuple[str, ...]:
        """The serving certificate's subject alternative names, in order."""
        svc = f"{self.service}.{self.namespace}"
        names = (self.service, svc, f"{svc}.svc", f"{svc}.svc.cluster.local", *self.extra_sans)
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class SecretState:
    """A Secret as read: its ``data`` (decoded bytes) and ``resource_version``."""

    data: Mapping[str, bytes]
    resource_version: str


@dataclass(frozen=True)
class ConfigState:
    """The webhook configuration as read: each webhook's ``caBundle`` (PEM bytes, ``b""`` when
    unset), the :data:`BUNDLE_UPDATED_AT` time (None when absent), ``resource_version`` and
    the webhooks' names (in the order of ``ca_bundles``)."""

    ca_bundles: tuple[bytes, ...]
    bundle_updated_at: dt.datetime | None
    resource_version: str
    webhook_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What :func:`plan` decides from: both Secrets and the configuration (None: not found)."""

    ca: SecretState | None
    tls: SecretState | None
    config: ConfigState | None


@dataclass
class Plan:
    """What :func:`plan` decided. ``None`` fields need no write. ``next_check`` is when
    something next falls due (a renewal, a retired CA's expiry, the end of a settle);
    ``notes`` say what is written and why; ``issued`` names what was made (``ca``,
    ``serving``); ``waiting`` why something is held back."""

    ca_secret: dict[str, bytes] | None = None
    ca_bundle: bytes | None = None
    tls_secret: dict[str, bytes] | None = None
    next_check: dt.datetime = NEVER
    notes: list[str] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    waiting: str = ""
    ca_expiry: dt.datetime | None = None
    serving_expiry: dt.datetime | None = None
    bundle_size: int = 0


def split_pem(pem: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle; unparsable input gives ``[]``."""
    try:
        return x509.load_pem_x509_certificates(pem) if pem.strip() else []
    except ValueError:
        return []


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _human(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if abs(seconds) >= 2 * 86400:
        return f"{seconds / 86400:.1f}d"
    if abs(seconds) >= 2 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds}s"


def _load_pair(state: SecretState | None) -> tuple[certs.KeyPair | None, str]:
    """The pair in a Secret's tls.crt/tls.key, or (None, why not)."""
    if state is None:
        return None, "the Secret does not exist"
    cert_pem, key_pem = state.data.get(CERT_KEY, b""), state.data.get(PRIVATE_KEY_KEY, b"")
    if not cert_pem or not key_pem:
        return None, f"the Secret has no {CERT_KEY} and {PRIVATE_KEY_KEY} yet"
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as e:
        return None, f"{CERT_KEY}/{PRIVATE_KEY_KEY} do not parse ({str(e).splitlines()[0] if str(e) else e})"
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) or key.public_key() != cert.public_key():
        return None, f"{PRIVATE_KEY_KEY} is not the key of {CERT_KEY}"
    return certs.KeyPair(cert_pem, key_pem), ""


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when ``ca``'s key made ``cert``'s signature (and the names chain)."""
    if cert.issuer != ca.subject:
        return False
    public = ca.public_key()
    hash_algorithm = cert.signature_hash_algorithm or hashes.SHA256()
    try:
        if isinstance(public, ec.EllipticCurvePublicKey):
            public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hash_algorithm))
        elif isinstance(public, rsa.RSAPublicKey):
            public.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), hash_algorithm)
        else:
            return False
    except InvalidSignature:
        return False
    return True


def _sans_of(cert: x509.Certificate) -> set[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {*ext.get_values_for_type(x509.DNSName), *(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))}


def _ca_problem(ca: certs.KeyPair | None, why: str, settings: Settings, now: dt.datetime) -> str:
    if ca is None:
        return why
    cert = ca.cert
    if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
        return f"{CERT_KEY} is not a CA"
    left = cert.not_valid_after_utc - now
    if left <= settings.validity:
        return (f"it expires in {_human(left)}, less than one serving certificate's validity "
                f"({_human(settings.validity)})")
    return ""


def _serving_problem(pair: certs.KeyPair | None, why: str, ca: x509.Certificate, settings: Settings,
                     now: dt.datetime) -> str:
    if pair is None:
        return why
    cert = pair.cert
    if _sans_of(cert) != set(settings.sans):
        return f"its names {sorted(_sans_of(cert))} are not {sorted(settings.sans)}"
    if not signed_by(cert, ca):
        return "the current CA did not sign it"
    left = cert.not_valid_after_utc - now
    if left <= settings.renew_before:
        return f"it expires in {_human(left)}, within the renewal window ({_human(settings.renew_before)})"
    return ""


def _trusted_now(cert: x509.Certificate, bundle: Sequence[x509.Certificate], now: dt.datetime) -> bool:
    """``cert`` is in date and one of ``bundle`` signed it: an API server with that bundle accepts it."""
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return False
    return any(signed_by(cert, ca) and ca.not_valid_after_utc > now for ca in bundle)


def plan(observed: Observed, settings: Settings, now: dt.datetime) -> Plan:
    """Decide the writes that keep the webhook's certificates valid and trusted at ``now``
    (aware UTC). Makes keys when it issues; no I/O, no clock. See the module docstring for
    the rules; a worked timeline is in ``docs/decisions/010-webhook-certificates.md``."""
    out = Plan()
    old_ca, why = _load_pair(observed.ca)
    ca = old_ca
    problem = _ca_problem(ca, why, settings, now)
    if problem:
        ca = certs.create_ca(f"troupe-webhook-ca-{now:%Y%m%dT%H%M%SZ}", lifetime=settings.ca_validity, now=now)
        out.notes.append(f"new CA (the CA Secret {settings.ca_secret}: {problem})")
        out.issued.append("ca")
    assert ca is not None
    ca_cert = ca.cert

    # The bundle: the current CA, then every other CA still in date that the CA Secret or
    # the webhook configuration trusted, so that nothing trusted a moment ago is dropped.
    previous: list[x509.Certificate] = []
    if observed.ca is not None:
        previous += split_pem(observed.ca.data.get(CA_KEY, b""))
    if old_ca is not None:
        previous.append(old_ca.cert)
    if observed.config is not None:
        for pem in observed.config.ca_bundles:
            previous += split_pem(pem)
    bundle = [ca_cert]
    seen = {ca_cert.fingerprint(hashes.SHA256())}
    for cert in previous:
        fingerprint = cert.fingerprint(hashes.SHA256())
        if fingerprint in seen or cert.not_valid_after_utc <= now:
            continue
        if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            continue
        seen.add(fingerprint)
        bundle.append(cert)
    bundle_pem = b"".join(_pem(c) for c in bundle)
    out.bundle_size = len(bundle)
    out.ca_expiry = ca_cert.not_valid_after_utc
    ca_data = {CERT_KEY: ca.cert_pem, PRIVATE_KEY_KEY: ca.key_pem, CA_KEY: bundle_pem}
    if observed.ca is None or dict(observed.ca.data) != ca_data:
        out.ca_secret = ca_data
    dropped = len({c.fingerprint(hashes.SHA256()) for c in previous} - seen)
    if dropped:
        out.notes.append(f"{dropped} expired CA(s) leave the bundle")

    # The webhook configuration's caBundle.
    bundle_since: dt.datetime | None = None
    if observed.config is None or not observed.config.ca_bundles:
        out.waiting = f"the MutatingWebhookConfiguration {settings.webhook_configuration} does not exist or has no webhooks"
    elif any(b != bundle_pem for b in observed.config.ca_bundles):
        out.ca_bundle = bundle_pem
        bundle_since = now
        out.notes.append(f"caBundle of {settings.webhook_configuration} set to {len(bundle)} CA(s)")
    else:
        # In place already; without the annotation (written by hand), take it as long settled.
        bundle_since = observed.config.bundle_updated_at or dt.datetime.min.replace(tzinfo=dt.UTC)

    # The serving certificate.
    pair, why = _load_pair(observed.tls)
    problem = _serving_problem(pair, why, ca_cert, settings, now)
    if problem:
        served = pair.cert if pair is not None else None
        if (served is not None and bundle_since is not None and now < bundle_since + settings.settle
                and _trusted_now(served, bundle, now)):
            # The served certificate still works; its replacement waits until the API
            # servers trust the CA that signs it.
            ready_at = bundle_since + settings.settle
            out.waiting = out.waiting or f"serving certificate due ({problem}); the new CA settles in the caBundle until {ready_at:%H:%M:%S}"
            out.next_check = min(out.next_check, ready_at)
        else:
            pair = certs.create_serving_cert(ca, settings.sans, lifetime=settings.validity, now=now)
            out.notes.append(f"new serving certificate for {settings.sans[0]} ({problem})")
            out.issued.append("serving")
    if pair is not None:
        tls_data = {CERT_KEY: pair.cert_pem, PRIVATE_KEY_KEY: pair.key_pem, CA_KEY: bundle_pem}
        if observed.tls is None or dict(observed.tls.data) != tls_data:
            out.tls_secret = tls_data
        served_cert = pair.cert
        out.serving_expiry = served_cert.not_valid_after_utc
        if signed_by(served_cert, ca_cert):
            out.next_check = min(out.next_check, served_cert.not_valid_after_utc - settings.renew_before)

    # When something next falls due.
    out.next_check = min(out.next_check, ca_cert.not_valid_after_utc - settings.validity,
                         *(c.not_valid_after_utc for c in bundle[1:]))
    return out


class CertificateStore(Protocol):
    """The port to the objects :func:`plan` reads and writes. Every write carries the
    resourceVersion it was read at and raises :class:`CertificateError` when it fails
    (including a conflict: another writer came first)."""

    def read_secret(self, name: str) -> SecretState | None:
        """The Secret ``name`` of the release namespace, or None when it does not exist."""

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: SecretState) -> None:
        """Set the data of the Secret ``name`` (read as ``previous``) to exactly ``data``."""

    def read_config(self) -> ConfigState | None:
        """The webhook configuration, or None when it does not exist."""

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: ConfigState) -> None:
        """Set every webhook's ``caBundle`` to ``bundle`` and :data:`BUNDLE_UPDATED_AT` to ``at``."""

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

    def __init__(self, store: CertificateStore, settings: Settings,
                 clock: Callable[[], dt.datetime] = _utcnow, watchers: Iterable[object] = (),
                 max_backoff: float = 60.0) -> None:
        self.store, self.settings, self.clock = store, settings, clock
        self.watchers = list(watchers)
        self.max_backoff = max_backoff
        self.last: Plan | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sync(self) -> Plan:
        """One pass: read the three objects, :func:`plan`, write in the safe order.

        Raises :class:`CertificateError` when a read or a write fails; nothing later in the
        order is written then, and the next pass starts from what is really there.
        """
        s = self.settings
        observed = Observed(self.store.read_secret(s.ca_secret), self.store.read_secret(s.tls_secret),
                            self.store.read_config())
        for what, state in ((s.ca_secret, observed.ca), (s.tls_secret, observed.tls)):
            if state is None:
                raise CertificateError(
                    f"Secret {s.namespace}/{what} does not exist; the chart creates it empty "
                    "(`helm upgrade` restores it) and the reconciler fills it")
        assert observed.ca is not None and observed.tls is not None
        now = self.clock()
        decided = plan(observed, s, now)
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


@dataclass
class FakeCertificateStore:
    """An in-memory :class:`CertificateStore` with the API server's rules that matter here:
    resourceVersions bump on every write and a stale one is a conflict. ``writes`` records
    ``(kind, name)`` in order; ``fail_next`` makes the next write of that name raise."""

    secrets: dict[str, SecretState] = field(default_factory=dict)
    config: ConfigState | None = None
    config_webhooks: int = 1
    writes: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    fail_next: set[str] = field(default_factory=set)
    _version: int = 0

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    def create_empty(self, *names: str, with_config: bool = True) -> FakeCertificateStore:
        """The chart's install: empty Secrets and a configuration without a caBundle."""
        for name in names:
            self.secrets[name] = SecretState({}, self._bump())
        if with_config:
            self.config = ConfigState((b"",) * self.config_webhooks, None, self._bump())
        return self

    def read_secret(self, name: str) -> SecretState | None:
        return self.secrets.get(name)

    def write_secret(self, name: str, data: Mapping[str, bytes], previous: SecretState) -> None:
        current = self.secrets.get(name)
        if name in self.fail_next:
            self.fail_next.discard(name)
            raise CertificateError(f"write of Secret {name} failed (injected)")
        if current is None or current.resource_version != previous.resource_version:
            raise CertificateError(f"Secret {name}: conflict")
        self.secrets[name] = SecretState(dict(data), self._bump())
        self.writes.append(("secret", name))

    def read_config(self) -> ConfigState | None:
        return self.config

    def write_ca_bundle(self, bundle: bytes, at: dt.datetime, previous: ConfigState) -> None:
        if "config" in self.fail_next:
            self.fail_next.discard("config")
            raise CertificateError("write of the webhook configuration failed (injected)")
        if self.config is None or self.config.resource_version != previous.resource_version:
            raise CertificateError("webhook configuration: conflict")
        self.config = ConfigState((bundle,) * len(self.config.ca_bundles), at, self._bump())
        self.writes.append(("config", "caBundle"))

    def emit(self, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))
