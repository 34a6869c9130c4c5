"""Kubeflow Trainer v2, whose TrainJobs run as JobSets, built from its Go module and run on
the local cluster.

The trainer's controller manager (``github.com/kubeflow/trainer/v2``, ``cmd/
trainer-controller-manager``: the TrainJob, TrainingRuntime and ClusterTrainingRuntime
controllers and their validating webhooks) turns each TrainJob into a JobSet, which the
JobSet controller of :mod:`.workloads` runs; Troupe gangs that JobSet's pods
(docs/decisions/078-trainjob-with-its-controller.md).

Built like Kueue (:mod:`.kueue`): in its own module graph, as released (its go.mod and
go.sum: k8s.io/* v0.32.2, controller-runtime v0.20.2, JobSet v0.8.2), from a writable copy
of the module with two changes to its ``main.go`` (:data:`MAIN_PATCHES`): the webhook
server binds 127.0.0.1, and when :data:`CERT_DIR_ENV` is set it serves the certificate in
that directory instead of starting its certificate rotator (which makes a certificate for
the in-cluster Service name, keeps it in a Secret of ``kubeflow-system`` and writes it to
the fixed ``/tmp/k8s-webhook-server/serving-certs``). Nothing else of the manager changes.

Cache layout (under :func:`devtools.devcluster.toolchain.cache_dir`)::

    trainer-v2.0.0/bin/trainer-controller-manager   the patched manager
    trainer-v2.0.0/crds.yaml          manifests/base/crds/*.yaml of the module (TrainJob,
                                      TrainingRuntime, ClusterTrainingRuntime)
    trainer-v2.0.0/webhooks.yaml      manifests/base/webhook/manifests.yaml with the
                                      kustomize patch of its patch.yaml applied
    trainer-v2.0.0/torch-distributed.yaml  manifests/base/runtimes/torch_distributed.yaml,
                                      verbatim below a comment naming its source

:class:`Trainer` runs it on a cluster whose JobSet controller runs already. Only the suite
needs it: ``python -m devtools.devcluster build`` builds it, and :func:`ensure_trainer`
builds it where it is still missing. This module imports :mod:`.toolchain`,
:mod:`.controllers` (the module copy, the webhook patch), :mod:`.cluster`,
:mod:`.processes` and :mod:`.workloads` (the start and stop of a manager with webhooks).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

import certs
from devtools.devcluster.cluster import Cluster, free_ports
from devtools.devcluster.controllers import build_patched_module, patched_webhooks
from devtools.devcluster.processes import Monitor, Started, spawn, tail
from devtools.devcluster.toolchain import (
    Builder,
    BuildError,
    build_lock,
    cache_dir,
    is_built,
    mark_built,
    module_dir,
)
from devtools.devcluster.workloads import (
    local_webhooks,
    register_webhooks,
    unregister_and_stop,
    wait_ready,
)

TRAINER_VERSION = "v2.0.0"
TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
#: The manager's package, relative to the module.
TRAINER_PACKAGE = "./cmd/trainer-controller-manager"
TRAINER_MAIN = "cmd/trainer-controller-manager/main.go"
TRAINER_CRD_FILES = tuple(f"manifests/base/crds/trainer.kubeflow.org_{plural}.yaml"
                          for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes"))
TRAINER_WEBHOOK_MANIFESTS = "manifests/base/webhook/manifests.yaml"
#: The kustomize JSON 6902 patch of the validating configuration (its name and Service).
TRAINER_WEBHOOK_PATCH = "manifests/base/webhook/patch.yaml"
#: The ClusterTrainingRuntime the tests' TrainJobs name, one of those the trainer ships.
TORCH_RUNTIME_FILE = "manifests/base/runtimes/torch_distributed.yaml"
TORCH_RUNTIME = "torch-distributed"
#: When set, the patched manager serves the webhook certificate (``tls.crt``, ``tls.key``)
#: in this directory and starts no certificate rotator.
CERT_DIR_ENV = "TRAINER_WEBHOOK_CERT_DIR"
#: The changes made to ``cmd/trainer-controller-manager/main.go`` before it is built: each
#: line (found exactly once) and what replaces it.
MAIN_PATCHES = (
    ("Port:    webhookServerPort,",
     f'Host: "127.0.0.1", CertDir: os.Getenv("{CERT_DIR_ENV}"), Port: webhookServerPort,'),
    ("cert.ManageCerts(mgr, cert.Config{",
     f'func(m ctrl.Manager, c cert.Config, ready chan struct{{}}) error {{ if os.Getenv("{CERT_DIR_ENV}") != "" '
     "{ close(ready); return nil }; return cert.ManageCerts(m, c, ready) }(mgr, cert.Config{"),
)
#: What the manager's stamp records: the version and the patch, so a change of either rebuilds it.
TRAINER_BINARY_VERSION = f"{TRAINER_VERSION} +{CERT_DIR_ENV} +127.0.0.1"
#: The API group and version of the trainer's kinds.
TRAINER_API = ("trainer.kubeflow.org", "v1alpha1")
_CRDS = ("trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
         "clustertrainingruntimes.trainer.kubeflow.org")


@dataclass(frozen=True)
class TrainerBuild:
    """The paths of the built manager (``binary``) and of its manifests (``crds``,
    ``webhooks``, ``torch_runtime``: the ClusterTrainingRuntime sample)."""

    binary: Path
    crds: Path
    webhooks: Path
    torch_runtime: Path


def trainer_paths(root: Path | None = None) -> TrainerBuild:
    """Where the cached manager and its manifests are (built or not)."""
    base = (root or cache_dir()) / f"trainer-{TRAINER_VERSION}"
    return TrainerBuild(base / "bin" / "trainer-controller-manager", base / "crds.yaml", base / "webhooks.yaml",
                        base / f"{TORCH_RUNTIME}.yaml")


def versions(paths: TrainerBuild) -> list[tuple[Path, str]]:
    """Each artifact with the version its stamp must record."""
    return [(paths.binary, TRAINER_BINARY_VERSION), (paths.crds, TRAINER_VERSION),
            (paths.webhooks, TRAINER_VERSION), (paths.torch_runtime, TRAINER_VERSION)]


def built_trainer(root: Path | None = None) -> TrainerBuild | None:
    """The cached manager and manifests if all are stamped at their versions, else None."""
    paths = trainer_paths(root)
    return paths if all(is_built(path, version) for path, version in versions(paths)) else None


def ensure_trainer(root: Path | None = None, out: TextIO | None = None) -> TrainerBuild:
    """Build the manager and extract its manifests unless they are in the cache (under the
    cache's build lock, so two test workers never build it at once); their paths. Warm: no
    go command runs. Raises :class:`~devtools.devcluster.toolchain.BuildError` naming what
    failed."""
    root = (root or cache_dir()).expanduser().resolve()
    warm = built_trainer(root)
    if warm is not None:
        return warm
    with build_lock(root):
        build(Builder(root, out or sys.stderr), trainer_paths(root))
    return trainer_paths(root)


def patch_main(src: Path) -> None:
    """Apply :data:`MAIN_PATCHES` to the manager's ``main.go`` in the module copy ``src``.
    Raises :class:`~devtools.devcluster.toolchain.BuildError` naming the file and the line
    when a line to patch is not there exactly once (a release that changed it: patch it
    anew)."""
    main = src / TRAINER_MAIN
    text = main.read_text() if main.is_file() else ""
    for line, replacement in MAIN_PATCHES:
        if text.count(line) != 1:
            raise BuildError(f"{main} of {TRAINER_MODULE}@{TRAINER_VERSION} does not hold {line!r} exactly once "
                             "(its webhook server or certificate set-up changed: patch it anew)")
        text = text.replace(line, replacement)
    main.write_text(text)


def build(builder: Builder, paths: TrainerBuild) -> None:
    """Build the manager and extract its manifests into ``paths`` where missing
    (:func:`ensure_trainer` calls it under the build lock). Cold, about 3.5 minutes on two
    loaded cores (207 s measured; its k8s.io libraries are not the control plane's); warm, nothing runs.
    Raises :class:`~devtools.devcluster.toolchain.BuildError` naming what failed or what
    the module lacks."""
    base = paths.binary.parent.parent
    base.mkdir(parents=True, exist_ok=True)
    module = f"{TRAINER_MODULE}@{TRAINER_VERSION}"
    build_patched_module(builder, "trainer", TRAINER_MODULE, TRAINER_VERSION, TRAINER_PACKAGE, paths.binary,
                         TRAINER_BINARY_VERSION, patch_main)
    if all(is_built(p, TRAINER_VERSION) for p in (paths.crds, paths.webhooks, paths.torch_runtime)):
        return
    mod = module_dir(builder, "trainer", module, base)
    wanted = (*TRAINER_CRD_FILES, TRAINER_WEBHOOK_MANIFESTS, TRAINER_WEBHOOK_PATCH, TORCH_RUNTIME_FILE)
    absent = [f for f in wanted if not (mod / f).is_file()]
    if absent:
        raise BuildError(f"{module} has no {', '.join(absent)} (looked in {mod})")
    docs = ["\n".join(line for line in (mod / f).read_text().strip().splitlines() if line != "---") + "\n"
            for f in TRAINER_CRD_FILES]
    _write(paths.crds, "---\n".join(docs))
    hooks = patched_webhooks((mod / TRAINER_WEBHOOK_MANIFESTS).read_text(),
                             {"ValidatingWebhookConfiguration": (mod / TRAINER_WEBHOOK_PATCH).read_text()})
    _write(paths.webhooks, yaml.safe_dump_all(hooks, sort_keys=False))
    _write(paths.torch_runtime, f"# {module} {TORCH_RUNTIME_FILE}, verbatim\n" + (mod / TORCH_RUNTIME_FILE).read_text())


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    mark_built(tmp, path, TRAINER_VERSION)


class Trainer:
    """The trainer's controller manager on ``cluster``, a context manager; the JobSet CRD
    and controller must be there already (``workload_controllers``). Builds it first where
    the cache lacks it (:func:`ensure_trainer`). Installs its CRDs, starts it as the
    cluster admin (webhooks and probes on free 127.0.0.1 ports, the webhooks' certificate
    signed by the cluster's CA, no metrics listener, no leader election), waits for its
    ``/readyz``, registers its validating webhooks by URL (configuration
    ``trainer-validating``) and waits until they are in effect, then applies the
    :data:`TORCH_RUNTIME` ClusterTrainingRuntime the module ships. :meth:`stop` removes the
    webhook configuration first, then stops the manager by its recorded pid (SIGTERM, then
    SIGKILL after 5 s: stopped whatever its signal dispositions). Log:
    ``<run_dir>/logs/trainer.log``. The CRDs and the runtime are left in place."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.build = ensure_trainer()
        self.dir = cluster.run_dir / "trainer"
        self._started: list[Started] = []
        self._monitor = Monitor([], lambda f: print(f"[trainer] {f}", file=sys.stderr, flush=True))
        self._configurations: list[tuple[str, str]] = []

    def __enter__(self) -> Trainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """The manager's process id. Raises ``RuntimeError`` when it is not started."""
        if not self._started:
            raise RuntimeError("the trainer's manager is not running")
        return self._started[0].record.pid

    def start(self) -> Trainer:
        """Install and start everything; raises ``RuntimeError`` naming the part that failed
        with the end of the manager's log (everything started is stopped first)."""
        try:
            self.cluster.kubectl("apply", "--server-side", "-f", str(self.build.crds))
            self.cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{c}" for c in _CRDS))
            self._start()
            self._monitor.start()
            self.cluster.kubectl("apply", "--server-side", "-f", str(self.build.torch_runtime))
            self._wait_runtime_seen(self._started[0])
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        cert_dir = self.dir / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        certs.write_pair(certs.create_serving_cert(self.cluster.ca_key_pair(), ["127.0.0.1", "localhost"], days=30),
                         cert_dir / "tls.crt", cert_dir / "tls.key")
        webhook_port, health_port = free_ports(2)
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig("admin")), **{CERT_DIR_ENV: str(cert_dir)})
        argv = [str(self.build.binary), f"--webhook-server-port={webhook_port}",
                f"--health-probe-bind-address=127.0.0.1:{health_port}", "--metrics-bind-address=0",
                "--leader-elect=false"]
        started = spawn("trainer", argv, self.cluster.logs_dir / "trainer.log", die_with_parent=True, env=env)
        self._started.append(started)
        self._monitor.add(started)
        wait_ready(started, health_port, "the trainer's controller manager", timeout=90.0)
        docs = [d for d in yaml.safe_load_all(self.build.webhooks.read_text()) if d]
        register_webhooks(self.cluster, local_webhooks(docs, "trainer", f"https://127.0.0.1:{webhook_port}",
                                                       self.cluster.ca_pem), self._configurations)
        self._wait_in_effect(started)

    def _wait_in_effect(self, started: Started) -> None:
        """Until the API server calls the TrainJob webhook: a server-side dry run of a
        TrainJob named ``0-probe`` (a valid object name, not the RFC 1035 label the webhook
        asks for) is denied by it."""
        self._wait_dry_run(started, "0-probe", "the trainer's webhooks in effect",
                           lambda rc, err: rc != 0 and "validator.trainjob.trainer.kubeflow.org" in err)

    def _wait_runtime_seen(self, started: Started) -> None:
        """Until the TrainJob webhook finds the ClusterTrainingRuntime just applied (it reads
        runtimes from the manager's informer cache, which may not hold it yet): a server-side
        dry run of a TrainJob naming it is no longer refused as "not found"."""
        self._wait_dry_run(started, "runtime-probe", f"ClusterTrainingRuntime {TORCH_RUNTIME} found by the webhook",
                           lambda rc, err: rc == 0 or "not found" not in err)

    def _wait_dry_run(self, started: Started, name: str, what: str, done: Callable[[int, str], bool],
                      timeout: float = 30.0) -> None:
        """Until a server-side dry run of a TrainJob ``name`` of the ``torch-distributed``
        runtime answers as ``done`` (exit code, stderr) accepts. Raises ``RuntimeError``
        naming ``what``, with the last answer and the manager's log tail, after ``timeout``
        seconds."""
        probe = {"apiVersion": "/".join(TRAINER_API), "kind": "TrainJob",
                 "metadata": {"name": name, "namespace": "default"},
                 "spec": {"runtimeRef": {"name": TORCH_RUNTIME}}}
        end = time.monotonic() + timeout
        while True:
            answer = self.cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                                          input=yaml.safe_dump(probe), check=False)
            if done(answer.returncode, answer.stderr):
                return
            if time.monotonic() > end:
                raise RuntimeError(f"not {what} after {timeout:.0f}s: {(answer.stderr or answer.stdout).strip()}; "
                                   f"last lines of {started.record.log}:\n{tail(started.record.log)}")
            time.sleep(0.3)

    def check(self) -> None:
        """Raise ``RuntimeError`` if the manager has died."""
        failure = self._monitor.check_now()
        if failure is not None:
            raise RuntimeError(str(failure))

    def stop(self) -> None:
        """Unregister the webhooks, then stop the manager by its recorded pid."""
        self._monitor.stop()
        unregister_and_stop(self.cluster, self._configurations, self._started)
