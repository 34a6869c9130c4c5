"""``python -m devtools.demo`` (``make demo``): every capability of Troupe, and how each
failure looks, in about two minutes, on a local cluster of 32 fake GPU nodes.

By default it builds (or reuses) the local control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok), creates the nodes of
``examples/demo-nodes.yaml`` (2 blocks x 2 subblocks x 8 hosts of 8 GPUs, and 2 shared-device
nodes), starts the JobSet controller and Troupe (webhook and reconciler, as the chart runs
them, with ``gangPreemptionMode: atomic``), plays the scenarios of
:mod:`devtools.demo.scenarios` with a line of narration per step and the commands a user
would run, prints a summary with the time each took, and stops everything.

``--keep`` leaves the cluster, Troupe and the JobSet controller running and prints the
``export KUBECONFIG=...`` line and the address of the reconciler's topology map (stop them
with ``python -m devtools.devcluster down``).
``--kubeconfig FILE`` plays the same scenarios on an existing cluster where Troupe is
installed (the chart) and whose nodes carry the documented topology labels; it installs
nothing, says what is missing, and skips a scenario whose prerequisite (shared-device
nodes, ``gangPreemptionMode: atomic``, JobSet) the cluster lacks.

Exit code: 0 when every scenario that ran showed what it says; 1 when one did not (the
reason, and where the logs are), or the cluster lacks what the demo needs; 130 when
interrupted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes.client.rest import ApiException

from devtools.demo.scenarios import SCENARIOS, Scenario, by_name, needs_of
from devtools.demo.stage import (
    DEMO_LABEL,
    GPU,
    DemoFailure,
    Narrator,
    Stage,
    Unsuitable,
    node_objects,
    read_layout,
    settled_layout,
)
from reconciler.kube import unreachable
from reconciler.tools.web.server import PREFIX as TOPOLOGY_PREFIX
from troupe import contract
from troupe.cli import OneLineParser, guarded, yaml_error
from troupe.config import Config, ConfigError, from_mapping, load_config

REPO = Path(__file__).resolve().parents[2]
DEFAULT_NODES = REPO / "examples" / "demo-nodes.yaml"
#: Troupe's configuration on the demo's own cluster: the defaults, except these two.
DEMO_CONFIG = """\
# Troupe's configuration in the demo (python -m devtools.demo): the defaults, except
gangPreemptionMode: "atomic"          # the preemption scenario: a victim gang is evicted whole
gangScheduleTimeoutJitterSeconds: 2   # the rollback scenario waits its 5 s timeout + at most 2 s, not 30
"""
#: Where the chart keeps the configuration (release ``troupe`` in ``troupe-system``); the
#: demo writes its own there too, so ``kubectl troupe`` decides with it.
CONFIG_MAP = "troupe-system/troupe-config"


@dataclass
class Result:
    """One scenario's outcome for the summary."""

    index: int
    scenario: Scenario
    status: str  # "ok", "skipped"
    summary: str
    seconds: float
    checks: int


class ScenarioFailed(RuntimeError):
    """A scenario failed: which one, after how long, and why."""

    def __init__(self, index: int, scenario: Scenario, seconds: float, reason: str, logs: str) -> None:
        super().__init__(f"scenario {index} ({scenario.name}) failed after {seconds:.1f}s: {reason}\n"
                         f"[demo] logs: {logs}")
        self.scenario = scenario


# --------------------------------------------------------------------------- running
def play(stage: Stage, scenarios: Sequence[Scenario], keep_last: bool = False,
         clock: Callable[[], float] = time.monotonic) -> list[Result]:
    """Play ``scenarios`` in order on ``stage``: heading, narration, result line; delete
    each scenario's namespaces after it (not the last one's when ``keep_last``; not after
    a failure on the demo's own cluster, which is stopped with its logs kept). A scenario
    the cluster cannot run (:func:`needs_of`) is skipped, saying what it needs. Raises
    :class:`ScenarioFailed` on the first failure."""
    results = []
    for i, sc in enumerate(scenarios, 1):
        stage.narrator.heading(f"{i}/{len(scenarios)}  {sc.title}")
        why = needs_of(sc, stage)
        if why:
            stage.say(f"SKIPPED: {why}")
            results.append(Result(i, sc, "skipped", why, 0.0, 0))
            continue
        stage.checks, stage.created = [], []
        began = clock()
        ok = False
        try:
            summary = sc.run(stage)
            ok = True
        except (DemoFailure, ApiException) as err:
            reason = str(err) if isinstance(err, DemoFailure) else f"API error {err.status} {err.reason}: {err.body}"
            raise ScenarioFailed(i, sc, clock() - began, reason, stage.logs) from err
        finally:
            if ok or not stage.local:
                for ns in stage.created if not (keep_last and i == len(scenarios) and ok) else []:
                    stage.delete_namespace(ns)
        seconds = clock() - began
        stage.say(f"OK: {len(stage.checks)} checks in {seconds:.1f}s")
        results.append(Result(i, sc, "ok", summary, seconds, len(stage.checks)))
    return results


