"""Command line of the local control plane: ``python -m devtools.devcluster build|up|down|status``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from devtools.devcluster.build import (
    ETCD_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    BuildError,
    cache_dir,
    ensure_built,
)
from devtools.devcluster.cluster import (
    Cluster,
    ClusterError,
    load_state,
    recorded_processes,
    stop_run_dir,
)
from devtools.devcluster.ecosystem import ensure_gangcheck, ensure_krew, ensure_ksm
from devtools.devcluster.kuberay import ensure_kuberay
from devtools.devcluster.kueue import ensure_kueue
from devtools.devcluster.nodes import NodesFileError
from devtools.devcluster.nodes import load as load_nodes
from devtools.devcluster.processes import ComponentDied, Recorded, is_running
from devtools.devcluster.promtool import ensure_promtool
from devtools.devcluster.trainer import ensure_trainer
from troupe.cli import OneLineParser, guarded

DEFAULT_NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes.yaml"

DESCRIPTION = f"""\
A local Kubernetes control plane for Troupe's tests, demo and development: etcd
{ETCD_VERSION}, kube-apiserver, kube-controller-manager and kube-scheduler {KUBERNETES_VERSION}
(stock, RBAC on) and kwok {KWOK_VERSION} simulating nodes, all on free 127.0.0.1 ports.

  build    build the binaries, helm and promtool for the chart tests, kube-state-metrics and
           gangcheck for the Gang object's ecosystem tests, krew for the plugin's install
           test, the JobSet and LeaderWorkerSet controllers for the workload tests, Kueue
           for the quota test, Kubeflow Trainer v2 for the TrainJob test and KubeRay's operator
           for the Ray tests, into the cache ({cache_dir()}; set TROUPE_CACHE_DIR to move it).
           Cold: about 8 to 10 minutes on two cores for the control plane, about 1 more for
           the two controllers (they reuse its compiled packages), about 10 for Kueue, about
           3.5 for the trainer, about 7 for KubeRay. Warm: instant. 'up' builds if needed.
  up       start the control plane, create the fake nodes (default {DEFAULT_NODES.name}),
           wait until Ready, print the admin kubeconfig, then return and leave it running.
  down     stop the running control plane (by its recorded PIDs).
  status   show whether it runs, its components and kubeconfigs.

