"""The workload controllers Troupe groups pods of, built from their Go modules.

JobSet (``sigs.k8s.io/jobset``) and LeaderWorkerSet (``sigs.k8s.io/lws``) are built from
their Go modules like the control plane (:mod:`.build`: cached by version, stamped,
progress printed, under the same lock) with their CRDs and webhook configurations, both
taken from the module zips; :mod:`.workloads` runs them on a cluster. Kubeflow's training
operator is represented by its PyTorchJob CRD alone: tests create pods shaped as the
operator creates them (docs/decisions/015-workload-controllers-in-tests.md says why).

Both controllers are built in one wrapper module whose module graph is the control
plane's (k8s.io/* at v0.36.3, the same third-party versions) with the controller-runtime
release for those libraries, so Go's build cache reuses the packages the kube-* build
compiled; their webhook setup is ported to that controller-runtime with a ``gofmt -r``
rule (docs/decisions/023-controllers-share-the-kubernetes-build.md).

Cache layout (under :func:`devtools.devcluster.toolchain.cache_dir`)::

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

This module imports only :mod:`.toolchain`; :mod:`.build` calls :func:`layout`,
:func:`versions` and :func:`build`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from devtools.devcluster.toolchain import (
    KUBE_COMPONENTS,
    KUBERNETES_VERSION,
    Binaries,
    Builder,
    BuildError,
    is_built,
    kubernetes_wrapper_go_mod,
    mark_built,
    module_dir,
    staging_version,
)

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
    :class:`~devtools.devcluster.toolchain.Binaries`."""
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
    return f"{c.version} k8s.io/{staging_version()} controller-runtime/{CONTROLLER_RUNTIME_VERSION}"


def controllers_go_mod(kubernetes_go_mod: str, controllers: Sequence[Controller] = CONTROLLERS) -> str:
    """The go.mod of the wrapper module that builds ``controllers``: the kubernetes wrapper
    module's (so the same versions of everything the kube-* commands compile) under another
    module name, plus controller-runtime at :data:`CONTROLLER_RUNTIME_VERSION` and each
    controller at its version, replaced by its ported copy in ``./modules/<name>``. A wrapper,
    not ``go install module@version``: that asks the module proxy for the module's version
    list (to check for deprecation), which the proxy here refuses; a required version it
    serves. Raises :class:`~devtools.devcluster.toolchain.BuildError` as the kubernetes one does."""
    lines = [kubernetes_wrapper_go_mod(kubernetes_go_mod, module="troupe.local/workload-controllers").rstrip(),
             "", "require (", f"\tsigs.k8s.io/controller-runtime {CONTROLLER_RUNTIME_VERSION}"]
    lines += [f"\t{c.module} {c.version}" for c in controllers]
    lines += [")", ""]
    lines += [f"replace {c.module} => ./modules/{c.name}" for c in controllers]
    return "\n".join(lines) + "\n"


def _gofmt(builder: Builder) -> str:
    goroot = builder.go("workload-controllers", ["env", "GOROOT"], builder.root, what="go env GOROOT",
                        capture=True).strip()
    return str(Path(goroot) / "bin" / "gofmt")


