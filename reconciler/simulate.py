"""The what-if simulator: plan a snapshot's gated gangs offline, as the reconciler would.

    python -m reconciler simulate SNAPSHOT [--config FILE] [--output json|table]
    python -m reconciler.simulate SNAPSHOT ...          (the same, standalone)

SNAPSHOT (a file, or ``-`` for stdin) is what ``kubectl get nodes,pods -A -o yaml``
prints (a ``v1 List``), or a multi-document YAML of Nodes and Pods. SharedDeviceGroups are
ignored for now, with a note on stderr.

The gangs to place are the gated pods (Troupe's gate or a ``gke.io/topology-aware-auto-``
gate) carrying Troupe's gang annotations, grouped by namespace and gang name, taken in
order of creation (their earliest member), then namespace/name. Each gang is:

- ``Waiting`` when fewer than ``size`` active members exist (all-or-nothing);
- ``Placed`` when the engine finds a plan; later gangs then see its capacity used;
- ``Unschedulable`` otherwise, with the engine's reason and code (and when members
  disagree on their gang keys, which the reconciler holds).

JSON output keeps these keys stable: ``{"gangs": [{"namespace", "name", "phase",
"reason", "placements": [{"pod", "node", "rank"}]}]}``; it adds ``code``, ``size``,
``members``, ``cost``, ``domain`` per gang and ``topology`` per placement.

Bad input (not YAML, an unknown kind, a missing or malformed field, an unreadable file or
configuration) gives one line on stderr naming the document and the field, and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reconciler.engine import Code, NodeInfo, PodInfo, Snapshot, TopologyLevels, place_gang
from reconciler.engine.fields import ObjectError
from troupe import contract
from troupe.config import Config, ConfigError, load_config

KINDS = ("Node", "Pod")
IGNORED_KINDS = ("SharedDeviceGroup",)
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Bad input; the message is the one line printed."""


@dataclass
class GangOutcome:
    """One gang's simulated result."""

    namespace: str
    name: str
    phase: str
    reason: str
    code: str
    size: int
    members: int
    cost: float | None = None
    domain: str | None = None
    placements: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "name": self.name, "phase": self.phase, "reason": self.reason,
            "code": self.code, "size": self.size, "members": self.members, "cost": self.cost,
            "domain": self.domain, "placements": self.placements,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's arguments, for ``python -m reconciler simulate``."""
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help="YAML of Nodes and Pods (kubectl get nodes,pods -A -o yaml), or - for stdin")
    parser.add_argument("--config", metavar="FILE", help="Troupe configuration YAML (default: built-in defaults)")
    parser.add_argument("--output", choices=("json", "table"), default="table", help="output format (default table)")


# --- reading the snapshot ----------------------------------------------------------------
def _describe(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str):
        return kind
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if kind == "Pod" and isinstance(ns, str) else f"{kind} {name}"


def read_objects(text: str, source: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(where, kind, object)`` for every object, lists unpacked; ``where`` names the
    document (1-based) and item. Raises :class:`InputError`."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{source}: not valid YAML{at}: {problem}") from None
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for n, doc in enumerate(docs, start=1):
        where = f"{source}: document {n}"
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise InputError(f"{where}: expected a Kubernetes object, got a {type(doc).__name__}")
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InputError(f"{where}: kind: missing field")
        if kind.endswith("List"):
            items = doc.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise InputError(f"{where} ({kind}): items: expected a list")
            for k, obj in enumerate(items):
                at = f"{where} item {k}"
                if not isinstance(obj, Mapping):
                    raise InputError(f"{at}: expected a Kubernetes object, got a {type(obj).__name__}")
                item_kind = obj.get("kind") or (kind[: -len("List")] if kind != "List" else None)
                if not isinstance(item_kind, str) or not item_kind:
                    raise InputError(f"{at}: kind: missing field")
                out.append((at, item_kind, obj))
        else:
            out.append((where, kind, doc))
    return out


def build(objects: Sequence[tuple[str, str, Mapping[str, Any]]], levels: TopologyLevels) -> tuple[Snapshot, dict[str, tuple[str, Mapping[str, Any]]], list[str]]:
    """The snapshot, each pod's ``(where, object)`` by key, and notes for stderr."""
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    origin: dict[str, tuple[str, Mapping[str, Any]]] = {}
    ignored: dict[str, int] = {}
    node_where: dict[str, str] = {}
    for where, kind, obj in objects:
        if kind in IGNORED_KINDS:
            ignored[kind] = ignored.get(kind, 0) + 1
            continue
        if kind not in KINDS:
            raise InputError(f"{where} ({_describe(obj, kind)}): unknown kind {kind!r} (expected Node or Pod)")
        try:
            if kind == "Node":
                node = NodeInfo.from_object(obj)
                if node.name in node_where:
                    raise InputError(f"{where} (Node {node.name}): duplicate of {node_where[node.name]}")
                node_where[node.name] = where
                nodes.append(node)
            else:
                pod = PodInfo.from_object(obj)
                if pod.key in origin:
                    raise InputError(f"{where} (Pod {pod.key}): duplicate of {origin[pod.key][0]}")
                origin[pod.key] = (where, obj)
                pods.append(pod)
        except ObjectError as e:
            raise InputError(f"{where} ({_describe(obj, kind)}): {e}") from None
    notes = [f"note: ignored {n} {kind} object(s): device groups are not simulated yet" for kind, n in ignored.items()]
    return Snapshot(nodes, pods, levels), origin, notes


