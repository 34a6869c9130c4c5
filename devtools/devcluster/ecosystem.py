"""The tools the Gang object's ecosystem glue is tested with, built once into the cache:
kube-state-metrics (its custom resource state metrics read charts/troupe/files/
kube-state-metrics/gangs.yaml) and ``gangcheck`` (tests/ecosystem/gangcheck: kstatus'
``status.Compute`` and Argo CD's way of running a Lua health script); and krew, which
tests/plugin/test_krew_install.py installs the plugin's archive with.

Layout under :func:`~devtools.devcluster.toolchain.cache_dir`::

    kube-state-metrics-v2.20.0/bin/kube-state-metrics
    kube-state-metrics-v2.20.0/src/            wrapper module (go.mod, go.sum)
    gangcheck-<key>/bin/gangcheck              key: a hash of the module's files
    krew-v0.4.3/bin/krew                       kubectl's plugin manager (sigs.k8s.io/krew)

kube-state-metrics is built from a wrapper module (``go get`` then ``go build``), as
promtool is: ``go install k8s.io/kube-state-metrics/v2@VERSION`` asks the module proxy for
the module's version list, which it refuses for this module, and ``go get`` of an exact
version does not. Measured on two cores with empty module and build caches: 37 s of
downloads and 3.5 minutes of compiling (2.3 minutes in all with the control plane's modules
and packages already cached), 10 s with the packages compiled, instant once built. gangcheck
is built from its own module in the repository, with its committed go.sum
(``-mod=readonly``): about a minute with empty caches, 17 s with the control plane's. ``python -m
devtools.devcluster build`` (``make cluster-build``, run first by ``make test``) builds both;
the tests build them on first use otherwise. krew is built as kube-state-metrics is: about
25 s with empty caches (its modules are few), instant once built.

Imports: :mod:`.toolchain` only.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TextIO

from devtools.devcluster.toolchain import (
    Builder,
    cache_dir,
    ensure_wrapped_tool,
    is_built,
    mark_built,
    wrapped_tool_path,
)

#: The kube-state-metrics release built (its Go module's version).
KSM_VERSION = "v2.20.0"
KSM_PACKAGE = "k8s.io/kube-state-metrics/v2"
#: The krew release built (its Go module's version) and its command's package.
KREW_VERSION = "v0.4.3"
KREW_PACKAGE = "sigs.k8s.io/krew/cmd/krew"
#: The module of gangcheck, in the repository.
GANGCHECK_SRC = Path(__file__).resolve().parents[2] / "tests" / "ecosystem" / "gangcheck"


def ksm_path(root: Path | None = None) -> Path:
    """Where the cached kube-state-metrics is (built or not)."""
    return wrapped_tool_path("kube-state-metrics", KSM_VERSION, root)


def built_ksm(root: Path | None = None) -> Path | None:
    """The cached kube-state-metrics if it is built at :data:`KSM_VERSION`, else None."""
    path = ksm_path(root)
    return path if is_built(path, KSM_VERSION) else None


def ensure_ksm(root: Path | None = None, out: TextIO | None = None) -> Path:
    """Build kube-state-metrics into the cache unless it is there; its path. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` with go's output when the build fails."""
    return ensure_wrapped_tool("kube-state-metrics", KSM_PACKAGE, KSM_VERSION, root, out)


def ensure_krew(root: Path | None = None, out: TextIO | None = None) -> Path:
    """Build krew into the cache unless it is there; its path. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` with go's output when the build fails."""
    return ensure_wrapped_tool("krew", KREW_PACKAGE, KREW_VERSION, root, out)


def gangcheck_key(src: Path = GANGCHECK_SRC) -> str:
    """The version of gangcheck: the first 12 hex digits of a hash of its module's files
    (go.mod, go.sum and the Go sources), so any change builds it again."""
    digest = hashlib.sha256()
    for path in sorted(p for p in src.iterdir() if p.name in ("go.mod", "go.sum") or p.suffix == ".go"):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def gangcheck_path(root: Path | None = None) -> Path:
    """Where the cached gangcheck of the present sources is (built or not)."""
    return (root or cache_dir()) / f"gangcheck-{gangcheck_key()}" / "bin" / "gangcheck"


def ensure_gangcheck(root: Path | None = None, out: TextIO | None = None) -> Path:
    """Build gangcheck from tests/ecosystem/gangcheck into the cache unless the present
    sources' build is there; its path. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` when the build fails."""
    root = (root or cache_dir()).expanduser().resolve()
    key = gangcheck_key()
    target = gangcheck_path(root)
    if is_built(target, key):
        return target
    builder = Builder(root, out or sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".gangcheck.tmp-{os.getpid()}")
    with builder.step("gangcheck", key):
        builder.go("gangcheck", ["build", "-trimpath", "-o", str(tmp), "."], GANGCHECK_SRC,
                   what="gangcheck", extra_env={"GOFLAGS": "-mod=readonly"})
    mark_built(tmp, target, key)
    return target
