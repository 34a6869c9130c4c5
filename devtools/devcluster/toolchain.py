"""The Go toolchain basics of the local control plane's build: the pinned versions, the
paths of the built artifacts (:class:`Binaries`), the cache root, the build stamps, the
runner of go commands (:class:`Builder`) and the kubernetes wrapper module's go.mod.

:mod:`.build` (the control plane's binaries) and :mod:`.controllers` (the workload
controllers) both build on this module; it imports neither.

Every artifact is written under a temporary name and renamed when complete, then a
``<name>.stamp`` file recording the version is written next to it (:func:`mark_built`): a
build killed half way leaves no binary that looks finished. Reuse is decided by binary +
matching stamp (:func:`is_built`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

#: The Kubernetes release the local control plane runs for the suite, the demo and the
#: benchmarks, and the one the workload controllers are compiled against.
KUBERNETES_VERSION = "v1.37.2"
#: Older releases whose kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
#: the compatibility run starts instead (``make test-compat``): the oldest minor the chart
#: claims (``kubeVersion`` in charts/troupe/Chart.yaml).
COMPATIBILITY_VERSIONS = ("v1.36.3",)
#: The environment variable that picks one of :data:`COMPATIBILITY_VERSIONS` instead.
VERSION_ENV = "TROUPE_KUBERNETES_VERSION"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.19.0"

KUBE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

#: Rough cold-build durations on two cores, shown in progress lines.
_ESTIMATES = {
    "kube-apiserver": "~3.5 min",
    "kube-controller-manager": "~1 min",
    "kube-scheduler": "<30 s",
    "kubectl": "<30 s",
    "etcd": "<30 s",
    "kwok": "~1 min",
    "helm": "~1 min",
    "workload-controllers": "~1 min once the control plane's packages are compiled",
    "kueue": "~10 min: its own k8s.io libraries",
    "trainer": "~3.5 min: its own k8s.io libraries",
    "kuberay": "~4-7 min: its own k8s.io libraries",
    "promtool": "~15-20 min (many modules)",
    "kube-state-metrics": "~4 min, ~2.5 min with the control plane's modules",
    "gangcheck": "<1 min",
    "krew": "<30 s",
}

_HEARTBEAT_SECONDS = 60.0
_FAILURE_TAIL_LINES = 40


class BuildError(RuntimeError):
    """A binary could not be built; the message names the component and shows go's output."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the built executables and the kwok stages file (all absolute, all existing)."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    kwok_stages: Path
    helm: Path
    jobset: Path
    jobset_crds: Path
    jobset_webhooks: Path
    lws: Path
    lws_crds: Path
    lws_webhooks: Path
    kubeflow_crds: Path


