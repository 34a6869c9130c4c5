"""``python -m reconciler run`` as a process (:func:`run`): the API clients, the probes,
leader election, the webhook's certificates, the signals, and the order in which they start
and stop.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import uuid
from typing import Any

from reconciler import kube
from reconciler.daemon import certificates
from reconciler.daemon.access import Access
from reconciler.daemon.election import Elector, LeaderElection
from reconciler.daemon.handlers.waves import default_in_flight
from reconciler.ports import UNFENCED, Fence
from reconciler.run.probes import Health, serve_http
from reconciler.run.reconciler import LEADER, POOL_EXTRA, Reconciler
from troupe.cli import interruptible
from troupe.config import Config

log = logging.getLogger("reconciler")


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--metrics-bind: expected HOST:PORT, got {value!r}")
    return host, int(port)


def _check_user(api: Any, config: Config) -> None:
    """Log who the API server says this reconciler is, with a warning when that is not
    ``reconcilerUsername`` (the webhook would refuse its decision annotations). Never raises:
    an old or locked-down API server may not say."""
    try:
        user = kube.whoami(api)
    except Exception as e:  # noqa: BLE001  an old or locked-down API server: carry on, say so
        log.warning("could not ask the API server who this reconciler is: %s", e)
        return
    if user != config.reconciler_username:
        log.warning(
            "running as %r but reconcilerUsername is %r: the webhook will refuse this "
            "reconciler's decision annotations", user, config.reconciler_username,
        )
    else:
        log.info("running as %s", user)


def _serve_probes(metrics_bind: str, health: Health, api: Any) -> None:
    """Serve the probes and metrics on ``metrics_bind`` (``HOST:PORT``; raises ``ValueError``
    otherwise) from a daemon thread; the gangs' pages ask ``api`` who their callers are
    (:class:`~reconciler.daemon.access.Access`)."""
    host, port = _host_port(metrics_bind)
    serve_http(host, port, health, Access(kube.KubeReviews(api)))
    log.info("metrics and probes on http://%s:%d (/metrics, /healthz, /readyz, /debug/gangs)", host, port)


def run(
    kubeconfig: str | None,
    config: Config,
    metrics_bind: str | None,
    election: LeaderElection | None = None,
    webhook_certificates: certificates.Settings | None = None,
    state: tuple[str, str] | None = None,
    reservation_key: bytes | None = None,
) -> int:
    """Run until SIGINT/SIGTERM; returns the exit code. SIGINT stops it even when the process
    was started with SIGINT ignored (:func:`troupe.cli.interruptible`; once running, its own
    handler takes both signals).

    With ``election``, the reconciler acts only while it holds the Lease, and every write
    passes the elector's fence. A replica that loses the Lease stops acting at once (its
    fence is closed) and exits with code 1, so that its pod restarts as a follower (what
    kube-controller-manager does). On SIGTERM it closes its fence, lets the writes in
    flight finish, stops, and releases the Lease, so the next leader need not wait for it
    to expire. The user agent of its requests names this replica
    (``troupe-reconciler (<host>_<id>)``), as the API server's audit log shows it. With
    ``webhook_certificates``, the acting replica also keeps the webhook's certificates
    (:mod:`reconciler.daemon.certificates`). ``state``: the ConfigMap of the reconciler's own
    state (rollback backoffs), so that a failover or restart continues where it stopped.
    ``reservation_key``: the key every replica signs and reads reservations with (the chart's
    Secret); None: a random key of this process's own, so a restart or failover reads no
    reservation written before it (docs/decisions/049-hostile-tenants-third-round.md).

    Long because the start and the stop of the process share its locals (the elector, the
    reconciler, the exit code) with the election's callbacks; each step is one call.
    """
    interruptible()  # Ctrl-C while starting, too, in a process started with SIGINT ignored
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    agent = f"troupe-reconciler ({identity})"
    try:
        api = kube.api_client(kubeconfig, pool_size=POOL_EXTRA, user_agent=agent)
    except Exception as e:  # the client raises several types for a bad kubeconfig
        raise ValueError(f"--kubeconfig: cannot build an API client: {e}") from e
    _check_user(api, config)
    health = Health()
    if metrics_bind:
        _serve_probes(metrics_bind, health, api)
    certs = kube.webhook_certificates(api, webhook_certificates) if webhook_certificates else None
    done = threading.Event()
    exit_code = 0
    elector: Elector | None = None
    reconciler: Reconciler | None = None

    def act(role: str) -> None:
        assert reconciler is not None
        health.role, health.reconciler = role, reconciler
        if certs is not None:
            certs.start()
        reconciler.start()

    def started() -> None:
        assert election is not None
        log.info("%s leads (Lease %s/%s): reconciling", identity, election.namespace, election.name)
        act("leader")

    def stopped() -> None:
        nonlocal exit_code
        assert election is not None
        log.error("%s lost the Lease %s/%s: stopping", identity, election.namespace, election.name)
        exit_code = 1
        done.set()

    fence: Fence = UNFENCED
    if election is not None:
        leases = kube.KubeLeases(kube.api_client(kubeconfig, pool_size=2, user_agent=agent, retries=0),
                                 election.namespace, election.name)
        elector = Elector(leases, election, identity, started, stopped)
        fence = elector
    # One connection per write that may be in flight at once, so none is opened (a TLS handshake on both
    # sides) and dropped per request: the release threads, the release drivers' first writes, and the
    # Event sender, the condition and Gang object sinks and a spare (docs/decisions/068-release-pipeline.md).
    writers = config.release_concurrency + default_in_flight(config.release_concurrency) + 4
    writer_api = kube.api_client(kubeconfig, pool_size=writers, user_agent=agent,
                                 fence=fence.check if elector is not None else None,
                                 fence_remaining=elector.remaining if elector is not None else None)
    if reservation_key is None:
        log.warning("no --reservation-key-file: reservations are signed with a key of this process only, and "
                    "those written before a restart or failover hold nothing")
    reconciler = Reconciler(api, config, writer_api=writer_api, fence=fence, state=state,
                            reservation_key=reservation_key)

    def _signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    LEADER.set_function(lambda: 1.0 if elector is None or elector.leading else 0.0)
    if elector is None:
        act("single")
    else:
        assert election is not None
        log.info("%s campaigns for the Lease %s/%s", identity, election.namespace, election.name)
        health.role = "standby"
        elector.start()
    done.wait()
    if certs is not None:
        certs.stop()
    if elector is not None:
        elector.stop()  # the fence closes: no write starts from here on
    reconciler.stop()  # the writes in flight finish (or fail) here
    if elector is not None and exit_code == 0:
        elector.release()
    return exit_code
