"""``python -m devtools.krew``: ``kubectl troupe`` as krew installs it (``make plugin``).

- ``build [--dist DIST]``: the plugin as one executable with its Python inside, made by
  PyInstaller (https://pyinstaller.org) from the environment it runs in, for the platform it
  runs on (PyInstaller builds for no other); packed as krew's archive
  ``DIST/kubectl-troupe-<os>-<arch>.tar.gz`` (``kubectl-troupe`` and ``LICENSE``), then
  ``manifest``.
- ``manifest [--dist DIST]``: ``DIST/troupe.yaml``, the krew manifest plugins/troupe.yaml with
  the sha256 of each platform's archive found in DIST; platforms without one are left out. The
  release workflow runs it over the four archives it built.

The executable carries what the plugin imports and nothing else
(docs/decisions/055-plugin-executable.md): PyInstaller follows the imports of
reconciler.tools.plugin, and :data:`EXCLUDED` drops what those reach but the plugin never
runs (the servers, the Kubernetes client's asyncio half, the development tools of a
developer's environment).
Exits 1 with one line when a step fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
#: The executable's name: kubectl runs ``kubectl-<name>`` on the PATH as ``kubectl <name>``.
NAME = "kubectl-troupe"
MANIFEST = REPO / "plugins" / "troupe.yaml"
LICENSE = REPO / "LICENSE"
#: Reached by the plugin's imports but never run by it, so not in the executable: Troupe's
#: servers (the webhook's WSGI stack), the Kubernetes client's asyncio client (kubernetes.aio
#: and aiohttp with its parts) and tools a developer's environment has that lark, pendulum and
#: the rest import when they find them (a release builds from requirements.lock, without them).
EXCLUDED = (
    "flask", "werkzeug", "jinja2", "itsdangerous", "click", "gunicorn", "h11",
    "webhook.server", "webhook.worker", "webhook.app", "webhook.wsgi",
    "kubernetes.aio", "aiohttp", "aiohttp_retry", "aiosignal", "aiohappyeyeballs", "frozenlist",
    "multidict", "yarl", "propcache",
    "mypy", "hypothesis", "pytest", "_pytest", "pygments", "rich", "IPython", "tkinter",
)
#: krew's names of the platforms (its manifest's ``os`` and ``arch`` labels, Go's GOOS/GOARCH)
#: from Python's ``platform.system()`` and ``platform.machine()``.
OS_NAMES = {"Linux": "linux", "Darwin": "darwin"}
ARCH_NAMES = {"x86_64": "amd64", "AMD64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class KrewError(Exception):
    """A step of the plugin's build failed; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Build:
    """What :func:`build` made: the archive, the manifest naming its sha256 (hex), the
    executable's size in bytes and the seconds the whole build took."""

    archive: Path
    manifest: Path
    sha256: str
    executable_bytes: int
    seconds: float


def this_platform(system: str | None = None, machine: str | None = None) -> tuple[str, str]:
    """``(os, arch)`` in krew's terms for this machine (or the given ``platform.system()`` and
    ``platform.machine()``). Raises :class:`KrewError` for a platform the plugin is not built for.

    >>> this_platform("Linux", "aarch64")
    ('linux', 'arm64')
    """
    system = system or platform.system()
    machine = machine or platform.machine()
    if system not in OS_NAMES or machine not in ARCH_NAMES:
        raise KrewError(f"no krew build for platform {system}/{machine}: only linux and darwin, amd64 and arm64")
    return OS_NAMES[system], ARCH_NAMES[machine]


