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

:func:`plan` decides (no I/O; it makes keys and reads no clock;
:mod:`~reconciler.daemon.certificates.rules`); :class:`CertificateManager`
(:mod:`~reconciler.daemon.certificates.manager`) runs it against a
:class:`CertificateStore`, the small port that :class:`reconciler.kube.KubeCertificateStore`
implements against the API server and
:class:`~reconciler.daemon.certificates.fake.FakeCertificateStore` in memory.
"""

from __future__ import annotations

from reconciler.daemon.certificates.manager import (
    BUNDLE_SIZE,
    EXPIRY,
    ISSUED,
    SYNC_ERRORS,
    CertificateManager,
    CertificateStore,
)
from reconciler.daemon.certificates.rules import (
    BUNDLE_UPDATED_AT,
    CA_KEY,
    CERT_KEY,
    NEVER,
    PRIVATE_KEY_KEY,
    CertificateError,
    ConfigState,
    Observed,
    Plan,
    SecretState,
    Settings,
    plan,
    signed_by,
    split_pem,
)

__all__ = [
    "BUNDLE_SIZE",
    "BUNDLE_UPDATED_AT",
    "CA_KEY",
    "CERT_KEY",
    "EXPIRY",
    "ISSUED",
    "NEVER",
    "PRIVATE_KEY_KEY",
    "SYNC_ERRORS",
    "CertificateError",
    "CertificateManager",
    "CertificateStore",
    "ConfigState",
    "Observed",
    "Plan",
    "SecretState",
    "Settings",
    "plan",
    "signed_by",
    "split_pem",
]
