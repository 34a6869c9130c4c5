"""Kueue, the quota manager Troupe is tested beside, built from its Go module.

Kueue (``sigs.k8s.io/kueue``) is built like the workload controllers (:mod:`.controllers`:
cached by version, stamped, progress printed, under the build lock) with its CRDs and
webhook configurations taken from the module zip; :mod:`.quota` runs it on a cluster
(docs/decisions/058-kueue-for-quota.md).

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

This module imports only :mod:`.toolchain` and :mod:`.controllers` (the module copy);
:mod:`.build` calls :func:`layout`, :func:`versions` and :func:`build`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from devtools.devcluster.controllers import copy_module
from devtools.devcluster.toolchain import (
    Binaries,
    Builder,
    BuildError,
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


def layout(root: Path) -> dict[str, Path]:
    """The cache paths of the manager and its manifests, as fields of
    :class:`~devtools.devcluster.toolchain.Binaries`."""
    base = root / f"kueue-{KUEUE_VERSION}"
    return {"kueue": base / "bin" / "kueue", "kueue_crds": base / "crds.yaml", "kueue_webhooks": base / "webhooks.yaml"}


def versions(bins: Binaries) -> list[tuple[Path, str]]:
    """Each artifact with the version its stamp must record."""
    return [(bins.kueue, KUEUE_BINARY_VERSION), (bins.kueue_crds, KUEUE_VERSION),
            (bins.kueue_webhooks, KUEUE_VERSION)]


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


def build(builder: Builder, bins: Binaries) -> None:
    """Build the manager and extract its manifests where missing (called by
    :func:`~devtools.devcluster.build.ensure_built` under the build lock). Cold, about 10
    minutes on two loaded cores (590 s measured; its k8s.io libraries are not the control
    plane's); warm, nothing runs. Raises :class:`~devtools.devcluster.toolchain.BuildError` naming what failed or
    what the module lacks."""
    base = bins.kueue.parent.parent
    base.mkdir(parents=True, exist_ok=True)
    module = f"{KUEUE_MODULE}@{KUEUE_VERSION}"
    if not is_built(bins.kueue, KUEUE_BINARY_VERSION):
        with builder.step("kueue", KUEUE_VERSION):
            mod = module_dir(builder, "kueue", module, base)
            src = base / "src"
            copy_module(mod, src)  # the module cache is read-only
            patch_metrics_cert_dir(src)
            bins.kueue.parent.mkdir(parents=True, exist_ok=True)
            tmp = bins.kueue.with_name(f".kueue.tmp-{os.getpid()}")
            try:
                builder.go("kueue", ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), KUEUE_PACKAGE],
                           src, what=f"kueue {KUEUE_VERSION}")
                mark_built(tmp, bins.kueue, KUEUE_BINARY_VERSION)
            finally:
                tmp.unlink(missing_ok=True)
            shutil.rmtree(src, ignore_errors=True)
    if is_built(bins.kueue_crds, KUEUE_VERSION) and is_built(bins.kueue_webhooks, KUEUE_VERSION):
        return
    mod = module_dir(builder, "kueue", module, base)
    absent = [f for f in (*KUEUE_CRD_FILES, KUEUE_WEBHOOK_MANIFESTS) if not (mod / f).is_file()]
    if absent:
        raise BuildError(f"{module} has no {', '.join(absent)} (looked in {mod})")
    tmp = bins.kueue_crds.with_name(f".crds.tmp-{os.getpid()}")
    tmp.write_text(_concat([mod / f for f in KUEUE_CRD_FILES]))
    mark_built(tmp, bins.kueue_crds, KUEUE_VERSION)
    tmp = bins.kueue_webhooks.with_name(f".webhooks.tmp-{os.getpid()}")
    tmp.write_text((mod / KUEUE_WEBHOOK_MANIFESTS).read_text())
    mark_built(tmp, bins.kueue_webhooks, KUEUE_VERSION)
