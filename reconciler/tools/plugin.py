"""``kubectl troupe``: why is my gang waiting? (also ``python -m reconciler status|why|topology|plan``)

    kubectl troupe status   [NAME] [-n NS | -A] [-l SELECTOR] [-o FORMAT] [--no-headers] [-w]
    kubectl troupe why      POD|GANG [-n NS] [-o ...] [-w]
    kubectl troupe topology [--resource NAME] [-o ...] [-w] [--web [--port N] [--no-browser]]
    kubectl troupe plan     -f MANIFEST [-n NS] [--gang-preemption-mode MODE] [-o ...]
    kubectl troupe completion bash|zsh

installed as the executable ``kubectl-troupe`` (kubectl runs any ``kubectl-<name>`` on the
PATH as ``kubectl <name>``; ``plugins/troupe.yaml`` is its krew manifest). Each command
reads the cluster, read-only, from the kubeconfig (``--kubeconfig``, default
``$KUBECONFIG`` or ``~/.kube/config``; ``--context``; kubectl's overrides ``--server``,
``--token``, ``--as``, ``--as-group``, ``--certificate-authority``,
``--insecure-skip-tls-verify``; ``--request-timeout`` per request) or from a snapshot file (``--snapshot FILE``: what
:data:`reconciler.objects.kinds.SNAPSHOT_COMMAND` prints, read by the simulator's reader),
and answers with the reconciler's own decision (:mod:`reconciler.tools.views`): every
waiting gang decided in queue order by :func:`reconciler.engine.decision.decide.decide`, as
``python -m reconciler simulate`` does. Nothing is written. The output follows kubectl's
``-o`` (:mod:`reconciler.tools.printers`, :mod:`reconciler.tools.render`): data on stdout,
messages (``no gangs found``, notes, errors) on stderr; ``-w`` watches the cluster
(:mod:`reconciler.kube.watching`) or the snapshot file and prints the answer again when it
changed, until interrupted (docs/decisions/052-kubectl-conventions.md).

The configuration the decision follows is ``--config FILE``, else the ``config.yaml`` of the
ConfigMap ``--config-map NAMESPACE/NAME`` (default: the chart's,
``troupe-system/troupe-config``), read from the cluster or found in the snapshot, else the
built-in defaults, with a note on stderr saying so.

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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import yaml

from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.keys import PodKey
from reconciler.engine.placement.shortfall import short_level
from reconciler.objects import kinds
from reconciler.objects.snapshot_io import (
    InputError,
    collector_paused,
    read_file,
    read_objects,
    read_retained,
)
from reconciler.tools import printers, render, views, watching
from reconciler.tools import simulate as sim
from reconciler.tools.flags import (
    COMMANDS,
    DEFAULT_CONFIG_MAP,
    SNAPSHOT_CONFIG_COMMAND,
    add_commands,
    completion_script,
    parser,
)
from reconciler.tools.manifests import Context, Expanded, ManifestError, expand
from troupe.cli import guarded, interruptible, yaml_error
from troupe.config import Config, ConfigError, from_mapping, load_config

__all__ = ["COMMANDS", "add_commands", "answer", "load", "main", "parser", "request_timeout", "run"]
EXIT_NOT_FOUND, EXIT_BAD_INPUT = 1, 2

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


#: The notes said by this command: ``-w`` says each once, not at every answer.
_NOTED: set[str] = set()


def _note(text: str) -> None:
    """Say ``text`` on stderr, once per command."""
    if text not in _NOTED:
        _NOTED.add(text)
        print(text, file=sys.stderr)


def _parsed(text: str, where: str) -> Config:
    try:
        return from_mapping(yaml.safe_load(text) or {})
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} config.yaml: not valid YAML at {yaml_error(e)}") from None
    except ConfigError as e:
        raise ConfigError(f"{where} config.yaml: {e}") from None


def _config_map_ref(args: argparse.Namespace) -> tuple[str, str, str]:
    ref = args.config_map or DEFAULT_CONFIG_MAP
    namespace, _, name = ref.partition("/")
    if not namespace or not name:
        raise ConfigError(f"--config-map: expected NAMESPACE/NAME, got {ref!r}")
    return ref, namespace, name


def _defaults_note(where: str) -> str:
    levels = ", ".join(short_level(k) for k in Config().topology_levels)
    return f"note: {where}: deciding with the built-in configuration (levels {levels}; see --config)"


def _config(args: argparse.Namespace, api: Any, maps: Sequence[tuple[str, Any]] = ()) -> Config:
    """The configuration the decision follows: ``--config``, else the ConfigMap's
    ``config.yaml`` on the cluster (``api``) or among a snapshot's ConfigMaps (``maps``:
    ``(where, object)``), else the defaults with a note on stderr naming what was missing."""
    if args.config:
        return load_config(args.config)
    ref, namespace, name = _config_map_ref(args)
    if api is None:
        return _snapshot_config(args, ref, namespace, name, maps)
    from reconciler import kube

    text = kube.read_config_map(api, namespace, name, "config.yaml", request_timeout(args.request_timeout))
    if text is None:
        if args.config_map:
            raise ConfigError(f"--config-map: ConfigMap {ref} has no config.yaml or cannot be read")
        _note(_defaults_note(f"ConfigMap {ref} not found or not readable"))
        return Config()
    return _parsed(text, f"ConfigMap {ref}")


def _snapshot_config(args: argparse.Namespace, ref: str, namespace: str, name: str,
                     maps: Sequence[tuple[str, Any]]) -> Config:
    """A snapshot's configuration: its ConfigMap ``ref`` (``--config-map``, else the chart's
    default name), else, without ``--config-map``, the one ConfigMap of the chart's
    (``app.kubernetes.io/name: troupe``) with a ``config.yaml``, else the defaults."""
    def text(obj: Any) -> Any:
        data = obj.get("data")
        return data.get("config.yaml") if isinstance(data, dict) else None

    def named(obj: Any) -> tuple[Any, Any]:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        return meta.get("namespace"), meta.get("name")

    found = [(w, o) for w, o in maps if named(o) == (namespace, name)]
    if not found and not args.config_map:
        found = [(w, o) for w, o in maps if isinstance(text(o), str) and
                 ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name") == "troupe"]
        if len(found) == 1:
            ns, other = named(found[0][1])
            _note(f"note: deciding with the configuration of ConfigMap {ns}/{other} in the snapshot "
                  f"({ref} is not there)")
    if len(found) == 1 and isinstance(text(found[0][1]), str):
        return _parsed(text(found[0][1]), f"{found[0][0]} (ConfigMap {'/'.join(map(str, named(found[0][1])))})")
    if args.config_map:
        raise ConfigError(f"--config-map: ConfigMap {ref} with a config.yaml is not in the snapshot "
                          f"(append it: {SNAPSHOT_CONFIG_COMMAND}, or give --config FILE)")
    missing = "has no config.yaml" if found else "is not in the snapshot"
    _note(_defaults_note(f"ConfigMap {ref} {missing}"))
    return Config()


def _client(args: argparse.Namespace) -> tuple[Any, str]:
    """The read-only API client of kubectl's kubeconfig flags, and the context's namespace."""
    from reconciler import kube

    return kube.plugin_client(args.kubeconfig, args.context, kube.Overrides(
        server=args.server, token=args.token, as_user=args.as_user, as_groups=tuple(args.as_group),
        certificate_authority=args.certificate_authority, insecure=args.insecure_skip_tls_verify))


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
    maps: list[tuple[str, Any]] = []
    with collector_paused():  # millions of objects made, none freed: no collection need walk them
        if args.snapshot:
            source = "<stdin>" if args.snapshot == "-" else args.snapshot
            try:
                data = sys.stdin.buffer.read() if args.snapshot == "-" else read_file(args.snapshot)
            except OSError as e:
                raise InputError(f"{source}: cannot read snapshot: {e.strerror}") from None
            objects = read_retained(data, source)  # what the reconciler's cache keeps of each object
            maps = [(w, o) for w, k, o in objects if k == kinds.CONFIG_KIND]  # Troupe's, when appended
            objects = [t for t in objects if t[1] != kinds.CONFIG_KIND] if maps else objects
            where = f"snapshot {source}"
        else:
            from reconciler import kube

            api, namespace = _client(args)
            notes: list[str] = []
            objects = (objects_of() if objects_of is not None
                       else kube.read_cluster(api, extra, notes, request_timeout(args.request_timeout)))
            for note in notes:
                _note(note)
            where = f"the cluster ({args.context or 'current context'})"
        config = _config(args, api, maps)
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
def _printed(args: argparse.Namespace, obj: Any, text: Callable[[], str], names: Callable[[], str]) -> str:
    """``obj`` (the command's JSON) as ``-o`` asks; ``text()`` for table/wide, ``names()`` for name."""
    output: printers.Output = args.output
    if output.kind == "name":
        return names()
    if output.kind in ("table", "wide"):
        return render.fit(text(), render.terminal_width(output.kind))
    return printers.printed(obj, output, headers=not args.no_headers)


def answer(args: argparse.Namespace) -> tuple[str, str]:
    """What one command prints: ``(stdout, stderr)``, the data and a message (``no gangs
    found in namespace ml``; empty when none), read and decided once. Raises
    ``LookupError`` (the pod or gang is not there or not Troupe's),
    ``InputError``/``ConfigError``/``ManifestError``/``ValueError`` (bad input) and
    ``OSError`` (the cluster could not be read)."""
    if args.command == "plan":
        return _plan(args), ""
    # status also reads the Gang objects: what the reconciler recorded (decision 043).
    cluster, namespace, _ = load(args, (views.GANG_KIND,) if args.command == "status" else ())
    if args.command == "status":
        return _status(args, cluster, namespace)
    if args.command == "why":
        pod = views.find_member(cluster, args.pod, args.namespace or namespace or "default")
        found = views.why(cluster, pod, args.resource)
        return _printed(args, render.why_json(found),
                        lambda: render.render_why(found, cluster.config.topology_levels, args.domains),
                        lambda: printers.gang_names([found.gang])), ""
    tree = views.topology(cluster, args.resource)
    return _printed(args, render.topology_json(tree), lambda: render.render_topology(tree, args.resource),
                    lambda: render.names("node", render.node_names(tree))), ""


def _status(args: argparse.Namespace, cluster: views.Cluster, namespace: str) -> tuple[str, str]:
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
    note = ""
    if not gangs and not args.output.data:  # kubectl's "No resources found in ml namespace."
        note = f"no gangs found in namespace {chosen[0]}\n" if chosen else "no gangs found\n"
    if not args.name:  # pods bound for a scheduler kube-scheduler is not (decision 065)
        waiting: dict[str, list[str]] = {}
        for key, why in cluster.unscheduled.items():
            if not chosen or key.partition("/")[0] in chosen:
                waiting.setdefault(why, []).append(key)
        note += "".join(f"note: not Troupe's nor kube-scheduler's: {', '.join(keys)}: {why}\n"
                        for why, keys in waiting.items())
    text = _printed(args, printers.gang_list(gangs),
                    lambda: render.render_status(gangs, wide=args.output.kind == "wide", headers=not args.no_headers),
                    lambda: printers.gang_names(gangs))
    return text, note


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
    result = views.plan(cluster, keys, expanded.managed, gangs, expanded.notes, expanded.left)
    return _printed(args, render.plan_json(result), lambda: render.render_plan(result, result.cluster, source),
                    lambda: printers.gang_names(result.gangs))


def _answer_once(args: argparse.Namespace) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)``: the answer, its message and 0, or one line for stderr and its code."""
    try:
        return 0, *answer(args)
    except LookupError as e:
        return EXIT_NOT_FOUND, "", f"kubectl-troupe: {e.args[0]}\n"
    except (InputError, ConfigError, ManifestError, ValueError) as e:
        return EXIT_BAD_INPUT, "", f"kubectl-troupe: {e}\n"
    except OSError as e:
        return EXIT_NOT_FOUND, "", f"kubectl-troupe: {e}\n"


def run(args: argparse.Namespace, changes: Callable[[argparse.Namespace], Iterator[None]] | None = None) -> int:
    """Run one command on parsed arguments; returns the exit code. With ``--watch``: answer
    again after each batch of changes ``changes(args)`` yields (default
    :func:`reconciler.tools.watching.changes`: the cluster's watch events, or the snapshot
    file's changes, at most once per ``--watch-interval``) and print the answer whenever it
    differs from the last one printed (a failed read prints its line on stderr and is tried
    again at the next change; bad input ends it), until interrupted (``KeyboardInterrupt``
    reaches the caller; Ctrl-C interrupts ``--watch`` and ``--web`` even in a process
    started with SIGINT ignored, :func:`troupe.cli.interruptible`)."""
    _NOTED.clear()
    if args.command == "completion":
        sys.stdout.write(completion_script(args.shell))
        return 0
    if getattr(args, "web", False):
        interruptible()  # served until Ctrl-C, however the process was started
        return _web(args)
    watch = getattr(args, "watch", False)
    if watch and not args.watch_interval > 0:
        print(f"kubectl-troupe: --watch-interval {args.watch_interval:g}: must be seconds > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    if watch:
        interruptible()  # watched until Ctrl-C, however the process was started
    last: tuple[str, str] | None = None
    batches: Iterator[None] | None = None
    if watch:  # watching from before the first read: no change between the two is missed
        try:
            batches = changes(args) if changes is not None else watching.changes(args, _client)
        except ValueError as e:
            print(f"kubectl-troupe: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    while True:
        code, text, note = _answer_once(args)
        if code == 0 and (text, note) != last:
            if last is not None and args.output.kind in ("table", "wide") and text:
                sys.stdout.write("\n")
            sys.stdout.write(text)
            sys.stdout.flush()
            sys.stderr.write(note)
            last = (text, note)
        elif code != 0:
            sys.stderr.write(note)
        if batches is None or code == EXIT_BAD_INPUT:
            return code
        next(batches)


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
            from reconciler.tools.web import watched as live

            watched = live.watch_cluster(_client(args)[0], request_timeout(args.request_timeout))
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


def main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-troupe``: the plugin's entry point; returns the exit code (a closed
    stdout and Ctrl-C end it without a traceback, :func:`troupe.cli.guarded`)."""
    args = parser().parse_args(argv)
    return guarded(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