Only one 'up' cluster at a time is tracked (state file {cache_dir() / "devcluster-current"}).
Tests start their own cluster through tests/e2e/conftest.py instead.
"""


def state_file() -> Path:
    """The file holding the run dir of the cluster started by ``up``."""
    return cache_dir() / "devcluster-current"


class CliError(Exception):
    """A one-line error for the user; exit code 1."""


def _current_run_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    try:
        return Path(state_file().read_text().strip())
    except FileNotFoundError:
        raise CliError(
            f"no devcluster is running (no state file {state_file()}); start one with 'up'"
        ) from None


def cmd_build(args: argparse.Namespace) -> int:
    bins = ensure_built()
    kueue, trainer, kuberay = ensure_kueue(), ensure_trainer(), ensure_kuberay()
    tools = {"promtool": ensure_promtool(), "kube-state-metrics": ensure_ksm(), "gangcheck": ensure_gangcheck(),
             "krew": ensure_krew(), "kueue": kueue.binary, "kueue-crds": kueue.crds, "kueue-webhooks": kueue.webhooks,
             "trainer": trainer.binary, "trainer-crds": trainer.crds, "trainer-webhooks": trainer.webhooks,
             "trainer-torch-runtime": trainer.torch_runtime}
    tools.update({"ray-operator": kuberay.binary, "kuberay-crds": kuberay.crds})
    for name, path in {**vars(bins), **tools}.items():
        print(f"{name.replace('_', '-'):24} {path}")
    return 0


_interrupted = threading.Event()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """First SIGINT/SIGTERM: unwind (the cluster stops everything). Later ones: ignored,
    so that a second Ctrl-C cannot cut the shutdown short and leave processes behind."""
    if _interrupted.is_set():
        print("[devcluster] still stopping the components…", file=sys.stderr, flush=True)
        return
    _interrupted.set()
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _report_and_set(failure: ComponentDied, died: threading.Event) -> None:
    print(f"[devcluster] {failure}", file=sys.stderr, flush=True)
    died.set()


def cmd_up(args: argparse.Namespace) -> int:
    existing = state_file()
    if existing.is_file() and not args.run_dir:
        run_dir = Path(existing.read_text().strip())
        if any(is_running(r) for r in _safe_records(run_dir)):
            raise CliError(
                f"a devcluster is already running (run dir {run_dir}); stop it with 'down'"
            )
    nodes = None if args.no_nodes else Path(args.nodes)
    if nodes is not None and not nodes.is_file():
        raise CliError(f"nodes file {nodes} does not exist")
    if nodes is not None:
        load_nodes(nodes)  # a file it cannot read fails now, naming the line, before anything starts
    ensure_built()
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    died = threading.Event()
    cluster = Cluster(
        args.run_dir,
        nodes=nodes,
        persistent=not args.foreground,
        on_failure=lambda failure: _report_and_set(failure, died),
        start_timeout=args.timeout,
    )
    try:
        cluster.start()
    except KeyboardInterrupt:
        print("[devcluster] interrupted; stopped every component", file=sys.stderr)
        return 130
    admin = cluster.kubeconfig("admin")
    print(
        f"[devcluster] ready in {cluster.startup_seconds:.1f}s: {cluster.server}", file=sys.stderr
    )
    print(f"run dir:    {cluster.run_dir}")
    print(f"kubeconfig: {admin}")
    for name in ("reconciler", "alice"):
        with contextlib.suppress(KeyError):
            print(f"  {name + ':':10}{cluster.kubeconfig(name)}")
    print(f"export KUBECONFIG={admin}")
    if not args.foreground:
        state_file().parent.mkdir(parents=True, exist_ok=True)
        state_file().write_text(f"{cluster.run_dir}\n")
        cluster.detach()
        print(
            f"[devcluster] running in the background; stop it with: {sys.executable} -m devtools.devcluster down",
            file=sys.stderr,
        )
        return 0
    print("[devcluster] running in the foreground; Ctrl-C stops it", file=sys.stderr)
    try:
        while not died.wait(1.0):
            pass
    except KeyboardInterrupt:
        cluster.stop()
        print("[devcluster] stopped every component", file=sys.stderr)
        return 0
    cluster.stop()
    return 1


def _safe_records(run_dir: Path) -> list[Recorded]:
    try:
        return recorded_processes(run_dir)
    except ClusterError:
        return []


def cmd_down(args: argparse.Namespace) -> int:
    run_dir = _current_run_dir(args.run_dir)
    if not run_dir.is_dir():
        state_file().unlink(missing_ok=True)
        raise CliError(f"run dir {run_dir} no longer exists; nothing to stop (state file cleared)")
    records = recorded_processes(run_dir)
    running = [r.name for r in records if is_running(r)]
    killed = stop_run_dir(run_dir)
    if not args.run_dir or (
        state_file().is_file() and Path(state_file().read_text().strip()) == run_dir
    ):
        state_file().unlink(missing_ok=True)
    if killed:
        print(
            f"[devcluster] {', '.join(killed)} did not stop on SIGTERM within 5s; killed",
            file=sys.stderr,
        )
    print(f"stopped: {', '.join(running) or 'nothing was running'} ({run_dir})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    run_dir = _current_run_dir(args.run_dir)
    state = load_state(run_dir)
    records = recorded_processes(run_dir)
    up = 0
    report = {
        "server": state.get("server"),
        "run_dir": str(run_dir),
        "components": {},
        "kubeconfigs": state.get("kubeconfigs", {}),
    }
    for record in records:
        alive = is_running(record)
        up += alive
        report["components"][record.name] = {"pid": record.pid, "running": alive, "log": record.log}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"server:  {report['server']}")
        print(f"run dir: {run_dir}")
        for name, info in report["components"].items():
            print(
                f"  {name:24} pid {info['pid']:<8} {'running' if info['running'] else 'NOT RUNNING'}   {info['log']}"
            )
        admin = report["kubeconfigs"].get("admin")
        if admin:
            print(f"export KUBECONFIG={admin}")
    if not records or up < len(records):
        raise CliError(
            f"{len(records) - up} of {len(records)} components are not running (logs in {run_dir / 'logs'})"
        )
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    top = OneLineParser(
        prog="python -m devtools.devcluster",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="{build,up,down,status}")
    build = sub.add_parser(
        "build",
        help="build the binaries and helm into the cache (cold ~8-10 min, warm instant)",
        description="Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok and helm into the version-keyed cache, then print their paths.",
    )
    build.set_defaults(func=cmd_build)

    up = sub.add_parser(
        "up",
        help="start the control plane and fake nodes, then return",
        description="Build if needed, start every component on free 127.0.0.1 ports, create the fake nodes, wait until they are Ready, print the kubeconfigs and leave the cluster running in the background.",
    )
    up.add_argument(
        "--run-dir",
        help="directory for PKI, kubeconfigs, etcd data and logs (default: a new temp dir)",
    )
    up.add_argument(
        "--nodes",
        default=str(DEFAULT_NODES),
        metavar="FILE",
        help="nodes file: compact FakeNodes groups or plain Node YAML (default: %(default)s)",
    )
    up.add_argument("--no-nodes", action="store_true", help="create no nodes")
    up.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl-C stops the cluster"
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="per readiness step (default: %(default)s)",
    )
    up.set_defaults(func=cmd_up)

    down = sub.add_parser(
        "down",
        help="stop the cluster started by 'up'",
        description="SIGTERM every recorded component (SIGKILL after 5 s) and remove its temp run dir.",
    )
    down.add_argument(
        "--run-dir", help="stop the cluster of this run dir instead of the current one"
    )
    down.set_defaults(func=cmd_down)

    status = sub.add_parser(
        "status",
        help="show the cluster started by 'up' (exit 1 if not fully running)",
        description="Show the server, each component's PID, whether it runs, its log, and the admin kubeconfig.",
    )
    status.add_argument("--run-dir", help="inspect this run dir instead of the current one")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 130 interrupted)."""
    args = parser().parse_args(argv)
    return guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("[devcluster] interrupted", file=sys.stderr)
        return 130
    except ComponentDied as err:
        first, _, rest = str(err).partition("\n")
        if rest:
            print(rest, file=sys.stderr)
        print(f"devcluster: error: {first}", file=sys.stderr)
        return 1
    except (
        CliError,
        BuildError,
        ClusterError,
        NodesFileError,
        FileNotFoundError,
        ValueError,
    ) as err:
        first, _, rest = str(err).partition("\n")
        if rest:
            print(rest, file=sys.stderr)
        print(f"devcluster: error: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
