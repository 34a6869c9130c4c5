"""``python -m webhook``: serve the admission webhook, or print its registration.

    python -m webhook serve --tls-cert FILE --tls-key FILE [--bind HOST:PORT]
                            [--health-bind HOST:PORT] [--config FILE] [--workers N]
                            [--threads N] [--max-connections N]
                            [--tls-handshake-timeout S] [--request-timeout S]
                            [--log-level debug|info|warning|error]
    python -m webhook configuration (--url URL | --service NAMESPACE/NAME[:PORT])
                            [--ca-bundle FILE] [--config FILE] [--name NAME]

Everything is checked before gunicorn starts (certificate and key, when they exist,
readable and matching, certificate not expired; configuration valid; addresses free); a
problem exits with status 2 and one line on stderr naming it. Certificate files that do not
exist yet are waited for (in-cluster they are created after install): ``/readyz`` answers
503 "waiting for certificate files X and Y" until they appear, and TLS is served from then
on (``docs/decisions/012-slow-clients.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import ssl
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from troupe.cli import UsageError as SharedUsageError
from troupe.cli import check_bind as shared_check_bind
from troupe.cli import guarded, parse_bind
from troupe.config import Config, ConfigError, load_config
from troupe.logs import LOG_LEVELS, log_level
from webhook.server import DEFAULT_LIMITS, Limits

PROG = "python -m webhook"
DEFAULT_BIND = "0.0.0.0:8443"


class UsageError(Exception):
    """A command-line problem; the message is the one line printed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parse_bind(value: str, flag: str = "--bind") -> tuple[str, int]:
    try:
        return parse_bind(flag, value)  # HOST:PORT, the port in range, the flag named
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_readable(flag: str, path: str) -> None:
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {path}: not readable")


