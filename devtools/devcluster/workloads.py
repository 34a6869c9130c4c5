"""The workload controllers Troupe groups pods of, built and run on the local cluster.

JobSet (``sigs.k8s.io/jobset``) and LeaderWorkerSet (``sigs.k8s.io/lws``) are built from
their Go modules like the control plane (:mod:`.build`: cached by version, stamped,
progress printed, under the same lock) and run by :class:`WorkloadControllers` with their
CRDs, both taken from the module zips. Kubeflow's training operator is represented by its
PyTorchJob CRD alone: tests create pods shaped as the operator creates them
(docs/decisions/015-workload-controllers-in-tests.md says why).

Both controllers are built in one wrapper module whose module graph is the control
plane's (k8s.io/* at v0.36.3, the same third-party versions) with the controller-runtime
release for those libraries, so Go's build cache reuses the packages the kube-* build
compiled; their webhook setup is ported to that controller-runtime with a ``gofmt -r``
rule (docs/decisions/023-controllers-share-the-kubernetes-build.md).

Cache layout (under :func:`devtools.devcluster.build.cache_dir`)::

    workload-controllers/src/          the wrapper module: go.mod (the kubernetes wrapper's
                                       graph, controller-runtime, both controllers replaced
                                       by their ported copies), tools.go, modules/<name>/
    jobset-v0.10.1/bin/jobset          go build sigs.k8s.io/jobset in that module
    jobset-v0.10.1/crds.yaml           config/components/crd/bases/*.yaml of the module
    jobset-v0.10.1/webhooks.yaml       config/components/webhook/manifests.yaml with its
                                       kustomize patches applied (the pod webhooks'
                                       objectSelector)
    lws-v0.7.0/bin/lws                 go build sigs.k8s.io/lws/cmd, in the same go build
    lws-v0.7.0/crds.yaml, webhooks.yaml
    training-operator-v1.9.0/crds.yaml manifests/base/crds/kubeflow.org_pytorchjobs.yaml

The controllers run with their admission webhooks on, served on 127.0.0.1 with a local
serving certificate, registered with ``clientConfig.url`` and the CA as ``caBundle``: the
JobSet webhook defaults what its controller relies on, and the LeaderWorkerSet pod
webhook writes the group labels (``group-index``, ``group-key``) that pods are grouped by.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonpatch
import yaml

if TYPE_CHECKING:  # build imports this module; the build helpers are imported lazily
    from devtools.devcluster.build import Binaries, _Builder
    from devtools.devcluster.cluster import Cluster
    from devtools.devcluster.processes import Recorded

JOBSET_VERSION = "v0.10.1"
LWS_VERSION = "v0.7.0"
TRAINING_OPERATOR_VERSION = "v1.9.0"
#: The controller-runtime release made for the control plane's k8s.io v0.36 libraries (its
#: compatibility table; v0.22.1 does not compile against client-go v0.36, see decision 023).
CONTROLLER_RUNTIME_VERSION = "v0.24.1"
#: The one change of controller-runtime's API that the controllers' sources meet: in
#: v0.24 ``NewWebhookManagedBy`` takes the object (``For`` is gone) and the untyped
#: defaulter and validator are registered by ``WithCustomDefaulter``/``WithCustomValidator``.
#: A ``gofmt -r`` rule (single lower-case letters are wildcards).
WEBHOOK_BUILDER_RULE = (
    "ctrl.NewWebhookManagedBy(m).For(o).WithDefaulter(d).WithValidator(v) -> "
    "ctrl.NewWebhookManagedBy(m, o).WithCustomDefaulter(d).WithCustomValidator(v)"
)
#: A ``NewWebhookManagedBy`` call with one argument: the form controller-runtime v0.24 rejects.
_OLD_BUILDER = re.compile(r"NewWebhookManagedBy\(\s*\w+\s*\)")


@dataclass(frozen=True)
class Controller:
    """How one controller is built from its module and where its manifests are in the zip."""

    name: str
    module: str
    version: str
    package: str
    crd_files: tuple[str, ...]
    webhook_manifests: str
    webhook_patches: tuple[tuple[str, str], ...]
    #: apiVersion of the controller's Configuration file.
    config_api: str
    #: Files (in the module) whose webhook setup :data:`WEBHOOK_BUILDER_RULE` ports.
    webhook_setup_files: tuple[str, ...] = ()


JOBSET = Controller(
    "jobset", "sigs.k8s.io/jobset", JOBSET_VERSION, "sigs.k8s.io/jobset",
    ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
    "config/components/webhook/manifests.yaml",
    (("MutatingWebhookConfiguration", "config/components/webhook/patches/mutating-patch.yaml"),
     ("ValidatingWebhookConfiguration", "config/components/webhook/patches/validating-patch.yaml")),
    "config.jobset.x-k8s.io/v1alpha1",
    ("pkg/webhooks/jobset_webhook.go", "pkg/webhooks/pod_mutating_webhook.go"),
)
LWS = Controller(
    "lws", "sigs.k8s.io/lws", LWS_VERSION, "sigs.k8s.io/lws/cmd",
    ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
    "config/webhook/manifests.yaml",
    (("MutatingWebhookConfiguration", "config/webhook/mutating-patch.yaml"),
     ("ValidatingWebhookConfiguration", "config/webhook/validating-patch.yaml")),
    "config.lws.x-k8s.io/v1alpha1",
    ("pkg/webhooks/leaderworkerset_webhook.go", "pkg/webhooks/pod_webhook.go"),
)
CONTROLLERS = (JOBSET, LWS)
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
KUBEFLOW_CRD_FILES = ("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",)


def layout(root: Path) -> dict[str, Path]:
    """The cache paths of the controllers and their manifests, as fields of
    :class:`~devtools.devcluster.build.Binaries`."""
    out: dict[str, Path] = {}
    for c in CONTROLLERS:
        base = root / f"{c.name}-{c.version}"
        out[c.name] = base / "bin" / c.name
        out[f"{c.name}_crds"] = base / "crds.yaml"
        out[f"{c.name}_webhooks"] = base / "webhooks.yaml"
    out["kubeflow_crds"] = root / f"training-operator-{TRAINING_OPERATOR_VERSION}" / "crds.yaml"
    return out


def versions(bins: Binaries) -> list[tuple[Path, str]]:
    """Each artifact with the version its stamp must record."""
    out = []
    for c in CONTROLLERS:
        out.append((getattr(bins, c.name), binary_version(c)))
        for field in (f"{c.name}_crds", f"{c.name}_webhooks"):
            out.append((getattr(bins, field), c.version))
    out.append((bins.kubeflow_crds, TRAINING_OPERATOR_VERSION))
    return out


def patched_webhooks(manifests: str, patches: Mapping[str, str]) -> list[dict[str, Any]]:
    """The webhook configurations of a kubebuilder ``manifests.yaml`` with the kustomize
    JSON 6902 patches of ``patches`` (configuration kind -> patch YAML) applied, as
    kustomize applies them to the configuration of that kind. Raises ``ValueError`` for a
    patch whose kind has no configuration."""
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    for kind, patch in patches.items():
        targets = [d for d in docs if d.get("kind") == kind]
        if not targets:
            raise ValueError(f"no {kind} in the manifests to patch")
        for i, doc in enumerate(docs):
            if doc.get("kind") == kind:
                docs[i] = jsonpatch.apply_patch(doc, yaml.safe_load(patch))
    return docs


def _concat(paths: Sequence[Path]) -> str:
    return "---\n".join(p.read_text().strip() + "\n" for p in paths)


_TOOLS_GO = """//go:build tools

