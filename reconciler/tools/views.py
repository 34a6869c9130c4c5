"""What ``kubectl troupe`` shows: every gang's state, why one waits, the topology, a plan.

Every answer is the reconciler's own decision: waiting gangs (those with a gated member)
are decided by :func:`reconciler.tools.simulate.simulate`, in queue order, each on what the
gangs ahead of it left and with what they hold or block, exactly as the reconciler and the
simulator decide them (:func:`reconciler.engine.decision.decide.decide`); gangs with no gated
member are decided by the same function (their rules, ``AllReleased``, ``TimedOut``,
``NoMembers``, do not depend on capacity or the queue). Nothing here reads a clock or does
I/O: a :class:`Cluster` in (objects already read, ``now`` given), plain values out
(docs/decisions/021-why-and-status.md).

- :func:`status`: one :class:`GangStatus` per gang.
- :func:`why`: a pod's gang, its decision and the per-domain shortfall
  (:func:`reconciler.engine.placement.shortfall.shortfall`).
- :func:`topology`: blocks > subblocks > hosts > nodes with who holds what
  (:func:`reconciler.engine.ledger.occupancy.occupancy`).
- :func:`plan`: the decision for the pods a manifest would create
  (:mod:`reconciler.tools.manifests`), on the cluster as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.decision.decide import decide
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.avoidance import Avoidance
from reconciler.engine.gangs.gang import Gang, all_gangs, build_gang
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.gangs.refusals import is_refused
from reconciler.engine.ledger.occupancy import DomainUsage, occupancy
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import LabelSelector
from reconciler.engine.model.selectors import Requirement
from reconciler.engine.model.timestamps import epoch
from reconciler.engine.placement.shortfall import Shortfall, shortfall
from reconciler.objects.snapshot_io import InputError
from reconciler.tools import simulate as sim
from reconciler.tools.peers import unscheduled
from troupe import contract
from troupe.config import Config

#: Kinds read besides those the simulator builds a snapshot of: what ``plan`` needs to apply
#: the webhook's contract (a namespace's opt-in label) and the API server's priority
#: admission (a PriorityClass's value) to the pods a manifest would create.
EXTRA_KINDS = ("Namespace", "PriorityClass")


@dataclass
class Cluster:
    """The cluster as read once: the simulator's :class:`~reconciler.tools.simulate.Built`
    snapshot, the configuration and policy the reconciler follows, ``now`` (seconds since
    the epoch) that decisions are made at, namespace labels by name and PriorityClasses by
    name (``(value, globalDefault)``), and ``source`` (how it was read, for messages)."""

    built: sim.Built
    config: Config
    now: float
    policy: Policy
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority_classes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    source: str = ""
    #: The Gang objects' statuses by gang key, when they were read (a live cluster).
    recorded: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``namespace/name`` -> what becomes of each pod bound for a scheduler kube-scheduler
    #: is not and that is not bound (:func:`reconciler.tools.peers.unscheduled`).
    unscheduled: Mapping[str, str] = field(default_factory=dict)

    @property
    def snapshot(self) -> Snapshot:
        """The engine's snapshot of every node and pod."""
        return self.built.snapshot


def read(objects: Iterable[tuple[str, str, Mapping[str, Any]]], config: Config, now: float,
         policy: Policy | None = None, source: str = "", absent_group: str | None = None) -> Cluster:
    """A :class:`Cluster` of ``(where, kind, object)`` triples (what
    :func:`reconciler.objects.snapshot_io.read_objects` gives, or the live reader in
    :mod:`reconciler.kube`). PriorityClasses are kept aside; every other object (Namespaces
    too) goes to :func:`reconciler.tools.simulate.build`, with ``absent_group`` (a snapshot's
    :data:`~reconciler.objects.kinds.NOT_IN_SNAPSHOT`). Raises
    :class:`~reconciler.objects.snapshot_io.InputError` naming the object and field."""
    objects = list(objects)
    gangs = [(w, k, o) for w, k, o in objects if k == GANG_KIND]
    rest, namespaces, classes = split((w, k, o) for w, k, o in objects if k != GANG_KIND)
    built = sim.build(rest, TopologyLevels.from_config(config), config, absent_group)
    return Cluster(built, config, now, policy or Policy.from_config(config), namespaces, classes, source,
                   recorded(o for _, _, o in gangs), unscheduled((o for _, k, o in objects if k == "Pod"), config))