def archive_name(os_name: str, arch: str) -> str:
    """The release asset of a platform: ``kubectl-troupe-<os>-<arch>.tar.gz``."""
    return f"{NAME}-{os_name}-{arch}.tar.gz"


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes, hex, as krew checks an archive."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_executable(work: Path, python: str = sys.executable) -> Path:
    """Run PyInstaller (``python -m PyInstaller --onefile``) on the plugin's entry point in the
    environment of ``python``; the executable ``work/dist/kubectl-troupe``. About a minute on
    two cores. Raises :class:`KrewError` with PyInstaller's last lines when it fails."""
    work.mkdir(parents=True, exist_ok=True)
    entry = work / "kubectl_troupe.py"
    entry.write_text("import sys\n\nfrom reconciler.tools.plugin import main\n\nsys.exit(main())\n")
    command = [python, "-m", "PyInstaller", "--onefile", "--noconfirm", "--log-level", "WARN",
               "--name", NAME, "--distpath", str(work / "dist"), "--workpath", str(work / "build"),
               "--specpath", str(work), "--paths", str(REPO),
               *(f"--exclude-module={module}" for module in EXCLUDED), str(entry)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise KrewError(f"PyInstaller exited with code {done.returncode}:\n{tail}")
    return work / "dist" / NAME


def pack(executable: Path, out: Path, license_file: Path = LICENSE) -> Path:
    """krew's archive at ``out``: a gzipped tar of ``kubectl-troupe`` (mode 0755) and
    ``LICENSE`` at its root, owned by root, with zero mtimes (the tar's and gzip's) and no file
    name in gzip's header, so that the same executable packs to the same bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with (open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
          tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar):
        for path, name, mode in ((executable, NAME, 0o755), (license_file, "LICENSE", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname, info.gname = path.stat().st_size, mode, 0, "root", "root"
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
    return out


def write_manifest(archives: Mapping[tuple[str, str], Path], out: Path, template: Path = MANIFEST) -> Path:
    """Write ``out``: the manifest ``template`` with each platform's ``sha256`` that of its
    archive in ``archives`` (``(os, arch)`` -> path) and the platforms with no archive left
    out. Raises :class:`KrewError` when no platform has an archive or an archive's name is not
    its platform's URI's file name."""
    manifest = yaml.safe_load(template.read_text())
    platforms = []
    for entry in manifest["spec"]["platforms"]:
        labels = entry["selector"]["matchLabels"]
        archive = archives.get((labels["os"], labels["arch"]))
        if archive is None:
            continue
        if entry["uri"].rsplit("/", 1)[-1] != archive.name:
            raise KrewError(f"{template}: platform {labels['os']}/{labels['arch']} has uri {entry['uri']}, "
                            f"not the archive {archive.name}")
        platforms.append({**entry, "sha256": sha256_of(archive)})
    if not platforms:
        wanted = ", ".join(f"{os_name}/{arch}" for os_name, arch in archives) or "none"
        raise KrewError(f"{template} has no platform for the archives given ({wanted})")
    manifest["spec"]["platforms"] = platforms
    source = template.relative_to(REPO) if template.is_relative_to(REPO) else template
    header = f"# Made by `python -m devtools.krew manifest` from {source} with each archive's sha256.\n"
    out.write_text(header + yaml.dump(manifest, Dumper=_BlockDumper, sort_keys=False, width=100))
    return out


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as ``|`` blocks, as plugins/troupe.yaml has them."""


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_BlockDumper.add_representer(str, _str)


def archives_in(dist: Path) -> dict[tuple[str, str], Path]:
    """``(os, arch)`` -> archive for each ``kubectl-troupe-<os>-<arch>.tar.gz`` in ``dist``."""
    found = {}
    for path in sorted(dist.glob(f"{NAME}-*-*.tar.gz")):
        os_name, arch = path.name.removeprefix(f"{NAME}-").removesuffix(".tar.gz").split("-", 1)
        found[(os_name, arch)] = path
    return found


def build(dist: Path, python: str = sys.executable) -> Build:
    """This platform's archive in ``dist`` and ``dist/troupe.yaml`` naming its sha256 (with
    any other platform's archive already in ``dist``): what ``make plugin`` runs. Raises
    :class:`KrewError` when a step fails."""
    started = time.monotonic()
    os_name, arch = this_platform()
    with tempfile.TemporaryDirectory(prefix="kubectl-troupe-build-") as work:
        executable = build_executable(Path(work), python)
        size = executable.stat().st_size
        archive = pack(executable, dist / archive_name(os_name, arch))
    manifest = write_manifest(archives_in(dist), dist / MANIFEST.name)
    return Build(archive, manifest, sha256_of(archive), size, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; the exit code (0, or 1 with one line on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.krew", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("build", "manifest"))
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="where the archives are (default: dist)")
    args = parser.parse_args(argv)
    try:
        if args.step == "build":
            made = build(args.dist)
            print(f"{made.archive}  sha256 {made.sha256}  executable {made.executable_bytes / 1e6:.1f} MB  "
                  f"built in {made.seconds:.0f} s\n{made.manifest}")
        else:
            print(write_manifest(archives_in(args.dist), args.dist / MANIFEST.name))
    except (KrewError, OSError) as err:
        print(f"devtools.krew: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
