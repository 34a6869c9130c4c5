"""Run the helm binary that ``python -m devtools.devcluster build`` built, on charts/troupe."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from devtools.devcluster.build import HELM_VERSION, KUBERNETES_VERSION, built_helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "troupe"
RELEASE = "troupe"
NAMESPACE = "troupe-system"

#: Why the chart tests are skipped when helm is missing (``make test`` builds it first).
NOT_BUILT = (
    f"helm {HELM_VERSION} is not built; build it with `python -m devtools.devcluster build` "
    "(or `make cluster-build`)"
)


class HelmFailed(Exception):
    """helm exited non-zero; the message is its output (lint reports findings on stdout)."""


def helm(*args: str, binary: Path | None = None) -> str:
    """Run ``helm ARGS`` and return stdout; raise :class:`HelmFailed` with its output on failure.

    helm's cache, configuration and data directories are a throwaway directory, so the
    user's own helm setup neither leaks in nor gets written to. ``template`` and ``lint``
    render for the Kubernetes release the suite runs (``--kube-version``, unless given):
    without a cluster helm assumes the release its own libraries are (v1.34 for helm
    v3.19), which the chart's ``kubeVersion`` (``>=1.36.0-0``) refuses.
    """
    if args and args[0] in ("template", "lint") and "--kube-version" not in args:
        args = (*args, "--kube-version", KUBERNETES_VERSION)
    path = binary or built_helm()
    if path is None:
        raise RuntimeError(NOT_BUILT)
    with tempfile.TemporaryDirectory(prefix="troupe-helm-") as home:
        env = dict(os.environ, HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config",
                   HELM_DATA_HOME=f"{home}/data")
        env.pop("KUBECONFIG", None)
        result = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60, check=False,
                                env=env)
    if result.returncode != 0:
        raise HelmFailed("\n".join(s.strip() for s in (result.stdout, result.stderr) if s.strip()))
    return result.stdout


def template(
    *values: str, release: str = RELEASE, namespace: str = NAMESPACE, binary: Path | None = None
) -> str:
    """``helm template`` of the chart; ``values`` are extra flags (``--set`` / ``-f``)."""
    return helm("template", release, str(CHART), "--namespace", namespace, *values, binary=binary)


def render(*values: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The rendered objects, parsed."""
    return [doc for doc in yaml.safe_load_all(template(*values, release=release, namespace=namespace)) if doc]


def one(objects: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``, if given) among ``objects``."""
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def notes(*values: str, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    """The chart's NOTES (what ``helm install`` prints after installing), rendered with
    ``values`` and no cluster.

    ``helm template`` never renders ``templates/NOTES.txt``, and ``helm install --dry-run``
    needs a reachable cluster, so this renders a copy of the chart in which NOTES.txt is the
    body of a named template that one ConfigMap includes; lookups find nothing, as with
    ``helm template``. Raises :class:`HelmFailed` as :func:`template` does.
    """
    with tempfile.TemporaryDirectory(prefix="troupe-notes-") as tmp:
        chart = Path(tmp) / CHART.name
        shutil.copytree(CHART, chart)
        body = (chart / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "_notes.tpl").write_text('{{- define "notes.text" -}}\n' + body + "{{- end -}}\n")
        (chart / "templates" / "notes.yaml").write_text(
            'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata: {notes: {{ include "notes.text" . | toJson }}}\n')
        out = helm("template", release, str(chart), "--namespace", namespace, "--show-only", "templates/notes.yaml",
                   *values)
    return str(yaml.safe_load(out)["data"]["notes"])
