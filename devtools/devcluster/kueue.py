"""Kueue, the quota manager Troupe is tested beside, built from its Go module.

Kueue (``sigs.k8s.io/kueue``) is built like the workload controllers (:mod:`.controllers`:
cached by version, stamped, progress printed, under the build lock) with its CRDs and
webhook configurations taken from the module zip; :mod:`.quota` runs it on a cluster
(docs/decisions/058-kueue-for-quota.md). Only the suite needs it, not the demo or a
cluster for development: like promtool, ``python -m devtools.devcluster build`` (``make
cluster-build``, which ``make test`` runs first) builds it, and :func:`ensure_kueue` builds
it where it is still missing.

Unlike the JobSet and LeaderWorkerSet controllers it is built in its own module graph, as
released (its go.mod and go.sum: k8s.io/* v0.36.2, controller-runtime v0.24.1, JobSet
v0.12.0, LeaderWorkerSet v0.9.0): the controllers' wrapper module pins older JobSet and
LeaderWorkerSet modules than Kueue requires, and the one binary is compiled once per cache.

Cache layout (under :func:`devtools.devcluster.toolchain.cache_dir`)::

    kueue-v0.19.2/src/             a writable copy of the module, patched (:data:`METRICS_CERT_PATCH`),
                                   while ``go build ./cmd/kueue`` runs there
    kueue-v0.19.2/bin/kueue        the manager
    kueue-v0.19.2/crds.yaml        config/components/crd/bases/*.yaml of the module, as served
                                   (no conversion webhook: every object is written and read at
                                   the storage version, v1beta2)
    kueue-v0.19.2/webhooks.yaml    config/components/webhook/manifests.yaml

This module imports only :mod:`.toolchain` and :mod:`.controllers` (the module copy).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from devtools.devcluster.controllers import build_patched_module
from devtools.devcluster.toolchain import (
    Builder,
    BuildError,
    build_lock,
    cache_dir,
    is_built,
    mark_built,
    module_dir,
)

KUEUE_VERSION = "v0.19.2"
KUEUE_MODULE = "sigs.k8s.io/kueue"
#: The manager's package, relative to the module.
KUEUE_PACKAGE = "./cmd/kueue"
#: The CRDs of the module's ``config/components/crd/kustomization.yaml``, every one the
#: manager may watch (its informers wait for each kind it sets up).
KUEUE_CRD_FILES = tuple(
    f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
    for plural in ("localqueues", "clusterqueues", "cohorts", "workloads", "resourceflavors", "admissionchecks",
                   "workloadpriorityclasses", "provisioningrequestconfigs", "multikueueconfigs",
                   "multikueueclusters", "topologies")
)
KUEUE_WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"
#: The one change made to Kueue's source before it is built: with internal certificate
#: management off, its manager reads the metrics server's certificate from the fixed path
#: ``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``), outside anything a test may write;
#: the patched manager takes the directory from :data:`METRICS_CERT_DIR_ENV` when it is set.
METRICS_CERT_LINE = 'metricsCertPath := "/etc/kueue/metrics/certs"'
METRICS_CERT_DIR_ENV = "KUEUE_METRICS_CERT_DIR"
METRICS_CERT_PATCH = (f'{METRICS_CERT_LINE}; if dir := os.Getenv("{METRICS_CERT_DIR_ENV}"); dir != "" '
                      "{ metricsCertPath = dir }")
#: What the manager's stamp records: the version and the patch, so that a change of either
#: rebuilds it.
KUEUE_BINARY_VERSION = f"{KUEUE_VERSION} +{METRICS_CERT_DIR_ENV}"
#: apiVersion of the manager's Configuration file.
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
#: The API version of Kueue's objects the tests write (the CRDs' storage version).
KUEUE_API = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class KueueBuild:
    """The paths of the built manager (``binary``) and of its manifests (``crds``,
    ``webhooks``)."""

    binary: Path
    crds: Path
    webhooks: Path


def kueue_paths(root: Path | None = None) -> KueueBuild:
    """Where the cached manager and its manifests are (built or not)."""
    base = (root or cache_dir()) / f"kueue-{KUEUE_VERSION}"
    return KueueBuild(base / "bin" / "kueue", base / "crds.yaml", base / "webhooks.yaml")


def versions(paths: KueueBuild) -> list[tuple[Path, str]]:
    """Each artifact with the version its stamp must record."""
    return [(paths.binary, KUEUE_BINARY_VERSION), (paths.crds, KUEUE_VERSION), (paths.webhooks, KUEUE_VERSION)]


def built_kueue(root: Path | None = None) -> KueueBuild | None:
    """The cached manager and manifests if all are stamped at their versions, else None."""
    paths = kueue_paths(root)
    return paths if all(is_built(path, version) for path, version in versions(paths)) else None


def ensure_kueue(root: Path | None = None, out: TextIO | None = None) -> KueueBuild:
    """Build the manager and extract its manifests unless they are in the cache (under the
    cache's build lock, so two test workers never build it at once); their paths. Warm:
    no go command runs. Raises :class:`~devtools.devcluster.toolchain.BuildError` naming
    what failed."""
    root = (root or cache_dir()).expanduser().resolve()
    warm = built_kueue(root)
    if warm is not None:
        return warm
    with build_lock(root):
        build(Builder(root, out or sys.stderr), kueue_paths(root))
    return kueue_paths(root)


def patch_metrics_cert_dir(src: Path) -> None:
    """Make the manager in the module copy ``src`` read its metrics certificate from
    ``$KUEUE_METRICS_CERT_DIR`` when set (:data:`METRICS_CERT_PATCH`). Raises
    :class:`~devtools.devcluster.toolchain.BuildError` naming the file when the line to
    patch is not there exactly once (a Kueue release that moved it: patch it anew)."""
    main = src / "cmd" / "kueue" / "main.go"
    text = main.read_text() if main.is_file() else ""
    if text.count(METRICS_CERT_LINE) != 1:
        raise BuildError(f"{main} of {KUEUE_MODULE}@{KUEUE_VERSION} does not hold {METRICS_CERT_LINE!r} exactly once "
                         "(its metrics certificate path moved: patch it anew)")
    main.write_text(text.replace(METRICS_CERT_LINE, METRICS_CERT_PATCH))


def _concat(paths: list[Path]) -> str:
    return "---\n".join(p.read_text().strip() + "\n" for p in paths)


def build(builder: Builder, paths: KueueBuild) -> None:
    """Build the manager and extract its manifests into ``paths`` where missing
    (:func:`ensure_kueue` calls it under the build lock). Cold, about 10 minutes on two
    loaded cores (590 s measured; its k8s.io libraries are not the control plane's); warm,
    nothing runs. Raises :class:`~devtools.devcluster.toolchain.BuildError` naming what
    failed or what the module lacks."""
    base = paths.binary.parent.parent
    base.mkdir(parents=True, exist_ok=True)
    module = f"{KUEUE_MODULE}@{KUEUE_VERSION}"
    build_patched_module(builder, "kueue", KUEUE_MODULE, KUEUE_VERSION, KUEUE_PACKAGE, paths.binary,
                         KUEUE_BINARY_VERSION, patch_metrics_cert_dir)
    if is_built(paths.crds, KUEUE_VERSION) and is_built(paths.webhooks, KUEUE_VERSION):
        return
    mod = module_dir(builder, "kueue", module, base)
    absent = [f for f in (*KUEUE_CRD_FILES, KUEUE_WEBHOOK_MANIFESTS) if not (mod / f).is_file()]
    if absent:
        raise BuildError(f"{module} has no {', '.join(absent)} (looked in {mod})")
    tmp = paths.crds.with_name(f".crds.tmp-{os.getpid()}")
    tmp.write_text(_concat([mod / f for f in KUEUE_CRD_FILES]))
    mark_built(tmp, paths.crds, KUEUE_VERSION)
    tmp = paths.webhooks.with_name(f".webhooks.tmp-{os.getpid()}")
    tmp.write_text((mod / KUEUE_WEBHOOK_MANIFESTS).read_text())
    mark_built(tmp, paths.webhooks, KUEUE_VERSION)