// Package tools pins the controllers built from this wrapper module, and the kubernetes
// commands whose module graph (and so whose compiled packages) they share.
package tools

import (
{imports})
"""


def binary_version(c: Controller) -> str:
    """What a controller binary's stamp records: its version and the libraries it was built
    with, so that a change of either rebuilds it (``v0.10.1 k8s.io/v0.36.3
    controller-runtime/v0.24.1``)."""
    from devtools.devcluster import build as b

    return f"{c.version} k8s.io/{b.staging_version()} controller-runtime/{CONTROLLER_RUNTIME_VERSION}"


def controllers_go_mod(kubernetes_go_mod: str, controllers: Sequence[Controller] = CONTROLLERS) -> str:
    """The go.mod of the wrapper module that builds ``controllers``: the kubernetes wrapper
    module's (so the same versions of everything the kube-* commands compile) under another
    module name, plus controller-runtime at :data:`CONTROLLER_RUNTIME_VERSION` and each
    controller at its version, replaced by its ported copy in ``./modules/<name>``. A wrapper,
    not ``go install module@version``: that asks the module proxy for the module's version
    list (to check for deprecation), which the proxy here refuses; a required version it
    serves. Raises :class:`~devtools.devcluster.build.BuildError` as the kubernetes one does."""
    from devtools.devcluster import build as b

    lines = [b.kubernetes_wrapper_go_mod(kubernetes_go_mod, module="troupe.local/workload-controllers").rstrip(),
             "", "require (", f"\tsigs.k8s.io/controller-runtime {CONTROLLER_RUNTIME_VERSION}"]
    lines += [f"\t{c.module} {c.version}" for c in controllers]
    lines += [")", ""]
    lines += [f"replace {c.module} => ./modules/{c.name}" for c in controllers]
    return "\n".join(lines) + "\n"


def _gofmt(builder: _Builder) -> str:
    goroot = builder.go("workload-controllers", ["env", "GOROOT"], builder.root, what="go env GOROOT",
                        capture=True).strip()
    return str(Path(goroot) / "bin" / "gofmt")


def port_module(gofmt: str, module_dir: Path, c: Controller) -> None:
    """Port the webhook setup of ``c``'s module copy in ``module_dir`` to controller-runtime
    :data:`CONTROLLER_RUNTIME_VERSION` in place: ``gofmt`` (the path of Go's gofmt) ``-r``
    :data:`WEBHOOK_BUILDER_RULE` on the files ``c.webhook_setup_files`` lists. Raises
    :class:`~devtools.devcluster.build.BuildError` naming the file when one is missing,
    does not parse, or still calls ``NewWebhookManagedBy`` with the manager alone (a new
    controller version that needs another rule, or none)."""
    from devtools.devcluster import build as b

    files = [module_dir / rel for rel in c.webhook_setup_files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise b.BuildError(f"{c.module}@{c.version} has no {', '.join(missing)} to port")
    if not files:
        return
    try:
        done = subprocess.run([gofmt, "-r", WEBHOOK_BUILDER_RULE, "-w", *map(str, files)],
                              capture_output=True, text=True, check=False)
    except OSError as err:
        raise b.BuildError(f"cannot run gofmt ({gofmt}) to port {c.module}@{c.version}: {err}") from err
    if done.returncode != 0:
        raise b.BuildError(f"gofmt -r could not port {c.module}@{c.version}: {done.stderr.strip()}")
    for f in files:
        if _OLD_BUILDER.search(f.read_text()):
            raise b.BuildError(
                f"{f.relative_to(module_dir)} of {c.module}@{c.version} still calls NewWebhookManagedBy "
                f"with the manager alone, which controller-runtime {CONTROLLER_RUNTIME_VERSION} does not "
                f"compile: the rule {WEBHOOK_BUILDER_RULE!r} did not match it (port it by another rule; "
                "a version that needs no port lists no webhook_setup_files)"
            )


def _copy_module(source: Path, target: Path) -> None:
    """Copy a module out of the (read-only) module cache, writable."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for directory, _, _ in os.walk(target):
        os.chmod(directory, 0o755)


def _build_binaries(builder: _Builder, bins: Binaries, missing: Sequence[Controller]) -> None:
    """Make the wrapper module afresh (cheap: its modules are the control plane's) and build
    the ``missing`` controllers in one ``go build``."""
    from devtools.devcluster import build as b

    base = builder.root / "workload-controllers"
    src = base / "src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "modules").mkdir(parents=True)
    # Module downloads outside the wrapper module (base has no go.mod), which is written last.
    kdir = b._module_dir(builder, "workload-controllers", f"k8s.io/kubernetes@{b.KUBERNETES_VERSION}", base)
    gofmt = _gofmt(builder)
    for c in CONTROLLERS:
        mod = b._module_dir(builder, "workload-controllers", f"{c.module}@{c.version}", base)
        _copy_module(mod, src / "modules" / c.name)
        if c.webhook_setup_files:
            builder.say(f"porting the webhook setup of {c.name} {c.version} to controller-runtime "
                        f"{CONTROLLER_RUNTIME_VERSION} ({', '.join(c.webhook_setup_files)})")
        port_module(gofmt, src / "modules" / c.name, c)
    imports = [f"k8s.io/kubernetes/cmd/{name}" for name in b.KUBE_COMPONENTS] + [c.package for c in CONTROLLERS]
    (src / "tools.go").write_text(_TOOLS_GO.format(imports="".join(f'\t_ "{i}"\n' for i in imports)))
    (src / "go.mod").write_text(controllers_go_mod((kdir / "go.mod").read_text()))
    builder.go("workload-controllers", ["mod", "tidy", "-e"], src,
               what="workload controllers' module graph (go mod tidy)")
    out = base / f".bin.tmp-{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    try:
        builder.go("workload-controllers",
                   ["build", "-trimpath", "-ldflags", "-s -w", "-o", f"{out}/", *(c.package for c in missing)],
                   src, what=" and ".join(f"{c.name} {c.version}" for c in missing))
        for c in missing:
            target = getattr(bins, c.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            b._mark_built(out / c.package.rsplit("/", 1)[-1], target, binary_version(c))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def build(builder: _Builder, bins: Binaries) -> None:
    """Build the controllers and extract their manifests where missing (called by
    :func:`~devtools.devcluster.build.ensure_built` under the build lock)."""
    from devtools.devcluster import build as b

    missing = [c for c in CONTROLLERS if not b._is_built(getattr(bins, c.name), binary_version(c))]
    if missing:
        with builder.step("workload-controllers", "", label=" and ".join(f"{c.name} {c.version}" for c in missing)):
            _build_binaries(builder, bins, missing)
    for c in CONTROLLERS:
        binary = getattr(bins, c.name)
        crds, hooks = getattr(bins, f"{c.name}_crds"), getattr(bins, f"{c.name}_webhooks")
        if b._is_built(crds, c.version) and b._is_built(hooks, c.version):
            continue
        mod = b._module_dir(builder, c.name, f"{c.module}@{c.version}", binary.parent.parent)
        missing = [f for f in (*c.crd_files, c.webhook_manifests, *(p for _, p in c.webhook_patches))
                   if not (mod / f).is_file()]
        if missing:
            raise b.BuildError(f"{c.module}@{c.version} has no {', '.join(missing)} (looked in {mod})")
        tmp = crds.with_name(f".crds.tmp-{os.getpid()}")
        tmp.write_text(_concat([mod / f for f in c.crd_files]))
        b._mark_built(tmp, crds, c.version)
        docs = patched_webhooks((mod / c.webhook_manifests).read_text(),
                                {kind: (mod / p).read_text() for kind, p in c.webhook_patches})
        tmp = hooks.with_name(f".webhooks.tmp-{os.getpid()}")
        tmp.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        b._mark_built(tmp, hooks, c.version)
    if not b._is_built(bins.kubeflow_crds, TRAINING_OPERATOR_VERSION):
        base = bins.kubeflow_crds.parent
        base.mkdir(parents=True, exist_ok=True)
        module = f"{TRAINING_OPERATOR_MODULE}@{TRAINING_OPERATOR_VERSION}"
        builder.say(f"extracting the PyTorchJob CRD of {module}…")
        mod = b._module_dir(builder, "training-operator", module, base)
        paths = [mod / f for f in KUBEFLOW_CRD_FILES]
        if not all(p.is_file() for p in paths):
            raise b.BuildError(f"{module} has no {', '.join(KUBEFLOW_CRD_FILES)} (looked in {mod})")
        tmp = bins.kubeflow_crds.with_name(f".crds.tmp-{os.getpid()}")
        tmp.write_text(_concat(paths))
        b._mark_built(tmp, bins.kubeflow_crds, TRAINING_OPERATOR_VERSION)


# --- running them ---------------------------------------------------------------------------
def local_webhooks(docs: Sequence[Mapping[str, Any]], prefix: str, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The configurations of ``docs`` for a controller serving on ``base_url``
    (``https://127.0.0.1:<port>``): each ``clientConfig.service`` becomes
    ``url: <base_url><path>`` with ``caBundle``, and each configuration is named
    ``<prefix>-<kind>`` (so that two controllers' configurations do not collide)."""
    import base64

    bundle = base64.b64encode(ca_pem).decode("ascii")
    out = []
    for doc in docs:
        doc = copy.deepcopy(dict(doc))
        kind = str(doc["kind"]).removesuffix("WebhookConfiguration").lower()
        doc["metadata"] = {"name": f"{prefix}-{kind}"}
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": base_url + path, "caBundle": bundle}
        out.append(doc)
    return out


def install_crds(cluster: Cluster) -> None:
    """Install the JobSet, LeaderWorkerSet and PyTorchJob CRDs on ``cluster`` and wait until
    they are served (the e2e fixtures do it before the reconciler starts, so that its
    informers find the kinds at once rather than on their next look)."""
    bins = cluster.binaries
    for crds in (bins.jobset_crds, bins.lws_crds, bins.kubeflow_crds):
        cluster.kubectl("apply", "--server-side", "-f", str(crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/jobsets.jobset.x-k8s.io", "crd/leaderworkersets.leaderworkerset.x-k8s.io",
                    "crd/pytorchjobs.kubeflow.org")


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
        from devtools.devcluster.processes import Monitor, Started

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
        import certs
        from devtools.devcluster.cluster import free_port
        from devtools.devcluster.processes import spawn, tail

        work = self.dir / c.name
        cert_dir = work / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        ca = certs.create_ca(f"{c.name}-webhook-ca", days=30)
        certs.write_pair(certs.create_serving_cert(ca, ["127.0.0.1", "localhost"], days=30),
                         cert_dir / "tls.crt", cert_dir / "tls.key")
        webhook_port, health_port = free_port(), free_port()
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
        end = time.monotonic() + 60
        while not _ok(f"http://127.0.0.1:{health_port}/readyz"):
            code = started.popen.poll()
            if code is not None or time.monotonic() > end:
                why = f"exited with code {code}" if code is not None else "not ready after 60s"
                raise RuntimeError(f"{c.name} controller {why}; last lines of {started.record.log}:\n"
                                   f"{tail(started.record.log)}")
            time.sleep(0.2)
        docs = local_webhooks(list(yaml.safe_load_all(webhooks.read_text())), c.name,
                              f"https://127.0.0.1:{webhook_port}", ca.cert_pem)
        for doc in docs:
            kind = "mutatingwebhookconfiguration" if doc["kind"].startswith("Mutating") else "validatingwebhookconfiguration"
            self._configurations.append((kind, doc["metadata"]["name"]))
            self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
        self._wait_in_effect(c)

    def _wait_in_effect(self, c: Controller) -> None:
        """Until the API server calls the controller's defaulting webhook: a dry-run
        create of a minimal object comes back with a field only the webhook sets."""
        import json

        obj, check = _probe(c)
        end = time.monotonic() + 30
        while True:
            done = self.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                        input=json.dumps(obj), check=False)
            if done.returncode == 0 and check(json.loads(done.stdout)):
                return
            if time.monotonic() > end:
                raise RuntimeError(f"{c.name}'s webhooks not in effect after 30s: {done.stderr.strip()}")
            time.sleep(0.3)

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
        from devtools.devcluster.processes import stop_all

        self._monitor.stop()
        for kind, name in reversed(self._configurations):
            with contextlib.suppress(Exception):  # the cluster may be gone already
                self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        self._configurations.clear()
        stop_all([s.record for s in self._started], [s.popen for s in self._started])
        for s in self._started:
            with contextlib.suppress(OSError):
                s.log_handle.close()
        self._started.clear()


def _ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


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
