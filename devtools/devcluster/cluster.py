"""A local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, all on free 127.0.0.1 ports, started and stopped by :class:`Cluster`.

Flags follow "Testing against a real control plane" in DESIGN.md. Run directory layout::

    <run_dir>/cluster.json         server URL, kubeconfig paths, whether run_dir is a temp dir
    <run_dir>/pids.json            the started processes (see processes.py)
    <run_dir>/pki/                 CA, serving cert, SA keys, static token file (see pki.py)
    <run_dir>/kubeconfigs/<identity>.kubeconfig
    <run_dir>/etcd/                etcd data
    <run_dir>/logs/<component>.log stdout + stderr of each component

Usage::

    with Cluster(nodes="examples/nodes.yaml") as cluster:
        core = kubernetes.client.CoreV1Api(cluster.api_client("admin"))
        ...
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import certs
from devtools.devcluster import dra
from devtools.devcluster import nodes as nodes_mod
from devtools.devcluster.build import Binaries, ensure_built
from devtools.devcluster.pki import DEFAULT_IDENTITIES, Identity, Pki, write_kubeconfig, write_pki
from devtools.devcluster.processes import (
    ComponentDied,
    Monitor,
    Recorded,
    Started,
    read_pids,
    spawn,
    stop_all,
    write_pids,
)

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_READY_LINE = "Starting HTTP server"

#: The chart's CustomResourceDefinitions, installed on every local cluster.
CRDS_DIR = Path(__file__).resolve().parents[2] / "charts" / "troupe" / "files" / "crds"
#: Minimal PodGroup CRDs of Volcano, coscheduling and KAI (our own schema), for
#: :meth:`Cluster.install_crds` (docs/decisions/056-pod-groups.md).
PEER_POD_GROUP_CRDS = Path(__file__).resolve().parent / "crds" / "peers"

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class ClusterError(RuntimeError):
    """The control plane could not start or be reached; the message says which part and why."""


#: The components whose client rate :class:`ClientRate` sets.
RATE_LIMITED_COMPONENTS = ("kube-controller-manager", "kube-scheduler")
#: The components a cluster's ``feature_gates`` are given to.
GATED_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: The upstream Workload API (KEP-4671), off by default in 1.37: its ``v1beta1`` served
#: (``runtime_config``) and the ``GenericWorkload`` gate (``feature_gates``), with which
#: kube-scheduler's own gang plugin acts on ``spec.schedulingGroup``.
WORKLOAD_API = ("scheduling.k8s.io/v1beta1=true",)
WORKLOAD_GATES = {"GenericWorkload": True}
#: ... and with a group's ``schedulingConstraints.topology`` kept and acted on (alpha in 1.37).
TOPOLOGY_AWARE_WORKLOADS = {**WORKLOAD_GATES, "TopologyAwareWorkloadScheduling": True}


@dataclass(frozen=True)
class ClientRate:
    """The client rate of kube-controller-manager and kube-scheduler to the API server:
    ``qps`` requests per second on average, ``burst`` at once (client-go's token bucket,
    set by the components' flags ``--kube-api-qps`` and ``--kube-api-burst``).

    Without one, the components keep their defaults: kube-controller-manager 20 per second,
    burst 30 (so the Job controller creates about 20 pods a second); kube-scheduler 50,
    burst 100 (about 50 bindings a second). Source: the ``kube-controller-manager`` and
    ``kube-scheduler`` command-line references on kubernetes.io.
    """

    qps: float
    burst: int

    def flags(self) -> list[str]:
        """``["--kube-api-qps=<qps>", "--kube-api-burst=<burst>"]``."""
        return [f"--kube-api-qps={self.qps:g}", f"--kube-api-burst={self.burst}"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read it, close).

    Another process may take it before the component binds it; the component then exits
    with "address already in use", which :class:`Cluster` reports with its log tail.
    """
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago: every socket
    stays bound until all are read, so the kernel cannot hand one port out twice (closed one
    at a time, two in a row may be the same, and etcd and kube-apiserver then ask for one
    port). Another process may still take one before its component binds it (as
    :func:`free_port`)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _report_failure(failure: ComponentDied) -> None:
    print(f"[devcluster] {failure}", file=sys.stderr, flush=True)


class Cluster:
    """A running (after :meth:`start`) local control plane; a context manager.

    ``run_dir``: where PKI, kubeconfigs, etcd data and logs go; default a fresh temp dir,
    which :meth:`stop` removes after a clean run (kept, and announced, after a failure).
    ``identities``: token identities besides ``admin`` (default: ``reconciler``, the
    ``troupe-system/troupe-reconciler`` service account with no RBAC, and ``alice``).
    ``nodes``: a nodes file applied (and waited for) at the end of :meth:`start`.
    ``persistent``: for ``python -m devtools.devcluster up``: the processes outlive this
    Python process (no parent-death signal, nothing stopped at exit).
    ``on_failure``: called from a monitor thread when a component exits on its own; by
    default the message is printed to stderr. :meth:`check` raises it in the caller.
    ``apiserver_args``: extra kube-apiserver flags (an audit log, say).
    ``client_rate``: raised client rates for kube-controller-manager and kube-scheduler
    (:class:`ClientRate`); None (the default) starts both with their own defaults.
    ``feature_gates``: ``--feature-gates`` of kube-apiserver, kube-controller-manager and
    kube-scheduler alike (name -> on); ``runtime_config``: kube-apiserver's
    ``--runtime-config`` entries (``scheduling.k8s.io/v1beta1=true``). Both empty by
    default: the stock components every other test runs on. :data:`WORKLOAD_API` and
    :data:`TOPOLOGY_AWARE_WORKLOADS` are the upstream Workload API's
    (docs/decisions/056-pod-groups.md).
    """

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        identities: Iterable[Identity] = DEFAULT_IDENTITIES,
        nodes: str | Path | None = None,
        binaries: Binaries | None = None,
        persistent: bool = False,
        on_failure: Callable[[ComponentDied], None] | None = None,
        start_timeout: float = 120.0,
        out: TextIO | None = None,
        apiserver_args: Iterable[str] = (),
        client_rate: ClientRate | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Iterable[str] = (),
    ) -> None:
        self._temp = run_dir is None
        self.run_dir = (
            Path(tempfile.mkdtemp(prefix="troupe-devcluster-"))
            if run_dir is None
            else Path(run_dir).resolve()
        )
        self._identities = list(identities)
        self._nodes_file = Path(nodes) if nodes is not None else None
        self._binaries = binaries
        self._persistent = persistent
        self._on_failure = on_failure or _report_failure
        self._timeout = start_timeout
        self._apiserver_args = list(apiserver_args)
        self._client_rate = client_rate
        self._feature_gates = dict(feature_gates or {})
        self._runtime_config = list(runtime_config)
        self._out = out or sys.stderr
        self._started: list[Started] = []
        self._monitor = Monitor([], self._on_failure)
        self._pki: Pki | None = None
        self._kubeconfigs: dict[str, Path] = {}
        self.server = ""
        self.ports: dict[str, int] = {}
        self.startup_seconds: float | None = None
        self._stopped = False
        self._failed = False

    # ---------------------------------------------------------------- properties

    @property
    def binaries(self) -> Binaries:
        """The executables in use (built on first access if needed)."""
        if self._binaries is None:
            self._binaries = ensure_built(out=self._out)
        return self._binaries

    @property
    def logs_dir(self) -> Path:
        """``<run_dir>/logs``: one ``<component>.log`` per component."""
        return self.run_dir / "logs"

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA certificate (PEM bytes); it signed the API server's cert."""
        if self._pki is None:
            raise ClusterError("the cluster is not started: no CA yet")
        return self._pki.ca_pem

    def ca_key_pair(self) -> certs.KeyPair:
        """The cluster CA's certificate and private key (PEM), to sign the serving
        certificate of a webhook server the API server calls (:mod:`.quota`). Raises
        :class:`ClusterError` before the cluster is started."""
        if self._pki is None:
            raise ClusterError("the cluster is not started: no CA yet")
        return certs.KeyPair(self._pki.ca_cert.read_bytes(), self._pki.ca_key.read_bytes())

    @property
    def failure(self) -> ComponentDied | None:
        """The first component death the monitor saw, if any."""
        return self._monitor.failure

    def extra_args(self, component: str) -> list[str]:
        """The flags this cluster adds to ``component``'s own (one of :data:`COMPONENTS`):
        ``feature_gates`` for the three of :data:`GATED_COMPONENTS`, then ``runtime_config``
        and ``apiserver_args`` for kube-apiserver, the :class:`ClientRate` flags for
        kube-controller-manager and kube-scheduler when one is set."""
        gates = [f"--feature-gates={','.join(f'{k}={str(v).lower()}' for k, v in sorted(self._feature_gates.items()))}"] \
            if self._feature_gates and component in GATED_COMPONENTS else []
        if component == "kube-apiserver":
            runtime = [f"--runtime-config={','.join(self._runtime_config)}"] if self._runtime_config else []
            return [*gates, *runtime, *self._apiserver_args]
        if component in RATE_LIMITED_COMPONENTS and self._client_rate is not None:
            return [*gates, *self._client_rate.flags()]
        return gates

    def kubeconfig(self, identity: str = "admin") -> Path:
        """Path of the token kubeconfig of ``identity`` (``admin``, ``reconciler``, ``alice``, ...).

        Raises ``KeyError`` naming the known identities when ``identity`` is unknown.
        """
        try:
            return self._kubeconfigs[identity]
        except KeyError:
            raise KeyError(
                f"no identity {identity!r}; known: {', '.join(sorted(self._kubeconfigs))}"
            ) from None

    def token(self, identity: str = "admin") -> str:
        """The static bearer token of ``identity``."""
        if self._pki is None:
            raise ClusterError("the cluster is not started: no tokens yet")
        return self._pki.tokens[identity]

    def api_client(self, identity: str = "admin") -> Any:
        """A new ``kubernetes.client.ApiClient`` authenticated as ``identity``; close it when done."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig(identity)))  # type: ignore[no-untyped-call]

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        identity: str = "admin",
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl with ``identity``'s kubeconfig; text output captured.

        Raises ``subprocess.CalledProcessError`` (with stderr) on a non-zero exit when
        ``check`` is set.
        """
        argv = [str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig(identity)), *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, argv, result.stdout, result.stderr
            )
        return result

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None and not isinstance(exc, KeyboardInterrupt):
            self._failed = True
        self.stop()

    def start(self) -> Cluster:
        """Start every component, wait until the cluster can run pods, apply the nodes file.

        Ready means: etcd healthy, ``/readyz`` of kube-apiserver OK, the ``default``
        ServiceAccount exists in namespace ``default``, kwok's controllers started (and the
        nodes of ``nodes`` Ready). Raises :class:`ComponentDied` when a component exits
        while starting and :class:`ClusterError` on a timeout; everything started is
        stopped before either is raised.
        """
        began = time.monotonic()
        try:
            self._start()
        except BaseException as err:
            self._failed = not isinstance(err, KeyboardInterrupt)
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _start(self) -> None:
        bins = self.binaries
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self.ports = dict(zip(("etcd-client", "etcd-peer", "kube-apiserver"), free_ports(3), strict=True))
        self.server = f"https://127.0.0.1:{self.ports['kube-apiserver']}"
        pki = self._pki = write_pki(self.run_dir / "pki", self._identities)
        for name, token in pki.tokens.items():
            self._kubeconfigs[name] = write_kubeconfig(
                self.run_dir / "kubeconfigs" / f"{name}.kubeconfig",
                self.server,
                pki.ca_pem,
                name,
                token,
            )
        self._write_state()

        etcd_url = f"http://127.0.0.1:{self.ports['etcd-client']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(bins.etcd),
                "--name=troupe",
                f"--data-dir={self.run_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=troupe={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd /health", lambda: _http_ok(f"{etcd_url}/health"))

        admin_kubeconfig = str(self.kubeconfig("admin"))
        self._spawn(
            "kube-apiserver",
            [
                str(bins.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['kube-apiserver']}",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={pki.token_file}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki.sa_public_key}",
                f"--service-account-signing-key-file={pki.sa_private_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--profiling=false",
                *self.extra_args("kube-apiserver"),
            ],
        )
        ssl_context = ssl.create_default_context(cadata=pki.ca_pem.decode())
        readyz = f"{self.server}/readyz"
        self._wait(
            "kube-apiserver /readyz", lambda: _http_ok(readyz, ssl_context, pki.tokens["admin"])
        )

        common = [
            f"--kubeconfig={admin_kubeconfig}",
            f"--authentication-kubeconfig={admin_kubeconfig}",
            f"--authorization-kubeconfig={admin_kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ]
        self._spawn(
            "kube-controller-manager",
            [
                str(bins.kube_controller_manager),
                *common,
                "--controllers=*",
                f"--root-ca-file={pki.ca_cert}",
                f"--service-account-private-key-file={pki.sa_private_key}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                *self.extra_args("kube-controller-manager"),
            ],
        )
        self._spawn(
            "kube-scheduler",
            [str(bins.kube_scheduler), *common, *self.extra_args("kube-scheduler")],
        )
        self._spawn(
            "kwok",
            [
                str(bins.kwok),
                f"--kubeconfig={admin_kubeconfig}",
                f"--config={bins.kwok_stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={nodes_mod.KWOK_ANNOTATION}={nodes_mod.KWOK_ANNOTATION_VALUE}",
                "--node-lease-duration-seconds=40",
                "--cidr=10.0.0.0/16",
                "--node-ip=10.0.0.1",
                "--server-address=127.0.0.1:0",
            ],
        )

        with self.api_client("admin") as client:
            from kubernetes import client as k8s

            core = k8s.CoreV1Api(client)
            self._wait(
                "ServiceAccount default/default (created by kube-controller-manager)",
                lambda: exists(lambda: core.read_namespaced_service_account("default", "default")),
            )
        kwok_log = self.logs_dir / "kwok.log"
        self._wait(
            f"kwok to start its controllers ({KWOK_READY_LINE!r} in {kwok_log})",
            lambda: KWOK_READY_LINE in kwok_log.read_text(errors="replace"),
        )
        self._monitor.start()
        self.install_crds()
        if self._nodes_file is not None:
            self.apply_nodes(self._nodes_file)

    def restart(self, component: str, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stop ``component`` (SIGTERM, then SIGKILL after 10 s), leave it down for
        ``down_seconds``, and start it again with the same arguments and log; for
        ``kube-apiserver``, wait until it is ready again. An outage, as a test makes it.
        Raises ``KeyError`` for a component this cluster did not start, :class:`ClusterError`
        when it does not come back within ``timeout`` seconds."""
        old = next(s for s in self._started if s.record.name == component)
        self._monitor.discard(old)
        old.popen.terminate()
        try:
            old.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            old.popen.kill()
            old.popen.wait()
        old.log_handle.close()
        self._started.remove(old)
        time.sleep(down_seconds)
        self._spawn(component, old.popen.args if isinstance(old.popen.args, list) else list(old.popen.args))
        if component == "kube-apiserver":
            assert self._pki is not None
            context = ssl.create_default_context(cadata=self._pki.ca_pem.decode())
            self._wait("kube-apiserver /readyz after a restart",
                       lambda: _http_ok(f"{self.server}/readyz", context, self._pki.tokens["admin"]), timeout)

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        started = spawn(
            name, argv, self.logs_dir / f"{name}.log", die_with_parent=not self._persistent
        )
        self._started.append(started)
        self._monitor.add(started)
        write_pids(self.run_dir / "pids.json", [s.record for s in self._started])

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "run_dir": str(self.run_dir),
            "temporary": self._temp,
            "kubeconfigs": {name: str(path) for name, path in self._kubeconfigs.items()},
            "ports": self.ports,
        }
        (self.run_dir / "cluster.json").write_text(json.dumps(state, indent=2) + "\n")

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self._timeout)
        while True:
            self.check()
            if ready():
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"timed out after {timeout or self._timeout:.0f}s waiting for {what}; logs in {self.logs_dir}"
                )
            time.sleep(0.2)

    def check(self) -> None:
        """Raise :class:`ComponentDied` if any component has exited (polls now)."""
        if self._stopped:
            return
        failure = self._monitor.check_now()
        if failure is not None:
            self._failed = True
            raise failure

    def detach(self, also: Iterable[Recorded] = ()) -> None:
        """Stop watching and leave the processes running (``up``); :meth:`stop` is then a no-op.

        They can later be stopped with :func:`stop_run_dir` (``python -m devtools.devcluster down``).
        ``also``: processes others started on this cluster (Troupe, workload controllers),
        recorded after the components in ``pids.json`` so that ``down`` stops them first.
        """
        extra = list(also)
        if extra:
            write_pids(self.run_dir / "pids.json", [s.record for s in self._started] + extra)
        self._monitor.stop()
        for started in self._started:
            started.log_handle.close()
        self._stopped = True

    def stop(self) -> None:
        """Stop every component (SIGTERM, SIGKILL after 5 s) by its recorded PID; idempotent.

        Removes a temporary run dir after a clean run; keeps it (and says where) when a
        component died or start/with-block failed, so its logs can be read.
        """
        if self._stopped:
            return
        self._stopped = True
        self._monitor.stop()
        if self._monitor.failure is not None:
            self._failed = True
        killed = stop_all([s.record for s in self._started], [s.popen for s in self._started])
        if killed:
            print(
                f"[devcluster] {', '.join(killed)} did not exit within 5s of SIGTERM; killed",
                file=self._out,
                flush=True,
            )
        for started in self._started:
            started.log_handle.close()
        if self._temp and not self._failed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        elif self._temp:
            print(f"[devcluster] logs kept in {self.logs_dir}", file=self._out, flush=True)

    # ---------------------------------------------------------------- CRDs

    def install_crds(self, directory: Path = CRDS_DIR, timeout: float = 60.0) -> list[str]:
        """Create (or replace) the CustomResourceDefinitions of ``directory`` (default: the
        chart's ``files/crds/``, which the chart renders as templates) and wait until each is
        Established. Returns their names. Raises :class:`ClusterError`."""
        import yaml
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        names = []
        with self.api_client("admin") as api:
            ext = k8s.ApiextensionsV1Api(api)
            for path in sorted(directory.glob("*.yaml")):
                for crd in yaml.safe_load_all(path.read_text()):
                    name = crd["metadata"]["name"]
                    names.append(name)
                    try:
                        ext.create_custom_resource_definition(crd)
                    except ApiException as err:
                        if err.status != 409:
                            raise ClusterError(f"creating CRD {name} from {path} failed: {err.status} {err.body}") from err
                        current = ext.read_custom_resource_definition(name)
                        crd["metadata"]["resourceVersion"] = current.metadata.resource_version
                        ext.replace_custom_resource_definition(name, crd)

            def established() -> bool:
                for name in names:
                    conditions = ext.read_custom_resource_definition(name).status.conditions or []
                    if not any(c.type == "Established" and c.status == "True" for c in conditions):
                        return False
                return True

            self._wait(f"CRDs {', '.join(names)} to be Established", established, timeout)
        return names

    # ---------------------------------------------------------------- nodes

    def apply_nodes(self, path: str | Path, timeout: float = 60.0) -> list[str]:
        """Create (or replace the labels/status of) the nodes of a nodes file; publish the
        ResourceSlice of each node with ``draDevices`` and the DeviceClass of each driver
        (see dra.py); wait until the nodes are Ready.

        Returns the node names in file order. Raises ``nodes.NodesFileError`` on a bad
        file and :class:`ClusterError` when they are not all Ready within ``timeout`` s.
        """
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        nodes_file = nodes_mod.load_file(path)
        wanted = nodes_file.nodes
        names = [node["metadata"]["name"] for node in wanted]
        with self.api_client("admin") as api:
            core = k8s.CoreV1Api(api)
            for node in wanted:
                try:
                    core.create_node(node)  # type: ignore[arg-type]  # a dict body is sent as is
                except ApiException as err:
                    if err.status != 409:
                        raise ClusterError(
                            f"creating node {node['metadata']['name']} failed: {err.status} {err.reason}: {err.body}"
                        ) from err
                    core.patch_node(
                        node["metadata"]["name"],
                        {"metadata": node["metadata"], "spec": node.get("spec", {})},
                    )
            dra.publish(api, nodes_file.devices)
            self._wait(
                f"{len(names)} nodes from {path} to be Ready (kwok marks them)",
                lambda: not_ready(core, names) == [],
                timeout,
            )
        return names


def not_ready(core: Any, names: Iterable[str]) -> list[str]:
    """Names among ``names`` whose Node is missing or whose Ready condition is not True."""
    ready = set()
    for node in core.list_node().items:
        for condition in node.status.conditions or []:
            if condition.type == "Ready" and condition.status == "True":
                ready.add(node.metadata.name)
    return [name for name in names if name not in ready]


def _http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def exists(read: Callable[[], object]) -> bool:
    """Call ``read`` (an API ``read_*``): True if it answers, False on 404; other errors raise."""
    from kubernetes.client.exceptions import ApiException

    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


# -------------------------------------------------------------------- detached runs


def load_state(run_dir: Path) -> dict[str, Any]:
    """``cluster.json`` of a run dir; raises ``ClusterError`` naming the file when absent or bad."""
    path = run_dir / "cluster.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"{run_dir} is not a devcluster run dir (no cluster.json)") from None
    except json.JSONDecodeError as err:
        raise ClusterError(f"{path} is not valid JSON: {err}") from err
    return data


def recorded_processes(run_dir: Path) -> list[Recorded]:
    """The processes recorded in ``<run_dir>/pids.json`` ([] when there is none)."""
    try:
        return read_pids(run_dir / "pids.json")
    except FileNotFoundError:
        return []
    except ValueError as err:
        raise ClusterError(str(err)) from err


def stop_run_dir(run_dir: Path, remove_temporary: bool = True) -> list[str]:
    """Stop the processes recorded in a run dir (another process started them).

    Returns the names of components that needed SIGKILL. Removes the run dir when it was
    a temporary one and ``remove_temporary`` is set.
    """
    state = load_state(run_dir)
    killed = stop_all(recorded_processes(run_dir))
    if remove_temporary and state.get("temporary"):
        with contextlib.suppress(OSError):
            shutil.rmtree(run_dir)
    return killed
