"""Troupe's mutating admission webhook.

- :mod:`webhook.admission`: the pure ``mutate(review, config) -> review`` (no I/O).
- :mod:`webhook.app`: the Flask adapter (``/mutate``, ``/healthz``, ``/readyz``, ``/metrics``).
- :mod:`webhook.registration`: the MutatingWebhookConfiguration builder.
- :mod:`webhook.cli`, :mod:`webhook.gunicorn_conf`, :mod:`webhook.tls`: serving under
  gunicorn over TLS with certificate reload.

Decisions: ``docs/decisions/002-webhook.md``.
"""
