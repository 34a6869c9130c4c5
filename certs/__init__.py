"""Certificates for Troupe: a CA, serving certificates signed by it, and expiry reports.

Everything is made with the ``cryptography`` library (ECDSA P-256, SHA-256). Private
keys are written with mode 0600, certificates with 0644. The webhook's serving
certificate and the local control plane's PKI both come from here.

Public API:

- :func:`create_ca` -> :class:`KeyPair` (a self-signed CA).
- :func:`create_serving_cert` -> :class:`KeyPair` (server auth, SANs from DNS names and IPs).
- :func:`create_client_cert` -> :class:`KeyPair` (client auth, CN = user, O = groups).
- :func:`create_rsa_key_pair` -> ``(private_pem, public_pem)`` (service-account signing keys).
- :func:`write_pair`, :func:`load_cert`, :func:`expiry`, :func:`needs_rotation`.
"""

from certs.pki import (
    KeyPair,
    create_ca,
    create_client_cert,
    create_rsa_key_pair,
    create_serving_cert,
    expiry,
    load_cert,
    needs_rotation,
    san_name,
    write_pair,
    write_private,
)

__all__ = [
    "KeyPair",
    "create_ca",
    "create_client_cert",
    "create_rsa_key_pair",
    "create_serving_cert",
    "expiry",
    "load_cert",
    "needs_rotation",
    "san_name",
    "write_pair",
    "write_private",
]
