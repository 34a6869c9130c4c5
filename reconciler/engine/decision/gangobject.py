"""A gang's ``gangs.troupe.io`` object: its name, owners and status, from a decision.

Pure: a :class:`~reconciler.engine.gangs.gang.Gang`, its
:class:`~reconciler.engine.decision.seen.Decision` and the snapshot it was decided on in, plain
JSON values out; the reconciler writes them (:mod:`reconciler.daemon.gangobjects`,
docs/decisions/043-gang-objects.md). The status says what ``kubectl troupe status`` says:
the phase, a reason word and the decision's message with numbers, the members' counts,
where the placed members are, the nomination and victims while preempting, the device IDs
of shared-device members; and the conditions tools wait on, in the ``metav1.Condition``
form (KEP-1623):

- ``Waiting``: True while members wait to be released;
- ``Released``: True once the members needed (the size, or the minimum) are released;
- ``Bound``: True once they are bound to nodes (``kubectl wait --for=condition=Bound``);
- ``Reconciling`` and ``Stalled``: kstatus's convention (sigs.k8s.io/cli-utils kstatus,
  used by Flux and kpt): Reconciling while neither Bound nor Held, Stalled while Held (the
  members' own input must change), so kstatus calls a held gang ``Failed``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.engine.decision.actions import Preempt
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.nominating import by_uid
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.timestamps import epoch, rfc3339

#: Condition types, in the order they are written.
WAITING, RELEASED, BOUND, RECONCILING, STALLED = "Waiting", "Released", "Bound", "Reconciling", "Stalled"
#: Phases in which members wait to be released.
_WAITING_PHASES = frozenset({Phase.WAITING, Phase.HELD, Phase.BACKING_OFF, Phase.UNSCHEDULABLE, Phase.PREEMPTING,
                             Phase.ROLLED_BACK})
#: Longest message written (the CRD allows 1,024 characters in ``status.message``).
MAX_MESSAGE = 1024
#: Most owners an object names: a workload's own objects (a JobSet's Jobs) are few.
MAX_OWNERS = 64
#: Most nominated nodes, victims and device entries listed (the CRD's bounds).
MAX_LISTED = 4096

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


#: How a name made with a hash ends: what no name used as it is may end with.
_HASHED = re.compile(r"-[0-9a-f]{16}$")


def object_name(gang: Gang) -> str:
    """The object's ``metadata.name``: the gang's name when it is a DNS subdomain of at most
    253 characters (``kubectl wait gang/train`` names the gang as its members do), else
    the name lower-cased with every other character replaced by ``-``, cut to 236
    characters, and 16 hex digits of the sha256 of the gang key appended
    (``gke:job-name=w`` -> ``gke-job-name-w-3f2a...``). A gang name that itself ends like
    such a name (``-`` and 16 hex digits) is hashed too, so no tenant can name a gang
    after another gang's object: two gangs share an object only if two gang keys share
    64 bits of their sha256 (docs/decisions/049-hostile-tenants-third-round.md)."""
    name = gang.name
    if len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) and ".." not in name and not _HASHED.search(name):
        return name
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")[:236].strip("-.")
    digest = hashlib.sha256(gang.key.encode()).hexdigest()[:16]
    return f"{cleaned}-{digest}" if cleaned else f"gang-{digest}"


def owner_references(gang: Gang) -> list[dict[str, Any]]:
    """The object's ``metadata.ownerReferences``: the distinct controlling owners of the
    gang's members (a Job, a JobSet's Jobs, a StatefulSet), as plain references
    (``controller`` and ``blockOwnerDeletion`` false), so the garbage collector deletes the
    object once every one of them is gone (Kubernetes docs, "Owners and Dependents"). Empty
    for ownerless members (the reconciler deletes the object with its last pod) or more
    than :data:`MAX_OWNERS` owners."""
    owners = {(p.owner.api_version, p.owner.kind, p.owner.name, p.owner.uid) for p in gang.members if p.owner}
    if len(owners) > MAX_OWNERS:
        return []
    return [{"apiVersion": a, "kind": k, "name": n, "uid": u, "controller": False, "blockOwnerDeletion": False}
            for a, k, n, u in sorted(owners)]


def reason_word(decision: Decision) -> str:
    """The status' one-word reason: the members' condition reason while they wait
    (``WaitingForMembers``, ``Queued``, ``Held``, ``Unschedulable``, ``Preempting``...),
    else where the release stands (``Releasing``, ``Binding``, ``Bound``, ``Running``), else
    the rule's name (``TimedOut``, ``MemberFailed``...)."""
    o, phase = decision.observation, decision.phase
    if decision.rule.condition is not None:
        return decision.rule.condition
    if phase is Phase.RELEASED:
        needed = o.needed or 0
        return "Running" if o.running >= needed else "Bound" if o.bound >= needed else "Binding"
    if phase in (Phase.PLACED, Phase.RELEASING):
        return "Releasing"
    return decision.rule.name


