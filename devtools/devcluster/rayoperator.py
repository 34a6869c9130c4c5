"""KubeRay's operator on the local cluster, for the end-to-end tests of RayClusters and
RayJobs ganged by Troupe (docs/decisions/076-kuberay-in-tests.md).

The operator built by :mod:`.kuberay` runs as the cluster admin with its batch scheduler off
(its default: a RayCluster's pods are plain pods, as most users run them), no leader
election, metrics and probes on free 127.0.0.1 ports, and no admission webhook (the
operator serves one only with ``ENABLE_WEBHOOKS=true``). The flags are those of the
module's ``main.go`` at :data:`~devtools.devcluster.kuberay.KUBERAY_VERSION`.

This module imports :mod:`.cluster`, :mod:`.processes`, :mod:`.kuberay` and
:mod:`.workloads` (the readiness wait); nothing in the build imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from devtools.devcluster.cluster import Cluster, free_ports
from devtools.devcluster.kuberay import KUBERAY_CRDS, ensure_kuberay
from devtools.devcluster.processes import Monitor, Recorded, Started, spawn, stop_all
from devtools.devcluster.workloads import wait_ready


def install_kuberay_crds(cluster: Cluster, crds: Path | None = None) -> None:
    """Install KubeRay's CRDs (``crds``, default the cached ``crds.yaml``, built first where
    missing) on ``cluster`` server-side (the RayCluster CRD is too large for the
    last-applied annotation) and wait until they are served. Raises
    ``subprocess.CalledProcessError`` when kubectl fails."""
    cluster.kubectl("apply", "--server-side", "-f", str(crds or ensure_kuberay().crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{c}" for c in KUBERAY_CRDS))


def operator_args(binary: Path, metrics_port: int, health_port: int) -> list[str]:
    """The operator's command line: metrics and probes on ``127.0.0.1:<port>``, no leader
    election, logs as text; no ``--batch-scheduler`` (off, the default: RayCluster pods are
    plain pods, as most users run them). Flags of ``main.go`` at :data:`KUBERAY_VERSION`
    (it reads its kubeconfig from ``$KUBECONFIG``, by controller-runtime's
    ``ctrl.GetConfigOrDie``)."""
    return [str(binary), f"--metrics-addr=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}", "--enable-leader-election=false",
            "--log-stdout-encoder=console"]


class KubeRayOperator:
    """KubeRay's operator on ``cluster``, as the cluster admin; a context manager. Builds it
    first where the cache lacks it (:func:`ensure_kuberay`), installs its CRDs
    (:func:`install_kuberay_crds`), starts it (:func:`operator_args`) and waits for its
    ``/readyz``. :meth:`stop` stops it by its recorded pid (SIGTERM, then SIGKILL of its
    process group after 5 s, whatever signals it ignores). Log:
    ``<run_dir>/logs/ray-operator.log``. The CRDs and Ray objects are left in place: the
    operator's objects carry no finalizers it must remove (RayJobs' only with
    ``shutdownAfterJobFinishes``, which the tests do not set)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.build = ensure_kuberay()
        self._started: list[Started] = []
        self._monitor = Monitor([], lambda f: print(f"[kuberay] {f}", file=sys.stderr, flush=True))

    def __enter__(self) -> KubeRayOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log(self) -> Path:
        """The operator's log file."""
        return self.cluster.logs_dir / "ray-operator.log"

    def start(self) -> KubeRayOperator:
        """Install the CRDs and start the operator; raises ``RuntimeError`` with the end of
        its log when it exits or is not ready within 90 s (it is stopped first)."""
        try:
            install_kuberay_crds(self.cluster, self.build.crds)
            metrics_port, health_port = free_ports(2)
            env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig("admin")))
            started = spawn("ray-operator", operator_args(self.build.binary, metrics_port, health_port), self.log,
                            die_with_parent=True, env=env)
            self._started.append(started)
            self._monitor.add(started)
            wait_ready(started, health_port, "KubeRay's operator", timeout=90.0)
            self._monitor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def check(self) -> None:
        """Raise ``RuntimeError`` if the operator has died."""
        failure = self._monitor.check_now()
        if failure is not None:
            raise RuntimeError(str(failure))

    def records(self) -> list[Recorded]:
        """The started process's record (name, pid, start time, log)."""
        return [s.record for s in self._started]

    def stop(self) -> None:
        """Stop the operator by its recorded pid and close its log; idempotent."""
        self._monitor.stop()
        stop_all([s.record for s in self._started], [s.popen for s in self._started])
        for s in self._started:
            with contextlib.suppress(OSError):
                s.log_handle.close()
        self._started.clear()


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[KubeRayOperator]:
    """:class:`KubeRayOperator` on ``cluster`` for the duration of the block."""
    with KubeRayOperator(cluster) as operator:
        yield operator
