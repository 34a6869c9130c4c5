"""Nodes that keep failing gang members are avoided (issue 26, part 4;
docs/decisions/041-failing-nodes.md).

Every gang member that ends ``Failed`` on a node after Troupe released it, or that runs on a
node NotReady past ``nodeFailureGraceSeconds``, is recorded on that node
(``reconciler.troupe.io/failures``, :data:`troupe.contract.NODE_FAILURES`) by the
:class:`~reconciler.engine.decision.actions.RecordNodeFailures` action a decision returns, once per
pod (the record names its UID and its pod). A node with ``threshold`` records within
``window`` seconds, of members of at least ``namespaces`` namespaces, is avoided until
``cooldown`` seconds after the last of them: new placements do not use it while anything
else fits, and say so when they fall back to it. The namespaces are what keeps one tenant
from steering every tenant off a node: its own members, pinned there and failing on
purpose, count as one namespace however many fail (docs/decisions/049-hostile-tenants-third-round.md). The record lives on the
node, so a new leader, the simulator and ``kubectl troupe`` see the same avoidance.
Pure: plain data in, plain data out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch, rfc3339
from reconciler.engine.placement.devicegroups import DevicePlacement, place_with_devices
from troupe.config import Config
from troupe.contract import NODE_FAILURES_KEPT, TopologyRequest


@dataclass(frozen=True)
class Avoidance:
    """When a node is avoided: ``threshold`` member failures within ``window`` seconds, of
    members of at least ``namespaces`` namespaces, avoided for ``cooldown`` seconds after
    the last (``nodeFailureThreshold``, ``nodeFailureWindowSeconds``,
    ``nodeFailureNamespaces``, ``nodeAvoidSeconds``)."""

    threshold: int = 2
    window: int = 3600
    cooldown: int = 1800
    namespaces: int = 2

    @classmethod
    def from_config(cls, config: Config) -> Avoidance:
        """The avoidance of a Troupe configuration."""
        return cls(config.node_failure_threshold, config.node_failure_window_seconds, config.node_avoid_seconds,
                   config.node_failure_namespaces)

    def until(self, node: NodeInfo) -> float | None:
        """Until when ``node`` is avoided (seconds since the epoch): ``cooldown`` after the
        last failure that ends a run of at least ``threshold`` failures within ``window``
        seconds (the failure itself and those before it) of members of at least
        ``namespaces`` namespaces; None when no such run exists (unreadable times are left
        out; an entry naming no pod counts as a namespace of its own)."""
        failures = sorted((t, namespace) for _, at, namespace in node.failures if (t := epoch(at)) is not None)
        ends = []
        for i, (end, _) in enumerate(failures):
            run = [namespace for t, namespace in failures[:i + 1] if end - t <= self.window]
            if len(run) >= self.threshold and len(set(run)) >= self.namespaces:
                ends.append(end)
        return max(ends) + self.cooldown if ends else None

    def avoided(self, snapshot: Snapshot, now: float) -> dict[str, str]:
        """Node name -> why it is avoided at ``now`` (``2 gang member failures within 3600s;
        avoided until <RFC 3339>``), for every node of ``snapshot`` avoided then."""
        out = {}
        for node in snapshot.table.failing:
            until = self.until(node)
            if until is not None and until > now:
                out[node.name] = (f"{len(node.failures)} gang member failure(s) recorded, {self.threshold} within "
                                  f"{self.window}s; avoided until {rfc3339(until)}")
        return out


@dataclass(frozen=True)
class NodeFailure:
    """One member failure to record on ``node``: the pod's ``uid`` and key ``pod``, when
    (``at``, RFC 3339) and ``why``."""

    node: str
    uid: str
    pod: str
    at: str
    why: str

    def entry(self) -> dict[str, str]:
        """The JSON entry of the node's record."""
        return {"uid": self.uid, "pod": self.pod, "at": self.at, "why": self.why}


def to_record(gang: Gang, released: Sequence[PodInfo], snapshot: Snapshot, now: float) -> tuple[NodeFailure, ...]:
    """The failures of ``gang``'s members not yet recorded on their nodes: members that
    ended ``Failed`` after a release, on a node still there; running members (``released``)
    on a node NotReady for ``gang.failure_grace_seconds``, recorded with the time the node
    turned NotReady. Whatever the gang's failure policy."""
    out = []
    for pod in gang.failed:
        index = snapshot.index.get(pod.node_name) if pod.node_name else None
        if index is not None and pod.uid and not _recorded(snapshot.nodes[index], pod.uid):
            out.append(NodeFailure(pod.node_name, pod.uid, pod.key, rfc3339(now), "Failed"))
    for pod in released:
        index = snapshot.index.get(pod.node_name) if pod.node_name else None
        if index is None or not pod.uid:
            continue
        node = snapshot.nodes[index]
        since = epoch(node.not_ready_since) if not node.ready else None
        if since is not None and now - since >= gang.failure_grace_seconds and not _recorded(node, pod.uid):
            out.append(NodeFailure(node.name, pod.uid, pod.key, node.not_ready_since, "lost with its NotReady node"))
    return tuple(out)


def _recorded(node: NodeInfo, uid: str) -> bool:
    return any(u == uid for u, _, _ in node.failures)


def merged(raw: str | None, failures: Sequence[NodeFailure]) -> str:
    """The node's record ``raw`` (its annotation, or None) with ``failures`` added (a pod
    already recorded is not added again), the newest :data:`~troupe.contract.NODE_FAILURES_KEPT`
    kept, as the JSON to write."""
    try:
        entries = json.loads(raw) if raw else []
    except (ValueError, RecursionError):
        entries = []
    if not isinstance(entries, list):
        entries = []
    entries = [e for e in entries if isinstance(e, dict)]
    known = {e.get("uid") for e in entries}
    entries += [f.entry() for f in failures if f.uid not in known]
    entries.sort(key=lambda e: epoch(str(e.get("at", ""))) or 0.0)
    return json.dumps(entries[-NODE_FAILURES_KEPT:], separators=(",", ":"))


def place_avoiding(view: Snapshot, members: Sequence[PodInfo], topology: TopologyRequest, near: Sequence[str],
                   avoided: Mapping[str, str]) -> tuple[DevicePlacement, str]:
    """Place ``members`` on ``view`` off the ``avoided`` nodes when that fits, else on
    ``view`` as it is; with the note a plan that uses an avoided node carries (``""``
    otherwise)."""
    if avoided:
        blocked = view.with_blocked(i for name in avoided if (i := view.index.get(name)) is not None)
        found = place_with_devices(blocked, members, topology, near=near)
        if found.result.placed:
            return found, ""
    found = place_with_devices(view, members, topology, near=near)
    used = sorted({a.node for a in found.result.assignments} & avoided.keys()) if found.result.placed else []
    note = (f"on node(s) {', '.join(used)}, avoided after repeated member failures, as nothing else fits"
            if used else "")
    return found, note
