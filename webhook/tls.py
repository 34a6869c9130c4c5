"""The webhook's TLS context, re-read when the certificate files are rotated.

Mechanism (``docs/decisions/002-webhook.md``): the server (:mod:`webhook.server`) asks
:meth:`CertReloader.context` for a context for every new connection; it
``stat``s the certificate and key files (inode, mtime in ns, size: a few microseconds) and
returns the cached context while they are unchanged. When they change (a Secret update
swaps the mounted files; ``certs`` rewrites them), it builds a new context, so the next
connection is served with the new certificate and connections already open keep theirs.
File times come from a coarse clock (milliseconds), so a rewrite in place within the same
tick and of the same size would look unchanged: while the files are younger than
:data:`RACY_SECONDS`, their content digest is compared too (as git does for racy index
entries).
If the new pair does not load (for example the certificate was replaced but not yet the
key), the previous context keeps serving and the load is retried on the next connection.

Every context requires TLS 1.2 or newer. The files need not exist when the webhook starts
(in-cluster they are created after install): until they do, new TLS connections are closed
and :meth:`CertReloader.ready` says it is waiting for them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass

from cryptography import x509

log = logging.getLogger("troupe.webhook.tls")

#: The oldest protocol version the webhook accepts.
MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2
#: Files modified less than this long ago are also compared by content.
RACY_SECONDS = 2.0


def build_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side context serving ``cert_file`` / ``key_file``, TLS 1.2 minimum.

    Raises ``OSError`` (unreadable file) or ``ssl.SSLError`` (not PEM, key does not match).
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = MINIMUM_TLS_VERSION
    ctx.load_cert_chain(certfile=cert_file, keyfile=key_file)
    return ctx


@dataclass(frozen=True)
class _Stamp:
    cert: tuple[int, int, int, int]
    key: tuple[int, int, int, int]

    def racy(self) -> bool:
        """True while a same-size rewrite could still share these modification times."""
        newest = max(self.cert[2], self.key[2])
        return time.time_ns() - newest < RACY_SECONDS * 1e9


def _stat(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def certificate_serial(cert_file: str) -> int | None:
    """The serial number of the first certificate in ``cert_file``, or None if unreadable."""
    try:
        with open(cert_file, "rb") as f:
            return x509.load_pem_x509_certificate(f.read()).serial_number
    except (OSError, ValueError):
        return None


class CertReloader:
    """A TLS context for one certificate/key pair of files, rebuilt when they change.

    Thread-safe: gthread workers call :meth:`context` from their connection threads.
    ``serial`` is the serial of the certificate being served; ``last_error`` the reason the
    newest files could not be loaded (None when they are the ones served).
    """

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        self._stamp: _Stamp | None = None
        self._digest = b""
        self.serial: int | None = None
        self.last_error: str | None = None
        self.loads = 0

    def _current_stamp(self) -> _Stamp:
        return _Stamp(_stat(self.cert_file), _stat(self.key_file))

    def _content_digest(self) -> bytes:
        h = hashlib.sha256()
        for path in (self.cert_file, self.key_file):
            with open(path, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
        return h.digest()

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: cached, or rebuilt if the files changed.

        Raises ``OSError``/``ssl.SSLError`` only when no context could ever be loaded.
        """
        try:
            stamp = self._current_stamp()
        except OSError as e:
            if self._ctx is not None:
                self.last_error = f"cannot read certificate files: {e}"
                return self._ctx
            raise
        ctx = self._ctx
        if ctx is not None and stamp == self._stamp and not stamp.racy():
            return ctx
        with self._lock:
            try:
                digest = self._content_digest()
                if self._ctx is not None and digest == self._digest:
                    # Touched, or racy: same content as served, keep the context.
                    self._stamp, self.last_error = stamp, None
                    return self._ctx
                new = build_context(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError) as e:
                self.last_error = f"cannot load {self.cert_file} with {self.key_file}: {e}"
                if self._ctx is None:
                    raise
                log.warning("keeping the previous certificate: %s", self.last_error)
                return self._ctx
            self._ctx, self._stamp, self._digest, self.last_error = new, stamp, digest, None
            self.serial = certificate_serial(self.cert_file)
            self.loads += 1
            log.info("serving certificate", extra={"fields": {
                "cert_file": self.cert_file, "serial": f"{self.serial:x}" if self.serial is not None else None}})
            return new

    def ready(self) -> tuple[bool, str]:
        """(True, "") when the current files are readable and a context is being served;
        else (False, reason): ``waiting for certificate files X and Y`` while one of them
        does not exist and none was ever loaded (they are created after the webhook starts).
        A rotation that failed to load leaves the previous certificate in service: still
        ready, with the reason as a note."""
        if self._ctx is None and not (os.path.exists(self.cert_file) and os.path.exists(self.key_file)):
            return False, f"waiting for certificate files {self.cert_file} and {self.key_file}"
        try:
            self.context()
            self._current_stamp()
        except (OSError, ssl.SSLError) as e:
            return False, f"certificate not loadable: {e}"
        return True, self.last_error or ""


_reloaders: dict[tuple[str, str], CertReloader] = {}
_reloaders_lock = threading.Lock()


def reloader_for(cert_file: str, key_file: str) -> CertReloader:
    """The process-wide :class:`CertReloader` for this pair of files (shared by the gunicorn
    hook and ``/readyz``)."""
    key = (os.path.abspath(cert_file), os.path.abspath(key_file))
    with _reloaders_lock:
        r = _reloaders.get(key)
        if r is None:
            r = _reloaders[key] = CertReloader(*key)
        return r
