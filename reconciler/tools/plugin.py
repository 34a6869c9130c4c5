"""``kubectl troupe``: why is my gang waiting? (also ``python -m reconciler status|why|topology|plan``)

    kubectl troupe status   [-n NS | -A] [--output table|json]
    kubectl troupe why      POD [-n NS] [--output table|json]
    kubectl troupe topology [--resource NAME] [--output table|json]
    kubectl troupe plan     -f MANIFEST [-n NS] [--gang-preemption-mode MODE] [--output table|json]

installed as the executable ``kubectl-troupe`` (kubectl runs any ``kubectl-<name>`` on the
PATH as ``kubectl <name>``). Each command reads the cluster once, read-only, from the
kubeconfig (``--kubeconfig``, default ``$KUBECONFIG`` or ``~/.kube/config``; ``--context``) or
from a snapshot file (``--snapshot FILE``: what ``kubectl get nodes,pods,jobs,jobsets,
leaderworkersets,pytorchjobs,shareddevicegroups,poddisruptionbudgets,persistentvolumeclaims,
persistentvolumes,csinodes,namespaces -A -o json`` prints, read by the simulator's reader), and answers with the reconciler's own decision (:mod:`reconciler.tools.views`): every
waiting gang decided in queue order by :func:`reconciler.engine.decision.decide`, as
``python -m reconciler simulate`` does. Nothing is written.

The configuration the decision follows is ``--config FILE``, else (on a live cluster) the
``config.yaml`` of the ConfigMap ``--config-map NAMESPACE/NAME`` (default: the chart's,
``troupe-system/troupe-config``, when it can be read), else the built-in defaults.

Exit codes: 0 answered; 1 the pod was not found or is not Troupe's, or the cluster could
not be read; 2 bad input (a flag, a snapshot, a manifest, the configuration), with one line
on stderr naming what is wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

import troupe
from reconciler.engine.gang import gang_key
from reconciler.engine.occupancy import DomainUsage
from reconciler.engine.queueing import Policy
from reconciler.engine.shortfall import Shortfall, short_level
from reconciler.engine.topology import TopologyLevels
from reconciler.objects.snapshot_io import (
    InputError,
    collector_paused,
    read_file,
    read_objects,
    read_retained,
)
from reconciler.tools import simulate as sim
from reconciler.tools import views
from reconciler.tools.manifests import Context, Expanded, ManifestError, expand
from troupe.config import PREEMPTION_MODES, Config, ConfigError, from_mapping, load_config

COMMANDS = ("status", "why", "topology", "plan")
EPILOG = """examples:
  kubectl troupe status -A                      every gang of every namespace
  kubectl troupe why train-3 -n ml              why pod ml/train-3's gang waits, domain by domain
  kubectl troupe topology                       who holds which node, free GPUs per domain
  kubectl troupe plan -f job.yaml -n ml --gang-preemption-mode atomic
                                                where the Job's gang would go, whom it would evict
  kubectl get nodes,pods,jobs,shareddevicegroups,pdb,pvc,pv,csinodes,namespaces -A -o json > snap.json
  kubectl troupe status -A --snapshot snap.json the same answers, offline