# --- planning ----------------------------------------------------------------------------
def _topology(snapshot: Snapshot, node: str) -> str:
    return "/".join("-" if v.startswith("<") else v for v in snapshot.paths[snapshot.index[node]])


def simulate(snapshot: Snapshot, origin: Mapping[str, tuple[str, Mapping[str, Any]]], config: Config) -> tuple[list[GangOutcome], list[str]]:
    """Plan every gang in order; returns the outcomes and notes for stderr."""
    notes: list[str] = []
    unannotated = 0
    gangs: dict[tuple[str, str], list[tuple[PodInfo, contract.GangSpec]]] = {}
    for key, pod in snapshot.pods.items():
        if pod.terminal:
            continue
        where, obj = origin[key]
        try:
            spec = contract.parse_gang(obj, config)
        except contract.ContractError as e:
            if pod.gated:
                notes.append(f"note: {where} (Pod {key}) ignored, as the reconciler ignores it: {e}")
            continue
        if spec is not None:
            gangs.setdefault((spec.namespace, spec.name), []).append((pod, spec))
        elif pod.gated:
            unannotated += 1
    if unannotated:
        notes.append(f"note: {unannotated} gated pod(s) without gang annotations not simulated "
                     "(a GKE auto-gang's size is only known in the cluster)")
    pending = {k: v for k, v in gangs.items() if any(p.gated for p, _ in v)}

    def created(item: tuple[tuple[str, str], list[tuple[PodInfo, contract.GangSpec]]]) -> tuple[int, str, str, str]:
        stamps = [p.creation_timestamp for p, _ in item[1] if p.creation_timestamp]
        return (0, min(stamps), *item[0]) if stamps else (1, "", *item[0])

    outcomes = []
    for (ns, name), members in sorted(pending.items(), key=created):
        gated = sorted((p for p, _ in members if p.gated), key=lambda p: (p.rank, p.key))
        size = members[0][1].size
        held = _disagreement([p for p, _ in members], config)
        outcome = GangOutcome(ns, name, "Unschedulable", held, Code.UNRESOLVABLE.value, size, len(members))
        if held:
            outcomes.append(outcome)
            continue
        if len(members) < size:
            outcome.phase, outcome.reason, outcome.code = "Waiting", f"{len(members)} of {size} members present", ""
            outcomes.append(outcome)
            continue
        first = gated[0].annotations
        result = place_gang(snapshot, gated, first.get(contract.TOPOLOGY_REQUIRED_LEVEL),
                            first.get(contract.TOPOLOGY_PREFERRED_LEVEL))
        outcome.reason, outcome.code = result.reason, result.code.value
        if result.placed:
            snapshot = snapshot.with_assumed(result)
            outcome.phase, outcome.cost, outcome.domain = "Placed", result.cost, str(result.domain)
            outcome.placements = [
                {"pod": a.pod_key.split("/", 1)[1], "node": a.node, "rank": a.rank,
                 "topology": _topology(snapshot, a.node)}
                for a in result.assignments
            ]
        outcomes.append(outcome)
    return outcomes, notes


def _disagreement(members: Sequence[PodInfo], config: Config) -> str:
    """The reconciler's rule: members that disagree on size, timeout or level are held."""
    keys = contract.GangKeys.for_prefix(config.gang_annotation_prefix)
    differing = []
    for k in (keys.size, keys.timeout, contract.TOPOLOGY_REQUIRED_LEVEL, contract.TOPOLOGY_PREFERRED_LEVEL):
        values = sorted({p.annotations.get(k, "<unset>") for p in members})
        if len(values) > 1:
            differing.append(f"{k}: {', '.join(values)}")
    return "members disagree on " + "; ".join(differing) + " (held until they agree)" if differing else ""


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


def run(args: argparse.Namespace) -> int:
    """Run the simulator on parsed arguments; returns the exit code."""
    try:
        config = load_config(args.config)
        source = "<stdin>" if args.snapshot == "-" else args.snapshot
        try:
            text = sys.stdin.read() if args.snapshot == "-" else Path(args.snapshot).read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{source}: cannot read snapshot: {e.strerror}") from None
        except UnicodeDecodeError:
            raise InputError(f"{source}: not valid YAML: not UTF-8 text") from None
        levels = TopologyLevels.from_config(config)
        snapshot, origin, notes = build(read_objects(text, source), levels)
    except (InputError, ConfigError) as e:
        print(f"simulate: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    outcomes, more = simulate(snapshot, origin, config)
    for note in [*notes, *more]:
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
