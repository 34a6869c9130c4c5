"""``kubectl troupe``: why is my gang waiting? (also ``python -m reconciler status|why|topology|plan``)

    kubectl troupe status   [NAME] [-n NS | -A] [-l SELECTOR] [-o table|wide|json|yaml|name] [-w]
    kubectl troupe why      POD|GANG [-n NS] [-o ...] [-w]
    kubectl troupe topology [--resource NAME] [-o ...] [-w] [--web [--port N] [--no-browser]]
    kubectl troupe plan     -f MANIFEST [-n NS] [--gang-preemption-mode MODE] [-o ...]

installed as the executable ``kubectl-troupe`` (kubectl runs any ``kubectl-<name>`` on the
PATH as ``kubectl <name>``; ``plugins/troupe.yaml`` is its krew manifest). Each command
reads the cluster, read-only, from the kubeconfig (``--kubeconfig``, default
``$KUBECONFIG`` or ``~/.kube/config``; ``--context``; ``--request-timeout`` per request, as
kubectl's) or from a snapshot file (``--snapshot FILE``: what
:data:`reconciler.objects.kinds.SNAPSHOT_COMMAND` prints, read by the simulator's reader),
and answers with the reconciler's own decision (:mod:`reconciler.tools.views`): every
waiting gang decided in queue order by :func:`reconciler.engine.decision.decide.decide`, as
``python -m reconciler simulate`` does. Nothing is written. The output follows kubectl's
``-o`` (:mod:`reconciler.tools.render`); ``-w`` reads again every ``--watch-interval``
seconds and prints the answer again when it changed, until interrupted.

The configuration the decision follows is ``--config FILE``, else (on a live cluster) the
``config.yaml`` of the ConfigMap ``--config-map NAMESPACE/NAME`` (default: the chart's,
``troupe-system/troupe-config``, when it can be read), else the built-in defaults.

Exit codes: 0 answered; 1 the pod or gang was not found or is not Troupe's, or the cluster
could not be read; 2 bad input (a flag, a snapshot, a manifest, the configuration), with
one line on stderr naming what is wrong; 130 interrupted (``-w`` ends so); 141 stdout
closed (``| head``), with nothing on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import yaml

import troupe
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.membership import gang_key
from reconciler.objects import kinds
from reconciler.objects.snapshot_io import (
    InputError,
    collector_paused,
    read_file,
    read_objects,
    read_retained,
)
from reconciler.tools import render, views
from reconciler.tools import simulate as sim
from reconciler.tools.manifests import Context, Expanded, ManifestError, expand
from troupe.cli import OneLineParser, guarded, yaml_error
from troupe.config import PREEMPTION_MODES, Config, ConfigError, from_mapping, load_config

COMMANDS = ("status", "why", "topology", "plan")
EPILOG = f"""examples:
  kubectl troupe status -A                      every gang of every namespace
  kubectl troupe status train -n ml -w          gang ml/train, printed again whenever it changes
  kubectl troupe status -l app=train -o wide    gangs with a member labelled app=train, every column
  kubectl troupe why train-3 -n ml              why pod ml/train-3's gang waits, domain by domain
  kubectl troupe why gang/train -n ml           the same, for the gang by its name
  kubectl troupe topology                       who holds which node, free GPUs per domain
  kubectl troupe topology --web                 the same as a map in the browser, updated as it changes
  kubectl troupe plan -f job.yaml -n ml --gang-preemption-mode atomic
                                                where the Job's gang would go, whom it would evict
  kubectl troupe status -A --snapshot snapshot.json
                                                the same answers, offline, on a snapshot taken with
  {kinds.SNAPSHOT_COMMAND}
  ({kinds.SNAPSHOT_NOTE})