def summary(results: Sequence[Result], where: str, timings: Sequence[tuple[str, float]]) -> str:
    """The closing summary: one line per scenario (time, checks, result), then the times."""
    ran = [r for r in results if r.status == "ok"]
    skipped = [r for r in results if r.status == "skipped"]
    lines = [f"== Summary: {len(ran)} of {len(results)} scenarios shown and checked ({sum(r.checks for r in ran)} "
             f"checks){f', {len(skipped)} skipped' if skipped else ''}, on {where}"]
    width = max(len(r.scenario.name) for r in results)
    for r in results:
        took = f"{r.seconds:5.1f}s" if r.status == "ok" else "   -  "
        mark = "ok  " if r.status == "ok" else "SKIP"
        lines.append(f"   {r.index}. {r.scenario.name:<{width}}  {took}  {mark}  {r.summary}")
    lines.append("   " + "; ".join(f"{what} {seconds:.1f}s" for what, seconds in timings))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the demo's own cluster
def local(args: argparse.Namespace, scenarios: Sequence[Scenario], narrator: Narrator) -> int:
    """Start the local cluster, Troupe and the JobSet controller; play; stop (or keep)."""
    from kubernetes import client

    from devtools.devcluster import Cluster
    from devtools.devcluster.build import built_binaries, ensure_built
    from devtools.devcluster.stack import Stack
    from devtools.devcluster.workloads import JOBSET, WorkloadControllers

    began = time.monotonic()
    timings: list[tuple[str, float]] = []
    if built_binaries() is None:
        narrator.step("building the control plane and the JobSet controller from their Go modules (first run "
                      "only; about 10 minutes on two cores, progress below)")
    ensure_built()
    timings.append(("binaries", time.monotonic() - began))
    narrator.step("starting the local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                  f"kwok with the nodes of {_relative(args.nodes)}")
    with Cluster(nodes=args.nodes, persistent=args.keep) as cluster:
        timings.append(("control plane", cluster.startup_seconds or 0.0))
        mark = time.monotonic()
        with WorkloadControllers(cluster, controllers=(JOBSET,), persistent=args.keep) as controllers:
            timings.append(("JobSet controller", time.monotonic() - mark))
            mark = time.monotonic()
            config_path = cluster.run_dir / "troupe-demo-config.yaml"
            config_path.write_text(DEMO_CONFIG)
            with Stack(cluster, config_path, persistent=args.keep) as stack:
                namespace, name = CONFIG_MAP.split("/")
                client.CoreV1Api(cluster.api_client("admin")).create_namespaced_config_map(namespace, {
                    "metadata": {"name": name}, "data": {"config.yaml": DEMO_CONFIG}})
                timings.append(("Troupe", time.monotonic() - mark))
                narrator.step(f"ready: {cluster.server}, Troupe's webhook and reconciler running (logs in "
                              f"{cluster.logs_dir}); Troupe's configuration: "
                              + ", ".join(line.split("#")[0].strip() for line in DEMO_CONFIG.splitlines()[1:]))
                stage = Stage(cluster.kubeconfig("admin"), str(cluster.binaries.kubectl), stack.config,
                              settled_layout(cluster.api_client("admin"), stack.config.topology_levels),
                              str(cluster.logs_dir), local=True, narrator=narrator)
                mark = time.monotonic()
                results = play(stage, scenarios, keep_last=args.keep)
                timings.append(("scenarios", time.monotonic() - mark))
                if args.keep:
                    cluster.detach(also=[*controllers.detach(), *stack.detach()])
                    kept = _track(cluster.run_dir)
                    # The page answers a bearer token; in the fragment it never reaches a server log.
                    topology_map = f"http://127.0.0.1:{stack.metrics_port}{TOPOLOGY_PREFIX}/#token={cluster.token('admin')}"
        timings.append(("total", time.monotonic() - began))
    print("\n" + summary(results, f"a local cluster of {stage.layout.node_count} nodes", timings), flush=True)
    if args.keep:
        print(f"\nThe cluster, Troupe and the JobSet controller are still running (logs in {cluster.logs_dir}):")
        print(f"export KUBECONFIG={cluster.kubeconfig('admin')}")
        print(f"the topology map (the reconciler's, read-only): {topology_map}")
        print(f"stop them with: {kept}")
    else:
        print("\nEverything the demo started is stopped.")
    return 0


def _track(run_dir: Path) -> str:
    """Record a kept cluster as the current ``devcluster up`` one unless another is; the
    command that stops it."""
    from devtools.devcluster.__main__ import state_file
    from devtools.devcluster.cluster import recorded_processes
    from devtools.devcluster.processes import is_running

    stop = f"{sys.executable} -m devtools.devcluster down"
    current = state_file()
    if current.is_file():
        other = Path(current.read_text().strip())
        try:
            if any(is_running(r) for r in recorded_processes(other)):
                return f"{stop} --run-dir {run_dir}"
        except RuntimeError:
            pass
    current.parent.mkdir(parents=True, exist_ok=True)
    current.write_text(f"{run_dir}\n")
    return stop


def _relative(path: str | Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- an existing cluster
def existing(args: argparse.Namespace, scenarios: Sequence[Scenario], narrator: Narrator) -> int:
    """Check what the demo needs on the kubeconfig's cluster, then play there."""
    from kubernetes import client
    from kubernetes import config as kube_config

    began = time.monotonic()
    kubeconfig = Path(args.kubeconfig).expanduser()
    if not kubeconfig.is_file():
        raise Unsuitable(f"kubeconfig {kubeconfig} does not exist")
    api = kube_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    core = client.CoreV1Api(api)
    config, source = _cluster_config(core, args)
    narrator.step(f"Troupe's configuration: {source}")
    layout = read_layout(node_objects(api), config.topology_levels)
    logs = (f"the reconciler's and the webhook's logs (the chart's: kubectl logs -n {args.config_map.split('/')[0]} "
            "deploy/troupe-reconciler, deploy/troupe-webhook)")
    stage = Stage(kubeconfig, _kubectl(), config, layout, logs, local=False, narrator=narrator)
    for ns in core.list_namespace(label_selector=f"{DEMO_LABEL}=true").items:
        narrator.step(f"removing namespace {ns.metadata.name}, left by an earlier run")
        stage.delete_namespace(ns.metadata.name, wait_gone=True)
    needs = _webhook_in_effect(core, config) + _idle(core, layout)
    if needs:
        raise Unsuitable("; ".join(needs))
    narrator.step(f"using subblocks {', '.join(s.name for s in layout.subblocks)} ({layout.hosts} nodes of "
                  f"{layout.gpus} GPUs each) and shared-device nodes {', '.join(layout.shared) or '(none)'}")
    mark = time.monotonic()
    try:
        results = play(stage, scenarios, keep_last=args.keep)
    finally:
        if not args.keep:
            for ns in core.list_namespace(label_selector=f"{DEMO_LABEL}=true").items:
                stage.delete_namespace(ns.metadata.name, wait_gone=True)
    timings = [("scenarios", time.monotonic() - mark), ("total", time.monotonic() - began)]
    print("\n" + summary(results, f"the cluster of {kubeconfig} ({layout.node_count} nodes)", timings), flush=True)
    print("\n" + ("The last scenario's namespace is kept." if args.keep else "The demo's namespaces are deleted."))
    return 0


def _cluster_config(core: Any, args: argparse.Namespace) -> tuple[Config, str]:
    """Troupe's configuration: ``--config``, else the ConfigMap, else the defaults."""
    if args.config:
        return load_config(args.config), args.config
    namespace, name = args.config_map.split("/", 1)
    try:
        data = core.read_namespaced_config_map(name, namespace).data or {}
    except ApiException as e:
        return Config(), f"the defaults (ConfigMap {args.config_map} not readable: {e.status} {e.reason})"
    try:
        return from_mapping(yaml.safe_load(data.get("config.yaml", "")) or {}), f"ConfigMap {args.config_map}"
    except yaml.YAMLError as e:
        raise Unsuitable(f"ConfigMap {args.config_map} config.yaml: not valid YAML at {yaml_error(e)}") from e
    except ConfigError as e:
        raise Unsuitable(f"ConfigMap {args.config_map}: {e}") from e


def _webhook_in_effect(core: Any, config: Config) -> list[str]:
    """[] when a dry-run gang pod comes back gated by Troupe, else what is missing."""
    prefix = config.gang_annotation_prefix
    probe = {"metadata": {"generateName": "troupe-demo-probe-", "annotations": {
        f"{prefix}{contract.GANG_NAME_SUFFIX}": "probe", f"{prefix}{contract.GANG_SIZE_SUFFIX}": "1"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    try:
        made = core.create_namespaced_pod("default", probe, dry_run="All")
    except ApiException as e:
        return [f"a dry-run pod in namespace default was refused ({e.status} {e.reason}): the demo needs to "
                "create namespaces, pods, Jobs, PriorityClasses and SharedDeviceGroups"]
    if not any(g.name == contract.GATE for g in made.spec.scheduling_gates or []):
        return [f"Troupe's webhook is not in effect (a dry-run pod with {prefix}-name came back without the "
                f"{contract.GATE} gate): install the chart, docs/guide/install.md"]
    return []


def _idle(core: Any, layout: Any) -> list[str]:
    """[] when no active pod uses a GPU on the nodes the demo uses, else which are busy."""
    used: dict[str, int] = {}
    nodes = {n for s in layout.subblocks for n in s.nodes} | set(layout.shared)
    pods = core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    for p in pods:
        if p.spec.node_name in nodes:
            for c in p.spec.containers:
                gpus = int(((c.resources and c.resources.requests) or {}).get(GPU, "0"))
                if gpus:
                    used[p.spec.node_name] = used.get(p.spec.node_name, 0) + gpus
    if not used:
        return []
    busy = ", ".join(f"{n} ({g})" for n, g in sorted(used.items())[:8])
    return [f"the GPU nodes the demo uses must be idle; {len(used)} run pods that use GPUs: {busy}"]


def _kubectl() -> str:
    """The local control plane's kubectl when built, else the first on the PATH."""
    from devtools.devcluster.build import built_binaries

    bins = built_binaries()
    found = str(bins.kubectl) if bins is not None else shutil.which("kubectl")
    if not found:
        raise Unsuitable("no kubectl: put one on the PATH (or run python -m devtools.devcluster build)")
    return found


# --------------------------------------------------------------------------- command line
def parser() -> argparse.ArgumentParser:
    """The command line (exposed for tests)."""
    names = "\n".join(f"  {s.name:<11} {s.title}" for s in SCENARIOS)
    p = OneLineParser(
        prog="python -m devtools.demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(__doc__ or "").split("\n\n", 1)[0] + "\n\nScenarios, in order:\n" + names,
        epilog="Exit codes: 0 every scenario that ran showed what it says; 1 one did not, or the cluster lacks "
               "what the demo needs (the reason and where the logs are on stderr); 130 interrupted.")
    p.add_argument("--keep", action="store_true",
                   help="leave the cluster, Troupe and the JobSet controller running, print export KUBECONFIG=... "
                        "(with --kubeconfig: keep the last scenario's namespace)")
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="play on this existing cluster instead (Troupe installed, nodes with the topology labels, "
                        "the GPU nodes idle); installs nothing")
    p.add_argument("--config-map", default=CONFIG_MAP, metavar="NAMESPACE/NAME",
                   help="with --kubeconfig: Troupe's configuration (default %(default)s, the chart's)")
    p.add_argument("--config", metavar="FILE", help="with --kubeconfig: Troupe's configuration file instead")
    p.add_argument("--nodes", default=str(DEFAULT_NODES), metavar="FILE",
                   help="the local cluster's nodes file (default %(default)s)")
    p.add_argument("--only", nargs="+", metavar="SCENARIO", help="play only these scenarios (story order kept)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit code (a closed stdout ends it quietly,
    :func:`troupe.cli.guarded`)."""
    args = parser().parse_args(argv)
    return guarded(lambda: _play(args))


def _play(args: argparse.Namespace) -> int:
    narrator = Narrator()
    try:
        scenarios = by_name(args.only) if args.only else list(SCENARIOS)
        if args.kubeconfig:
            return existing(args, scenarios, narrator)
        return local(args, scenarios, narrator)
    except ScenarioFailed as err:
        print(f"\n[demo] FAILED: {err}", file=sys.stderr)
        return 1
    except (Unsuitable, ValueError) as err:
        print(f"[demo] error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\n[demo] interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except urllib3.exceptions.HTTPError as err:  # the API server did not answer: its URL, one line
        print(f"[demo] error: {unreachable('the demo', err)}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001  the control plane or Troupe could not start: say which, one line
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"[demo] error: {type(err).__name__}: {first}", file=sys.stderr)
        rest = "\n".join(str(err).splitlines()[1:])
        if rest:
            print(rest, file=sys.stderr)
        return 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