def port_module(gofmt: str, module_dir: Path, c: Controller) -> None:
    """Port the webhook setup of ``c``'s module copy in ``module_dir`` to controller-runtime
    :data:`CONTROLLER_RUNTIME_VERSION` in place: ``gofmt`` (the path of Go's gofmt) ``-r``
    :data:`WEBHOOK_BUILDER_RULE` on the files ``c.webhook_setup_files`` lists. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` naming the file when one is missing,
    does not parse, or still calls ``NewWebhookManagedBy`` with the manager alone (a new
    controller version that needs another rule, or none)."""
    files = [module_dir / rel for rel in c.webhook_setup_files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise BuildError(f"{c.module}@{c.version} has no {', '.join(missing)} to port")
    if not files:
        return
    try:
        done = subprocess.run([gofmt, "-r", WEBHOOK_BUILDER_RULE, "-w", *map(str, files)],
                              capture_output=True, text=True, check=False)
    except OSError as err:
        raise BuildError(f"cannot run gofmt ({gofmt}) to port {c.module}@{c.version}: {err}") from err
    if done.returncode != 0:
        raise BuildError(f"gofmt -r could not port {c.module}@{c.version}: {done.stderr.strip()}")
    for f in files:
        if _OLD_BUILDER.search(f.read_text()):
            raise BuildError(
                f"{f.relative_to(module_dir)} of {c.module}@{c.version} still calls NewWebhookManagedBy "
                f"with the manager alone, which controller-runtime {CONTROLLER_RUNTIME_VERSION} does not "
                f"compile: the rule {WEBHOOK_BUILDER_RULE!r} did not match it (port it by another rule; "
                "a version that needs no port lists no webhook_setup_files)"
            )


def copy_module(source: Path, target: Path) -> None:
    """Copy a module out of the (read-only) module cache into ``target`` (replaced),
    writable."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for directory, _, _ in os.walk(target):
        os.chmod(directory, 0o755)


def build_patched_module(builder: Builder, name: str, module: str, version: str, package: str, binary: Path,
                         stamp: str, patch: Callable[[Path], None]) -> None:
    """Build ``package`` of ``module`` at ``version`` from a writable copy of it (in
    ``<binary's base>/src``, removed afterwards) that ``patch`` changes first, into
    ``binary`` stamped ``stamp``, unless it is built at that stamp: a controller that must
    change a line to run on the local cluster (Kueue's, the trainer's), in its own module
    graph. Progress is printed as ``name``. Raises :class:`BuildError` (from ``patch`` or
    the go command)."""
    if is_built(binary, stamp):
        return
    base = binary.parent.parent
    with builder.step(name, version):
        mod = module_dir(builder, name, f"{module}@{version}", base)
        src = base / "src"
        copy_module(mod, src)  # the module cache is read-only
        patch(src)
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_name(f".{name}.tmp-{os.getpid()}")
        try:
            builder.go(name, ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), package], src,
                       what=f"{name} {version}")
            mark_built(tmp, binary, stamp)
        finally:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(src, ignore_errors=True)


def _build_binaries(builder: Builder, bins: Binaries, missing: Sequence[Controller]) -> None:
    """Make the wrapper module afresh (cheap: its modules are the control plane's) and build
    the ``missing`` controllers in one ``go build``."""
    base = builder.root / "workload-controllers"
    src = base / "src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "modules").mkdir(parents=True)
    # Module downloads outside the wrapper module (base has no go.mod), which is written last.
    kdir = module_dir(builder, "workload-controllers", f"k8s.io/kubernetes@{KUBERNETES_VERSION}", base)
    gofmt = _gofmt(builder)
    for c in CONTROLLERS:
        mod = module_dir(builder, "workload-controllers", f"{c.module}@{c.version}", base)
        copy_module(mod, src / "modules" / c.name)
        if c.webhook_setup_files:
            builder.say(f"porting the webhook setup of {c.name} {c.version} to controller-runtime "
                        f"{CONTROLLER_RUNTIME_VERSION} ({', '.join(c.webhook_setup_files)})")
        port_module(gofmt, src / "modules" / c.name, c)
    imports = [f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMPONENTS] + [c.package for c in CONTROLLERS]
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
            mark_built(out / c.package.rsplit("/", 1)[-1], target, binary_version(c))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def build(builder: Builder, bins: Binaries) -> None:
    """Build the controllers and extract their manifests where missing (called by
    :func:`~devtools.devcluster.build.ensure_built` under the build lock)."""
    missing = [c for c in CONTROLLERS if not is_built(getattr(bins, c.name), binary_version(c))]
    if missing:
        with builder.step("workload-controllers", "", label=" and ".join(f"{c.name} {c.version}" for c in missing)):
            _build_binaries(builder, bins, missing)
    for c in CONTROLLERS:
        binary = getattr(bins, c.name)
        crds, hooks = getattr(bins, f"{c.name}_crds"), getattr(bins, f"{c.name}_webhooks")
        if is_built(crds, c.version) and is_built(hooks, c.version):
            continue
        mod = module_dir(builder, c.name, f"{c.module}@{c.version}", binary.parent.parent)
        absent = [f for f in (*c.crd_files, c.webhook_manifests, *(p for _, p in c.webhook_patches))
                  if not (mod / f).is_file()]
        if absent:
            raise BuildError(f"{c.module}@{c.version} has no {', '.join(absent)} (looked in {mod})")
        tmp = crds.with_name(f".crds.tmp-{os.getpid()}")
        tmp.write_text(_concat([mod / f for f in c.crd_files]))
        mark_built(tmp, crds, c.version)
        docs = patched_webhooks((mod / c.webhook_manifests).read_text(),
                                {kind: (mod / p).read_text() for kind, p in c.webhook_patches})
        tmp = hooks.with_name(f".webhooks.tmp-{os.getpid()}")
        tmp.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        mark_built(tmp, hooks, c.version)
    if not is_built(bins.kubeflow_crds, TRAINING_OPERATOR_VERSION):
        base = bins.kubeflow_crds.parent
        base.mkdir(parents=True, exist_ok=True)
        module = f"{TRAINING_OPERATOR_MODULE}@{TRAINING_OPERATOR_VERSION}"
        builder.say(f"extracting the PyTorchJob CRD of {module}…")
        mod = module_dir(builder, "training-operator", module, base)
        paths = [mod / f for f in KUBEFLOW_CRD_FILES]
        if not all(p.is_file() for p in paths):
            raise BuildError(f"{module} has no {', '.join(KUBEFLOW_CRD_FILES)} (looked in {mod})")
        tmp = bins.kubeflow_crds.with_name(f".crds.tmp-{os.getpid()}")
        tmp.write_text(_concat(paths))
        mark_built(tmp, bins.kubeflow_crds, TRAINING_OPERATOR_VERSION)
