"""How ``kubectl troupe`` prints its answers (:mod:`reconciler.tools.plugin` runs the commands).

kubectl's output conventions (``kubectl get -o``): ``table`` (the default: columns two
spaces apart, each line cut to the terminal's width when stdout is a terminal, :func:`fit`),
``wide`` (the table with more columns and nothing cut), ``json`` and ``yaml`` (the same stable
objects; ``yaml`` is the JSON object dumped as YAML) and ``name`` (``node/NAME`` lines, as
``kubectl get -o name`` prints ``KIND/NAME``; gangs are printed by
:mod:`reconciler.tools.printers`). Nothing here reads the cluster: :mod:`reconciler.tools.views`
values in, text out.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from reconciler.engine.ledger.occupancy import DomainUsage
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.timestamps import rfc3339 as stamp
from reconciler.engine.placement.shortfall import Shortfall, short_level
from reconciler.tools import simulate as sim
from reconciler.tools import views

#: The output formats of every command (``-o``).
OUTPUTS = ("table", "wide", "json", "yaml", "name")
#: Candidate domains ``why`` lists (the best ones); the rest are summed up in one line.
WHY_DOMAINS = 8
#: What a cut line ends with.
CUT = "..."


def terminal_width(output: str) -> int | None:
    """The width lines of ``output`` are cut to: for ``table`` on a terminal, the terminal's
    (:func:`shutil.get_terminal_size`, ``$COLUMNS`` first); None (nothing cut) for ``wide``
    and for a pipe or a file, whose reader wants whole lines (``kubectl troupe status | grep``)."""
    if output != "table" or not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def fit(text: str, width: int | None) -> str:
    """``text`` with each line longer than ``width`` characters cut to ``width``, ending in
    ``...`` (unchanged for None)."""
    if width is None:
        return text
    keep = max(width - len(CUT), 1)
    return "".join(line[:keep] + CUT + "\n" if len(line.rstrip("\n")) > width else line
                   for line in text.splitlines(keepends=True))


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, writing a ``str`` subclass (a :class:`~reconciler.engine.model.keys.PodKey`) as the string it is."""


_Dumper.add_multi_representer(str, yaml.representer.SafeRepresenter.represent_str)


def data(obj: Any, output: str) -> str:
    """``obj`` (plain JSON values) as ``json`` (indented) or ``yaml`` text."""
    if output == "yaml":
        return str(yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=10_000))
    return json.dumps(obj, indent=2) + "\n"


def names(kind: str, items: Sequence[str]) -> str:
    """``-o name``: one ``KIND/NAME`` line per item, as ``kubectl get -o name`` prints."""
    return "".join(f"{kind}/{name}\n" for name in items)


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


def render_status(gangs: Sequence[views.GangStatus], wide: bool = False, headers: bool = True) -> str:
    """``status`` as a table: one line per gang, after a header line unless ``headers`` is
    false (``--no-headers``); ``wide`` adds the priority, the rule that decided and the
    domain of a placement before the reason. Nothing for no gang (the caller says so on stderr)."""
    if not gangs:
        return ""
    head = ("NAMESPACE", "GANG", "PHASE", "MEMBERS", "RELEASED", "BOUND", "RUNNING", "WAITING", "QUEUE")
    more = ("PRIORITY", "RULE", "DOMAIN") if wide else ()
    rows: list[tuple[str, ...]] = [(*head, *more, "REASON")]
    for s in gangs:
        extra = (str(s.priority), s.rule, s.domain or "-") if wide else ()
        rows.append((s.namespace, s.name, s.phase, _members(s), str(s.released), str(s.bound), str(s.running),
                     duration(s.waiting), str(s.queue) if s.queue else "-", *extra, s.reason))
    lines = columns(rows)[0 if headers else 1:]
    return "\n".join(line.rstrip() for line in lines) + "\n"


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
                         "otherPods": n.others, "avoided": n.avoided or None} for n in d.nodes]
    return out


