"""Troupe's mutating admission webhook.

- :mod:`webhook.admission`: the pure ``mutate(review, config) -> review`` (no I/O), with
  :mod:`webhook.patches` and :mod:`webhook.checks`; ``kubectl troupe plan`` admits a
  manifest's pods with it (``docs/decisions/051-plan-admits-with-the-webhook.md``).
- :mod:`webhook.app`: the Flask adapter (``/mutate``, ``/healthz``, ``/readyz``, ``/metrics``).
- :mod:`webhook.registration`: the MutatingWebhookConfiguration builder.
- :mod:`webhook.cli`, :mod:`webhook.gunicorn_conf`, :mod:`webhook.tls`: serving under
  gunicorn over TLS with certificate reload.
- :mod:`webhook.worker`, :mod:`webhook.server`: the gunicorn worker whose connections an
  event loop reads, with deadlines and a connection cap, so no slow client stalls it.

Decisions: ``docs/decisions/002-webhook.md``, ``docs/decisions/012-slow-clients.md``,
``docs/decisions/013-update-rules.md``.
"""