def check_tls(cert_file: str, key_file: str, now: dt.datetime | None = None) -> bool:
    """False when either file does not exist yet (the webhook waits for them); True when
    the pair loads, matches and the certificate is in date; else raise :class:`UsageError`."""
    from cryptography import x509

    if not os.path.exists(cert_file) or not os.path.exists(key_file):
        return False
    _check_readable("--tls-cert", cert_file)
    _check_readable("--tls-key", key_file)
    try:
        with open(cert_file, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except ValueError as e:
        raise UsageError(f"--tls-cert {cert_file}: not a PEM certificate ({str(e).split('.')[0]})") from e
    now = now or dt.datetime.now(dt.UTC)
    if cert.not_valid_after_utc <= now:
        raise UsageError(f"--tls-cert {cert_file}: expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        raise UsageError(f"--tls-key {key_file}: not a PEM private key matching --tls-cert ({e.reason or e})") from e
    return True


def _check_pem_certificates(flag: str, path: str, data: bytes) -> None:
    """Raise :class:`UsageError` naming ``flag`` and ``path`` unless ``data`` is one or more
    PEM certificates (what a caBundle holds)."""
    from cryptography import x509

    try:
        x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise UsageError(f"{flag} {path}: not PEM certificates ({str(e).split('.')[0]})") from None


def check_bind(host: str, port: int, flag: str = "--bind") -> None:
    """Raise :class:`UsageError` if ``host:port`` cannot be listened on right now
    (:func:`troupe.cli.check_bind`, its error this module's)."""
    try:
        shared_check_bind(flag, host, port)
    except SharedUsageError as e:
        raise UsageError(str(e)) from None


@dataclass(frozen=True)
class ServeOptions:
    """Validated options of ``serve``."""

    cert_file: str
    key_file: str
    bind: str
    config: Config
    workers: int | None
    threads: int | None
    health_bind: str | None = None
    max_connections: int | None = None
    limits: Limits = DEFAULT_LIMITS
    certificate_present: bool = True
    log_level: str = "info"


def _bind_string(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _serve_options(args: argparse.Namespace) -> ServeOptions:
    cert, key = os.path.abspath(args.tls_cert), os.path.abspath(args.tls_key)
    present = check_tls(cert, key)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise UsageError(f"--config {e}") from e
    host, port = _parse_bind(args.bind)
    for flag, n in (("--workers", args.workers), ("--threads", args.threads),
                    ("--max-connections", args.max_connections)):
        if n is not None and n < 1:
            raise UsageError(f"{flag} {n}: must be >= 1")
    for flag, seconds in (("--tls-handshake-timeout", args.tls_handshake_timeout),
                          ("--request-timeout", args.request_timeout)):
        if not 0 < seconds <= 300:
            raise UsageError(f"{flag} {seconds:g}: must be seconds in (0, 300]")
    check_bind(host, port)
    health = None
    if args.health_bind is not None:
        health_host, health_port = _parse_bind(args.health_bind, "--health-bind")
        if (health_host, health_port) == (host, port):
            raise UsageError(f"--health-bind {args.health_bind}: must differ from --bind")
        check_bind(health_host, health_port, "--health-bind")
        health = _bind_string(health_host, health_port)
    limits = Limits(handshake_timeout=args.tls_handshake_timeout, request_timeout=args.request_timeout)
    return ServeOptions(cert, key, _bind_string(host, port), config, args.workers, args.threads, health,
                        args.max_connections, limits, present, args.log_level)


METRICS_DIR_PREFIX = "troupe-webhook-metrics-"


def _remove_stale_metrics_dirs() -> None:
    """Remove metrics directories left by servers that were killed (no exit hook ran):
    ``troupe-webhook-metrics-<pid>-*`` whose pid is gone."""
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        pid = name[len(METRICS_DIR_PREFIX):].partition("-")[0]
        if not name.startswith(METRICS_DIR_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def _metrics_dir() -> None:
    """Set PROMETHEUS_MULTIPROC_DIR before prometheus_client is imported: an existing value
    is used (and emptied), else a fresh temporary directory that is removed at exit (or by
    the next server, if this one is killed)."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.unlink(os.path.join(path, name))
        return
    _remove_stale_metrics_dirs()
    path = tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    os.environ["TROUPE_OWNED_METRICS_DIR"] = path


def serve(opts: ServeOptions) -> None:
    """Run gunicorn in this process (blocks until it stops)."""
    _metrics_dir()
    from gunicorn.app.base import BaseApplication

    import webhook.gunicorn_conf as conf_module
    from webhook.worker import Serving

    if not opts.certificate_present:
        import logging

        from webhook.logs import configure_troupe_logging

        configure_troupe_logging(log_level(opts.log_level))
        logging.getLogger("troupe.webhook.tls").warning(
            "waiting for certificate files; /readyz answers 503 until they exist",
            extra={"fields": {"cert_file": opts.cert_file, "key_file": opts.key_file}})

    class WebhookApplication(BaseApplication):  # type: ignore[misc]
        """gunicorn, configured from ``webhook.gunicorn_conf`` plus the command line. TLS
        is the worker's (:mod:`webhook.worker`), not gunicorn's: gunicorn would refuse to
        start while the certificate files do not exist yet."""

        troupe_serving = Serving(opts.cert_file, opts.key_file, opts.health_bind, opts.limits)

        def load_config(self) -> None:
            for name, value in vars(conf_module).items():
                if name in self.cfg.settings and value is not None:
                    self.cfg.set(name, value)
            overrides: dict[str, Any] = {
                "bind": [opts.bind, *([opts.health_bind] if opts.health_bind else [])],
                "proc_name": "troupe-webhook",
                "loglevel": opts.log_level,
            }
            if opts.workers is not None:
                overrides["workers"] = opts.workers
            if opts.threads is not None:
                overrides["threads"] = opts.threads
            if opts.max_connections is not None:
                overrides["worker_connections"] = opts.max_connections
            for name, value in overrides.items():
                self.cfg.set(name, value)

        def load(self) -> Any:
            from webhook.app import create_app
            from webhook.logs import FdAdmissionLog

            return create_app(opts.config, opts.cert_file, opts.key_file,
                              FdAdmissionLog(sys.stderr.fileno(), log_level(opts.log_level)))

    WebhookApplication().run()


def _configuration(args: argparse.Namespace) -> int:
    import yaml

    from webhook.registration import webhook_configuration

    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise UsageError(f"--config {e}") from e
    ca = b""
    if args.ca_bundle:
        _check_readable("--ca-bundle", args.ca_bundle)
        with open(args.ca_bundle, "rb") as f:
            ca = f.read()
        _check_pem_certificates("--ca-bundle", args.ca_bundle, ca)
    service = None
    if args.service:
        ns, _, rest = args.service.partition("/")
        name, _, port = rest.partition(":")
        if not ns or not name or (port and not port.isdigit()):
            raise UsageError(f"--service {args.service!r}: must be NAMESPACE/NAME[:PORT]")
        service = {"namespace": ns, "name": name, "port": int(port) if port else 443}
    try:
        obj = webhook_configuration(config, url=args.url, service=service, ca_bundle_pem=ca, name=args.name)
    except ValueError as e:
        raise UsageError(str(e)) from e
    sys.stdout.write(yaml.safe_dump(obj, sort_keys=False, width=10_000))
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser (``--help`` explains each command)."""
    p = _Parser(prog=PROG, description="Troupe's mutating admission webhook (gang, topology, "
                "shared device groups; protects the reconciler's annotations).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser(
        "serve", help="serve POST /mutate over HTTPS under gunicorn",
        description="Serve the admission webhook over HTTPS under gunicorn: worker processes "
        "whose connections are read by an event loop, with a deadline on each TLS handshake and "
        "on reading each whole request and a cap on connections per worker, so that slow or silent "
        "clients cannot hold what real admissions need; keep-alive; TLS 1.2+. Routes: POST /mutate "
        "(AdmissionReview v1), GET /healthz, /readyz, /metrics; with --health-bind, the last three "
        "also over plain HTTP there (for probes and scrapers). The certificate and key files are "
        "re-read when they change, for new connections; if they do not exist yet, the webhook "
        "starts, /readyz answers 503 'waiting for certificate files ...', and TLS is served once "
        "they appear. Logs are JSON lines on stderr.",
    )
    s.add_argument("--tls-cert", required=True, metavar="FILE", help="PEM serving certificate (chain)")
    s.add_argument("--tls-key", required=True, metavar="FILE", help="PEM private key of the certificate")
    s.add_argument("--bind", default=DEFAULT_BIND, metavar="HOST:PORT",
                   help=f"HTTPS address to listen on (default {DEFAULT_BIND})")
    s.add_argument("--health-bind", metavar="HOST:PORT",
                   help="also serve /healthz, /readyz and /metrics over plain HTTP here, e.g. 0.0.0.0:8081 "
                   "(needs no certificate; default: none)")
    s.add_argument("--config", metavar="FILE",
                   help="Troupe's YAML configuration, the file the reconciler reads (default: all defaults)")
    s.add_argument("--workers", type=int, metavar="N", help="worker processes (default: one per CPU)")
    s.add_argument("--threads", type=int, metavar="N",
                   help="threads per worker that run the application (default 1: in the worker's event loop)")
    s.add_argument("--max-connections", type=int, metavar="N",
                   help="open connections per worker; at the cap the oldest one without a complete request "
                   "makes room (default 1000)")
    s.add_argument("--tls-handshake-timeout", type=float, default=Limits.handshake_timeout, metavar="SECONDS",
                   help=f"close a connection whose TLS handshake takes longer (default {Limits.handshake_timeout:g})")
    s.add_argument("--request-timeout", type=float, default=Limits.request_timeout, metavar="SECONDS",
                   help="close a connection that takes longer to send one whole request, headers and body "
                   f"(default {Limits.request_timeout:g})")
    s.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                   help="the least severe log lines written, gunicorn's and the webhook's; the line per admission "
                   "review is info, so warning and error leave it out (default %(default)s)")
    c = sub.add_parser(
        "configuration", help="print the MutatingWebhookConfiguration as YAML",
        description="Print the MutatingWebhookConfiguration (matchConditions for the configured "
        "keys) as YAML, for kubectl apply.",
    )
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="https URL of /mutate (a webhook outside the cluster)")
    target.add_argument("--service", metavar="NAMESPACE/NAME[:PORT]", help="in-cluster Service of the webhook")
    c.add_argument("--ca-bundle", metavar="FILE", help="PEM CA that signed the serving certificate")
    c.add_argument("--config", metavar="FILE", help="Troupe's YAML configuration")
    c.add_argument("--name", default="troupe", help="object name (default troupe)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parser().parse_args(argv)
    return guarded(lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "serve":
            serve(_serve_options(args))
            return 0
        return _configuration(args)
    except UsageError as e:
        sys.stderr.write(f"{PROG} {args.command}: error: {e}\n")
        return 2
