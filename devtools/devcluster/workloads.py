"""The workload controllers Troupe groups pods of, run on the local cluster.

JobSet (``sigs.k8s.io/jobset``) and LeaderWorkerSet (``sigs.k8s.io/lws``), built by
:mod:`.controllers` (through :func:`~devtools.devcluster.build.ensure_built`), are run by
:class:`WorkloadControllers` with their CRDs and the PyTorchJob CRD of Kubeflow's training
operator (docs/decisions/015-workload-controllers-in-tests.md says why the operator itself
is not run).

The controllers run with their admission webhooks on, served on 127.0.0.1 with a local
serving certificate, registered with ``clientConfig.url`` and the CA as ``caBundle``: the
JobSet webhook defaults what its controller relies on, and the LeaderWorkerSet pod
webhook writes the group labels (``group-index``, ``group-key``) that pods are grouped by.

This module imports :mod:`.cluster`, :mod:`.processes` and :mod:`.controllers`; nothing
in the build imports it.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

import certs
from devtools.devcluster.cluster import Cluster, free_ports
from devtools.devcluster.controllers import CONTROLLERS, JOBSET, LWS, Controller
from devtools.devcluster.processes import Monitor, Recorded, Started, spawn, stop_all, tail

#: The names callers import from here; the controllers' definitions live in
#: :mod:`.controllers`.
__all__ = [
    "CONTROLLERS",
    "JOBSET",
    "LWS",
    "Controller",
    "WorkloadControllers",
    "install_crds",
    "local_webhooks",
    "running",
]


def local_webhooks(docs: Sequence[Mapping[str, Any]], prefix: str, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The configurations of ``docs`` for a controller serving on ``base_url``
    (``https://127.0.0.1:<port>``): each ``clientConfig.service`` becomes
    ``url: <base_url><path>`` with ``caBundle``, and each configuration is named
    ``<prefix>-<kind>`` (so that two controllers' configurations do not collide)."""
    bundle = base64.b64encode(ca_pem).decode("ascii")
    out: list[dict[str, Any]] = []
    for doc in docs:
        configuration = copy.deepcopy(dict(doc))
        kind = str(configuration["kind"]).removesuffix("WebhookConfiguration").lower()
        configuration["metadata"] = {"name": f"{prefix}-{kind}"}
        for hook in configuration.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": base_url + path, "caBundle": bundle}
        out.append(configuration)
    return out


#: The MPI operator's MPIJob CRD (``kubeflow.org/v2beta1``), vendored with its source: the
#: operator's Go module is not served here, so its pods are made as it makes them
#: (docs/decisions/075-ray-and-mpi-workloads.md).
MPIJOB_CRD = Path(__file__).resolve().parent / "crds" / "mpi-operator" / "kubeflow.org_mpijobs.yaml"