Each command has --help. Exit codes: 0 answered; 1 the pod or gang was not found or is not
Troupe's, or the cluster could not be read; 2 bad input (one line on stderr names it); 130
interrupted; 141 stdout closed."""
DEFAULT_CONFIG_MAP = "troupe-system/troupe-config"
EXIT_NOT_FOUND, EXIT_BAD_INPUT = 1, 2
WHY_DOMAINS = render.WHY_DOMAINS
#: Seconds between two reads of ``-w`` (``--watch-interval``'s default).
WATCH_INTERVAL = 2.0


def _common(p: argparse.ArgumentParser, watch: bool = True) -> None:
    source = p.add_argument_group("where the cluster is read from (read-only)")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    source.add_argument("--snapshot", metavar="FILE",
                        help=f"read this snapshot instead of the cluster: what `{kinds.SNAPSHOT_COMMAND}` writes "
                        "(or -o yaml; - for stdin)")
    source.add_argument("--request-timeout", metavar="DURATION", default="0",
                        help="how long to wait for each request to the API server, as kubectl's: 30s, 2m, 1h, "
                        "or seconds; 0 waits as long as it takes (default %(default)s)")
    decision = p.add_argument_group("the decision")
    decision.add_argument("--config", metavar="FILE", help="Troupe configuration YAML (default: the cluster's "
                          "ConfigMap, see --config-map, else built-in defaults)")
    decision.add_argument("--config-map", metavar="NAMESPACE/NAME",
                          help=f"read the configuration from this ConfigMap's config.yaml (default {DEFAULT_CONFIG_MAP} "
                          "when it exists; live cluster only)")
    decision.add_argument("--gang-preemption-mode", choices=PREEMPTION_MODES, metavar="off|minimal|atomic",
                          help="decide as if gangPreemptionMode were this (default: the configuration's)")
    decision.add_argument("--now", metavar="TIME",
                          help="decide as of this time (RFC 3339, e.g. 2026-11-22T10:00:00Z; default: now)")
    p.add_argument("-o", "--output", choices=render.OUTPUTS, default="table", metavar="|".join(render.OUTPUTS),
                   help="output format, as kubectl's: table (cut to the terminal's width), wide (every column, "
                   "nothing cut), json, yaml, name (default table)")
    if watch:
        p.add_argument("-w", "--watch", action="store_true",
                       help="read again every --watch-interval seconds and print the answer again when it changed, "
                       "until interrupted (Ctrl-C)")
        p.add_argument("--watch-interval", type=float, default=WATCH_INTERVAL, metavar="SECONDS",
                       help="seconds between two reads of --watch (default %(default)s)")


def add_commands(sub: Any) -> None:
    """Add ``status``, ``why``, ``topology`` and ``plan`` to an argparse subparsers object."""
    status = sub.add_parser(
        "status", help="every gang: phase, members, waiting time, reason",
        description="Every gang with its phase, its members (present of size, released, bound, running), how long "
        "its oldest gated member has waited, its place in the queue and the reason: the reconciler's decision, "
        "made now on the cluster as it is. Waiting gangs come first, in queue order.")
    status.add_argument("name", metavar="NAME", nargs="?", help="only this gang (in -n's namespace, or NAMESPACE/NAME)")
    status.add_argument("-n", "--namespace", help="only this namespace (default: the context's; a snapshot: all)")
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-l", "--selector", metavar="SELECTOR",
                        help="only gangs with a member whose labels match, as kubectl's -l: app=train,tier!=web, "
                        "'env in (a,b)', gpu, '!spot'")
    _common(status)
    why = sub.add_parser(
        "why", help="why a pod's gang (or a gang) waits: its decision and the per-domain shortfall",
        description="The gang of POD (or the gang GANG: pod/NAME and gang/NAME say which; a bare NAME is a pod "
        "when there is one, else a gang), its phase and reason, the gangs ahead of it in the queue and what they hold, "
        "and, for every candidate domain at the gang's level (its required or preferred level, else the smallest "
        "that could ever hold it), how many members fit and what keeps the rest out: "
        "'subblock b0-s1: 6 of 8 fit (2 nodes cordoned, 1 full)'.")
    why.add_argument("pod", metavar="POD|GANG", help="pod or gang name (in -n's namespace) or NAMESPACE/NAME; "
                     "pod/NAME or gang/NAME to say which")
    why.add_argument("-n", "--namespace", help="the pod's namespace (default: the context's, else default)")
    why.add_argument("--resource", default="nvidia.com/gpu", help="resource whose free units domains report "
                     "(default %(default)s)")
    why.add_argument("--domains", type=int, default=WHY_DOMAINS, metavar="N",
                     help="list the N best domains (default %(default)s); 0: all")
    _common(why)
    topo = sub.add_parser(
        "topology", help="blocks > subblocks > hosts > nodes: who holds what, free devices",
        description="The topology tree of the configured levels: each domain's free and allocatable units of "
        "--resource, each node's gangs (pods of a gang bound, pinned, planned or nominated there) and other pods.")
    topo.add_argument("--resource", default="nvidia.com/gpu", help="resource to count (default %(default)s)")
    web = topo.add_argument_group("the map in a browser (--web)")
    web.add_argument("--web", action="store_true",
                     help="serve the topology as a map on 127.0.0.1 (each host a cell coloured by the gang on it, "
                     "reserved and nominated nodes marked, the waiting gangs and their reasons, a search for a gang), "
                     "print its address and open a browser; the page reads again every --refresh seconds (a live "
                     "cluster's pods and nodes are watched, the rest read again at most every minute; a snapshot "
                     "file is read again when it changed), until Ctrl-C")
    web.add_argument("--port", type=int, default=0, metavar="PORT",
                     help="with --web: the port to listen on (default: a free one)")
    web.add_argument("--no-browser", action="store_true", help="with --web: only print the address")
    web.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                     help="with --web: seconds between the page's reads (default %(default)s; 0: never)")
    _common(topo)
    plan = sub.add_parser(
        "plan", help="where a manifest's gang would go, what it waits for, whom it would evict",
        description="Add the pods a manifest would create (Pods, Jobs, JobSets; admitted as Troupe's webhook "
        "admits them: gated, timeout defaulted, gang-size auto in opted-in namespaces) to the cluster as it "
        "is, and decide every waiting gang in queue order: where the new gangs would go, what they wait for, "
        "and, with preemption on, which gangs they would evict. Nothing is created.")
    plan.add_argument("-f", "--filename", required=True, metavar="MANIFEST",
                      help="YAML or JSON of Pods, Jobs and JobSets (- for stdin)")
    plan.add_argument("-n", "--namespace", help="namespace of objects that name none (default: the context's)")
    _common(plan, watch=False)


# --- reading -----------------------------------------------------------------------------
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                       r"(?:(\d+(?:\.\d+)?)ms)?")


def request_timeout(raw: str) -> float | None:
    """``--request-timeout`` in seconds, None for ``0`` (no timeout): a number of seconds
    or a duration of hours, minutes, seconds and milliseconds (``1h2m3s``, ``500ms``), as
    kubectl's flag takes (a Go ``time.Duration``). Raises ``ValueError`` naming the flag."""
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        found = _DURATION.fullmatch(text)
        if not text or found is None:
            raise ValueError(f"--request-timeout {raw!r}: expected seconds or a duration such as 30s, 2m, 1h") from None
        hours, minutes, secs, millis = (float(g) if g else 0.0 for g in found.groups())
        seconds = hours * 3600 + minutes * 60 + secs + millis / 1000
    if seconds < 0:
        raise ValueError(f"--request-timeout {raw!r}: must not be negative")
    return seconds or None


