"""The what-if simulator: the reconciler's decision for every waiting gang of a snapshot.

    python -m reconciler simulate SNAPSHOT [--config FILE] [--output json|table] [--now TIME]
    python -m reconciler.simulate SNAPSHOT ...          (the same, standalone)

SNAPSHOT (a file, or ``-`` for stdin) is what ``kubectl get nodes,pods -A -o json`` or
``-o yaml`` prints (a ``v1 List``), or a multi-document YAML of Nodes and Pods, read as
:mod:`reconciler.snapshot_io` says (JSON by orjson, YAML by libyaml when present); add
``jobs`` to the kubectl command and the size of a GKE auto-gang owned by a Job is that
Job's parallelism, as in the cluster; add ``jobsets,leaderworkersets,pytorchjobs`` too and
gangs of ``<prefix>-size: auto`` are grouped and sized from their workloads as the
reconciler does (:mod:`reconciler.engine.workloads`; a workload kind that is absent from
the snapshot leaves its gangs waiting, with the reason). SharedDeviceGroups are ignored
for now, with a note on stderr.

Every gang with a gated member is decided by the very function the reconciler calls,
:func:`reconciler.engine.decision.decide`, in order of creation (the gang's earliest
member), then key; a gang placed earlier uses its capacity for later ones, and a gang
rolled back frees its members'. So the phase and the reason are the reconciler's:
``Waiting``, ``Held``, ``BackingOff`` (never here: backoffs live in the reconciler),
``Unschedulable``, ``Placed`` (the reconciler would release it now), ``Releasing`` (a
release cut short, finished on its reserved nodes), ``RolledBack``. ``--now`` sets the
time of the decision (RFC 3339; default: the current time), which timeouts and settle
periods are measured against.

JSON output keeps these keys stable: ``{"gangs": [{"namespace", "name", "phase",
"reason", "placements": [{"pod", "node", "rank"}]}]}``; it adds ``rule``, ``code``,
``size``, ``members``, ``cost``, ``domain`` per gang and ``topology`` per placement.

Bad input (neither JSON nor YAML, an unknown kind, a missing or malformed field, an unreadable file or
configuration) gives one line on stderr naming the document and the field, and exit code 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine import NodeInfo, PodInfo, Snapshot, TopologyLevels
from reconciler.engine import workloads as wl
from reconciler.engine.decision import decide
from reconciler.engine.fields import ObjectError, mapping, string
from reconciler.engine.gang import Gang, build_gang, group_by_gang, job_parallelism
from reconciler.engine.lifecycle import Phase
from reconciler.snapshot_io import InputError, collector_paused, read_file, read_objects
from troupe.config import Config, ConfigError, load_config

KINDS = ("Node", "Pod", "Job", *(k.kind for k in wl.CUSTOM_KINDS))
IGNORED_KINDS = ("SharedDeviceGroup",)
EXIT_BAD_INPUT = 2


@dataclass
class GangOutcome:
    """One gang's simulated decision (the fields of the JSON output)."""

    namespace: str
    name: str
    phase: str
    reason: str
    rule: str
    code: str
    size: int | None
    members: int
    cost: float | None = None
    domain: str | None = None
    placements: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The gang's JSON object."""
        return {
            "namespace": self.namespace, "name": self.name, "phase": self.phase, "reason": self.reason,
            "rule": self.rule, "code": self.code, "size": self.size, "members": self.members, "cost": self.cost,
            "domain": self.domain, "placements": self.placements,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's arguments, for ``python -m reconciler simulate``."""
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help="JSON or YAML of Nodes and Pods (kubectl get nodes,pods -A -o json|yaml), or - for stdin")
    parser.add_argument("--config", metavar="FILE", help="Troupe configuration YAML (default: built-in defaults)")
    parser.add_argument("--output", choices=("json", "table"), default="table", help="output format (default table)")
    parser.add_argument("--now", metavar="TIME",
                        help="decide as of this time (RFC 3339, e.g. 2026-11-22T10:00:00Z; default: now)")