def install_crds(cluster: Cluster) -> None:
    """Install the JobSet, LeaderWorkerSet, PyTorchJob and MPIJob CRDs on ``cluster`` and wait
    until they are served (the e2e fixtures do it before the reconciler starts, so that its
    informers find the kinds at once rather than on their next look)."""
    bins = cluster.binaries
    for crds in (bins.jobset_crds, bins.lws_crds, bins.kubeflow_crds, MPIJOB_CRD):
        cluster.kubectl("apply", "--server-side", "-f", str(crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/jobsets.jobset.x-k8s.io", "crd/leaderworkersets.leaderworkerset.x-k8s.io",
                    "crd/pytorchjobs.kubeflow.org", "crd/mpijobs.kubeflow.org")


class WorkloadControllers:
    """JobSet and LeaderWorkerSet controllers (and the PyTorchJob CRD) on ``cluster``; a
    context manager. Installs the CRDs, starts each controller as the cluster admin with
    its webhook on a free 127.0.0.1 port, waits for its ``/readyz``, then registers its
    webhook configurations and waits until they are in effect. :meth:`stop` removes the
    configurations first (so no pod creation waits on a stopped webhook), then stops the
    processes by their recorded pids. Logs: ``<run_dir>/logs/<name>.log``.
    ``controllers``: which to run (default both); the CRDs are installed either way.
    ``persistent``: the processes may outlive this Python process; :meth:`detach` then
    leaves them running."""

    def __init__(self, cluster: Cluster, controllers: Sequence[Controller] = CONTROLLERS,
                 persistent: bool = False) -> None:
        self.cluster = cluster
        self.controllers = tuple(controllers)
        self.persistent = persistent
        self.dir = cluster.run_dir / "workload-controllers"
        self._started: list[Started] = []
        self._monitor = Monitor([], lambda f: print(f"[workloads] {f}", file=sys.stderr, flush=True))
        self._configurations: list[tuple[str, str]] = []

    def __enter__(self) -> WorkloadControllers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> WorkloadControllers:
        """Install and start everything; raises ``RuntimeError`` naming the part that
        failed with the end of its log (everything started is stopped first)."""
        try:
            bins = self.cluster.binaries
            install_crds(self.cluster)
            for c in self.controllers:
                self._start(c, getattr(bins, c.name), getattr(bins, f"{c.name}_webhooks"))
            self._monitor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, c: Controller, binary: Path, webhooks: Path) -> None:
        work = self.dir / c.name
        cert_dir = work / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        ca = certs.create_ca(f"{c.name}-webhook-ca", days=30)
        certs.write_pair(certs.create_serving_cert(ca, ["127.0.0.1", "localhost"], days=30),
                         cert_dir / "tls.crt", cert_dir / "tls.key")
        webhook_port, health_port = free_ports(2)
        config = {
            "apiVersion": c.config_api, "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig("admin")))
        started = spawn(c.name, [str(binary), f"--config={work / 'config.yaml'}", "--leader-elect=false"],
                        self.cluster.logs_dir / f"{c.name}.log", die_with_parent=not self.persistent, env=env)
        self._started.append(started)
        self._monitor.add(started)
        wait_ready(started, health_port, f"{c.name} controller", timeout=60.0)
        docs = local_webhooks(list(yaml.safe_load_all(webhooks.read_text())), c.name,
                              f"https://127.0.0.1:{webhook_port}", ca.cert_pem)
        register_webhooks(self.cluster, docs, self._configurations)
        # In effect once a dry-run create of a minimal object comes back with a field only
        # the controller's defaulting webhook sets.
        wait_for_dry_run(self.cluster, *_probe(c), what=f"{c.name}'s webhooks")

    def check(self) -> None:
        """Raise ``RuntimeError`` if a controller has died."""
        failure = self._monitor.check_now()
        if failure is not None:
            raise RuntimeError(str(failure))

    def detach(self) -> list[Recorded]:
        """Stop watching and leave the controllers and their webhook configurations in
        place (``persistent``); returns the processes' records, for the cluster's
        ``pids.json`` (:meth:`Cluster.detach`)."""
        self._monitor.stop()
        records = [s.record for s in self._started]
        for s in self._started:
            with contextlib.suppress(OSError):
                s.log_handle.close()
        self._started.clear()
        self._configurations.clear()
        return records

    def stop(self) -> None:
        """Unregister the webhooks, then stop the controllers by their recorded pids."""
        self._monitor.stop()
        unregister_and_stop(self.cluster, self._configurations, self._started)


def _ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


# --- a manager with webhooks, started on the local cluster (here and in .quota) -------------
def wait_ready(started: Started, health_port: int, what: str, timeout: float) -> None:
    """Return once ``started``'s ``/readyz`` on ``127.0.0.1:<health_port>`` answers 200.
    Raises ``RuntimeError`` naming ``what``, with the last lines of its log, when the
    process exits or after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not _ok(f"http://127.0.0.1:{health_port}/readyz"):
        code = started.popen.poll()
        if code is not None or time.monotonic() > end:
            why = f"exited with code {code}" if code is not None else f"not ready after {timeout:.0f}s"
            raise RuntimeError(f"{what} {why}; last lines of {started.record.log}:\n{tail(started.record.log)}")
        time.sleep(0.2)


def register_webhooks(cluster: Cluster, docs: Sequence[Mapping[str, Any]],
                      configurations: list[tuple[str, str]]) -> None:
    """Apply the webhook configurations ``docs``, each recorded in ``configurations`` as
    ``(kind, name)`` first, so :func:`unregister_and_stop` removes whatever was applied."""
    for doc in docs:
        kind = "mutatingwebhookconfiguration" if doc["kind"].startswith("Mutating") else "validatingwebhookconfiguration"
        configurations.append((kind, doc["metadata"]["name"]))
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(dict(doc)))


def wait_for_dry_run(cluster: Cluster, obj: Mapping[str, Any], check: Callable[[dict[str, Any]], bool], *,
                     what: str, timeout: float = 30.0, log: Path | None = None) -> None:
    """Until a server-side dry-run create of ``obj`` comes back passing ``check`` (the API
    server calls ``what``). Raises ``RuntimeError`` after ``timeout`` seconds with the API
    server's last answer (and the last lines of ``log``, when given)."""
    end = time.monotonic() + timeout
    while True:
        done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
        if done.returncode == 0 and check(json.loads(done.stdout)):
            return
        if time.monotonic() > end:
            more = f"; last lines of {log}:\n{tail(log)}" if log is not None else ""
            raise RuntimeError(f"{what} not in effect after {timeout:.0f}s: {done.stderr.strip()}{more}")
        time.sleep(0.3)


def unregister_and_stop(cluster: Cluster, configurations: list[tuple[str, str]], started: list[Started]) -> None:
    """Delete the webhook configurations (newest first, so no write waits on a stopped
    server; errors ignored: the cluster may be gone already), then stop the processes by
    their recorded pids and close their logs; both lists are emptied."""
    for kind, name in reversed(configurations):
        with contextlib.suppress(Exception):
            cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
    configurations.clear()
    stop_all([s.record for s in started], [s.popen for s in started])
    for s in started:
        with contextlib.suppress(OSError):
            s.log_handle.close()
    started.clear()


def _probe(c: Controller) -> tuple[dict[str, Any], Any]:
    """A minimal object of the controller's kind and a check that its webhook defaulted it."""
    pod = {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    if c is JOBSET:
        obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
               "metadata": {"name": "probe", "namespace": "default"},
               "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": pod}}}]}}
        # Only the webhook turns DNS hostnames on.
        return obj, lambda o: (o["spec"].get("network") or {}).get("enableDNSHostnames") is True
    obj = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "probe", "namespace": "default"},
           "spec": {"leaderWorkerTemplate": {"workerTemplate": pod}}}
    # Only the webhook fills in the network's subdomain policy.
    return obj, lambda o: bool((o["spec"].get("networkConfig") or {}).get("subdomainPolicy"))


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[WorkloadControllers]:
    """:class:`WorkloadControllers` on ``cluster`` for the duration of the block."""
    with WorkloadControllers(cluster) as controllers:
        yield controllers