def render_topology(root: DomainUsage, resource: str) -> str:
    """``topology`` as an indented tree: each domain with free/allocatable units, each node
    with its state and holders."""
    lines = [f"cluster: {root.free} of {root.allocatable} {resource} free"]

    def node_row(label: str, n: Any) -> tuple[str, str, str, str]:
        state = "not ready" if not n.ready else "cordoned" if n.cordoned else "avoided" if n.avoided else ""
        held = ", ".join(f"{g} ({u} {resource}, {c} pod{'s' if c != 1 else ''})" if c else f"{g} ({u} {resource})"
                         for g, u, c in n.holders)
        others = f"{n.others} other pod{'s' if n.others != 1 else ''}" if n.others else ""
        return (label, f"{max(n.free, 0)} of {n.allocatable} free", state,
                "; ".join(x for x in (held, others, n.avoided) if x))

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
    they wait for, whom they would evict; the pods left to kube-scheduler, per object and
    why; the notes (docs/decisions/077-plan-takes-what-users-apply.md)."""
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
            if g.outcome is not None and g.outcome.reserved:
                lines.append(f"{g.key} is expected to start {_expected(g.outcome)} on {g.outcome.reserved}.")
            lines += render_shortfall(views.room_shortfall(cluster, g), g, WHY_DOMAINS // 2)
    fates = result.cluster.unscheduled
    for origin, keys, why in result.left:
        alone = [k for k in keys if k not in fates]
        if alone:
            pods = "" if origin.startswith("Pod ") else f", {len(alone)} pod(s) placed one by one ({', '.join(alone)})"
            lines.append(f"left to kube-scheduler: {origin}{pods}: {why}")
    lines += [f"note: {n}" for n in result.notes]
    waiting: dict[str, list[str]] = {}
    for key in result.untouched:
        if key in fates:
            waiting.setdefault(fates[key], []).append(key)
    lines += [f"not Troupe's nor kube-scheduler's: {', '.join(keys)}: {why}" for why, keys in waiting.items()]
    return "\n".join(lines) + "\n"


def _expected(outcome: sim.GangOutcome) -> str:
    """When a reserved gang is expected to start (``at 12:04:00Z``), as ``plan`` prints it."""
    if outcome.expected_start is None:
        return "once a pod without a time limit ends"
    return f"at {stamp(outcome.expected_start)[:19]}Z"


def plan_json(result: views.PlanResult) -> dict[str, Any]:
    """``plan --output json``: the manifest's pods, those left alone, what becomes of those
    bound for a scheduler kube-scheduler is not (``unscheduled``: pod -> why,
    :func:`reconciler.tools.peers.fate`), those left to kube-scheduler
    (``leftToKubeScheduler``: ``{object, pods, why}`` per manifest object), the ``notes``,
    each gang's decision with its cost, placements and victims, a gang with a reservation
    its ``expectedStart`` and ``reserved`` domain (``queueingStrategy: Backfill``,
    docs/decisions/079-reservation-at-earliest-start-and-backfill.md), and the
    ProvisioningRequest it would make (``provisioningRequest``, with ``provisioning`` on:
    docs/decisions/080-provisioning-requests.md)."""
    rows = [{**g.to_json(), "cost": g.outcome.cost if g.outcome is not None else None,
             "placements": g.outcome.placements if g.outcome is not None else [],
             "victims": g.outcome.victims if g.outcome is not None else [],
             **({k: v for k, v in g.outcome.to_json().items() if k in ("expectedStart", "reserved")}
                if g.outcome is not None else {}),
             **({"provisioningRequest": g.outcome.capacity}
                if g.outcome is not None and g.outcome.capacity is not None else {})} for g in result.gangs]
    fates = result.cluster.unscheduled
    left = [{"object": origin, "pods": alone, "why": why} for origin, keys, why in result.left
            if (alone := [k for k in keys if k not in fates])]
    return {"pods": list(result.pods), "untouched": list(result.untouched),
            "unscheduled": {k: fates[k] for k in result.untouched if k in fates}, "leftToKubeScheduler": left,
            "notes": list(result.notes), "gangs": rows}


def node_names(d: DomainUsage) -> list[str]:
    """Every node of the tree, in its order (``topology -o name``)."""
    return [n.name for n in d.nodes] + [name for c in d.children for name in node_names(c)]