def cache_dir() -> Path:
    """The build cache root: ``$TROUPE_CACHE_DIR`` if set, else ``~/.cache/troupe``."""
    env = os.environ.get("TROUPE_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "troupe"


def stamp_path(path: Path) -> Path:
    """The stamp file of the artifact ``path``: ``<name>.stamp`` next to it."""
    return path.with_name(path.name + ".stamp")


def is_built(path: Path, version: str) -> bool:
    """Whether the artifact ``path`` exists with a stamp recording exactly ``version``."""
    stamp = stamp_path(path)
    return path.is_file() and stamp.is_file() and stamp.read_text().strip() == version


def mark_built(tmp: Path, final: Path, version: str) -> None:
    """Rename the finished artifact ``tmp`` to ``final``, then write ``final``'s stamp
    (``version`` and a newline) under a temporary name and rename it into place."""
    os.replace(tmp, final)
    stamp_tmp = stamp_path(final).with_suffix(".stamp.tmp")
    stamp_tmp.write_text(version + "\n")
    os.replace(stamp_tmp, stamp_path(final))


class Builder:
    """Runs go commands with progress lines; one instance per
    :func:`~devtools.devcluster.build.ensure_built` call. Logs go to ``<root>/logs``.
    Raises :class:`BuildError` when ``go`` is not on PATH."""

    def __init__(self, root: Path, out: TextIO) -> None:
        self.root = root
        self.out = out
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = self._go_env()

    def say(self, message: str) -> None:
        """Print ``message`` as a ``[devcluster]`` progress line to the builder's output."""
        print(f"[devcluster] {message}", file=self.out, flush=True)

    @staticmethod
    def _go_env() -> dict[str, str]:
        if shutil.which("go") is None:
            raise BuildError(
                "the Go toolchain ('go') is not on PATH; it is needed to build the control plane"
            )
        env = dict(os.environ)
        env.update(GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod")
        return env

    def go(
        self,
        component: str,
        args: Sequence[str],
        cwd: Path,
        *,
        what: str,
        extra_env: dict[str, str] | None = None,
        capture: bool = False,
    ) -> str:
        """Run ``go ARGS`` in ``cwd``, appending output to logs/<component>.log.

        Prints a heartbeat line every minute. Returns stdout when ``capture`` is set.
        Raises BuildError with the last 40 lines of go's output when go fails.
        """
        log_path = self.logs / f"{component}.log"
        env = dict(self.env, **(extra_env or {}))
        started = time.monotonic()
        with open(log_path, "a") as log:
            log.write(f"\n$ go {' '.join(args)}   (in {cwd})\n")
            log.flush()
            proc = subprocess.Popen(
                ["go", *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if capture else log,
                stderr=log,
                text=True,
            )
            stop = threading.Event()
            beat = threading.Thread(target=self._heartbeat, args=(what, started, stop), daemon=True)
            beat.start()
            try:
                stdout, _ = proc.communicate()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            finally:
                stop.set()
                beat.join()
            # Durations in the log separate module downloads (mod, get) from compiling (build).
            log.write(f"# exit {proc.returncode} after {time.monotonic() - started:.1f}s\n")
        if proc.returncode != 0:
            tail = log_path.read_text(errors="replace").splitlines()[-_FAILURE_TAIL_LINES:]
            raise BuildError(
                f"building {component} failed: 'go {' '.join(args)}' exited with code "
                f"{proc.returncode}; last lines of {log_path}:\n" + "\n".join(tail)
            )
        return stdout or ""

    def _heartbeat(self, what: str, started: float, stop: threading.Event) -> None:
        while not stop.wait(_HEARTBEAT_SECONDS):
            self.say(f"still building {what} … {time.monotonic() - started:.0f}s")

    @contextlib.contextmanager
    def step(self, component: str, version: str, *, label: str | None = None) -> Iterator[None]:
        """A block that builds ``component``: a progress line with its cold-build estimate
        before, one with its duration after (``label`` replaces ``<component> <version>``)."""
        shown = label or f"{component} {version}"
        self.say(f"building {shown} (cold build, {_ESTIMATES[component]})…")
        started = time.monotonic()
        yield
        self.say(f"built {shown} in {time.monotonic() - started:.0f}s")


def module_dir(builder: Builder, component: str, module: str, cwd: Path) -> Path:
    """The directory of ``module`` (``path@version``) in Go's module cache, downloading it
    by ``go mod download -json`` run in ``cwd`` and logged as ``component``. Raises
    :class:`BuildError` when go fails or names no directory."""
    out = builder.go(
        component,
        ["mod", "download", "-json", module],
        cwd,
        what=f"{module} download",
        capture=True,
    )
    try:
        return Path(json.loads(out)["Dir"])
    except (ValueError, KeyError) as err:
        raise BuildError(
            f"'go mod download -json {module}' gave no module directory: {out[:200]!r}"
        ) from err


def staging_replacements(kubernetes_go_mod: str) -> list[str]:
    """Module paths that kubernetes' go.mod replaces with ``./staging/...`` directories.

    >>> staging_replacements("replace (\\n\\tk8s.io/api => ./staging/src/k8s.io/api\\n)")
    ['k8s.io/api']
    """
    modules = []
    for line in kubernetes_go_mod.splitlines():
        parts = line.strip().removeprefix("replace ").split("=>")
        if len(parts) == 2 and parts[1].strip().startswith("./staging/"):
            modules.append(parts[0].split()[0])
    return modules


def control_plane_version() -> str:
    """The release (``vMAJOR.MINOR.PATCH``) of the control plane's four commands to build and
    start: ``$TROUPE_KUBERNETES_VERSION`` when set, else :data:`KUBERNETES_VERSION`. Raises
    :class:`BuildError` naming the variable and its value when it is neither that nor one of
    :data:`COMPATIBILITY_VERSIONS`."""
    chosen = os.environ.get(VERSION_ENV, "").strip() or KUBERNETES_VERSION
    allowed = (KUBERNETES_VERSION, *COMPATIBILITY_VERSIONS)
    if chosen not in allowed:
        raise BuildError(f"{VERSION_ENV}={chosen!r}: not a Kubernetes release the local control plane is "
                         f"tested on (one of {', '.join(allowed)})")
    return chosen


def staging_version(version: str = KUBERNETES_VERSION) -> str:
    """The published version of the staging modules (k8s.io/api, client-go, ...) of a
    kubernetes release: ``v1.36.3`` gives ``v0.36.3``."""
    return "v0." + version.removeprefix("v").split(".", 1)[1]


def kubernetes_wrapper_go_mod(
    kubernetes_go_mod: str,
    version: str = KUBERNETES_VERSION,
    module: str = "troupe.local/k8s-wrapper",
) -> str:
    """The go.mod text of the wrapper module ``module`` that builds kubernetes ``version``.

    Copies the ``go`` and ``godebug`` lines of kubernetes' own go.mod and replaces each
    staging module with its published ``v0.<minor>.<patch>`` version.
    """
    staging = staging_version(version)
    directives = [
        line.strip()
        for line in kubernetes_go_mod.splitlines()
        if line.startswith(("go ", "godebug "))
    ]
    modules = staging_replacements(kubernetes_go_mod)
    if not modules:
        raise BuildError(
            "kubernetes' go.mod lists no ./staging replacements; cannot make the wrapper module"
        )
    lines = [
        f"module {module}",
        "",
        *directives,
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        "replace (",
    ]
    lines += [f"\t{path} => {path} {staging}" for path in modules]
    lines += [")", ""]
    return "\n".join(lines)


@contextlib.contextmanager
def build_lock(root: Path) -> Iterator[None]:
    """Hold the cache's build lock (``<root>/.build.lock``, an exclusive ``flock``) for the
    block, so that two processes (two test workers) never build into ``root`` at once."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wrapped_tool_path(name: str, version: str, root: Path | None = None) -> Path:
    """Where the cached command ``name`` built at ``version`` is (built or not):
    ``<cache>/<name>-<version>/bin/<name>``."""
    return (root or cache_dir()) / f"{name}-{version}" / "bin" / name


def ensure_wrapped_tool(name: str, package: str, version: str, root: Path | None = None,
                        out: TextIO | None = None) -> Path:
    """Build the Go command ``package`` of its module at ``version`` into the cache unless it
    is there, and return its path (:func:`wrapped_tool_path`). Built from a wrapper module
    (``go get package@version``, then ``go build``) next to it, for modules that ``go install
    pkg@version`` refuses (``exclude`` directives, a version list the proxy will not serve).
    Raises :class:`BuildError` with go's output when the build fails."""
    root = (root or cache_dir()).expanduser().resolve()
    target = wrapped_tool_path(name, version, root)
    if is_built(target, version):
        return target
    builder = Builder(root, out or sys.stderr)
    src = target.parent.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{name}.tmp-{os.getpid()}")
    with builder.step(name, version):
        if not (src / "go.mod").is_file():
            (src / "go.mod").write_text(f"module troupe.local/{name}-wrapper\n\ngo 1.26\n")
        builder.go(name, ["get", f"{package}@{version}"], src, what=f"{name} {version} modules")
        builder.go(name, ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), package], src,
                   what=f"{name} {version}")
    mark_built(tmp, target, version)
    return target
