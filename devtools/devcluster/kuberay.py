"""KubeRay's operator, built from its Go module with its CRDs.

The operator (``github.com/ray-project/kuberay/ray-operator``, whose main package is the
module's root) is built like kube-state-metrics (:mod:`.ecosystem`): a wrapper module next
to the binary, ``go get`` of the exact version (``go install module@version`` asks the
module proxy for the version list, which it refuses here), then ``go build``; in the
operator's own module graph, as released (k8s.io/* v0.34.1, controller-runtime v0.22.1:
that controller-runtime does not compile against the control plane's client-go, see
docs/decisions/023-controllers-share-the-kubernetes-build.md, point 2). Cached by version,
stamped and built under the cache's build lock like the other controllers (:mod:`.kueue`);
its CRDs are taken from the module zip; :func:`ensure_kuberay_crds` extracts them alone, for
the reconciler's informers, without building the operator. Only the suite needs it: ``python -m
devtools.devcluster build`` (``make cluster-build``, which ``make test`` runs first) builds
it, and :func:`ensure_kuberay` builds it where it is still missing
(docs/decisions/076-kuberay-in-tests.md).

Cache layout (under :func:`devtools.devcluster.toolchain.cache_dir`)::

    kuberay-v1.5.0/src/               the wrapper module (go.mod, go.sum)
    kuberay-v1.5.0/bin/ray-operator   go build github.com/ray-project/kuberay/ray-operator
    kuberay-v1.5.0/crds.yaml          config/crd/bases/ray.io_{rayclusters,rayjobs,rayservices}.yaml

:mod:`.rayoperator` runs it on a cluster. This module imports only :mod:`.toolchain`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from devtools.devcluster.toolchain import (
    Builder,
    BuildError,
    build_lock,
    cache_dir,
    is_built,
    mark_built,
    module_dir,
)

#: The KubeRay release built (the Go module's version, tag ``ray-operator/v1.5.0``).
KUBERAY_VERSION = "v1.5.0"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
#: The CRDs of the module (``config/crd/bases``): the operator's three controllers each
#: watch their kind, and its manager stops when a watched kind is not served.
KUBERAY_CRD_FILES = tuple(f"config/crd/bases/ray.io_{plural}.yaml" for plural in ("rayclusters", "rayjobs", "rayservices"))
#: The CRDs' names, as ``kubectl wait crd/<name>`` takes them.
KUBERAY_CRDS = tuple(path.rsplit("_", 1)[1].removesuffix(".yaml") + ".ray.io" for path in KUBERAY_CRD_FILES)
#: The API version of KubeRay's objects the tests write.
RAY_API = "ray.io/v1"


@dataclass(frozen=True)
class KubeRayBuild:
    """The paths of the built operator (``binary``) and of its CRDs (``crds``)."""

    binary: Path
    crds: Path


def kuberay_paths(root: Path | None = None) -> KubeRayBuild:
    """Where the cached operator and its CRDs are (built or not)."""
    base = (root or cache_dir()) / f"kuberay-{KUBERAY_VERSION}"
    return KubeRayBuild(base / "bin" / "ray-operator", base / "crds.yaml")


def versions(paths: KubeRayBuild) -> list[tuple[Path, str]]:
    """Each artifact with the version its stamp must record (:data:`KUBERAY_VERSION`)."""
    return [(paths.binary, KUBERAY_VERSION), (paths.crds, KUBERAY_VERSION)]


def built_kuberay(root: Path | None = None) -> KubeRayBuild | None:
    """The cached operator and CRDs if both are stamped at :data:`KUBERAY_VERSION`, else None."""
    paths = kuberay_paths(root)
    return paths if all(is_built(path, version) for path, version in versions(paths)) else None


def ensure_kuberay(root: Path | None = None, out: TextIO | None = None) -> KubeRayBuild:
    """Build the operator and extract its CRDs unless they are in the cache (under the
    cache's build lock, so two test workers never build it at once); their paths. Warm: no
    go command runs. Raises :class:`~devtools.devcluster.toolchain.BuildError` naming what
    failed."""
    root = (root or cache_dir()).expanduser().resolve()
    warm = built_kuberay(root)
    if warm is not None:
        return warm
    _locked_build(root, out, binary=True)
    return kuberay_paths(root)


def ensure_kuberay_crds(root: Path | None = None, out: TextIO | None = None) -> Path:
    """The cached ``crds.yaml``, extracted from the module zip first where missing (a
    ``go mod download``, seconds; the operator itself is not built): what the reconciler's
    informers need to find the Ray kinds from their start. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` naming what failed."""
    root = (root or cache_dir()).expanduser().resolve()
    paths = kuberay_paths(root)
    if not is_built(paths.crds, KUBERAY_VERSION):
        _locked_build(root, out, binary=False)
    return paths.crds


def _locked_build(root: Path, out: TextIO | None, *, binary: bool) -> None:
    with build_lock(root):
        build(Builder(root, out or sys.stderr), kuberay_paths(root), binary=binary)


def build(builder: Builder, paths: KubeRayBuild, *, binary: bool = True) -> None:
    """Build the operator (unless ``binary`` is false) and extract its CRDs into ``paths``
    where missing (:func:`ensure_kuberay` calls it under the build lock); warm, nothing
    runs. Cold (an empty ``kuberay-v1.5.0``, the Go module cache warm), 6.9 minutes
    measured on two cores loaded by other builds: 20 s of ``go get``, 390 s of ``go build``
    (3.8 CPU minutes). Raises
    :class:`~devtools.devcluster.toolchain.BuildError` naming what failed or what the
    module lacks."""
    base = paths.binary.parent.parent
    src = base / "src"
    src.mkdir(parents=True, exist_ok=True)
    module = f"{KUBERAY_MODULE}@{KUBERAY_VERSION}"
    if binary and not is_built(paths.binary, KUBERAY_VERSION):
        with builder.step("kuberay", KUBERAY_VERSION):
            if not (src / "go.mod").is_file():
                (src / "go.mod").write_text("module troupe.local/kuberay-wrapper\n\ngo 1.26\n")
            builder.go("kuberay", ["get", module], src, what=f"kuberay {KUBERAY_VERSION} modules")
            paths.binary.parent.mkdir(parents=True, exist_ok=True)
            tmp = paths.binary.with_name(f".ray-operator.tmp-{os.getpid()}")
            try:
                builder.go("kuberay", ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), KUBERAY_MODULE],
                           src, what=f"kuberay {KUBERAY_VERSION}")
                mark_built(tmp, paths.binary, KUBERAY_VERSION)
            finally:
                tmp.unlink(missing_ok=True)
    if is_built(paths.crds, KUBERAY_VERSION):
        return
    mod = module_dir(builder, "kuberay", module, src)
    absent = [f for f in KUBERAY_CRD_FILES if not (mod / f).is_file()]
    if absent:
        raise BuildError(f"{module} has no {', '.join(absent)} (looked in {mod})")
    tmp = paths.crds.with_name(f".crds.tmp-{os.getpid()}")
    tmp.write_text("---\n".join((mod / f).read_text().strip() + "\n" for f in KUBERAY_CRD_FILES))
    mark_built(tmp, paths.crds, KUBERAY_VERSION)