#: The kind of the reconciler's Gang objects (read by ``status`` on a live cluster).
GANG_KIND = "Gang"


def recorded(objects: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Gang key (``namespace/id``, from the object's ``reconciler.troupe.io/gang-key``
    annotation) -> the object's name and status, for the Gang objects that carry one."""
    out: dict[str, Mapping[str, Any]] = {}
    for obj in objects:
        meta = obj.get("metadata")
        status = obj.get("status")
        if not isinstance(meta, Mapping) or not isinstance(status, Mapping):
            continue
        key = (meta.get("annotations") or {}).get(contract.GANG_KEY_ANNOTATION)
        if isinstance(key, str) and key.partition("/")[0] == meta.get("namespace"):
            out[key] = {"name": meta.get("name"), **status}
    return out


def split(objects: Iterable[tuple[str, str, Mapping[str, Any]]]) -> tuple[
        list[tuple[str, str, Mapping[str, Any]]], dict[str, Mapping[str, str]], dict[str, tuple[int, bool]]]:
    """The objects the simulator builds a snapshot of (Namespaces included), namespace labels by name, and
    PriorityClasses by name (``(value, globalDefault)``). Raises
    :class:`~reconciler.objects.snapshot_io.InputError` for a Namespace or PriorityClass it cannot read."""
    rest: list[tuple[str, str, Mapping[str, Any]]] = []
    namespaces: dict[str, Mapping[str, str]] = {}
    classes: dict[str, tuple[int, bool]] = {}
    for where, kind, obj in objects:
        if kind != "PriorityClass":  # Namespaces go to the snapshot too: their labels, for namespaceSelector
            rest.append((where, kind, obj))
        if kind not in EXTRA_KINDS:
            continue
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise InputError(f"{where} ({kind}): metadata.name: missing field")
        if kind == "Namespace":
            labels = meta.get("labels") if isinstance(meta, Mapping) else None
            namespaces[name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        else:
            value = obj.get("value", 0)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where} (PriorityClass {name}): value: expected an integer, got {value!r}")
            classes[name] = (value, obj.get("globalDefault") is True)
    return rest, namespaces, classes


# --- every gang's decision ----------------------------------------------------------------
@dataclass(frozen=True)
class GangStatus:
    """One gang as ``kubectl troupe status`` shows it: the decision's ``phase``, ``rule``,
    ``reason`` and placement ``code``; ``size`` (None while unknown) and the members:
    ``present`` (active), ``gated``, ``released``, ``bound``, ``running``; ``waiting``:
    seconds its oldest gated member has waited (since its creation; None with no gated
    member); ``queue``: its 1-based place among the waiting gangs (0 when not waiting);
    ``priority``; ``domain`` of a placement (``Placed``); and the gang, its decision and
    (for waiting gangs) the simulator's outcome, for :func:`why`."""

    namespace: str
    name: str
    phase: str
    rule: str
    reason: str
    code: str
    size: int | None
    present: int
    gated: int
    released: int
    bound: int
    running: int
    waiting: float | None
    queue: int
    priority: int
    domain: str | None
    gang: Gang = field(repr=False, compare=False)
    decision: Decision = field(repr=False, compare=False)
    outcome: sim.GangOutcome | None = field(default=None, repr=False, compare=False)
    #: What the reconciler recorded in the gang's Gang object (its name and status), when read.
    recorded: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        """The stable JSON object of ``status --output json``."""
        out: dict[str, Any] = {
            "namespace": self.namespace, "name": self.name, "phase": self.phase, "rule": self.rule,
            "reason": self.reason, "code": self.code, "size": self.size,
            "members": {"present": self.present, "gated": self.gated, "released": self.released,
                        "bound": self.bound, "running": self.running},
            "waitingSeconds": None if self.waiting is None else round(self.waiting, 3),
            "queuePosition": self.queue or None, "priority": self.priority, "domain": self.domain,
        }
        if self.outcome is not None and self.outcome.victims:
            out["victims"] = self.outcome.victims
        out["releaseMode"] = self.gang.release_mode  # AsCreated or WhenComplete (docs/decisions/034)
        if self.gang.min_size is not None:
            out["minSize"] = self.gang.min_size  # docs/decisions/038-minimum-size.md
        if self.outcome is not None and self.outcome.reservation is not None:
            out["reservation"] = self.outcome.reservation
        if self.recorded is not None:  # docs/decisions/043-gang-objects.md
            r = self.recorded
            out["object"] = {"name": r.get("name"), "phase": r.get("phase"), "reason": r.get("reason"),
                             "message": r.get("message"), "updateTime": r.get("updateTime"),
                             "conditions": {c.get("type"): c.get("status") for c in r.get("conditions") or []
                                            if isinstance(c, Mapping)}}
        return out


def _waiting(gang: Gang, now: float) -> float | None:
    stamps = [t for p in gang.members if p.gated and (t := epoch(p.creation_timestamp)) is not None]
    return max(0.0, now - min(stamps)) if stamps else None


def _status(cluster: Cluster, gang: Gang, decision: Decision, queue: int, outcome: sim.GangOutcome | None) -> GangStatus:
    o = decision.observation
    return GangStatus(
        gang.namespace, gang.name, decision.phase.value, decision.rule.name, decision.reason, decision.code, o.size,
        o.active, o.gated, o.released, o.bound, o.running, _waiting(gang, cluster.now), queue, gang.priority,
        outcome.domain if outcome is not None else None, gang, decision, outcome, cluster.recorded.get(gang.key))


def _gangs(cluster: Cluster) -> list[Gang]:
    built, config = cluster.built, cluster.config
    return all_gangs(built.snapshot.pods.values(), config, built.parallelism, built.workloads,
                     built.snapshot.namespaces)


def status(cluster: Cluster, namespaces: Sequence[str] = (), until: str | None = None,
           selector: LabelSelector | None = None) -> list[GangStatus]:
    """Every gang of the cluster (in ``namespaces``; all when empty): the waiting ones in
    queue order first, as the reconciler would decide them now, then the others by key.
    ``until``: stop deciding waiting gangs after this gang key (what ``why`` needs: the
    gangs behind it change nothing for it); the others are then left out. ``selector``:
    only gangs with a member whose labels it matches (``kubectl troupe status -l``); every
    gang is still decided, in its place in the queue."""
    out = _all_status(cluster, namespaces, until)
    if selector is None:
        return out
    return [s for s in out if any(selector.matches(p.labels) for p in s.gang.members)]


def _all_status(cluster: Cluster, namespaces: Sequence[str], until: str | None) -> list[GangStatus]:
    built = cluster.built
    outcomes = sim.simulate(built.snapshot, cluster.config, cluster.now, built.parallelism, cluster.policy,
                            built.workloads, until=until)
    out: list[GangStatus] = []
    decided = set()
    for position, o in enumerate(outcomes, start=1):
        assert o.gang is not None and o.decision is not None
        decided.add(o.gang.key)
        if not namespaces or o.namespace in namespaces:
            out.append(_status(cluster, o.gang, o.decision, position, o))
    if until is not None:
        return out
    rest = sorted((g for g in _gangs(cluster) if g.key not in decided and (not namespaces or g.namespace in namespaces)),
                  key=lambda g: g.key)
    for gang in rest:
        decision = decide(gang, built.snapshot, cluster.now, cluster.policy)
        out.append(_status(cluster, gang, decision, 0, None))
    return out


# --- why ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Why:
    """``kubectl troupe why POD``: the ``pod`` (``namespace/name``), its ``rank`` in its
    gang (0-based), the gang's :class:`GangStatus`, the gangs ahead of it in the queue
    (``ahead``: their statuses, nearest first, at most a few; none when it does not wait),
    ``held``: capacity those gangs hold (gang -> ``(domain, nodes)``), and ``shortfall``,
    the per-domain shortfall of its gated members that have no node yet, when the gang
    waits for room (``Unschedulable``, ``Preempting``, queued behind one that does); else
    None. ``condition``: the pod's own ``troupe.io/Gang`` condition as ``(status, reason,
    message)`` (what the reconciler told it: a release's note of what was not modeled or
    which nodes it avoids), ``refusal``: kube-scheduler's message when it refused the pod
    on its node (``PodScheduled=False``, ``Unschedulable``); None when absent."""

    pod: str
    rank: int
    gang: GangStatus
    ahead: tuple[GangStatus, ...]
    held: Mapping[str, tuple[str, int]]
    shortfall: Shortfall | None
    condition: tuple[str, str, str] | None = None
    refusal: str | None = None


def find_pod(cluster: Cluster, name: str, namespace: str) -> PodInfo:
    """The pod ``name`` (``NAME`` in ``namespace``, or ``NAMESPACE/NAME``). Raises
    ``LookupError`` naming it when the snapshot has no such pod."""
    key = PodKey.parse(name) if "/" in name else PodKey(namespace, name)
    pod = cluster.snapshot.pods.get(key)
    if pod is None:
        raise LookupError(f"pod {key} not found in {cluster.source or 'the snapshot'}")
    return pod


def find_member(cluster: Cluster, name: str, namespace: str) -> PodInfo:
    """The pod ``why`` explains, named as kubectl names objects: ``pod/NAME`` or
    ``gang/NAME`` (either optionally ``NAMESPACE/NAME``), or a bare ``NAME``, a pod when
    there is one, else a gang of that name. For a gang: its first gated member by rank
    (the one a wait is about), else its first member. Raises ``LookupError`` naming what
    was looked for when there is neither."""
    kind, _, rest = name.partition("/") if name.startswith(("pod/", "gang/")) else ("", "", name)
    key = PodKey.parse(rest) if "/" in rest else PodKey(namespace, rest)
    if kind != "gang":
        pod = cluster.snapshot.pods.get(key)
        if pod is not None or kind == "pod":
            return find_pod(cluster, rest, namespace)
    members = [p for p in cluster.snapshot.pods.values() if gang_key(p, cluster.config) == key]
    if not members:  # a bare name is first of all a pod's
        raise LookupError(f"{kind or 'pod'} {key} not found in {cluster.source or 'the snapshot'}")
    built = cluster.built
    gang = build_gang(key, members, cluster.config, built.parallelism, built.workloads)
    return next((p for p in gang.members if p.gated), gang.members[0] if gang.members else members[0])


def parse_label_selector(text: str) -> LabelSelector:
    """kubectl's ``-l`` selector (``app=train,tier!=web,env in (a,b),gpu,!spot``) as a
    :class:`~reconciler.engine.model.podterms.LabelSelector` whose requirements all hold
    (``=``/``==``: In, ``!=``: NotIn, ``in (...)``, ``notin (...)``, ``KEY``: Exists,
    ``!KEY``: DoesNotExist; the grammar of apimachinery's ``labels.Parse``). Raises
    ``ValueError`` naming the term it cannot read."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    requirements = []
    for raw in (t.strip() for t in terms):
        found = _SELECTOR_TERM.fullmatch(raw)
        if not raw or found is None:
            raise ValueError(f"--selector {text!r}: cannot read {raw!r} (expected KEY=VALUE, KEY!=VALUE, "
                             "KEY in (A,B), KEY notin (A,B), KEY or !KEY)")
        if found["set"] is not None:
            values = tuple(v.strip() for v in found["values"].split(",") if v.strip())
            requirements.append(Requirement(found["setkey"], "In" if found["set"] == "in" else "NotIn", values))
        elif found["op"] is not None:
            requirements.append(Requirement(found["key"], "NotIn" if found["op"] == "!=" else "In", (found["value"],)))
        else:
            requirements.append(Requirement(found["bare"], "DoesNotExist" if found["not"] else "Exists"))
    return LabelSelector(tuple(requirements))


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SELECTOR_TERM = re.compile(
    rf"(?P<setkey>{_KEY})\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\)"
    rf"|(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>[-A-Za-z0-9_.]*)"
    rf"|(?P<not>!)?\s*(?P<bare>{_KEY})")


def why(cluster: Cluster, pod: PodInfo, resource: str = "nvidia.com/gpu", ahead: int = 3) -> Why:
    """Why ``pod``'s gang is where it is (:class:`Why`). Raises ``LookupError`` when
    Troupe does not manage the pod (no gang key, no Troupe gate)."""
    key = gang_key(pod, cluster.config)
    if key is None:
        fate = cluster.unscheduled.get(str(pod.key))
        raise LookupError(f"pod {pod.key} is not managed by Troupe: it carries no gang annotation, no "
                          f"{cluster.config.gang_annotation_prefix}-size and no Troupe scheduling gate"
                          + (f"; {fate}" if fate else ""))
    pods = [p for p in cluster.snapshot.pods.values() if gang_key(p, cluster.config) == key]
    waiting: list[GangStatus] = []
    if any(p.active and p.gated for p in pods):  # decided in queue order, behind the gangs ahead
        waiting = status(cluster, until=key)
        found = next(s for s in waiting if s.key == key)
    else:  # nothing gated: its rules read no capacity and no queue
        built = cluster.built
        gang = build_gang(key, pods, cluster.config, built.parallelism, built.workloads)
        found = _status(cluster, gang, decide(gang, built.snapshot, cluster.now, cluster.policy), 0, None)
    rank = next((i for i, p in enumerate(found.gang.members) if p.key == pod.key), -1)
    before = tuple(s for s in reversed(waiting) if s.key != key)[:ahead] if found.queue else ()
    outcome = found.outcome
    holds = outcome.queue.holds if outcome is not None and outcome.queue is not None else ()
    held = {h.gang: (h.domain, len(h.nodes)) for h in holds}
    refusal = pod.scheduled[2] if is_refused(pod) and pod.scheduled is not None else None
    return Why(pod.key, rank, found, before, held, room_shortfall(cluster, found, resource), pod.condition, refusal)


def room_shortfall(cluster: Cluster, found: GangStatus, resource: str = "nvidia.com/gpu") -> Shortfall | None:
    """The per-domain shortfall of ``found``'s gated members that have no node yet, on the
    snapshot its decision was made on, with the nodes gangs ahead hold for themselves;
    None unless it waits for room (``Unschedulable``, ``Preempting``, or queued behind a
    gang that does)."""
    room = found.decision.rule.waits_for_room
    gang, outcome = found.gang, found.outcome
    seen = outcome.seen if outcome is not None and outcome.seen is not None else cluster.snapshot
    free = [p for p in gang.members if p.gated and not seen.committed_node(p)]
    if not room or not free:
        return None
    held_nodes: dict[int, str] = {}
    for h in outcome.queue.holds if outcome is not None and outcome.queue is not None else ():
        for i in h.nodes:
            held_nodes.setdefault(i, h.gang)
    seen = seen.planned_from(free, gang.priority)  # as the decision sees it
    near = sorted({n for p in gang.members if not p.gated and (n := p.node_name or seen.committed_node(p))})
    return shortfall(seen, free, gang.topology, held=held_nodes, near=near, resource=resource)


# --- topology -------------------------------------------------------------------------------
def gang_of_pods(cluster: Cluster) -> dict[PodKey, str]:
    """Pod key -> the key of the gang it belongs to, for every pod Troupe manages."""
    out = {}
    for key, pods in group_by_gang(cluster.snapshot.pods.values(), cluster.config).items():
        for p in pods:
            out[p.key] = key
    return out


def topology(cluster: Cluster, resource: str = "nvidia.com/gpu") -> DomainUsage:
    """The topology tree with who holds what (:func:`reconciler.engine.ledger.occupancy.occupancy`),
    and the nodes new placements avoid after repeated member failures at ``cluster.now``."""
    avoided = Avoidance.from_config(cluster.config).avoided(cluster.snapshot, cluster.now)
    return occupancy(cluster.snapshot, gang_of_pods(cluster), resource, avoided)


# --- plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanResult:
    """``kubectl troupe plan``: the pods the manifest would create (``pods``: their
    names, in order), the gangs they form (their statuses, with the simulator's outcome:
    placements, victims), and ``untouched``: pods the webhook would leave alone (no Troupe
    key), which kube-scheduler places on its own; ``notes``: what was done with objects that
    make no pod (an upstream ``Workload``) and which names were generated; ``left``: per
    manifest object, its untouched pods and why (docs/decisions/077-plan-takes-what-users-apply.md)."""

    pods: tuple[str, ...]
    gangs: tuple[GangStatus, ...]
    untouched: tuple[str, ...]
    cluster: Cluster = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()
    left: tuple[tuple[str, tuple[str, ...], str], ...] = ()


def plan(cluster: Cluster, pods: Sequence[str], managed: Sequence[str], gang_keys: Iterable[str],
         notes: Sequence[str] = (), left: Sequence[tuple[str, tuple[str, ...], str]] = ()) -> PlanResult:
    """The decisions for a manifest's gangs: ``cluster`` was read with the manifest's pods
    (``pods``: their keys; ``managed``: those carrying a Troupe gate) and workloads added
    (:func:`reconciler.tools.manifests.expand`), so every waiting gang was decided in queue order
    with them: the new gangs wait behind those ahead and are placed on what they leave.
    ``gang_keys``: the keys of the gangs the new pods form; ``notes`` and ``left`` as
    :class:`PlanResult`'s (:class:`reconciler.tools.manifests.Expanded`'s)."""
    keys = set(gang_keys)
    gangs = tuple(s for s in status(cluster) if s.key in keys)
    return PlanResult(tuple(pods), gangs, tuple(p for p in pods if p not in set(managed)), cluster,
                      tuple(notes), tuple(left))