def _now(raw: str | None) -> float:
    """``--now`` in seconds since the epoch (the simulator's parsing), else the clock."""
    return sim.decision_time(raw) if raw is not None else time.time()


def _config(args: argparse.Namespace, api: Any) -> Config:
    if args.config:
        return load_config(args.config)
    if api is None:
        if args.config_map:
            raise ConfigError("--config-map: needs a live cluster (not --snapshot); give --config FILE")
        return Config()
    from reconciler import kube

    ref = args.config_map or DEFAULT_CONFIG_MAP
    namespace, _, name = ref.partition("/")
    if not namespace or not name:
        raise ConfigError(f"--config-map: expected NAMESPACE/NAME, got {ref!r}")
    text = kube.read_config_map(api, namespace, name, "config.yaml", request_timeout(args.request_timeout))
    if text is None:
        if args.config_map:
            raise ConfigError(f"--config-map: ConfigMap {ref} has no config.yaml or cannot be read")
        print(f"note: ConfigMap {ref} not found or not readable: deciding with the built-in configuration "
              f"(give --config FILE or --config-map NAMESPACE/NAME)", file=sys.stderr)
        return Config()
    try:
        return from_mapping(yaml.safe_load(text) or {})
    except yaml.YAMLError as e:
        raise ConfigError(f"ConfigMap {ref} config.yaml: not valid YAML at {yaml_error(e)}") from None
    except ConfigError as e:
        raise ConfigError(f"ConfigMap {ref} config.yaml: {e}") from None