def gang_status(gang: Gang, decision: Decision, snapshot: Snapshot) -> dict[str, Any] | None:
    """The object's ``status`` after ``decision`` (conditions without their times: see
    :func:`with_times`), or None when the gang has no active member left (its members
    ended: the object keeps the last status written until its owner or its last pod goes).
    Counts are members (pods); ``domain`` is the smallest topology domain
    (``level=value``) holding every placed member, ``domains`` the domains of every level
    they use (highest level first)."""
    o = decision.observation
    if o.active == 0 and decision.rule.name == "NoMembers":
        return None
    word = reason_word(decision)
    size = "?" if o.size is None else str(o.size)
    status: dict[str, Any] = {
        "phase": decision.phase.value, "reason": word, "message": decision.reason[:MAX_MESSAGE] or word,
        "members": f"{o.active}/{size}", "present": o.active, "gated": o.gated, "released": o.released,
        "bound": o.bound, "running": o.running, "releaseMode": gang.release_mode, "priority": gang.priority,
    }
    if o.size is not None:
        status["size"] = o.size
    if gang.min_size is not None:
        status["minSize"] = gang.min_size
    domain, domains = placed_domains(gang, snapshot)
    if domain:
        status["domain"] = domain
    if domains:
        status["domains"] = list(domains)
    status.update(_preempting(gang, decision, snapshot))
    devices = {p.name: ", ".join(f"{r} {','.join(map(str, ids))}" for r, ids in sorted(p.devices.items()))
               for p in gang.members if p.devices}
    if devices:
        status["devices"] = dict(sorted(devices.items())[:MAX_LISTED])
    stamps = [t for p in gang.members if p.gated and (t := epoch(p.creation_timestamp)) is not None]
    if stamps:
        status["waitingSince"] = rfc3339(min(stamps))[:19] + "Z"
    status["conditions"] = conditions(decision, word)
    return status


def _preempting(gang: Gang, decision: Decision, snapshot: Snapshot) -> dict[str, Any]:
    """``nominatedNodes`` and the victims while preempting: ``victims``, those of the gang's
    own namespace (``namespace/name``), and ``victimsElsewhere``, how many are in other
    namespaces (the object is read by whoever reads the gang's namespace:
    docs/decisions/064-preemption-names-no-other-tenant.md)."""
    preempt = decision.find(Preempt)
    if preempt is None:
        return {}
    nodes = sorted(set(preempt.nomination.nodes.values()))
    keys = {p.key for p in by_uid(snapshot, preempt.nomination.victims)} | set(preempt.evict)
    own = sorted(k for k in keys if k.namespace == gang.namespace)
    out: dict[str, Any] = {"nominatedNodes": nodes[:MAX_LISTED]}
    if own:
        out["victims"] = own[:MAX_LISTED]
    if len(keys) > len(own):
        out["victimsElsewhere"] = len(keys) - len(own)
    return out


def placed_domains(gang: Gang, snapshot: Snapshot) -> tuple[str, tuple[str, ...]]:
    """``(domain, domains)`` of the members with a node (bound, or pinned by a release):
    the deepest level whose value all share, as ``level=value`` (``""`` when they share
    none, or none is placed), and every ``level=value`` they use, highest level first."""
    keys = snapshot.levels.keys
    paths = [snapshot.paths[i] for p in gang.members
             if (node := p.node_name or p.assigned_node) and (i := snapshot.index.get(node)) is not None]
    if not paths:
        return "", ()
    domain = ""
    for depth, key in enumerate(keys):
        values = {path[depth] for path in paths}
        if len(values) != 1:
            break
        domain = f"{key}={next(iter(values))}"
    used = tuple(dict.fromkeys(f"{key}={path[d]}" for d, key in enumerate(keys) for path in paths))
    return domain, used[:MAX_LISTED]


def conditions(decision: Decision, word: str) -> list[dict[str, str]]:
    """The five conditions (module docstring) as ``{type, status, reason, message}``,
    without ``lastTransitionTime``."""
    o, phase = decision.observation, decision.phase
    needed = o.needed
    message = decision.reason[:MAX_MESSAGE] or word
    waiting = phase in _WAITING_PHASES
    released = needed is not None and o.released >= needed and not waiting
    bound = released and needed is not None and o.bound >= needed
    held = phase is Phase.HELD

    def cond(kind: str, on: bool, reason: str, text: str) -> dict[str, str]:
        return {"type": kind, "status": "True" if on else "False", "reason": reason, "message": text}

    bound_text = f"{o.bound} of {needed} members bound" if needed is not None else message
    return [
        cond(WAITING, waiting, word if waiting else "Released", message),
        cond(RELEASED, released, "Released" if released else word, message),
        cond(BOUND, bound, "Bound" if bound else ("Binding" if released else word), bound_text if released else message),
        # Not while Held: kstatus reads the first True of Reconciling and Stalled, and a held
        # gang is stalled (it needs its members changed), not progressing.
        cond(RECONCILING, not bound and not held, "Bound" if bound else word, bound_text if bound else message),
        cond(STALLED, held, "Held" if held else "AsExpected", message if held else "nothing the members must change"),
    ]


def with_times(status: Mapping[str, Any], previous: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """``status`` with each condition's ``lastTransitionTime``: the previous one's when
    its ``status`` did not change, else ``now`` (seconds since the epoch, written as RFC
    3339 in seconds, as ``metav1.Time``), and ``updateTime`` ``now``."""
    before = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    stamp = rfc3339(now)[:19] + "Z"
    out = dict(status)
    timed = []
    for c in status.get("conditions", ()):
        old = before.get(c["type"])
        same = old is not None and old.get("status") == c["status"] and isinstance(old.get("lastTransitionTime"), str)
        timed.append({**c, "lastTransitionTime": old["lastTransitionTime"] if same and old else stamp})
    out["conditions"] = timed
    out["updateTime"] = stamp
    return out


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two statuses say the same, times aside (``updateTime`` and the conditions'
    ``lastTransitionTime``): a write that would change only those is not made."""
    if a is None or b is None:
        return a is b

    def strip(s: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in s.items() if k != "updateTime"}
        out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                             for c in s.get("conditions", ()) if isinstance(c, Mapping)]
        return out

    return strip(a) == strip(b)
