"""``kubectl troupe``'s command line: the commands, their flags and ``--help`` (run by
:mod:`reconciler.tools.plugin`).

The flags are kubectl's where kubectl has one (docs/decisions/052-kubectl-conventions.md):
``-o`` with kubectl's formats (:func:`reconciler.tools.printers.parse_output`),
``--no-headers``, ``-w``, ``-l``, ``-n``/``-A``, and the kubeconfig overrides kubectl takes
(``--kubeconfig``, ``--context``, ``-s``/``--server``, ``--token``, ``--as``, ``--as-group``,
``--certificate-authority``, ``--insecure-skip-tls-verify``, ``--request-timeout``), applied by
:func:`reconciler.kube.readonly.plugin_client`.
"""

from __future__ import annotations

import argparse
from typing import Any

import troupe
from reconciler.objects import kinds
from reconciler.tools import printers, render
from troupe.cli import OneLineParser
from troupe.config import PREEMPTION_MODES

COMMANDS = ("status", "why", "topology", "plan")
DEFAULT_CONFIG_MAP = "troupe-system/troupe-config"
#: What appends Troupe's ConfigMap to a snapshot (a snapshot may be several JSON values in a row).
SNAPSHOT_CONFIG_COMMAND = "kubectl get configmap troupe-config -n troupe-system -o json >> snapshot.json"
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
  kubectl troupe status -A -o jsonpath='{{range .items[*]}}{{.metadata.name}}{{"\\t"}}{{.status.phase}}{{"\\n"}}{{end}}'
                                                each gang's object name and phase, as kubectl's -o jsonpath
  kubectl troupe status -A -o custom-columns=GANG:.spec.gangName,QUEUE:.status.queuePosition --no-headers
  kubectl troupe status -A --as jane --as-group ml-team
                                                what jane, of group ml-team, may see
  source <(kubectl-troupe completion bash)      complete kubectl-troupe's commands and flags (bash; zsh too)
  kubectl troupe status -A --snapshot snapshot.json
                                                the same answers, offline, on a snapshot taken with
  {kinds.SNAPSHOT_COMMAND}
  ({kinds.SNAPSHOT_NOTE})
  and, for the cluster's configuration, Troupe's ConfigMap appended:
  {SNAPSHOT_CONFIG_COMMAND}

Each command has --help. Exit codes: 0 answered; 1 the pod or gang was not found or is not
Troupe's, or the cluster could not be read; 2 bad input (one line on stderr names it); 130
interrupted; 141 stdout closed."""
WHY_DOMAINS = render.WHY_DOMAINS
#: The least seconds between two answers of ``-w`` (``--watch-interval``'s default).
WATCH_INTERVAL = 1.0


def output_format(raw: str) -> printers.Output:
    """``-o``'s argparse type: :func:`reconciler.tools.printers.parse_output`, its error as argparse's."""
    try:
        return printers.parse_output(raw)
    except printers.OutputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _kubeconfig_flags(p: argparse.ArgumentParser) -> None:
    """kubectl's kubeconfig overrides (k8s.io/cli-runtime genericclioptions.ConfigFlags)."""
    source = p.add_argument_group("where the cluster is read from (read-only), as kubectl's flags")
    source.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    source.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    source.add_argument("-s", "--server", metavar="URL",
                        help="the API server's address, instead of the context's cluster's (no kubeconfig is then "
                        "needed)")
    source.add_argument("--token", metavar="TOKEN", help="bearer token to authenticate with, instead of the "
                        "context's user's credentials")
    source.add_argument("--as", dest="as_user", metavar="USER",
                        help="user to impersonate (the Impersonate-User header)")
    source.add_argument("--as-group", action="append", default=[], metavar="GROUP",
                        help="group to impersonate (Impersonate-Group; repeat for several)")
    source.add_argument("--certificate-authority", metavar="FILE",
                        help="the CA file the API server's certificate is checked against")
    source.add_argument("--insecure-skip-tls-verify", action="store_true",
                        help="do not check the API server's certificate (insecure)")
    source.add_argument("--snapshot", metavar="FILE",
                        help=f"read this snapshot instead of the cluster: what `{kinds.SNAPSHOT_COMMAND}` writes "
                        "(or -o yaml; - for stdin), with Troupe's ConfigMap appended when it should decide with the "
                        f"cluster's configuration: `{SNAPSHOT_CONFIG_COMMAND}`")
    source.add_argument("--request-timeout", metavar="DURATION", default="0",
                        help="how long to wait for each request to the API server, as kubectl's: 30s, 2m, 1h, "
                        "or seconds; 0 waits as long as it takes (default %(default)s)")


