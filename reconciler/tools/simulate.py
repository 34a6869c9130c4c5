"""The what-if simulator: the reconciler's decision for every waiting gang of a snapshot.

    python -m reconciler simulate SNAPSHOT [--config FILE] [--output json|table] [--now TIME]
    python -m reconciler.tools.simulate SNAPSHOT ...          (the same, standalone)

SNAPSHOT (a file, or ``-`` for stdin) is what the one snapshot command prints (a ``v1 List``;
``-o yaml`` too), or a multi-document YAML of such objects, read as
:mod:`reconciler.objects.snapshot_io` says (JSON by orjson, YAML by libyaml when present)::

    kubectl get nodes,pods,jobs,jobsets,leaderworkersets,pytorchjobs,shareddevicegroups,\
      poddisruptionbudgets,persistentvolumeclaims,persistentvolumes,csinodes,namespaces,\
      priorityclasses,resourceslices,deviceclasses,resourceclaims,resourceclaimtemplates \
      -A -o json > snapshot.json

(:data:`~reconciler.objects.kinds.SNAPSHOT_COMMAND`; leave out custom kinds whose CRD is not
installed). Each kind counts as in the cluster: Jobs' parallelism, workloads sizing
``<prefix>-size: auto`` gangs (:mod:`reconciler.engine.model.workloads`; a workload absent from the
snapshot leaves its gangs waiting), SharedDeviceGroups (one a pod joins that the snapshot
lacks is "not in the snapshot"), PodDisruptionBudgets for ``atomic`` preemption, claims,
volumes and CSINodes for the volume filters (skipped without any), Namespaces for namespace
selectors, the DRA kinds for devices claimed; PriorityClasses are ``kubectl troupe plan``'s.
The configuration's ``topologySpreadDefaultConstraints`` apply as in the reconciler: the
snapshot is made by the reconciler's own builder
(:func:`reconciler.engine.ledger.builder.build_snapshot`, docs/decisions/047-one-snapshot-builder.md).

Every gang with a gated member is decided by the very function the reconciler calls,
:func:`reconciler.engine.decision.decide.decide`, in order of creation (the gang's earliest
member), then key; a gang placed earlier uses its capacity for later ones, and a gang
rolled back frees its members'. So the phase and the reason are the reconciler's:
``Waiting``, ``Held``, ``BackingOff`` (never here: backoffs live in the reconciler),
``Unschedulable``, ``Placed`` (the reconciler would release it now), ``Releasing`` (a
release cut short, finished on its reserved nodes), ``RolledBack``. ``--now`` sets the
time of the decision (RFC 3339; default: the current time), which timeouts and settle
periods are measured against.

Gangs are decided in queue order (the highest priority first, then the earliest creation,
then the key), with what the gangs ahead hold or block (``queueingStrategy``), and with
``--gang-preemption-mode`` (default: the configuration's) a gang that does not fit may
preempt lower-priority gangs, exactly as the reconciler would.

JSON output keeps these keys stable: ``{"gangs": [{"namespace", "name", "phase",
"reason", "placements": [{"pod", "node", "rank"}], "victims": [{"namespace", "pod",
"node"}]}], "deviceGroups": [{"name", "phase", "node", "devices", "pods", "reason"}]}``
(``victims`` for a gang in phase ``Preempting``; ``reservation``, ``{"plannedAt", "nodes",
"members", "released", "bound"}``, for a gang released as created that holds one, or makes
one now: docs/decisions/034-release-as-created.md; ``provisioningRequest``, ``{"request",
"class", "pods", "attempt", "shapes": [{"template", "count", "requests", "model"}]}``, for a
gang that would ask for room with ``provisioning`` on: docs/decisions/080); it adds ``rule``, ``code``, ``size``,
``members``, ``cost``, ``domain``, ``slices`` (``[{"layer", "size", "index", "domain"}]``,
each slice of the gang's slice layers, outermost first) and ``balance`` (``{"level",
"domains", "largest", "smallest"}`` or null) per gang, ``topology`` per placement and, for
a gang with slices, ``slices`` (the member's slice index in each layer), and ``devices`` (resource name -> IDs)
per placement of a group member. A group pod in no gang is a gang
of one. ``deviceGroups`` lists every SharedDeviceGroup as it stands after the simulated
decisions: ``Bound`` with its node and IDs, or ``Pending`` with the reason.

Bad input (neither JSON nor YAML, an unknown kind, a missing or malformed field, an unreadable file or
configuration) gives one line on stderr naming the document and the field, and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reconciler.engine.decision.seen import Decision
from reconciler.engine.decision.step import step
from reconciler.engine.gangs.capacity import ask_for, owner_of
from reconciler.engine.gangs.gang import Gang, all_gangs
from reconciler.engine.gangs.queueing import Hold as QueueHold
from reconciler.engine.gangs.queueing import Policy, QueueState, QueueView, queue_order
from reconciler.engine.ledger.builder import build_snapshot
from reconciler.engine.ledger.parts import BadObject, Located, read_parts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.devicegroups import Holding
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import rfc3339 as stamp
from reconciler.engine.placement.devicegroups import group_view
from reconciler.engine.placement.layers import Balance
from reconciler.objects.kinds import (
    CONFIG_KIND,
    NOT_IN_SNAPSHOT,
    SKIPPED_KINDS,
    SNAPSHOT_COMMAND,
    SNAPSHOT_NOTE,
)
from reconciler.objects.snapshot_io import InputError, collector_paused, read_file, read_retained
from reconciler.tools.interpret import APPLY, Applied, reservation_json
from troupe.cli import OneLineParser, UsageError, guarded, rfc3339
from troupe.config import PREEMPTION_MODES, Config, ConfigError, load_config

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
    slices: list[dict[str, Any]] = field(default_factory=list)
    balance: dict[str, Any] | None = None
    bindings: tuple[Holding, ...] = ()
    victims: list[dict[str, Any]] = field(default_factory=list)
    #: The decision released new members (``placed``: they use their nodes from then on),
    #: or makes room by preemption (``preempting``: the output lists its victims).
    placed: bool = False
    preempting: bool = False
    #: A gang released as created: its reservation (``plannedAt``, ``nodes`` by rank, and
    #: how many ``members`` exist, are ``released`` and ``bound``), None for other gangs.
    reservation: dict[str, Any] | None = None
    #: The ProvisioningRequest the gang would ask for (``provisioning`` on:
    #: :func:`~reconciler.tools.interpret.capacity_json`), None when it asks none.
    capacity: dict[str, Any] | None = None
    #: When a gang that waits with a reservation (``queueingStrategy: Backfill``) is expected
    #: to start (seconds since the epoch), the reservation's start; None when not known
    #: (docs/decisions/079-reservation-at-earliest-start-and-backfill.md).
    expected_start: float | None = None
    #: The domain that reservation holds (``""``: none).
    reserved: str = ""
    #: What the decision was made of, for callers that explain it (``kubectl troupe why``):
    #: the gang, the decision itself, the snapshot it was made on and the queue's view.
    gang: Gang | None = field(default=None, repr=False, compare=False)
    decision: Decision | None = field(default=None, repr=False, compare=False)
    seen: Snapshot | None = field(default=None, repr=False, compare=False)
    queue: QueueView | None = field(default=None, repr=False, compare=False)
    #: The capacity held for it (a head-of-line hold or a reservation), None when none: the
    #: topology map's ``held`` nodes (:func:`reconciler.tools.web.data.held_marks`).
    hold: QueueHold | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The gang's JSON object (``victims`` only for a gang that preempts)."""
        out: dict[str, Any] = {
            "namespace": self.namespace, "name": self.name, "phase": self.phase, "reason": self.reason,
            "rule": self.rule, "code": self.code, "size": self.size, "members": self.members, "cost": self.cost,
            "domain": self.domain, "placements": self.placements, "slices": self.slices, "balance": self.balance,
        }
        if self.preempting:
            out["victims"] = self.victims
        if self.reservation is not None:
            out["reservation"] = self.reservation
        if self.capacity is not None:
            out["provisioningRequest"] = self.capacity
        if self.reserved:
            out["expectedStart"] = stamp(self.expected_start) if self.expected_start is not None else None
            out["reserved"] = self.reserved
        return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's arguments, for ``python -m reconciler simulate``."""
    parser.add_argument("snapshot", metavar="SNAPSHOT",
                        help=f"what `{SNAPSHOT_COMMAND}` writes (or -o yaml; - for stdin); {SNAPSHOT_NOTE}")
    parser.add_argument("--config", metavar="FILE", help="Troupe configuration YAML (default: built-in defaults)")
    parser.add_argument("--output", choices=("json", "table"), default="table", help="output format (default table)")
    parser.add_argument("--now", metavar="TIME",
                        help="decide as of this time (RFC 3339, e.g. 2026-11-22T10:00:00Z; default: now)")
    parser.add_argument("--gang-preemption-mode", choices=PREEMPTION_MODES, metavar="off|minimal|atomic",
                        help="evict lower-priority gangs for a gang that does not fit: off, minimal (only the pods "
                        "the plan needs) or atomic (every pod of each chosen gang) (default: the configuration's "
                        "gangPreemptionMode)")