# --- reading the snapshot ----------------------------------------------------------------
def _describe(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str):
        return kind
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if kind == "Pod" and isinstance(ns, str) else f"{kind} {name}"


@dataclass
class Built:
    """A snapshot read from objects: the engine's snapshot, each pod's ``(where,
    object)`` by key, Jobs' parallelism by ``(namespace, name)``, notes for stderr, and
    the workload objects (Jobs, JobSets, LeaderWorkerSets, PyTorchJobs)."""

    snapshot: Snapshot
    origin: dict[str, tuple[str, Mapping[str, Any]]]
    parallelism: dict[tuple[str, str], int]
    notes: list[str]
    workloads: wl.Workloads = field(default_factory=wl.Workloads)


def build(objects: Sequence[tuple[str, str, Mapping[str, Any]]], levels: TopologyLevels) -> Built:
    """Parse every object; raises :class:`InputError` naming the document and field."""
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    origin: dict[str, tuple[str, Mapping[str, Any]]] = {}
    parallelism: dict[tuple[str, str], int] = {}
    workloads: dict[wl.WorkloadKey, wl.Workload] = {}
    ignored: dict[str, int] = {}
    node_where: dict[str, str] = {}
    for where, kind, obj in objects:
        if kind in IGNORED_KINDS:
            ignored[kind] = ignored.get(kind, 0) + 1
            continue
        if kind not in KINDS:
            raise InputError(f"{where} ({_describe(obj, kind)}): unknown kind {kind!r} (expected {', '.join(KINDS)})")
        try:
            if kind == "Node":
                node = NodeInfo.from_object(obj)
                if node.name in node_where:
                    raise InputError(f"{where} (Node {node.name}): duplicate of {node_where[node.name]}")
                node_where[node.name] = where
                nodes.append(node)
            elif kind != "Pod":
                meta = mapping(obj, "metadata", required=True)
                mapping(obj, "spec")  # a spec that is not a mapping is refused, naming the field
                key = (string(meta, "namespace", "metadata", default="default"), string(meta, "name", "metadata", required=True))
                if kind == "Job":
                    parallelism[key] = job_parallelism(obj)
                found = wl.workload(kind, obj)
                if found is not None:
                    workloads[found.key] = found
            else:
                pod = PodInfo.from_object(obj)
                if pod.key in origin:
                    raise InputError(f"{where} (Pod {pod.key}): duplicate of {origin[pod.key][0]}")
                origin[pod.key] = (where, obj)
                pods.append(pod)
        except ObjectError as e:
            raise InputError(f"{where} ({_describe(obj, kind)}): {e}") from None
    notes = [f"note: ignored {n} {kind} object(s): device groups are not simulated yet" for kind, n in ignored.items()]
    return Built(Snapshot(nodes, pods, levels), origin, parallelism, notes, wl.Workloads(workloads))


# --- deciding ----------------------------------------------------------------------------
def _topology(snapshot: Snapshot, node: str) -> str:
    i = snapshot.index.get(node)
    if i is None:
        return "-"
    return "/".join("-" if v.startswith("<") else v for v in snapshot.paths[i])


def waiting_gangs(snapshot: Snapshot, config: Config, parallelism: Mapping[tuple[str, str], int],
                  workloads: wl.Workloads | None = None) -> list[Gang]:
    """Every gang with a gated active member, in order of creation, then key."""
    gangs = [build_gang(key, pods, config, parallelism, workloads)
             for key, pods in group_by_gang(snapshot.pods.values(), config).items()
             if any(p.active and p.gated for p in pods)]
    return sorted(gangs, key=lambda g: (g.created == "", g.created, g.key))