def _common(p: argparse.ArgumentParser, watch: bool = True) -> None:
    _kubeconfig_flags(p)
    decision = p.add_argument_group("the decision")
    decision.add_argument("--config", metavar="FILE", help="Troupe configuration YAML (default: the cluster's "
                          "ConfigMap, see --config-map, else built-in defaults)")
    decision.add_argument("--config-map", metavar="NAMESPACE/NAME",
                          help=f"read the configuration from this ConfigMap's config.yaml (default {DEFAULT_CONFIG_MAP} "
                          "when it exists), on the cluster or in the --snapshot")
    decision.add_argument("--gang-preemption-mode", choices=PREEMPTION_MODES, metavar="off|minimal|atomic",
                          help="decide as if gangPreemptionMode were this (default: the configuration's)")
    decision.add_argument("--now", metavar="TIME",
                          help="decide as of this time (RFC 3339, e.g. 2026-11-22T10:00:00Z; default: now)")
    out = p.add_argument_group("output, as kubectl's")
    out.add_argument("-o", "--output", type=output_format, default="table", metavar="FORMAT",
                     help="table (cut to the terminal's width), wide (every column, nothing cut), json, yaml, name, "
                     "jsonpath=TEMPLATE (kubectl's: '{.items[*].metadata.name}', {range ...}...{end}, {\"\\n\"}; "
                     "not [,] unions or {else}), jsonpath-file=FILE, custom-columns=HEADER:EXPRESSION,... , "
                     "custom-columns-file=FILE (default table)")
    out.add_argument("--no-headers", action="store_true",
                     help="no header line in status's table and in custom-columns")
    if watch:
        p.add_argument("-w", "--watch", action="store_true",
                       help="watch the cluster (its pods, nodes and Gang objects; a snapshot file: its changes) and "
                       "print the answer again when it changed, until interrupted (Ctrl-C)")
        p.add_argument("--watch-interval", type=float, default=WATCH_INTERVAL, metavar="SECONDS",
                       help="with --watch: the least time between two answers, changes in between read together "
                       "(default %(default)s)")


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
        description="Add the pods a manifest would create (Pods, and the pods the controllers of its Jobs, "
        "JobSets, Deployments, ReplicaSets, StatefulSets, LeaderWorkerSets, PyTorchJobs, MPIJobs, RayClusters and "
        "RayJobs make, read with its PodGroups; admitted as Troupe's webhook admits them: gated, timeout "
        "defaulted, gang-size auto in opted-in namespaces) to the cluster as it is, and decide every waiting "
        "gang in queue order: where the new gangs would go, what they wait for, and, with preemption on, which "
        "gangs they would evict; the pods left to kube-scheduler are listed per object, with why. Nothing is "
        "created.")
    plan.add_argument("-f", "--filename", required=True, metavar="MANIFEST",
                      help="YAML or JSON of what you apply: Pods, workloads, PodGroups, Workloads (- for stdin)")
    plan.add_argument("-n", "--namespace", help="namespace of objects that name none (default: the context's)")
    _common(plan, watch=False)


#: The shells ``completion`` writes a script for.
SHELLS = ("bash", "zsh")


def parser(prog: str = "kubectl troupe") -> argparse.ArgumentParser:
    """The plugin's argument parser."""
    p = OneLineParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Why is my gang waiting? Troupe's own decision, read-only, on the live cluster or a snapshot:\n"
        "status of every gang, why one waits, the topology, and a what-if plan for a manifest.",
        epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"kubectl-troupe {troupe.__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    add_commands(sub)
    sub.add_parser(
        "completion", help="the shell completion script of kubectl-troupe (bash, zsh)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the completion script of kubectl-troupe's commands and flags for SHELL, made from this "
        "parser by shtab:\n\n"
        "  source <(kubectl-troupe completion bash)       # bash, for this shell\n"
        "  kubectl-troupe completion zsh > \"${fpath[1]}/_kubectl-troupe\"   # zsh\n\n"
        "kubectl itself completes `kubectl troupe ...` only through an executable kubectl_complete-troupe on the "
        "PATH that answers in cobra's __complete protocol (kubectl 1.26+); Troupe does not ship one.",
    ).add_argument("shell", choices=SHELLS, metavar="|".join(SHELLS), help="the shell")
    return p


def completion_script(shell: str) -> str:
    """The completion script of ``kubectl-troupe`` for ``shell`` (one of :data:`SHELLS`), made
    from :func:`parser` by shtab (github.com/iterative/shtab): subcommands, flags, choices."""
    import shtab

    return str(shtab.complete(parser("kubectl-troupe"), shell=shell))


