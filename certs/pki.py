"""The PKI primitives behind :mod:`certs` (see its docstring for the overview)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Default validity of a CA, in days.
CA_DAYS = 3650
#: Default validity of a serving or client certificate, in days.
LEAF_DAYS = 365
#: Backdating of ``not_valid_before``, in seconds, to tolerate clock skew between hosts.
CLOCK_SKEW_SECONDS = 300


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key, both as bytes."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _validity(days: int, lifetime: dt.timedelta | None) -> dt.timedelta:
    if lifetime is not None:
        if lifetime <= dt.timedelta(0):
            raise ValueError(f"lifetime must be positive, got {lifetime}")
        return lifetime
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    return dt.timedelta(days=days)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, now: dt.datetime,
             not_after: dt.datetime, ca: bool) -> x509.CertificateBuilder:
    """A certificate for ``key`` from ``now`` (less the clock skew allowed) to ``not_after``
    with a random serial, and the critical basic constraints and key usage of a CA
    (``ca``: signs certificates, path length 0) or of a leaf (signs, enciphers keys)."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(seconds=CLOCK_SKEW_SECONDS))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=not ca,
                data_encipherment=False, key_agreement=False, key_cert_sign=ca,
                crl_sign=ca, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    )


def create_ca(
    common_name: str = "troupe-ca",
    days: int = CA_DAYS,
    *,
    lifetime: dt.timedelta | None = None,
    now: dt.datetime | None = None,
) -> KeyPair:
    """Create a self-signed CA valid for ``days`` days (basic constraints CA, path length 0).

    ``lifetime``, when given, replaces ``days`` (for validities shorter than a day, such as
    a rotation test's minutes); ``now`` (aware UTC) is the issue time, default the clock.
    Raises ``ValueError`` if ``days`` < 1, ``lifetime`` is not positive or ``common_name`` is empty.
    """
    validity = _validity(days, lifetime)
    if not common_name:
        raise ValueError("common_name must not be empty")
    key = _new_key()
    name = _name(common_name)
    now = now or _now()
    cert = (
        _builder(name, name, key, now, now + validity, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


#: One label of a DNS name (RFC 1123 section 2.1: letters, digits, inner hyphens, 1-63 long).
_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def san_name(value: str, flag: str = "--san") -> x509.GeneralName:
    """A subject alternative name: an IP address (v4 or v6) or a DNS name (RFC 1123
    labels, 253 characters at most; a leading ``*.`` wildcard label, RFC 6125 section
    6.4.3). Raises ``ValueError`` naming ``flag`` and the value for anything else."""
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        pass
    labels = value.removeprefix("*.").split(".")
    if len(value) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{flag} {value!r}: not a DNS name (letters, digits, '-' and '.') or an IP address")
    return x509.DNSName(value)


def _split_sans(sans: Iterable[str]) -> list[x509.GeneralName]:
    return [san_name(san.strip()) for san in sans if san.strip()]


def _leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[str],
    days: int,
    lifetime: dt.timedelta | None = None,
    now: dt.datetime | None = None,
) -> KeyPair:
    validity = _validity(days, lifetime)
    ca_cert = ca.cert
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the CA key must be an EC or RSA key")
    key = _new_key()
    now = now or _now()
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    builder = (
        _builder(subject, ca_cert.subject, key, now, not_after, ca=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    names = _split_sans(sans)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def create_serving_cert(
    ca: KeyPair,
    sans: Sequence[str],
    common_name: str | None = None,
    days: int = LEAF_DAYS,
    *,
    lifetime: dt.timedelta | None = None,
    now: dt.datetime | None = None,
) -> KeyPair:
    """Create a TLS server certificate signed by ``ca``.

    ``sans`` are DNS names or IP addresses (``"127.0.0.1"``, ``"troupe-webhook.troupe-system.svc"``);
    at least one is required, since clients check SANs, not the common name. Validity is
    ``days`` days (or ``lifetime``, when given), never beyond the CA's; ``now`` is the issue
    time (default the clock). Raises ``ValueError`` on no SANs, ``days`` < 1 or a
    non-positive ``lifetime``.
    """
    names = [s for s in sans if s.strip()]
    if not names:
        raise ValueError("a serving certificate needs at least one SAN (DNS name or IP)")
    return _leaf(ca, _name(common_name or names[0]), ExtendedKeyUsageOID.SERVER_AUTH, names, days, lifetime, now)


def create_client_cert(
    ca: KeyPair, user: str, groups: Sequence[str] = (), days: int = LEAF_DAYS
) -> KeyPair:
    """Create a TLS client certificate: CN is the Kubernetes user name, O entries its groups.

    This is the x509 client-certificate authentication of kube-apiserver
    (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates).
    Raises ``ValueError`` on an empty user or ``days`` < 1.
    """
    if not user:
        raise ValueError("user must not be empty")
    return _leaf(ca, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, (), days)


def create_rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """Create an RSA key pair, as ``(private_key_pem, public_key_pem)`` bytes.

    Used for the service-account token signing keys of kube-apiserver.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def write_private(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically with mode 0600 (a key or a token file)."""
    return _write(Path(path), data, 0o600)


def _write(path: Path, data: bytes, mode: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the new one, never half
    return path


def write_pair(pair: KeyPair, cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> None:
    """Write a certificate (mode 0644) and its key (mode 0600), each atomically.

    The key is written first so that a watcher of the certificate never sees a new
    certificate beside an old key.
    """
    _write(Path(key_path), pair.key_pem, 0o600)
    _write(Path(cert_path), pair.cert_pem, 0o644)


def load_cert(path: str | os.PathLike[str]) -> x509.Certificate:
    """Read a PEM certificate. Raises ``FileNotFoundError`` or ``ValueError`` (not PEM)."""
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


def expiry(path: str | os.PathLike[str]) -> dt.datetime:
    """The ``not_valid_after`` of the certificate at ``path``, as an aware UTC datetime."""
    return load_cert(path).not_valid_after_utc


def needs_rotation(
    path: str | os.PathLike[str], within_seconds: float, now: dt.datetime | None = None
) -> bool:
    """True when the certificate at ``path`` is missing or expires within ``within_seconds``."""
    try:
        end = expiry(path)
    except FileNotFoundError:
        return True
    return end - (now or _now()) <= dt.timedelta(seconds=within_seconds)
