"""``python -m reconciler``: run the reconciler, or simulate placement offline.

- ``run [--kubeconfig FILE] [--config FILE] [--metrics-bind HOST:PORT]``: watch gated pods and
  nodes and release whole gangs (in-cluster credentials when no kubeconfig is given).
- ``simulate SNAPSHOT [--config FILE] [--output json|table]``: the what-if simulator on a
  snapshot (:data:`reconciler.objects.kinds.SNAPSHOT_COMMAND`).
- ``status``, ``why POD``, ``topology``, ``plan -f MANIFEST``: what ``kubectl troupe`` answers
  (:mod:`reconciler.tools.plugin`), on the live cluster or a ``--snapshot``.

Exits non-zero with a one-line error naming what is wrong.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
from typing import Any

import yaml

from troupe.cli import OneLineParser, UsageError, check_bind, guarded, parse_bind, yaml_error
from troupe.config import ConfigError, load_config
from troupe.logs import LOG_LEVELS, JSONFormatter, log_level


def _add_certificate_flags(run: argparse.ArgumentParser) -> None:
    """The ``webhook certificates`` flags of ``run`` (:class:`reconciler.daemon.certificates.Settings`)."""
    certs = run.add_argument_group(
        "webhook certificates",
        "With --manage-webhook-certificates, the acting replica makes a CA and the webhook's serving "
        "certificate, keeps them in two Secrets of the Service's namespace (which must exist; the chart "
        "creates them empty), writes the CA bundle into the MutatingWebhookConfiguration's caBundle and "
        "renews both before they expire (docs/decisions/010-webhook-certificates.md). Durations in seconds.",
    )
    certs.add_argument("--manage-webhook-certificates", action="store_true",
                       help="keep the webhook's certificates and the caBundle (needs --webhook-service)")
    certs.add_argument("--webhook-service", metavar="NAMESPACE/NAME",
                       help="the webhook's Service: the certificate's DNS names and the Secrets' namespace")
    certs.add_argument("--webhook-configuration", default="troupe", metavar="NAME",
                       help="the MutatingWebhookConfiguration whose caBundle is kept (default %(default)s)")
    certs.add_argument("--webhook-tls-secret", metavar="NAME",
                       help="Secret of the serving pair, mounted by the webhook (default <service>-tls)")
    certs.add_argument("--webhook-ca-secret", metavar="NAME", help="Secret of the CA (default <service>-ca)")
    certs.add_argument("--webhook-cert-san", action="append", default=[], metavar="NAME",
                       help="one more DNS name or IP of the serving certificate (repeat), e.g. for a URL")
    certs.add_argument("--cluster-domain", default="cluster.local", metavar="DOMAIN",
                       help="the cluster's DNS domain (kubelet's --cluster-domain): the serving certificate also "
                       "names <service>.<namespace>.svc.DOMAIN (default %(default)s)")
    certs.add_argument("--webhook-cert-validity-seconds", type=int, default=90 * 86400, metavar="S",
                       help="validity of a serving certificate (default %(default)s: 90 days)")
    certs.add_argument("--webhook-cert-renew-before-seconds", type=int, default=30 * 86400, metavar="S",
                       help="renew a serving certificate this long before it expires (default %(default)s: 30 days); "
                       "must exceed the time a Secret takes to reach the pods (kubelet: about 1-2 minutes)")
    certs.add_argument("--webhook-ca-validity-seconds", type=int, default=365 * 86400, metavar="S",
                       help="validity of a CA (default %(default)s: 365 days); it is replaced when less than one "
                       "serving validity is left")
    certs.add_argument("--webhook-cert-settle-seconds", type=int, default=10, metavar="S",
                       help="how long a new CA is in the caBundle before a certificate it signed replaces a valid "
                       "one (default %(default)s)")


def _parser() -> argparse.ArgumentParser:
    """The command line: ``run``, ``simulate`` and the ``kubectl troupe`` commands."""
    p = OneLineParser(
        prog="python -m reconciler",
        description="Troupe's reconciler: releases whole gangs of gated pods onto a topology-aware plan.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="watch the cluster and release gangs",
        description="Watch gated pods, nodes and Jobs; when a gang is complete and fits, record the plan, "
        "then release every member in one update each (pin to its node and remove Troupe's scheduling "
        "gate), releaseConcurrency updates in flight. A release cut short is finished or rolled back, "
        "never left partial.",
    )
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")
    run.add_argument("--config", help="Troupe configuration YAML, shared with the webhook (default: built-in defaults)")
    run.add_argument("--metrics-bind", metavar="HOST:PORT", help="serve /metrics (Prometheus), /healthz (503 with "
                     "the reason when the worker died or is stuck, or an informer has failed for a minute), /readyz "
                     "(caches synced, or standing by; names the informers not listed yet) and /debug/gangs (each "
                     "gang's decision, JSON) here (default: off)")
    run.add_argument("--leader-elect", action="store_true",
                     help="act only while holding a coordination.k8s.io Lease, so that several replicas can run; "
                     "writes stop when the Lease is not renewed within the renew deadline, and the Lease is "
                     "released on SIGTERM")
    run.add_argument("--leader-elect-namespace", metavar="NS",
                     help="namespace of the Lease (default: this pod's namespace in-cluster, else troupe-system)")
    run.add_argument("--leader-elect-name", default="troupe-reconciler", metavar="NAME",
                     help="name of the Lease (default %(default)s)")
    run.add_argument("--leader-elect-lease-seconds", type=int, default=15, metavar="S",
                     help="how long a leader holds the Lease without renewing it (default %(default)s); it renews "
                     "every 1-2 s and stops writing once 2/3 of it has passed without a renewal")
    run.add_argument("--state-configmap", default="troupe-reconciler-state", metavar="[NS/]NAME",
                     help="ConfigMap that keeps what a new leader must know (the backoff of gangs that timed out), "
                     "in the Lease's namespace unless NS/ is given; made when absent (the chart makes it); '-' "
                     "keeps it in memory only (default %(default)s)")
    run.add_argument("--reservation-key-file", metavar="PATH",
                     help="file holding the key (at least 32 bytes) every replica signs the reservations it writes "
                     "on workloads with, and reads them under: a record it does not verify holds no node (the "
                     "chart mounts it from a Secret). Without it each process uses a random key of its own, and a "
                     "restart or failover reads no reservation written before it")
    _add_certificate_flags(run)
    run.add_argument("--log-format", choices=("json", "text"), default="json", help="log line format (default json)")
    run.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                     help="the least severe log lines written (default %(default)s)")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging (--log-level debug)")
    from reconciler.objects import kinds
    from reconciler.tools import simulate

    sim = sub.add_parser(
        "simulate", help="plan gangs offline on a snapshot",
        description="Decide every gang of a snapshot in queue order, with the reconciler's own decision: the "
        "same phase, reason and placement it would reach. Take the snapshot with\n\n  "
        f"{kinds.SNAPSHOT_COMMAND}\n\n({kinds.SNAPSHOT_NOTE}).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_arguments(sim)
    from reconciler.tools import plugin

    plugin.add_commands(sub)  # status, why, topology, plan: what kubectl-troupe runs
    return p


def _namespaced(value: str, default_namespace: str) -> tuple[str, str]:
    """``NS/NAME`` or ``NAME`` (in ``default_namespace``) as ``(namespace, name)``."""
    namespace, _, name = value.rpartition("/")
    if not name:
        raise ValueError(f"--state-configmap: expected [NAMESPACE/]NAME, got {value!r}")
    return (namespace or default_namespace, name)


#: The shortest reservation key accepted, in bytes: HMAC-SHA256's own output length (RFC 2104).
MIN_RESERVATION_KEY = 32


def reservation_key(path: str) -> bytes:
    """The key in the file ``path`` (``--reservation-key-file``), trailing whitespace
    removed. Raises ``ValueError`` naming the flag when it cannot be read or is shorter than
    ``MIN_RESERVATION_KEY`` bytes."""
    try:
        with open(path, "rb") as f:
            key = f.read().rstrip()
    except OSError as e:
        raise UsageError(f"--reservation-key-file {path}: cannot read it: {e.strerror}") from None
    if len(key) < MIN_RESERVATION_KEY:
        raise UsageError(f"--reservation-key-file {path}: the key is {len(key)} bytes, fewer than the "
                         f"{MIN_RESERVATION_KEY} a reservation's signature needs")
    return key


def _pod_namespace() -> str | None:
    """The namespace of the service account this pod runs as, when in a cluster."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def webhook_certificate_settings(args: argparse.Namespace) -> Any:
    """The :class:`reconciler.daemon.certificates.Settings` of ``run``'s flags, or None without
    ``--manage-webhook-certificates``. Raises ``ValueError`` naming the flag that is wrong."""
    if not args.manage_webhook_certificates:
        return None
    from reconciler.daemon.certificates import Settings

    namespace, _, service = (args.webhook_service or "").partition("/")
    if not namespace or not service:
        raise ValueError(f"--webhook-service: expected NAMESPACE/NAME, got {args.webhook_service!r}")
    seconds = dt.timedelta(seconds=1)
    return Settings(
        namespace=namespace, service=service, webhook_configuration=args.webhook_configuration,
        tls_secret=args.webhook_tls_secret or f"{service}-tls", ca_secret=args.webhook_ca_secret or f"{service}-ca",
        extra_sans=tuple(args.webhook_cert_san), validity=args.webhook_cert_validity_seconds * seconds,
        renew_before=args.webhook_cert_renew_before_seconds * seconds,
        ca_validity=args.webhook_ca_validity_seconds * seconds, settle=args.webhook_cert_settle_seconds * seconds,
        cluster_domain=args.cluster_domain,
    )