def load(args: argparse.Namespace, extra: tuple[str, ...] = (),
         manifest: Sequence[tuple[str, str, Any]] = (),
         objects_of: Callable[[], list[tuple[str, str, Any]]] | None = None) -> tuple[views.Cluster, str, Expanded | None]:
    """The cluster the command answers on, the default namespace (the kubeconfig
    context's; ``""``, meaning all, for a snapshot) and, given a ``manifest``'s objects,
    what it expands to, added to the cluster before anything is decided. On a live cluster,
    ``objects_of()`` gives its objects when given (``topology --web``'s watches), instead of
    a list of every kind. Raises
    ``InputError``/``ConfigError``/``ManifestError`` for bad input, ``OSError`` when the
    cluster cannot be read."""
    now = _now(args.now)
    api, namespace = None, ""
    with collector_paused():  # millions of objects made, none freed: no collection need walk them
        if args.snapshot:
            source = "<stdin>" if args.snapshot == "-" else args.snapshot
            try:
                data = sys.stdin.buffer.read() if args.snapshot == "-" else read_file(args.snapshot)
            except OSError as e:
                raise InputError(f"{source}: cannot read snapshot: {e.strerror}") from None
            objects = read_retained(data, source)  # what the reconciler's cache keeps of each object
            where = f"snapshot {source}"
        else:
            from reconciler import kube

            api, namespace = kube.plugin_client(args.kubeconfig, args.context)
            notes: list[str] = []
            objects = (objects_of() if objects_of is not None
                       else kube.read_cluster(api, extra, notes, request_timeout(args.request_timeout)))
            for note in notes:
                print(note, file=sys.stderr)
            where = f"the cluster ({args.context or 'current context'})"
        config = _config(args, api)
        policy = Policy.from_config(config)
        if args.gang_preemption_mode is not None:
            policy = dataclasses.replace(policy, preemption=args.gang_preemption_mode)
        expanded = None
        if manifest:
            _, namespaces, classes = views.split(objects)
            ctx = Context(config, args.namespace or namespace or "default", namespaces, classes, now)
            expanded = expand(manifest, ctx)
            objects = [*objects, *((f"{args.filename}: {kind} {k}", kind, obj) for k, (kind, obj) in
                                   enumerate(expanded.workloads)),
                       *((f"{args.filename}: pod {k}", "Pod", obj) for k, obj in enumerate(expanded.pods))]
        cluster = views.read(objects, config, now, policy, where, kinds.NOT_IN_SNAPSHOT if args.snapshot else None)
        del objects
        gc.freeze()  # what was read lives to the end: no collection need walk it again
        return cluster, namespace, expanded


# --- commands ----------------------------------------------------------------------------
def answer(args: argparse.Namespace) -> str:
    """What one command prints, read and decided once. Raises ``LookupError`` (the pod
    or gang is not there or not Troupe's), ``InputError``/``ConfigError``/
    ``ManifestError``/``ValueError`` (bad input) and ``OSError`` (the cluster could not be
    read)."""
    if args.command == "plan":
        return _plan(args)
    # status also reads the Gang objects: what the reconciler recorded (decision 043).
    cluster, namespace, _ = load(args, (views.GANG_KIND,) if args.command == "status" else ())
    output, width = args.output, render.terminal_width(args.output)
    if args.command == "status":
        return render.fit(_status(args, cluster, namespace), width)
    if args.command == "why":
        pod = views.find_member(cluster, args.pod, args.namespace or namespace or "default")
        found = views.why(cluster, pod, args.resource)
        if output in ("json", "yaml"):
            return render.data(render.why_json(found), output)
        if output == "name":
            return render.names("gang", [found.gang.name])
        return render.fit(render.render_why(found, cluster.config.topology_levels, args.domains), width)
    tree = views.topology(cluster, args.resource)
    if output in ("json", "yaml"):
        return render.data(render.topology_json(tree), output)
    if output == "name":
        return render.names("node", render.node_names(tree))
    return render.fit(render.render_topology(tree, args.resource), width)


def _status(args: argparse.Namespace, cluster: views.Cluster, namespace: str) -> str:
    gang_ns, _, gang_name = (args.name or "").rpartition("/")
    wanted = gang_ns or args.namespace or namespace  # "" on a snapshot: every namespace
    chosen: tuple[str, ...] = () if (args.all_namespaces and not gang_ns) or not wanted else (wanted,)
    selector = views.parse_label_selector(args.selector) if args.selector else None
    gangs = views.status(cluster, chosen, selector=selector)
    if args.name:
        gangs = [g for g in gangs if g.name == gang_name]
        if not gangs:
            key = f"{chosen[0]}/{gang_name}" if chosen else gang_name
            raise LookupError(f"gang {key} not found in {cluster.source or 'the snapshot'}")
    if args.output in ("json", "yaml"):
        return render.data({"gangs": [g.to_json() for g in gangs]}, args.output)
    if args.output == "name":
        return render.names("gang", [g.name for g in gangs])
    return render.render_status(gangs, wide=args.output == "wide")


