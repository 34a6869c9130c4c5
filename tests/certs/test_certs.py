"""The certs library and CLI: a CA, serving certs that verify against it, 0600 keys, expiry."""

import datetime as dt
import ipaddress
import os
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

import certs


def test_a_serving_cert_is_signed_by_the_ca_and_carries_the_sans():
    ca = certs.create_ca("test-ca", days=10)
    leaf = certs.create_serving_cert(ca, ["127.0.0.1", "localhost", "troupe.troupe-system.svc"], days=5)
    cert = leaf.cert
    assert cert.issuer == ca.cert.subject
    ca_key = ca.cert.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePublicKey)
    ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "troupe.troupe-system.svc"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_a_leaf_never_outlives_its_ca():
    ca = certs.create_ca(days=2)
    leaf = certs.create_serving_cert(ca, ["localhost"], days=365)
    assert leaf.cert.not_valid_after_utc <= ca.cert.not_valid_after_utc


def test_a_client_cert_names_the_user_and_groups():
    ca = certs.create_ca()
    leaf = certs.create_client_cert(ca, "alice", ["dev", "system:authenticated"])
    subject = leaf.cert.subject
    assert subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)] == ["dev", "system:authenticated"]


@pytest.mark.parametrize("sans", [[], ["", "  "]])
def test_a_serving_cert_without_sans_is_refused(sans):
    with pytest.raises(ValueError, match="at least one SAN"):
        certs.create_serving_cert(certs.create_ca(), sans)


def test_keys_are_written_0600_and_certs_0644(tmp_path):
    certs.write_pair(certs.create_ca(), tmp_path / "ca.crt", tmp_path / "ca.key")
    assert stat.S_IMODE(os.stat(tmp_path / "ca.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "ca.crt").st_mode) == 0o644
    assert not list(tmp_path.glob(".*.tmp"))


def test_rotation_is_due_when_the_cert_is_missing_or_expires_soon(tmp_path):
    path = tmp_path / "w.crt"
    assert certs.needs_rotation(path, within_seconds=60)
    certs.write_pair(certs.create_serving_cert(certs.create_ca(), ["localhost"], days=10), path, tmp_path / "w.key")
    assert not certs.needs_rotation(path, within_seconds=86400)
    assert certs.needs_rotation(path, within_seconds=11 * 86400)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=9, hours=23)
    assert certs.needs_rotation(path, within_seconds=3600, now=later)


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "certs", *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_the_cli_creates_a_ca_and_a_serving_cert_and_reports_expiry(tmp_path):
    assert run_cli("ca", "--out", "pki", cwd=tmp_path).returncode == 0
    r = run_cli("serving", "--ca-dir", "pki", "--san", "127.0.0.1", "--out", "pki/webhook", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "pki/webhook.key").st_mode) == 0o600
    r = run_cli("expiry", "pki/webhook.crt", cwd=tmp_path)
    assert r.returncode == 0 and "days left" in r.stdout
    assert run_cli("expiry", "--within", "400", "pki/webhook.crt", cwd=tmp_path).returncode == 1


def test_the_cli_names_what_is_wrong(tmp_path):
    r = run_cli("serving", "--ca-dir", "nowhere", "--san", "x", "--out", "w", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == "certs: --ca-dir: nowhere/ca.crt not found (create it with 'python -m certs ca --out nowhere')"
    run_cli("ca", "--out", "pki", cwd=tmp_path)
    r = run_cli("ca", "--out", "pki", cwd=tmp_path)
    assert r.returncode == 2 and "--force" in r.stderr
    r = run_cli("expiry", "nope.crt", cwd=tmp_path)
    assert r.returncode == 2 and "nope.crt: no such file" in r.stderr