#: Where in-cluster credentials are read (the service account's token).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def check_run_flags(args: argparse.Namespace) -> None:
    """``run``'s flags checked before anything starts, each error one line naming the flag:
    ``--metrics-bind`` (a port in range and free), the kubeconfig (the file exists and is
    YAML; without one, in-cluster credentials must be there: ``KUBERNETES_SERVICE_HOST``
    and the service account's token), ``--webhook-cert-san`` (a DNS name or an IP),
    ``--cluster-domain`` (a DNS name).
    Raises ``ValueError`` (:class:`troupe.cli.UsageError`)."""
    if args.metrics_bind:
        host, port = parse_bind("--metrics-bind", args.metrics_bind)
        check_bind("--metrics-bind", host, port)
    if args.kubeconfig:
        try:
            with open(args.kubeconfig, encoding="utf-8") as f:
                yaml.safe_load(f)
        except OSError as e:
            raise UsageError(f"--kubeconfig {args.kubeconfig}: cannot read it: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise UsageError(f"--kubeconfig {args.kubeconfig}: not valid YAML at {yaml_error(e)}") from None
    elif not os.environ.get("KUBERNETES_SERVICE_HOST") or not os.path.isfile(SERVICE_ACCOUNT_TOKEN):
        raise UsageError("no --kubeconfig, and not in a cluster: in-cluster credentials need $KUBERNETES_SERVICE_HOST "
                         f"({os.environ.get('KUBERNETES_SERVICE_HOST') or 'unset'}) and {SERVICE_ACCOUNT_TOKEN}")
    from certs import san_name

    for san in args.webhook_cert_san:
        san_name(san, "--webhook-cert-san")
    domain = san_name(args.cluster_domain, "--cluster-domain")
    if not isinstance(domain.value, str) or args.cluster_domain.startswith("*."):
        raise UsageError(f"--cluster-domain {args.cluster_domain!r}: not a DNS name (letters, digits, '-' and '.')")


def configure_logging(args: argparse.Namespace) -> None:
    """``run``'s logs: one handler on stderr, JSON lines (``--log-format json``, the default)
    or text, at ``--log-level`` and above (``--verbose``: debug). urllib3's own lines only
    from warning up, at any level (its debug lines are one per request)."""
    handler = logging.StreamHandler()
    if args.log_format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = logging.DEBUG if args.verbose else log_level(args.log_level)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("urllib3").setLevel(max(level, logging.WARNING))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code. A closed stdout and Ctrl-C end every command
    without a traceback (:func:`troupe.cli.guarded`)."""
    args = _parser().parse_args(argv)
    return guarded(lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.command == "simulate":
        from reconciler.tools import simulate

        return simulate.run(args)
    if args.command in ("status", "why", "topology", "plan"):
        from reconciler.tools import plugin

        return plugin.run(args)
    configure_logging(args)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"reconciler: {e}", file=sys.stderr)
        return 2
    from reconciler.daemon.election import LeaderElection
    from reconciler.run.process import run

    try:
        election = None
        if args.leader_elect:
            namespace = args.leader_elect_namespace or _pod_namespace() or "troupe-system"
            election = LeaderElection.scaled(namespace, args.leader_elect_name, args.leader_elect_lease_seconds)
        state_namespace = election.namespace if election else (_pod_namespace() or "troupe-system")
        state = _namespaced(args.state_configmap, state_namespace) if args.state_configmap != "-" else None
        certificates = webhook_certificate_settings(args)
        check_run_flags(args)  # after the flags above: each error names the first flag that is wrong
        key = reservation_key(args.reservation_key_file) if args.reservation_key_file else None
        return run(args.kubeconfig, config, args.metrics_bind, election, certificates, state, key)
    except ValueError as e:  # a bad flag or kubeconfig: the user's to fix
        print(f"reconciler: {e}", file=sys.stderr)
        return 2
    except (OSError, TimeoutError) as e:  # the cluster did not answer as it should
        print(f"reconciler: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