Each command has --help. Exit codes: 0 answered; 1 the pod was not found or is not Troupe's,
or the cluster could not be read; 2 bad input (one line on stderr names it)."""
DEFAULT_CONFIG_MAP = "troupe-system/troupe-config"
EXIT_NOT_FOUND, EXIT_BAD_INPUT = 1, 2
#: Candidate domains ``why`` lists (the best ones); the rest are summed up in one line.
WHY_DOMAINS = 8


def _common(p: argparse.ArgumentParser) -> None:
    source = p.add_argument_group("where the cluster is read from (read-only)")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    source.add_argument("--snapshot", metavar="FILE",
                        help="read this snapshot instead of the cluster: kubectl get nodes,pods,jobs,jobsets,"
                        "leaderworkersets,pytorchjobs,shareddevicegroups -A -o json (or -o yaml; - for stdin)")
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
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format (default table)")


def add_commands(sub: Any) -> None:
    """Add ``status``, ``why``, ``topology`` and ``plan`` to an argparse subparsers object."""
    status = sub.add_parser(
        "status", help="every gang: phase, members, waiting time, reason",
        description="Every gang with its phase, its members (present of size, released, bound, running), how long "
        "its oldest gated member has waited, its place in the queue and the reason: the reconciler's decision, "
        "made now on the cluster as it is. Waiting gangs come first, in queue order.")
    status.add_argument("-n", "--namespace", help="only this namespace (default: the context's; a snapshot: all)")
    status.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    _common(status)
    why = sub.add_parser(
        "why", help="why a pod's gang waits: its decision and the per-domain shortfall",
        description="The gang of POD, its phase and reason, the gangs ahead of it in the queue and what they hold, "
        "and, for every candidate domain at the gang's level (its required or preferred level, else the smallest "
        "that could ever hold it), how many members fit and what keeps the rest out: "
        "'subblock b0-s1: 6 of 8 fit (2 nodes cordoned, 1 full)'.")
    why.add_argument("pod", metavar="POD", help="pod name (in -n's namespace) or NAMESPACE/NAME")
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
    _common(plan)


# --- reading -----------------------------------------------------------------------------
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
    text = kube.read_config_map(api, namespace, name, "config.yaml")
    if text is None:
        if args.config_map:
            raise ConfigError(f"--config-map: ConfigMap {ref} has no config.yaml or cannot be read")
        print(f"note: ConfigMap {ref} not found or not readable: deciding with the built-in configuration "
              f"(give --config FILE or --config-map NAMESPACE/NAME)", file=sys.stderr)
        return Config()
    try:
        return from_mapping(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ConfigError) as e:
        raise ConfigError(f"ConfigMap {ref} config.yaml: {e}") from None


def load(args: argparse.Namespace, extra: tuple[str, ...] = (),
         manifest: Sequence[tuple[str, str, Any]] = ()) -> tuple[views.Cluster, str, Expanded | None]:
    """The cluster the command answers on, the default namespace (the kubeconfig
    context's; ``""``, meaning all, for a snapshot) and, given a ``manifest``'s objects,
    what it expands to, added to the cluster before anything is decided. Raises
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
            objects = kube.read_cluster(api, extra, notes)
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
        cluster = views.read(objects, config, now, policy, where)
        del objects
        gc.freeze()  # what was read lives to the end: no collection need walk it again
        return cluster, namespace, expanded


# --- rendering ---------------------------------------------------------------------------
def duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart, the last one unpadded."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]


def _members(s: views.GangStatus) -> str:
    return f"{s.present}/{'?' if s.size is None else s.size}"


def render_status(gangs: Sequence[views.GangStatus]) -> str:
    """``status`` as a table: one line per gang."""
    if not gangs:
        return "no gangs\n"
    rows = [("NAMESPACE", "GANG", "PHASE", "MEMBERS", "RELEASED", "BOUND", "RUNNING", "WAITING", "QUEUE", "REASON")]
    rows += [(s.namespace, s.name, s.phase, _members(s), str(s.released), str(s.bound), str(s.running),
              duration(s.waiting), str(s.queue) if s.queue else "-", s.reason) for s in gangs]
    return "\n".join(line.rstrip() for line in columns(rows)) + "\n"


def _shortfall_json(w: views.Why) -> dict[str, Any] | None:
    if w.shortfall is None:
        return None
    f = w.shortfall
    return {"level": f.level, "members": f.members, "resource": f.resource, "domains": [
        {"level": d.level, "domain": d.name, "path": list(d.path), "nodes": d.nodes, "need": d.need, "fits": d.fits,
         "couldFit": d.could, "free": d.free, "excluded": dict(d.excluded), "text": d.describe()}
        for d in f.domains]}


def why_json(w: views.Why) -> dict[str, Any]:
    """``why --output json``."""
    outcome = w.gang.outcome
    return {"pod": w.pod, "rank": w.rank, "gang": w.gang.to_json(),
            "placements": outcome.placements if outcome is not None else [],
            "ahead": [s.to_json() for s in w.ahead],
            "held": {g: {"domain": d, "nodes": n} for g, (d, n) in w.held.items()},
            "shortfall": _shortfall_json(w),
            "condition": dict(zip(("status", "reason", "message"), w.condition, strict=True)) if w.condition else None,
            "refusedByScheduler": w.refusal}


def render_why(w: views.Why, levels: Sequence[str], limit: int) -> str:
    """``why`` as text: the gang, its decision, the queue ahead, the per-domain shortfall."""
    s = w.gang
    size = "?" if s.size is None else str(s.size)
    lines = [
        f"Pod:      {w.pod} (rank {w.rank} of gang {s.key})",
        f"Gang:     {s.key}: {s.present} of {size} members present, {s.gated} gated, {s.released} released, "
        f"{s.bound} bound, {s.running} running",
        f"Phase:    {s.phase} (rule {s.rule}{', placement ' + s.code if s.code else ''})",
        f"Reason:   {s.reason}",
    ]
    if w.condition is not None and w.condition[2] != s.reason:
        lines.append(f"Told:     {w.condition[1]}: {w.condition[2]}")
    if w.refusal is not None:
        lines.append(f"Refused:  by kube-scheduler on its node: {w.refusal}")
    if s.waiting is not None:
        where = f", {_ordinal(s.queue)} in the queue" if s.queue else ""
        lines.append(f"Waiting:  {duration(s.waiting)}{where} (priority {s.priority})")
    for a in w.ahead:
        lines.append(f"Ahead:    {a.key} ({a.phase}, priority {a.priority}): {a.reason}")
    for gang, (domain, nodes) in sorted(w.held.items()):
        lines.append(f"Held:     {nodes} node(s) of {domain} for {gang}")
    outcome = s.outcome
    if outcome is not None and outcome.placements:
        header = "Would be released to:" if s.phase == "Placed" else "Planned:"
        lines.append(header)
        rows = [("RANK", "POD", "NODE", "/".join(short_level(k) for k in levels).upper())]
        rows += [(str(p["rank"]), p["pod"], p["node"], p["topology"]) for p in outcome.placements]
        lines += ["  " + r for r in columns(rows)]
    if outcome is not None and outcome.victims:
        lines.append("Would evict:")
        lines += [f"  {v['namespace']}/{v['pod']} on {v['node'] or '-'}" for v in outcome.victims]
    lines += render_shortfall(w.shortfall, s, limit)
    return "\n".join(lines) + "\n"


def render_shortfall(f: Shortfall | None, s: views.GangStatus, limit: int) -> list[str]:
    """The ``Domains:`` lines of a gang's per-domain shortfall (none for None)."""
    if f is None:
        return []
    what = "smallest level that could ever hold them"
    topo = s.gang.topology
    if topo.required_level:
        what = "the gang's required level"
    elif topo.preferred_level:
        what = "the gang's preferred level"
    lines = [f"Domains:  {f.members} gated member(s) at {short_level(f.level)} ({what}), best first:"]
    shown = f.domains if limit <= 0 else f.domains[:limit]
    width = max((len(d.describe()) for d in shown), default=0)
    lines += [f"  {d.describe().ljust(width)}  free {f.resource}: {d.free}" for d in shown]
    rest = f.domains[len(shown):]
    if rest:
        best = max(d.fits for d in rest)
        lines.append(f"  ... {len(rest)} more {short_level(f.level)}(s), {best} or fewer fit in each")
    return lines


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def topology_json(d: DomainUsage) -> dict[str, Any]:
    """``topology --output json``: the tree as nested objects."""
    out: dict[str, Any] = {"level": d.level, "name": d.name, "allocatable": d.allocatable, "free": d.free}
    if d.children:
        out["children"] = [topology_json(c) for c in d.children]
    else:
        out["nodes"] = [{"name": n.name, "allocatable": n.allocatable, "free": n.free, "ready": n.ready,
                         "cordoned": n.cordoned, "holders": [{"gang": g, "units": u, "pods": c} for g, u, c in n.holders],
                         "otherPods": n.others} for n in d.nodes]
    return out


def render_topology(root: DomainUsage, resource: str) -> str:
    """``topology`` as an indented tree: each domain with free/allocatable units, each node
    with its state and holders."""
    lines = [f"cluster: {root.free} of {root.allocatable} {resource} free"]

    def node_row(label: str, n: Any) -> tuple[str, str, str, str]:
        state = "not ready" if not n.ready else "cordoned" if n.cordoned else ""
        held = ", ".join(f"{g} ({u} {resource}, {c} pod{'s' if c != 1 else ''})" if c else f"{g} ({u} {resource})"
                         for g, u, c in n.holders)
        others = f"{n.others} other pod{'s' if n.others != 1 else ''}" if n.others else ""
        return (label, f"{max(n.free, 0)} of {n.allocatable} free", state, "; ".join(x for x in (held, others) if x))

    def walk(d: DomainUsage, pad: str) -> None:
        rows: list[tuple[str, str, str, str]] = []
        for c in d.children:
            if len(c.nodes) == 1 and not c.children:  # a host of one node: one line
                n = c.nodes[0]
                name = c.name if c.name == n.name else f"{c.name} (node {n.name})"
                rows.append(node_row(f"{pad}{short_level(c.level)} {name}", n))
                continue
            lines.extend(r.rstrip() for r in columns(rows))
            rows = []
            lines.append(f"{pad}{short_level(c.level)} {c.name}: {c.free} of {c.allocatable} free")
            walk(c, pad + "  ")
        rows += [node_row(f"{pad}node {n.name}", n) for n in d.nodes]
        lines.extend(r.rstrip() for r in columns(rows))

    walk(root, "  ")
    return "\n".join(lines) + "\n"


def render_plan(result: views.PlanResult, cluster: views.Cluster, source: str) -> str:
    """``plan`` as text: the pods, the gangs' decisions (the simulator's table), what
    they wait for, whom they would evict."""
    lines = [f"{len(result.pods)} pod(s) from {source}, decided with every waiting gang of the cluster "
             f"(nothing is created):"]
    outcomes = [g.outcome for g in result.gangs if g.outcome is not None]
    levels = TopologyLevels.from_config(cluster.config)
    body = sim.render_table(outcomes, levels) if outcomes else ""
    lines += body.rstrip("\n").splitlines()
    for g in result.gangs:
        place = f", {_ordinal(g.queue)} in the queue" if g.queue else ""
        if g.phase == "Placed":
            lines.append(f"{g.key} would be released now{place}.")
        elif g.phase == "Preempting" and g.outcome is not None:
            gangs = sorted({f"{v['namespace']}/{v['pod']}" for v in g.outcome.victims})
            lines.append(f"{g.key} would evict {len(gangs)} pod(s), then be released once they are gone{place}.")
        else:
            lines.append(f"{g.key} would wait ({g.phase}{place}): {g.reason}")
            lines += render_shortfall(views.room_shortfall(cluster, g), g, WHY_DOMAINS // 2)
    if result.untouched:
        lines.append(f"not Troupe's (no Troupe key; kube-scheduler places them alone): {', '.join(result.untouched)}")
    return "\n".join(lines) + "\n"


# --- commands ----------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    """Run one command on parsed arguments; returns the exit code."""
    try:
        if args.command == "plan":
            return _plan(args)
        cluster, namespace, _ = load(args)
    except (InputError, ConfigError, ManifestError, ValueError) as e:
        print(f"kubectl-troupe: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:
        print(f"kubectl-troupe: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    levels = cluster.config.topology_levels
    if args.command == "status":
        chosen = () if args.all_namespaces else ((args.namespace,) if args.namespace else
                                                  ((namespace,) if namespace else ()))
        gangs = views.status(cluster, chosen)
        if args.output == "json":
            print(json.dumps({"gangs": [g.to_json() for g in gangs]}, indent=2))
        else:
            sys.stdout.write(render_status(gangs))
        return 0
    if args.command == "why":
        try:
            pod = views.find_pod(cluster, args.pod, args.namespace or namespace or "default")
            answer = views.why(cluster, pod, args.resource)
        except LookupError as e:
            print(f"kubectl-troupe: {e.args[0]}", file=sys.stderr)
            return EXIT_NOT_FOUND
        if args.output == "json":
            print(json.dumps(why_json(answer), indent=2))
        else:
            sys.stdout.write(render_why(answer, levels, args.domains))
        return 0
    tree = views.topology(cluster, args.resource)
    if args.output == "json":
        print(json.dumps(topology_json(tree), indent=2))
    else:
        sys.stdout.write(render_topology(tree, args.resource))
    return 0


def _plan(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.filename == "-" else args.filename
    try:
        data = sys.stdin.buffer.read() if args.filename == "-" else read_file(args.filename)
    except OSError as e:
        raise InputError(f"{source}: cannot read manifest: {e.strerror}") from None
    manifest = read_objects(data, source)
    if not manifest:
        raise InputError(f"{source}: no objects")
    try:
        cluster, _, expanded = load(args, views.EXTRA_KINDS, manifest)
    except OSError as e:
        print(f"kubectl-troupe: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    assert expanded is not None
    keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in expanded.pods]
    gangs = {k for key in keys if (k := gang_key(cluster.snapshot.pods[key], cluster.config)) is not None}
    result = views.plan(cluster, keys, expanded.managed, gangs)
    if args.output == "json":
        rows = [{**g.to_json(), "cost": g.outcome.cost if g.outcome is not None else None,
                  "placements": g.outcome.placements if g.outcome is not None else [],
                  "victims": g.outcome.victims if g.outcome is not None else []} for g in result.gangs]
        print(json.dumps({"pods": list(result.pods), "untouched": list(result.untouched), "gangs": rows}, indent=2))
    else:
        sys.stdout.write(render_plan(result, result.cluster, source))
    return 0


def parser(prog: str = "kubectl troupe") -> argparse.ArgumentParser:
    """The plugin's argument parser."""
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Why is my gang waiting? Troupe's own decision, read-only, on the live cluster or a snapshot:\n"
        "status of every gang, why one waits, the topology, and a what-if plan for a manifest.",
        epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"kubectl-troupe {troupe.__version__}")
    add_commands(p.add_subparsers(dest="command", required=True))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-troupe``: the plugin's entry point; returns the exit code."""
    args = parser().parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
