"""The TLS context is re-read when the certificate files change (``webhook.tls``).

Handshakes here run in memory (``ssl.MemoryBIO``), so the tests see the certificate a
client would be served, without sockets or sleeps.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from certs import create_serving_cert
from tests.support.webhook_builders import TLSFiles, make_tls
from webhook.tls import MINIMUM_TLS_VERSION, CertReloader, certificate_serial


def served_serial(server_ctx: ssl.SSLContext, ca_file: Path) -> int:
    """Handshake a client (trusting ``ca_file``) with ``server_ctx``; the served serial."""
    client_ctx = ssl.create_default_context(cafile=str(ca_file))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = 0
        for end in (client, server):
            try:
                end.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done == 2:
            break
    der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.fixture
def tls(tmp_path: Path) -> TLSFiles:
    return make_tls(tmp_path)


def test_the_context_is_reused_while_the_files_are_unchanged(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    assert r.context() is r.context()
    assert r.loads == 1


def test_a_rotated_pair_is_served_to_the_next_handshake(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    first = served_serial(r.context(), tls.ca_file)
    assert first == certificate_serial(str(tls.cert)) == r.serial
    new = tls.rotate()
    second = served_serial(r.context(), tls.ca_file)
    assert second == new.cert.serial_number != first
    assert r.serial == second and r.loads == 2 and r.last_error is None


def test_a_rewrite_in_place_is_noticed_too(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    r.context()
    pair = create_serving_cert(tls.ca, ["127.0.0.1"])
    tls.key.write_bytes(pair.key_pem)  # same inode, new content
    tls.cert.write_bytes(pair.cert_pem)
    assert served_serial(r.context(), tls.ca_file) == pair.cert.serial_number


def test_a_half_rotated_pair_keeps_the_previous_certificate_until_the_key_arrives(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    old_serial = served_serial(r.context(), tls.ca_file)
    pair = create_serving_cert(tls.ca, ["127.0.0.1"])
    tls.cert.write_bytes(pair.cert_pem)  # the key is still the old one
    assert served_serial(r.context(), tls.ca_file) == old_serial
    assert r.last_error is not None and str(tls.cert) in r.last_error
    assert r.ready() == (True, r.last_error)
    tls.key.write_bytes(pair.key_pem)
    assert served_serial(r.context(), tls.ca_file) == pair.cert.serial_number
    assert r.last_error is None


def test_missing_files_keep_the_served_context_but_make_it_unready(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    ctx = r.context()
    os.unlink(tls.cert)
    assert r.context() is ctx
    ok, reason = r.ready()
    assert not ok and "certificate" in reason


def test_without_any_loadable_pair_there_is_no_context(tmp_path: Path) -> None:
    r = CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    with pytest.raises(OSError):
        r.context()
    assert r.ready()[0] is False


def test_tls_before_1_2_is_refused(tls: TLSFiles) -> None:
    ctx = CertReloader(str(tls.cert), str(tls.key)).context()
    assert ctx.minimum_version == MINIMUM_TLS_VERSION == ssl.TLSVersion.TLSv1_2


def test_touching_the_files_without_changing_them_keeps_the_context(tls: TLSFiles) -> None:
    r = CertReloader(str(tls.cert), str(tls.key))
    ctx = r.context()
    os.utime(tls.cert, ns=(1, 1))
    assert r.context() is ctx and r.loads == 1