# --- reading the snapshot ----------------------------------------------------------------
@dataclass
class Built:
    """A snapshot read from objects: the engine's snapshot, Jobs' parallelism by
    ``(namespace, name)``, notes for stderr, and the workload objects (Jobs, JobSets,
    LeaderWorkerSets, PyTorchJobs)."""

    snapshot: Snapshot
    parallelism: Mapping[tuple[str, str], int]
    notes: list[str]
    workloads: wl.Workloads = field(default_factory=wl.Workloads)


def build(objects: Iterable[Located], levels: TopologyLevels, config: Config | None = None,
          absent_group: str | None = None) -> Built:
    """Parse every object (passing over :data:`SKIPPED_KINDS` and a ConfigMap) with the parser the tests
    and benchmarks use (:func:`~reconciler.engine.ledger.parts.read_parts`) and build the
    snapshot with the builder the reconciler's cache calls
    (:func:`~reconciler.engine.ledger.builder.build_snapshot`), so it is the snapshot the
    reconciler would decide on: DRA counted, ``config``'s spread defaults, the volume catalog
    (None, the volume filters skipped, when the objects hold no claim, volume or CSINode),
    namespaces' labels, the workloads' reservations. ``absent_group``: why a
    SharedDeviceGroup a pod joins is missing from a snapshot (:data:`NOT_IN_SNAPSHOT`; None
    on a live cluster). Raises :class:`InputError` naming the document and field."""
    try:
        read = read_parts(((w, k, o) for w, k, o in objects if k not in SKIPPED_KINDS and k != CONFIG_KIND), config, levels,
                          absent_group=absent_group)
    except BadObject as e:
        raise InputError(str(e)) from None
    snapshot = build_snapshot(read.parts)
    notes = [f"note: {c}" for c in snapshot.devices.conflicts]
    return Built(snapshot, read.parallelism, notes, read.parts.workloads)


