"""Prometheus' ``promtool``, built once into the cache: the chart's alerting rules are checked
and unit-tested with it (tests/chart/test_alerts.py).

Layout under :func:`~devtools.devcluster.toolchain.cache_dir`::

    promtool-v0.307.3/bin/promtool    Prometheus 3.7.3's promtool
    promtool-v0.307.3/src/            wrapper module (go.mod, go.sum)

``go install github.com/prometheus/prometheus/cmd/promtool@VERSION`` is refused: the
prometheus module's go.mod has ``exclude`` directives, which ``go install pkg@version``
does not accept. So, as for etcd, a wrapper module requires the prometheus module (its
Go module versions are ``v0.<major><minor>.<patch>``: ``v0.307.3`` is Prometheus 3.7.3) and
``go build`` makes the command from it. Cold: about 15-20 minutes on two busy cores (many modules);
warm: instant. ``python -m devtools.devcluster build`` (``make cluster-build``, which
``make test`` runs first) builds it with the control plane, so a fresh machine gets it.

Imports: :mod:`.toolchain` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from devtools.devcluster.toolchain import ensure_wrapped_tool, is_built, wrapped_tool_path

#: The Go module version of the prometheus module whose promtool is built (Prometheus 3.7.3).
PROMTOOL_VERSION = "v0.307.3"
PACKAGE = "github.com/prometheus/prometheus/cmd/promtool"


def promtool_path(root: Path | None = None) -> Path:
    """Where the cached promtool is (built or not)."""
    return wrapped_tool_path("promtool", PROMTOOL_VERSION, root)


def built_promtool(root: Path | None = None) -> Path | None:
    """The cached promtool if it is built at :data:`PROMTOOL_VERSION`, else None."""
    path = promtool_path(root)
    return path if is_built(path, PROMTOOL_VERSION) else None


def ensure_promtool(root: Path | None = None, out: TextIO | None = None) -> Path:
    """Build promtool into the cache unless it is there; its path. Raises
    :class:`~devtools.devcluster.toolchain.BuildError` with go's output when the build fails."""
    return ensure_wrapped_tool("promtool", PACKAGE, PROMTOOL_VERSION, root, out)