def simulate(snapshot: Snapshot, config: Config, now: float,
             parallelism: Mapping[tuple[str, str], int] | None = None,
             workloads: wl.Workloads | None = None) -> list[GangOutcome]:
    """Decide every waiting gang in order (:func:`waiting_gangs`), each on the snapshot
    the decisions before it left: a placed gang uses its nodes, a rolled-back gang's
    deleted members free theirs. ``workloads`` size the gangs of ``<prefix>-size: auto``."""
    outcomes = []
    for gang in waiting_gangs(snapshot, config, parallelism or {}, workloads):
        decision = decide(gang, snapshot, now)
        placements = [{"pod": m.pod.split("/", 1)[1], "node": m.node, "rank": m.rank,
                       "topology": _topology(snapshot, m.node)} for m in decision.release]
        result = decision.placement
        if decision.phase is Phase.PLACED and result is not None:
            snapshot = snapshot.with_assumed(result)
        elif decision.phase is Phase.ROLLED_BACK:
            snapshot = snapshot.with_removed(decision.rollback)
        placed = decision.phase is Phase.PLACED and result is not None
        outcomes.append(GangOutcome(
            gang.namespace, gang.name, decision.phase.value, decision.reason, decision.rule, decision.code,
            decision.observation.size, len(gang.members),
            cost=result.cost if placed and result is not None else None,
            domain=str(result.domain) if placed and result is not None and result.domain else None,
            placements=placements,
        ))
    return outcomes


# --- output ------------------------------------------------------------------------------
def _short(level: str) -> str:
    return level.rsplit("/", 1)[-1].removeprefix("gce-topology-")


def render_table(outcomes: Sequence[GangOutcome], levels: TopologyLevels) -> str:
    """Readable columns: one line per gang, then one per member with its topology path."""
    if not outcomes:
        return "no gated gangs in the snapshot\n"
    rows: list[tuple[str, str, str, str, str]] = [("GANG", "PHASE", "MEMBERS", "COST", "DOMAIN / REASON")]
    for gang in outcomes:
        cost = f"{gang.cost:.0f}" if gang.cost is not None else "-"
        rows.append((f"{gang.namespace}/{gang.name}", gang.phase, f"{gang.members}/{gang.size}", cost,
                     gang.domain if gang.phase == "Placed" and gang.domain else gang.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    path_header = "/".join(_short(k) for k in levels.keys).upper()
    lines = []
    listed: list[GangOutcome | None] = [None, *outcomes]
    for row, o in zip(rows, listed, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
        if o is not None and o.placements:
            sub = [("RANK", "POD", "NODE", path_header)]
            sub += [(str(p["rank"]), p["pod"], p["node"], p["topology"]) for p in o.placements]
            sw = [max(len(r[i]) for r in sub) for i in range(3)]
            for r in sub:
                lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(r[:3], sw, strict=True)) + "  " + r[3])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _now(raw: str | None) -> float:
    if raw is None:
        return time.time()
    try:
        parsed = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise InputError(f"--now: expected an RFC 3339 time such as 2026-11-22T10:00:00Z, got {raw!r}") from None
    if parsed.tzinfo is None:
        raise InputError(f"--now: give a time zone (Z or +00:00), got {raw!r}")
    return parsed.timestamp()


def run(args: argparse.Namespace) -> int:
    """Run the simulator on parsed arguments; returns the exit code."""
    try:
        config = load_config(args.config)
        now = _now(getattr(args, "now", None))
        source = "<stdin>" if args.snapshot == "-" else args.snapshot
        try:
            data = sys.stdin.buffer.read() if args.snapshot == "-" else read_file(args.snapshot)
        except OSError as e:
            raise InputError(f"{source}: cannot read snapshot: {e.strerror}") from None
        levels = TopologyLevels.from_config(config)
        with collector_paused():  # parsing allocates millions of objects and frees none
            built = build(read_objects(data, source), levels)
            # The objects live to the end: no collection need walk them (unfrozen below).
            gc.freeze()
        del data
    except (InputError, ConfigError) as e:
        print(f"simulate: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        outcomes = simulate(built.snapshot, config, now, built.parallelism, built.workloads)
    finally:
        gc.unfreeze()
    for note in built.notes:
        print(note, file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"gangs": [o.to_json() for o in outcomes]}, indent=2))
    else:
        sys.stdout.write(render_table(outcomes, levels))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m reconciler.simulate``."""
    parser = argparse.ArgumentParser(
        prog="python -m reconciler.simulate",
        description="Plan the gated gangs of a snapshot offline, as the reconciler would.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