# --- deciding ----------------------------------------------------------------------------
def waiting_gangs(snapshot: Snapshot, config: Config, parallelism: Mapping[tuple[str, str], int],
                  workloads: wl.Workloads | None = None) -> list[Gang]:
    """Every gang with a gated active member, and every gang released as created from a
    workload that holds a reservation or has none of it released yet (to be reserved:
    docs/decisions/034-release-as-created.md), in queue
    order (:func:`queue_order`: the highest priority first, then the earliest creation,
    then the key)."""
    gangs = [g for g in all_gangs(snapshot.pods.values(), config, parallelism, workloads, snapshot.namespaces)
             if any(p.gated for p in g.members) or g.reservation is not None
             or (g.as_created and all(p.gated for p in g.members))]
    return sorted(gangs, key=lambda g: queue_order(g.key, g.priority, g.created))


def simulate(snapshot: Snapshot, config: Config, now: float,
             parallelism: Mapping[tuple[str, str], int] | None = None,
             policy: Policy | None = None, workloads: wl.Workloads | None = None,
             until: str | None = None) -> list[GangOutcome]:
    """Decide every waiting gang in queue order (:func:`waiting_gangs`), each on the
    snapshot the decisions before it left and with what the gangs ahead of it hold or
    block (:class:`QueueState`), as the reconciler does (:func:`step`), and apply each
    decision's actions to the snapshot (:class:`~reconciler.tools.interpret.Applied`): a placed gang uses its nodes, a
    preemptor's victims are gone and it uses their room, a rolled-back gang's deleted
    members free theirs. ``policy`` defaults to the configuration's; ``workloads`` size
    the gangs of ``<prefix>-size: auto``. ``until``: stop once the gang of this key is
    decided (the gangs behind it change nothing for it)."""
    policy = policy or Policy.from_config(config)
    queue = QueueState(policy.queueing)
    outcomes = []
    for gang in waiting_gangs(snapshot, config, parallelism or {}, workloads):
        if config.provisioning is not None:  # what it would ask; the snapshot holds no request (docs/decisions/080)
            gang = replace(gang, capacity=ask_for(config.provisioning, snapshot.namespaces.get(gang.namespace, {}),
                                                  owner_of(gang.members)))
        seen = snapshot
        turn = step(gang, snapshot, now, policy, queue)
        decision = turn.decision
        applied = Applied(gang, decision, snapshot)
        if gang.reservation is not None:
            applied.reservation = reservation_json(gang, gang.reservation.planned_at, gang.reservation.nodes)
        for action in decision.actions:
            APPLY[type(action)](applied, action)
        snapshot = applied.snapshot
        result = decision.placement if applied.placed else None
        planned = decision.placement if applied.placed or applied.preempting else None
        sizes = sorted({(s.layer, s.size) for s in planned.slices}) if planned is not None else []
        for placement in applied.placements if sizes else ():
            placement["slices"] = [placement["rank"] // size for _, size in sizes]
        outcomes.append(GangOutcome(
            gang.namespace, gang.name, decision.phase.value, decision.reason, decision.rule.name, decision.code,
            decision.observation.size, len(gang.members),
            cost=result.cost if result is not None else None,
            domain=str(result.domain) if result is not None and result.domain else None,
            placements=applied.placements, bindings=applied.bindings, victims=applied.victims,
            slices=[{"layer": s.layer, "size": s.size, "index": s.index, "domain": str(s.domain)}
                    for s in (planned.slices if planned is not None else ())],
            balance=_balance(snapshot, planned.balance) if planned is not None and planned.balance else None,
            gang=gang, decision=decision, seen=seen, queue=turn.queue, placed=applied.placed,
            preempting=applied.preempting, reservation=applied.reservation, capacity=applied.capacity,
            expected_start=turn.effect.hold.start if turn.effect.hold is not None else None,
            reserved=turn.effect.hold.domain if turn.effect.hold is not None and turn.effect.hold.reservation else "",
            hold=turn.effect.hold,
        ))
        if gang.key == until:
            break
    return outcomes


def _balance(snapshot: Snapshot, balance: Balance) -> dict[str, Any]:
    """A plan's spread as JSON: the level, domains used, largest and smallest share."""
    return {"level": snapshot.levels.name_of(balance.depth), "domains": balance.domains,
            "largest": balance.largest, "smallest": balance.smallest}


def device_groups(snapshot: Snapshot, outcomes: Sequence[GangOutcome]) -> list[dict[str, Any]]:
    """Every SharedDeviceGroup of ``snapshot`` as it stands once ``outcomes`` are applied:
    ``{"name", "phase", "node", "devices", "pods", "reason"}`` (``devices``: resource name
    -> IDs; ``pods``: ``namespace/name`` of the pods that join it, active ones)."""
    bound = [h for o in outcomes for h in o.bindings]
    after = snapshot.with_assumed(None, bound) if bound else snapshot
    members: dict[str, list[PodInfo]] = {}
    for pod in snapshot.pods.values():
        if pod.device_group and pod.active:
            members.setdefault(pod.device_group, []).append(pod)
    placed = {p["pod"] for o in outcomes if o.placed for p in o.placements}
    out = []
    for name in sorted(after.groups):
        pods = sorted(members.get(name, []), key=lambda p: p.key)
        # The members the simulation placed are no longer waiting: the view sees them released.
        view = group_view(after, after.groups[name], [p for p in pods if p.name not in placed])
        out.append({"name": name, "phase": view.phase, "node": view.node or None,
                    "devices": {r: list(ids) for r, ids in view.devices.items()},
                    "pods": [p.key for p in pods], "reason": view.message})
    return out


# --- output ------------------------------------------------------------------------------
def _short(level: str) -> str:
    return level.rsplit("/", 1)[-1].removeprefix("gce-topology-")


def _ids(devices: Mapping[str, Sequence[int]]) -> str:
    return " ".join(f"{r}={','.join(map(str, ids))}" for r, ids in sorted(devices.items())) or "-"


def render_table(outcomes: Sequence[GangOutcome], levels: TopologyLevels,
                 groups: Sequence[Mapping[str, Any]] = ()) -> str:
    """Readable columns: one line per gang, then one per member with its topology path
    (and its devices, for group members); then one line per SharedDeviceGroup."""
    lines = []
    if not outcomes:
        lines.append("no gated gangs in the snapshot")
    else:
        rows: list[tuple[str, str, str, str, str]] = [("GANG", "PHASE", "MEMBERS", "COST", "DOMAIN / REASON")]
        for gang in outcomes:
            cost = f"{gang.cost:.0f}" if gang.cost is not None else "-"
            rows.append((f"{gang.namespace}/{gang.name}", gang.phase, f"{gang.members}/{gang.size}", cost,
                         gang.domain if gang.phase == "Placed" and gang.domain else gang.reason))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        path_header = "/".join(_short(k) for k in levels.keys).upper()
        listed: list[GangOutcome | None] = [None, *outcomes]
        for row, o in zip(rows, listed, strict=True):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
            if o is not None and o.placements:
                with_devices = any("devices" in p for p in o.placements)
                sub = [("RANK", "POD", "NODE", path_header, "DEVICES" if with_devices else "")]
                sub += [(str(p["rank"]), p["pod"], p["node"], p["topology"],
                         _ids(p.get("devices", {})) if with_devices else "") for p in o.placements]
                sw = [max(len(r[i]) for r in sub) for i in range(4)]
                for r in sub:
                    lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(r[:4], sw, strict=True)) + "  " + r[4])
            if o is not None and o.victims:
                vw = max(len(f"{v['namespace']}/{v['pod']}") for v in o.victims)
                lines.append("    VICTIM".ljust(vw + 6) + "  NODE")
                lines += [f"    {v['namespace']}/{v['pod']}".ljust(vw + 6) + f"  {v['node'] or '-'}" for v in o.victims]
    if groups:
        rows2 = [("DEVICE GROUP", "PHASE", "NODE", "DEVICES", "PODS", "REASON")]
        rows2 += [(g["name"], g["phase"], g["node"] or "-", _ids(g["devices"]), str(len(g["pods"])), g["reason"])
                  for g in groups]
        gw = [max(len(r[i]) for r in rows2) for i in range(5)]
        lines.append("")
        lines += ["  ".join(c.ljust(w) for c, w in zip(r[:5], gw, strict=True)) + "  " + r[5] for r in rows2]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def decision_time(raw: str | None) -> float:
    """``--now``: an RFC 3339 time (with a zone) in seconds since the epoch; the current
    time for None. Raises :class:`InputError` naming the flag."""
    if raw is None:
        return time.time()
    try:
        return rfc3339("--now", raw).timestamp()
    except UsageError as e:
        raise InputError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    """Run the simulator on parsed arguments; returns the exit code."""
    try:
        config = load_config(args.config)
        now = decision_time(getattr(args, "now", None))
        source = "<stdin>" if args.snapshot == "-" else args.snapshot
        try:
            data = sys.stdin.buffer.read() if args.snapshot == "-" else read_file(args.snapshot)
        except OSError as e:
            raise InputError(f"{source}: cannot read snapshot: {e.strerror}") from None
        levels = TopologyLevels.from_config(config)
        with collector_paused():  # parsing allocates millions of objects and frees none
            built = build(read_retained(data, source), levels, config, NOT_IN_SNAPSHOT)
            # The objects live to the end: no collection need walk them (unfrozen below).
            gc.freeze()
        del data
    except (InputError, ConfigError) as e:
        print(f"simulate: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    policy = Policy.from_config(config)
    mode = getattr(args, "gang_preemption_mode", None)
    if mode is not None:
        policy = dataclasses.replace(policy, preemption=mode)
    try:
        outcomes = simulate(built.snapshot, config, now, built.parallelism, policy, built.workloads)
    finally:
        gc.unfreeze()
    for note in built.notes:
        print(note, file=sys.stderr)
    groups = device_groups(built.snapshot, outcomes)
    if args.output == "json":
        print(json.dumps({"gangs": [o.to_json() for o in outcomes], "deviceGroups": groups}, indent=2))
    else:
        sys.stdout.write(render_table(outcomes, levels, groups))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m reconciler.tools.simulate``."""
    parser = OneLineParser(
        prog="python -m reconciler.tools.simulate",
        description="Plan the gated gangs of a snapshot offline, as the reconciler would. Take the snapshot "
        f"with\n\n  {SNAPSHOT_COMMAND}\n\n({SNAPSHOT_NOTE}).", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
