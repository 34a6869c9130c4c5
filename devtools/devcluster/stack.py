"""Troupe itself on a local :class:`~devtools.devcluster.cluster.Cluster`: the webhook and the
reconciler, started the way the chart starts them (``python -m webhook serve``,
``python -m reconciler run``), each as its own process with its own log.

:class:`Stack` does what ``helm install`` does on a real cluster, with local stand-ins:

- a serving certificate for 127.0.0.1 from :mod:`certs`, and the webhook on a free port;
- the reconciler's RBAC: the ClusterRole rules of ``charts/troupe/files/reconciler-rules.yaml``
  (the very file the chart ships; and ``reconciler-provisioning-rules.yaml`` when the
  configuration's ``provisioning`` is on, as the chart adds it), bound to the ``troupe-system/troupe-reconciler``
  service account, whose token identity the cluster already has;
- the MutatingWebhookConfiguration built by :func:`webhook.registration.webhook_configuration`
  with ``clientConfig.url`` pointing at 127.0.0.1 and the CA as ``caBundle``;
- the reconciler running with the reconciler identity's kubeconfig (not the admin's).

The tests' ``troupe`` fixture and the demo share it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import ssl
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import certs
from devtools.devcluster.cluster import Cluster, free_port
from devtools.devcluster.processes import Monitor, Recorded, Started, spawn, stop_all, tail
from troupe.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "charts" / "troupe" / "files" / "reconciler-rules.yaml"
LEASE_RULES_FILE = REPO / "charts" / "troupe" / "files" / "reconciler-leader-election-rules.yaml"
#: What the chart adds to the ClusterRole when ``provisioning`` is on (docs/decisions/080).
PROVISIONING_RULES_FILE = REPO / "charts" / "troupe" / "files" / "reconciler-provisioning-rules.yaml"
NAMESPACE = "troupe-system"
RECONCILER_SA = "troupe-reconciler"
WEBHOOK_NAME = "troupe"


def readyz(port: int) -> dict[str, Any] | None:
    """The JSON body of a reconciler's ``/readyz`` on ``127.0.0.1:port`` when it answers
    200 (``{"ready", "role", "synced"}``), else None (not ready, or not listening yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            body = json.load(r)
            return body if isinstance(body, dict) else None
    except (OSError, ValueError):
        return None


class StackError(RuntimeError):
    """Troupe could not start on the local cluster; the message names the part and shows its log."""


#: The reconciler's Lease and state ConfigMap here: the defaults of ``python -m reconciler run``.
LEASE_NAME, STATE_CONFIGMAP = "troupe-reconciler", "troupe-reconciler-state"


def reconciler_rules(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    """RBAC rules as the chart ships them (default: the reconciler's ClusterRole), with the
    names of this harness's Lease and state ConfigMap where the file names them."""
    text = path.read_text().replace("{lease}", LEASE_NAME).replace("{state}", STATE_CONFIGMAP)
    rules = yaml.safe_load(text)
    if not isinstance(rules, list):
        raise StackError(f"{path}: expected a list of RBAC rules")
    return rules


def _apply(create: Any, replace: Any, body: Any, *args: Any) -> None:
    """Create, or replace when it exists (409)."""
    try:
        create(*args, body)
    except ApiException as e:
        if e.status != 409:
            raise
        name = body["metadata"]["name"]
        replace(name, *args, body)


class Stack:
    """The webhook and the reconciler on ``cluster``; a context manager.

    ``config`` is a path to Troupe's configuration YAML (default: built-in defaults, written
    to the run directory so both processes read the same file). The reconciler runs with
    leader election and one reservation key for every replica (``troupe/reservation-key``), as
    the chart runs it; ``lease_seconds`` is its Lease duration. Logs go to
    ``<cluster.run_dir>/logs/troupe-webhook.log`` and ``troupe-reconciler.log``.
    ``persistent``: the processes may outlive this Python process (no parent-death signal);
    :meth:`detach` then leaves them running.
    """

    def __init__(self, cluster: Cluster, config: str | Path | None = None, lease_seconds: int = 15,
                 persistent: bool = False) -> None:
        self.cluster = cluster
        self.lease_seconds = lease_seconds
        self.persistent = persistent
        self._detached = False
        self.dir = cluster.run_dir / "troupe"
        self.dir.mkdir(parents=True, exist_ok=True)
        if config is None:
            config = self.dir / "config.yaml"
            Path(config).write_text("# Troupe configuration: built-in defaults\n")
        self.config_path = Path(config)
        self.config: Config = load_config(str(self.config_path))
        # The key every replica signs reservations with, as the chart's Secret gives it.
        self.reservation_key = self.dir / "reservation-key"
        if not self.reservation_key.exists():
            self.reservation_key.write_text(secrets.token_hex(32))
            self.reservation_key.chmod(0o600)
        self.webhook_port = 0
        self.metrics_port = 0
        self._started: list[Started] = []
        self._monitor = Monitor([], lambda failure: print(f"[troupe] {failure}", file=sys.stderr, flush=True))

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def webhook_url(self) -> str:
        """``https://127.0.0.1:<port>/mutate``."""
        return f"https://127.0.0.1:{self.webhook_port}/mutate"

    def _spawn(self, name: str, argv: list[str]) -> Started:
        started = spawn(name, argv, self.cluster.logs_dir / f"{name}.log", die_with_parent=not self.persistent)
        self._started.append(started)
        self._monitor.add(started)
        return started

    def _wait(self, what: str, started: Started, ready: Any, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            code = started.popen.poll()
            if code is not None:
                raise StackError(f"{what} exited with code {code}; last lines of {started.record.log}:\n{tail(started.record.log)}")
            if ready():
                return
            time.sleep(0.2)
        raise StackError(f"{what} not ready after {timeout:.0f}s; last lines of {started.record.log}:\n{tail(started.record.log)}")

    def start(self) -> Stack:
        """Start the webhook, register it, grant the reconciler its role, start the reconciler.

        Raises :class:`StackError` naming the part that failed, with the end of its log.
        """
        try:
            self._start_webhook()
            self._install()
            self._start_reconciler()
            self._monitor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_webhook(self) -> None:
        webhook_ca = certs.create_ca("troupe-webhook-ca", days=30)
        serving = certs.create_serving_cert(webhook_ca, ["127.0.0.1", "localhost"], days=30)
        certs.write_pair(webhook_ca, self.dir / "ca.crt", self.dir / "ca.key")
        certs.write_pair(serving, self.dir / "tls.crt", self.dir / "tls.key")
        self.webhook_port = free_port()
        started = self._spawn("troupe-webhook", [
            sys.executable, "-m", "webhook", "serve",
            "--tls-cert", str(self.dir / "tls.crt"), "--tls-key", str(self.dir / "tls.key"),
            "--bind", f"127.0.0.1:{self.webhook_port}", "--config", str(self.config_path),
        ])
        context = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.webhook_port}/readyz", context=context, timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        self._wait("troupe-webhook", started, healthy)

    def _install(self) -> None:
        from webhook.registration import webhook_configuration

        api = self.cluster.api_client("admin")
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        admission = client.AdmissionregistrationV1Api(api)
        with contextlib.suppress(ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        with contextlib.suppress(ApiException):
            core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": RECONCILER_SA}})
        extra = reconciler_rules(PROVISIONING_RULES_FILE) if self.config.provisioning is not None else []
        role = {"metadata": {"name": "troupe-reconciler"}, "rules": reconciler_rules() + extra}
        _apply(rbac.create_cluster_role, rbac.replace_cluster_role, role)
        binding = {
            "metadata": {"name": "troupe-reconciler"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "troupe-reconciler"},
            "subjects": [{"kind": "ServiceAccount", "name": RECONCILER_SA, "namespace": NAMESPACE}],
        }
        _apply(rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding)
        lease_role = {"metadata": {"name": "troupe-reconciler-leader-election"},
                      "rules": reconciler_rules(LEASE_RULES_FILE)}
        _apply(rbac.create_namespaced_role, rbac.replace_namespaced_role, lease_role, NAMESPACE)
        lease_binding = dict(binding, metadata={"name": "troupe-reconciler-leader-election"}, roleRef={
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "troupe-reconciler-leader-election"})
        _apply(rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding, lease_binding, NAMESPACE)
        hook = webhook_configuration(
            self.config, url=self.webhook_url, ca_bundle_pem=(self.dir / "ca.crt").read_bytes(), name=WEBHOOK_NAME
        )
        _apply(admission.create_mutating_webhook_configuration, admission.replace_mutating_webhook_configuration, hook)
        # The API server picks the configuration up asynchronously: wait until a pod with a
        # Troupe key is actually mutated (dry run, so nothing is created).
        probe = {
            "metadata": {"generateName": "troupe-probe-", "annotations": {
                f"{self.config.gang_annotation_prefix}-name": "probe", f"{self.config.gang_annotation_prefix}-size": "1"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }
        end = time.monotonic() + 30
        while True:
            pod = core.create_namespaced_pod("default", probe, dry_run="All")
            if any(g.name == "troupe.io/placement" for g in pod.spec.scheduling_gates or []):
                return
            if time.monotonic() > end:
                raise StackError("the MutatingWebhookConfiguration was not in effect after 30s")
            time.sleep(0.3)

    def _start_reconciler(self) -> None:
        self.metrics_port = free_port()
        started = self.start_reconciler("troupe-reconciler", self.metrics_port)

        def leading() -> bool:
            state = readyz(self.metrics_port)
            return state is not None and state.get("role") == "leader" and bool(state.get("synced"))

        self._wait("troupe-reconciler", started, leading)

    def start_reconciler(self, name: str, metrics_port: int | None = None, identity: str = "reconciler") -> Started:
        """Start one more reconciler replica (log ``logs/<name>.log``), as the chart runs it:
        with leader election in ``troupe-system``, with the token of the cluster identity
        ``identity`` (another token of the same user tells replicas apart in an audit
        log). Returns once its ``/readyz`` answers 200 (standing by as a follower, or
        leading with synced caches), as a readiness probe would see it."""
        port = metrics_port or free_port()
        started = self._spawn(name, [
            sys.executable, "-m", "reconciler", "run",
            "--kubeconfig", str(self.cluster.kubeconfig(identity)),
            "--config", str(self.config_path),
            "--metrics-bind", f"127.0.0.1:{port}",
            "--leader-elect", "--leader-elect-namespace", NAMESPACE,
            "--leader-elect-lease-seconds", str(self.lease_seconds),
            "--reservation-key-file", str(self.reservation_key),
        ])
        self._wait(name, started, lambda: readyz(port) is not None)
        return started

    def process(self, name: str) -> Started:
        """The process started under ``name`` (``troupe-webhook``, ``troupe-reconciler``...).

        Raises ``KeyError`` naming it when no such process was started.
        """
        for started in self._started:
            if started.record.name == name:
                return started
        raise KeyError(f"no process {name!r} was started")

    def running(self, prefix: str) -> Started:
        """The process started last under a name beginning with ``prefix`` that still runs
        (the reconciler a test restarted last, say). Raises ``KeyError`` naming the prefix
        when none does."""
        for started in reversed(self._started):
            if started.record.name.startswith(prefix) and started.popen.poll() is None:
                return started
        raise KeyError(f"no process named {prefix!r}... runs")

    def check(self) -> None:
        """Raise :class:`StackError` if the webhook or the reconciler has died."""
        failure = self._monitor.check_now()
        if failure is not None:
            raise StackError(str(failure))

    def detach(self) -> list[Recorded]:
        """Stop watching and leave the processes running (``persistent`` stacks); returns
        their records, for the cluster's ``pids.json`` (:meth:`Cluster.detach`)."""
        self._monitor.stop()
        records = [s.record for s in self._started]
        for s in self._started:
            with contextlib.suppress(OSError):
                s.log_handle.close()
        self._started.clear()
        self._detached = True
        return records

    def stop(self) -> None:
        """Stop both processes (by their recorded pids) and remove the webhook registration;
        after :meth:`detach`, nothing."""
        if self._detached:
            return
        self._monitor.stop()
        with contextlib.suppress(Exception):  # the cluster may already be gone
            api = self.cluster.api_client("admin")
            client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(WEBHOOK_NAME)
        stop_all([s.record for s in self._started], [s.popen for s in self._started])
        for s in self._started:
            with contextlib.suppress(OSError):
                s.log_handle.close()
        self._started.clear()
