"""Build the control plane's binaries once, into a cache directory keyed by version.

Layout under :func:`cache_dir` (default ``${TROUPE_CACHE_DIR:-~/.cache/troupe}``)::

    k8s-v1.37.2/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
                                (k8s-v1.36.3/ too when $TROUPE_KUBERNETES_VERSION picks it: make test-compat)
    k8s-v1.37.2/src/            wrapper module (go.mod, tools.go)
    etcd-v3.6.16/bin/etcd
    etcd-v3.6.16/src/           wrapper module
    kwok-v0.8.0/bin/kwok
    kwok-v0.8.0/stages.yaml     node-initialize, node-heartbeat-with-lease, pod-ready, and kwok-pod-stages.yaml
    helm-v3.19.0/bin/helm       renders and lints charts/troupe (tests/chart, tests/e2e)
    jobset-v0.10.1/bin/jobset   the JobSet controller, with crds.yaml and webhooks.yaml from its
    lws-v0.7.0/bin/lws          module zip (and the same for LeaderWorkerSet; see controllers.py)
    workload-controllers/src/   their one wrapper module, sharing the k8s-v1.37.2 module graph
    training-operator-v1.9.0/crds.yaml   Kubeflow's PyTorchJob CRD (the operator is not built)
    logs/<component>.log        go's output of the builds of that component, each command
                                with its duration (downloads and compiles apart)

How (see "Testing against a real control plane" in DESIGN.md): ``go install
k8s.io/kubernetes/cmd/...`` cannot work because kubernetes' go.mod replaces its staging
modules with local paths, so a wrapper module requires ``k8s.io/kubernetes`` and replaces
each of those modules with the published ``v0.<minor>.<patch>`` version of itself.

Every artifact is written under a temporary name and renamed when complete, then a
``<name>.stamp`` file recording the version is written next to it: a build killed half
way leaves no binary that looks finished. Reuse is decided by binary + matching stamp
(:mod:`.toolchain`). A file lock serialises concurrent builds of the same cache directory.

Imports: :mod:`.toolchain` (the Go basics) and :mod:`.controllers` (the workload
controllers' build); :mod:`.cluster` imports this module, and nothing here imports back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import TextIO

from devtools.devcluster import controllers
from devtools.devcluster.toolchain import (
    ETCD_VERSION,
    HELM_VERSION,
    KUBE_COMPONENTS,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    Binaries,
    Builder,
    BuildError,
    build_lock,
    cache_dir,
    control_plane_version,
    is_built,
    kubernetes_wrapper_go_mod,
    mark_built,
    module_dir,
    staging_replacements,
    staging_version,
)

#: The names callers import from here; the toolchain basics among them live in
#: :mod:`.toolchain`.
__all__ = [
    "ETCD_VERSION",
    "HELM_VERSION",
    "KUBERNETES_VERSION",
    "KUBE_COMPONENTS",
    "KWOK_POD_STAGES",
    "KWOK_STAGE_FILES",
    "KWOK_VERSION",
    "Binaries",
    "BuildError",
    "built_binaries",
    "built_helm",
    "cache_dir",
    "control_plane_version",
    "ensure_built",
    "helm_ldflags",
    "kubernetes_wrapper_go_mod",
    "kwok_stages_version",
    "staging_replacements",
    "staging_version",
]

#: Stage files taken from the kwok module, in order. ``pod/fast/pod-complete.yaml`` is left
#: out on purpose: it completes every Job-owned pod at once, so a gang never stays Running;
#: ``pod/fast/pod-delete.yaml`` is replaced by :data:`KWOK_POD_STAGES` (pods with finalizers).
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
)
#: The local cluster's own pod stages, appended to kwok's: terminate, then delete.
KWOK_POD_STAGES = Path(__file__).resolve().parent / "kwok-pod-stages.yaml"


def kwok_stages_version() -> str:
    """The stamp of the stages file: kwok's version and a digest of our own stages, so that
    a change to them builds the file again."""
    digest = hashlib.sha256(KWOK_POD_STAGES.read_bytes()).hexdigest()[:12]
    return f"{KWOK_VERSION}+{digest}"


def _layout(root: Path) -> Binaries:
    k8s = root / f"k8s-{control_plane_version()}" / "bin"
    kwok = root / f"kwok-{KWOK_VERSION}"
    return Binaries(
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kubectl=k8s / "kubectl",
        etcd=root / f"etcd-{ETCD_VERSION}" / "bin" / "etcd",
        kwok=kwok / "bin" / "kwok",
        kwok_stages=kwok / "stages.yaml",
        helm=root / f"helm-{HELM_VERSION}" / "bin" / "helm",
        **controllers.layout(root),
    )


def built_binaries(root: Path | None = None) -> Binaries | None:
    """The cached binaries if every one of them is built at the pinned version, else None."""
    bins = _layout(root or cache_dir())
    versions = _versions(bins)
    if all(is_built(path, version) for path, version in versions):
        return bins
    return None


def built_helm(root: Path | None = None) -> Path | None:
    """The cached helm binary if it is built at the pinned version, else None.

    The chart's unit tests need helm alone, not the whole control plane.
    """
    helm = _layout(root or cache_dir()).helm
    return helm if is_built(helm, HELM_VERSION) else None


def _versions(bins: Binaries) -> list[tuple[Path, str]]:
    k8s = control_plane_version()
    return [
        (bins.kube_apiserver, k8s),
        (bins.kube_controller_manager, k8s),
        (bins.kube_scheduler, k8s),
        (bins.kubectl, k8s),
        (bins.etcd, ETCD_VERSION),
        (bins.kwok, KWOK_VERSION),
        (bins.kwok_stages, kwok_stages_version()),
        (bins.helm, HELM_VERSION),
        *controllers.versions(bins),
    ]


def ensure_built(root: Path | None = None, out: TextIO | None = None) -> Binaries:
    """Build whatever is missing from the cache and return the paths of all binaries.

    Warm (everything stamped at the pinned versions) this returns at once without running
    go. Cold, it takes about 9 minutes on two cores for the control plane and about 1 more
    for the JobSet and LeaderWorkerSet controllers, which reuse the control plane's compiled
    packages (docs/decisions/023-controllers-share-the-kubernetes-build.md), and prints
    progress lines to ``out`` (default stderr). Raises :class:`BuildError` naming the
    component that failed.
    """
    root = (root or cache_dir()).expanduser().resolve()
    out = out or sys.stderr
    warm = built_binaries(root)
    if warm is not None:
        return warm
    with build_lock(root):
        bins = _layout(root)
        builder = Builder(root, out)
        _build_kubernetes(builder, bins)
        _build_etcd(builder, bins)
        _build_kwok(builder, bins)
        _build_helm(builder, bins)
        controllers.build(builder, bins)
    done = built_binaries(root)
    if done is None:  # pragma: no cover - each step above stamps its artifact or raises
        raise BuildError(f"build finished but artifacts under {root} are not all stamped")
    return done


_TOOLS_GO = """//go:build tools