def _plan(args: argparse.Namespace) -> str:
    source = "<stdin>" if args.filename == "-" else args.filename
    try:
        data = sys.stdin.buffer.read() if args.filename == "-" else read_file(args.filename)
    except OSError as e:
        raise InputError(f"{source}: cannot read manifest: {e.strerror}") from None
    manifest = read_objects(data, source)
    if not manifest:
        raise InputError(f"{source}: no objects")
    cluster, _, expanded = load(args, views.EXTRA_KINDS, manifest)
    assert expanded is not None
    keys = [PodKey.of(p) for p in expanded.pods]
    gangs = {k for key in keys if (k := gang_key(cluster.snapshot.pods[key], cluster.config)) is not None}
    result = views.plan(cluster, keys, expanded.managed, gangs)
    if args.output in ("json", "yaml"):
        return render.data(render.plan_json(result), args.output)
    if args.output == "name":
        return render.names("gang", [g.name for g in result.gangs])
    return render.fit(render.render_plan(result, result.cluster, source), render.terminal_width(args.output))


def _answer_once(args: argparse.Namespace) -> tuple[int, str]:
    """``(exit code, text)``: the answer and 0, or one line for stderr and its code."""
    try:
        return 0, answer(args)
    except LookupError as e:
        return EXIT_NOT_FOUND, f"kubectl-troupe: {e.args[0]}\n"
    except (InputError, ConfigError, ManifestError, ValueError) as e:
        return EXIT_BAD_INPUT, f"kubectl-troupe: {e}\n"
    except OSError as e:
        return EXIT_NOT_FOUND, f"kubectl-troupe: {e}\n"


def run(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    """Run one command on parsed arguments; returns the exit code. With ``--watch``: read
    and decide again every ``--watch-interval`` seconds and print the answer whenever it
    differs from the last one printed (a failed read prints its line on stderr and is
    tried again; bad input ends it), until interrupted (``KeyboardInterrupt`` reaches the
    caller)."""
    if getattr(args, "web", False):
        return _web(args)
    if getattr(args, "watch", False) and not args.watch_interval > 0:
        print(f"kubectl-troupe: --watch-interval {args.watch_interval:g}: must be seconds > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    last = None
    while True:
        code, text = _answer_once(args)
        if code == 0 and text != last:
            if last is not None and args.output in ("table", "wide"):
                sys.stdout.write("\n")
            sys.stdout.write(text)
            sys.stdout.flush()
            last = text
        elif code != 0:
            sys.stderr.write(text)
        if not getattr(args, "watch", False) or code == EXIT_BAD_INPUT:
            return code
        sleep(args.watch_interval)


def _web(args: argparse.Namespace) -> int:
    """``topology --web``: the map served until interrupted (:mod:`reconciler.tools.web.local`)."""
    from reconciler.tools.web import local

    if not 0 <= args.port <= 65535 or args.refresh < 0:
        print(f"kubectl-troupe: --port {args.port} / --refresh {args.refresh:g}: a port in 0-65535 and seconds >= 0",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    watched = None
    try:
        if not args.snapshot:  # a live cluster: its pods and nodes watched, not listed for every refresh
            from reconciler import kube
            from reconciler.tools.web import watched as live

            watched = live.watch_cluster(kube.plugin_client(args.kubeconfig, args.context)[0],
                                         request_timeout(args.request_timeout))
        produce = local.reader(lambda: load(args, objects_of=watched.objects if watched else None)[0], args.resource,
                               args.refresh, args.snapshot, watched.stamp if watched else None)
        return local.serve(produce, args.port, not args.no_browser)
    except (InputError, ConfigError, ValueError) as e:
        print(f"kubectl-troupe: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(f"kubectl-troupe: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    finally:
        if watched is not None:
            watched.stop()


def parser(prog: str = "kubectl troupe") -> argparse.ArgumentParser:
    """The plugin's argument parser."""
    p = OneLineParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Why is my gang waiting? Troupe's own decision, read-only, on the live cluster or a snapshot:\n"
        "status of every gang, why one waits, the topology, and a what-if plan for a manifest.",
        epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"kubectl-troupe {troupe.__version__}")
    add_commands(p.add_subparsers(dest="command", required=True))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-troupe``: the plugin's entry point; returns the exit code (a closed
    stdout and Ctrl-C end it without a traceback, :func:`troupe.cli.guarded`)."""
    args = parser().parse_args(argv)
    return guarded(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
