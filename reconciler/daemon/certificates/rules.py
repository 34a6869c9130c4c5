"""The rules that keep the webhook's certificates valid and trusted (:func:`plan`: no I/O,
it makes keys and reads no clock), and what they read and decide: :class:`Settings`,
:class:`Observed`, :class:`Plan`. The rules and their reasons are in the package docstring
of :mod:`reconciler.daemon.certificates` and ``docs/decisions/010-webhook-certificates.md``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

import certs

#: Keys of both Secrets (the ``kubernetes.io/tls`` names, plus ``ca.crt`` as cert-manager writes it).
CERT_KEY = "tls.crt"
PRIVATE_KEY_KEY = "tls.key"
CA_KEY = "ca.crt"
#: Annotation on the webhook configuration: when its ``caBundle`` was last written (RFC 3339).
BUNDLE_UPDATED_AT = "troupe.io/ca-bundle-updated-at"

#: A time later than any certificate's expiry.
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


class CertificateError(RuntimeError):
    """A certificate object could not be read or written; the message names it."""


@dataclass(frozen=True)
class Settings:
    """Where the webhook's certificates live and how long they last.

    ``namespace``/``service``: the webhook's Service; the serving certificate's DNS names are
    ``service``, ``service.namespace``, ``service.namespace.svc`` and
    ``service.namespace.svc.<cluster_domain>`` (``cluster.local`` unless the cluster's DNS
    domain differs; what the API server checks for a service reference is the ``.svc`` name:
    https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#service-reference),
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
    cluster_domain: str = "cluster.local"

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
        names = (self.service, svc, f"{svc}.svc", f"{svc}.svc.{self.cluster_domain}", *self.extra_sans)
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


def is_ca(cert: x509.Certificate) -> bool:
    """True when ``cert`` may sign others: a BasicConstraints extension with ``ca`` set
    (RFC 5280 4.2.1.9). A certificate without it (an X.509 v1 one, say, in a hand-set
    ``caBundle`` or CA Secret) is not a CA here: it is replaced, never a reason to fail."""
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (x509.ExtensionNotFound, ValueError):
        return False


def _ca_problem(ca: certs.KeyPair | None, why: str, settings: Settings, now: dt.datetime) -> str:
    if ca is None:
        return why
    cert = ca.cert
    if not is_ca(cert):
        return f"{CERT_KEY} is not a CA (no BasicConstraints with ca set)"
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


def _trust_bundle(observed: Observed, old_ca: certs.KeyPair | None, ca_cert: x509.Certificate,
                  now: dt.datetime) -> tuple[list[x509.Certificate], int]:
    """The trust bundle: the current CA ``ca_cert``, then every other CA still in date that
    the CA Secret (its bundle and ``old_ca``) or the webhook configuration trusted, so that
    nothing trusted a moment ago is dropped; and how many CAs leave it (expired)."""
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
        if not is_ca(cert):
            continue
        seen.add(fingerprint)
        bundle.append(cert)
    return bundle, len({c.fingerprint(hashes.SHA256()) for c in previous} - seen)


def _set_ca_bundle(out: Plan, config: ConfigState | None, bundle_pem: bytes, size: int, settings: Settings,
                   now: dt.datetime) -> dt.datetime | None:
    """Decide the webhook configuration's caBundle into ``out`` (``size`` CAs in
    ``bundle_pem``); returns since when the API servers have had that bundle (None: they
    cannot, the configuration is missing)."""
    if config is None or not config.ca_bundles:
        out.waiting = f"the MutatingWebhookConfiguration {settings.webhook_configuration} does not exist or has no webhooks"
        return None
    if any(b != bundle_pem for b in config.ca_bundles):
        out.ca_bundle = bundle_pem
        out.notes.append(f"caBundle of {settings.webhook_configuration} set to {size} CA(s)")
        return now
    # In place already; without the annotation (written by hand), take it as long settled.
    return config.bundle_updated_at or dt.datetime.min.replace(tzinfo=dt.UTC)


def plan(observed: Observed, settings: Settings, now: dt.datetime) -> Plan:
    """Decide the writes that keep the webhook's certificates valid and trusted at ``now``
    (aware UTC). Makes keys when it issues; no I/O, no clock. See the package docstring for
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

    bundle, dropped = _trust_bundle(observed, old_ca, ca_cert, now)
    bundle_pem = b"".join(_pem(c) for c in bundle)
    out.bundle_size = len(bundle)
    out.ca_expiry = ca_cert.not_valid_after_utc
    ca_data = {CERT_KEY: ca.cert_pem, PRIVATE_KEY_KEY: ca.key_pem, CA_KEY: bundle_pem}
    if observed.ca is None or dict(observed.ca.data) != ca_data:
        out.ca_secret = ca_data
    if dropped:
        out.notes.append(f"{dropped} expired CA(s) leave the bundle")

    bundle_since = _set_ca_bundle(out, observed.config, bundle_pem, len(bundle), settings, now)

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