// Package tools pins the kubernetes commands built from this wrapper module.
package tools

import (
{imports})
"""


def _build_kubernetes(builder: Builder, bins: Binaries) -> None:
    version = control_plane_version()
    targets = {
        "kube-apiserver": bins.kube_apiserver,
        "kube-controller-manager": bins.kube_controller_manager,
        "kube-scheduler": bins.kube_scheduler,
        "kubectl": bins.kubectl,
    }
    missing = {
        name: path for name, path in targets.items() if not is_built(path, version)
    }
    if not missing:
        return
    base = bins.kube_apiserver.parent.parent
    src = base / "src"
    src.mkdir(parents=True, exist_ok=True)
    bins.kube_apiserver.parent.mkdir(parents=True, exist_ok=True)
    if not (src / "go.sum").is_file():
        builder.say(
            f"preparing the kubernetes {version} wrapper module (downloads ~1.3 GB of modules when cold)…"
        )
        kdir = module_dir(builder, "kube-modules", f"k8s.io/kubernetes@{version}", src)
        (src / "go.mod").write_text(kubernetes_wrapper_go_mod((kdir / "go.mod").read_text(), version))
        imports = "".join(f'\t_ "k8s.io/kubernetes/cmd/{name}"\n' for name in KUBE_COMPONENTS)
        (src / "tools.go").write_text(_TOOLS_GO.format(imports=imports))
        builder.go(
            "kube-modules", ["mod", "tidy", "-e"], src, what="kubernetes module graph (go mod tidy)"
        )
    major, minor = version.removeprefix("v").split(".")[:2]
    xflags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        xflags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    ldflags = " ".join(["-s", "-w", *xflags])
    for name, path in missing.items():
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}")
        with builder.step(name, version):
            builder.go(
                name,
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    ldflags,
                    "-o",
                    str(tmp),
                    f"k8s.io/kubernetes/cmd/{name}",
                ],
                src,
                what=f"{name} {version}",
            )
        mark_built(tmp, path, version)


def _build_etcd(builder: Builder, bins: Binaries) -> None:
    if is_built(bins.etcd, ETCD_VERSION):
        return
    src = bins.etcd.parent.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    bins.etcd.parent.mkdir(parents=True, exist_ok=True)
    tmp = bins.etcd.with_name(f".etcd.tmp-{os.getpid()}")
    with builder.step("etcd", ETCD_VERSION):
        if not (src / "go.mod").is_file():
            (src / "go.mod").write_text("module troupe.local/etcd-wrapper\n\ngo 1.26\n")
        builder.go(
            "etcd",
            ["get", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}"],
            src,
            what=f"etcd {ETCD_VERSION} modules",
        )
        builder.go(
            "etcd",
            [
                "build",
                "-trimpath",
                "-ldflags",
                "-s -w",
                "-o",
                str(tmp),
                "go.etcd.io/etcd/server/v3",
            ],
            src,
            what=f"etcd {ETCD_VERSION}",
        )
    mark_built(tmp, bins.etcd, ETCD_VERSION)


def _go_install(builder: Builder, name: str, package: str, version: str, ldflags: str, target: Path) -> None:
    """``go install package@version`` into a private GOBIN, then move the binary to
    ``target`` and stamp it (so a killed build never leaves a finished-looking binary)."""
    base = target.parent.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    gobin = base / f".gobin.tmp-{os.getpid()}"
    gobin.mkdir(parents=True, exist_ok=True)
    try:
        builder.go(
            name,
            ["install", "-trimpath", "-ldflags", ldflags, f"{package}@{version}"],
            base,
            what=f"{name} {version}",
            extra_env={"GOBIN": str(gobin), "GOFLAGS": ""},
        )
        mark_built(gobin / name, target, version)
    finally:
        shutil.rmtree(gobin, ignore_errors=True)


def _build_kwok(builder: Builder, bins: Binaries) -> None:
    base = bins.kwok.parent.parent
    if not is_built(bins.kwok, KWOK_VERSION):
        with builder.step("kwok", KWOK_VERSION):
            _go_install(builder, "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION, "-s -w", bins.kwok)
    if not is_built(bins.kwok_stages, kwok_stages_version()):
        mod = module_dir(builder, "kwok", f"sigs.k8s.io/kwok@{KWOK_VERSION}", base)
        docs = []
        for rel in KWOK_STAGE_FILES:
            path = mod / rel
            if not path.is_file():
                raise BuildError(
                    f"kwok {KWOK_VERSION} module has no stage file {rel} (looked in {mod})"
                )
            docs.append(path.read_text().strip() + "\n")
        docs.append(KWOK_POD_STAGES.read_text().strip() + "\n")
        tmp = bins.kwok_stages.with_name(f".stages.tmp-{os.getpid()}")
        tmp.write_text("---\n".join(docs))
        mark_built(tmp, bins.kwok_stages, kwok_stages_version())


def helm_ldflags(helm_go_mod: str, version: str = HELM_VERSION) -> str:
    """The ``-ldflags`` of helm's own release build (its Makefile) for ``go install``.

    Without them ``helm version`` says ``v3.19`` and, worse, ``helm template`` and ``helm
    lint`` assume Kubernetes v1.20, so a chart with ``kubeVersion: >=1.30.0-0`` does not
    render. The Kubernetes version is the one helm's Makefile derives from the
    ``k8s.io/client-go`` version in its go.mod (``v0.34.0`` gives 1.34).

    >>> helm_ldflags("require (\\n\\tk8s.io/client-go v0.34.0\\n)", "v3.19.0").split()[2:4]
    ['-X', 'helm.sh/helm/v3/internal/version.version=v3.19.0']
    """
    client_go = [
        line.split()[1]
        for line in helm_go_mod.splitlines()
        if line.strip().startswith("k8s.io/client-go ")
    ]
    if not client_go:
        raise BuildError("helm's go.mod does not require k8s.io/client-go; cannot tell its Kubernetes version")
    major, minor = client_go[0].removeprefix("v").split(".")[:2]
    kube_major = str(int(major) + 1)
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}",
             "-X helm.sh/helm/v3/internal/version.gitTreeState=clean"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor={kube_major}", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def _build_helm(builder: Builder, bins: Binaries) -> None:
    if is_built(bins.helm, HELM_VERSION):
        return
    base = bins.helm.parent.parent
    base.mkdir(parents=True, exist_ok=True)
    with builder.step("helm", HELM_VERSION):
        mod = module_dir(builder, "helm", f"helm.sh/helm/v3@{HELM_VERSION}", base)
        ldflags = helm_ldflags((mod / "go.mod").read_text())
        _go_install(builder, "helm", "helm.sh/helm/v3/cmd/helm", HELM_VERSION, ldflags, bins.helm)
