"""``python -m devtools.release``: the local steps of a release (``make release-check``).

- ``versions``: the version is the same in every place that states one: pyproject.toml,
  charts/troupe/Chart.yaml (``version`` and ``appVersion``, which is the image's tag),
  ``troupe.__version__`` and ``kubectl troupe --version``; with ``--tag vX.Y.Z`` (the
  release workflow's tag) that too.
- ``chart DIST``: ``helm lint --strict`` and ``helm package`` of charts/troupe into DIST.
- ``artifacts DIST``: the wheel, the sdist and the chart in DIST carry that version and the
  distribution's name, and the wheel installs ``kubectl-troupe``.

Each exits non-zero with one line per problem. docs/decisions/036-install-and-release.md.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = Path("charts") / "troupe"
#: The wheel's and the sdist's file-name prefix for the distribution troupe-scheduler (PEP 427, 625).
DIST_PREFIX = "troupe_scheduler"


class ReleaseError(Exception):
    """A release step found a problem; the message says which and where."""


def stated_versions(repo: Path = REPO) -> dict[str, str]:
    """Where the version is stated -> that version, read from the files under ``repo`` (a
    checkout): pyproject.toml, Chart.yaml's version and appVersion, troupe/__init__.py's
    ``__version__`` (read, not imported) and what ``kubectl troupe --version`` prints when
    run on that checkout. Raises :class:`ReleaseError` when one cannot be read."""
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((repo / CHART / "Chart.yaml").read_text())
    module = ast.parse((repo / "troupe" / "__init__.py").read_text())
    dunder = [node.value.value for node in module.body if isinstance(node, ast.Assign)
              and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
              and isinstance(node.value, ast.Constant)]
    if not dunder:
        raise ReleaseError("troupe/__init__.py: no __version__ = '...'")
    plugin = subprocess.run([sys.executable, "-m", "reconciler.tools.plugin", "--version"], cwd=repo,
                            env=dict(os.environ, PYTHONPATH=str(repo)), capture_output=True, text=True,
                            timeout=60, check=False)
    printed = re.fullmatch(r"kubectl-troupe (\S+)\n?", plugin.stdout)
    if plugin.returncode != 0 or printed is None:
        raise ReleaseError(f"kubectl troupe --version: exit {plugin.returncode}, printed {plugin.stdout!r} "
                           f"{plugin.stderr.strip()[-300:]!r}")
    return {
        "pyproject.toml project.version": str(pyproject["version"]),
        f"{CHART}/Chart.yaml version": str(chart["version"]),
        f"{CHART}/Chart.yaml appVersion": str(chart["appVersion"]),
        "troupe/__init__.py __version__": str(dunder[0]),
        "kubectl troupe --version": printed.group(1),
    }


def version_mismatches(stated: dict[str, str], tag: str | None = None) -> list[str]:
    """One line per place whose version differs from pyproject.toml's (the first of
    ``stated``), and for a ``tag`` that is not ``v`` plus that version; [] when all agree."""
    (source, version), *others = stated.items()
    lines = [f"{where}: {found}, but {source} says {version}" for where, found in others if found != version]
    if tag is not None and tag != f"v{version}":
        lines.append(f"tag {tag}: the release of version {version} is tagged v{version}")
    return lines


def package_chart(dist: Path, helm: Path, repo: Path = REPO) -> Path:
    """``helm lint --strict`` (for the Kubernetes release the suite runs: helm's own default,
    v1.34 for helm v3.19, is older than the chart's ``kubeVersion``) then ``helm package`` of
    the chart into ``dist``; returns the package. Raises :class:`ReleaseError` with helm's
    output when either fails."""
    from devtools.devcluster.toolchain import KUBERNETES_VERSION

    for args in (["lint", "--strict", str(repo / CHART), "--kube-version", KUBERNETES_VERSION],
                 ["package", str(repo / CHART), "-d", str(dist)]):
        result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise ReleaseError(f"helm {args[0]}: {(result.stdout + result.stderr).strip()}")
    version = yaml.safe_load((repo / CHART / "Chart.yaml").read_text())["version"]
    return dist / f"troupe-{version}.tgz"


def artifact_problems(dist: Path, version: str) -> list[str]:
    """One line per problem with the artifacts of ``version`` in ``dist``: the wheel
    (name, version, the ``kubectl-troupe`` console script), the sdist and the chart."""
    problems = []
    wheel = dist / f"{DIST_PREFIX}-{version}-py3-none-any.whl"
    if not wheel.exists():
        return [f"{wheel}: missing (found {sorted(p.name for p in dist.iterdir())})"]
    with zipfile.ZipFile(wheel) as archive:
        info = f"{DIST_PREFIX}-{version}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    for field, want in (("Name", "troupe-scheduler"), ("Version", version)):
        if f"\n{field}: {want}\n" not in metadata:
            problems.append(f"{wheel.name}: METADATA has no {field}: {want}")
    if not re.search(r"^kubectl-troupe\s*=\s*reconciler\.tools\.plugin:main$", entry_points, flags=re.M):
        problems.append(f"{wheel.name}: no console script kubectl-troupe = reconciler.tools.plugin:main")
    sdist = dist / f"{DIST_PREFIX}-{version}.tar.gz"
    if not sdist.exists():
        problems.append(f"{sdist}: missing")
    chart = dist / f"troupe-{version}.tgz"
    if not chart.exists():
        problems.append(f"{chart}: missing")
    else:
        with tarfile.open(chart) as packaged:
            member = packaged.extractfile("troupe/Chart.yaml")
            packaged_chart = yaml.safe_load(member.read() if member else b"{}")
        if (packaged_chart["version"], packaged_chart["appVersion"]) != (version, version):
            problems.append(f"{chart.name}: Chart.yaml version {packaged_chart['version']}, appVersion "
                            f"{packaged_chart['appVersion']}")
    return problems


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    versions = sub.add_parser("versions", help="the version is the same everywhere")
    versions.add_argument("--tag", help="the release's git tag, vX.Y.Z")
    chart = sub.add_parser("chart", help="lint and package the chart into DIST")
    chart.add_argument("dist", type=Path)
    chart.add_argument("--helm", type=Path, help="the helm binary (default: the one make cluster-build builds)")
    artifacts = sub.add_parser("artifacts", help="check the wheel, the sdist and the chart in DIST")
    artifacts.add_argument("dist", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one step; returns the exit code (1 with the problems on stderr)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "versions":
            stated = stated_versions()
            problems = version_mismatches(stated, args.tag)
            if not problems:
                print(f"version {next(iter(stated.values()))} in: {', '.join(stated)}")
        elif args.command == "chart":
            from devtools.devcluster.build import built_helm

            helm = args.helm or built_helm()
            if helm is None:
                raise ReleaseError("helm is not built: run `make cluster-build`, or pass --helm")
            args.dist.mkdir(parents=True, exist_ok=True)
            print(f"chart: {package_chart(args.dist, helm)}")
            problems = []
        else:
            version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
            problems = artifact_problems(args.dist, version)
            if not problems:
                print(f"artifacts of {version} in {args.dist}: " + ", ".join(sorted(p.name for p in args.dist.iterdir())))
    except ReleaseError as e:
        problems = [str(e)]
    for line in problems:
        print(f"release: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
