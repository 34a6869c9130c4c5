"""The records the reconciler writes in pod annotations and reads back: a release's plan
(:class:`Plan`, ``reconciler.troupe.io/plan``) and a preemptor's nomination
(:class:`Nomination`, ``reconciler.troupe.io/nomination``). Both are compact JSON, a stamp
and a map of pod UIDs to node names (one reader, :func:`_stamped_node_map`); only the
reconciler writes them (the webhook refuses anyone else), so a value that cannot be read
is no record: it reserves and holds nothing (docs/decisions/007-release-writes.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.devicegroups import Holding, format_ids, parse_ids


@dataclass(frozen=True)
class Plan:
    """A release's plan record (``reconciler.troupe.io/plan``): ``planned_at`` (RFC 3339)
    and ``nodes``, pod UID -> node name, for every member the release places; ``groups``,
    the SharedDeviceGroups the release binds (name -> :class:`Holding`), so that the IDs
    they get are taken from the moment the record is written, before any member carries
    them (docs/decisions/018-shared-device-groups.md)."""

    planned_at: str
    nodes: Mapping[str, str]
    groups: Mapping[str, Holding] = field(default_factory=dict)

    def encode(self) -> str:
        """The annotation value: compact JSON with sorted keys (``groups`` only when some
        group is bound: ``{"g": {"node": "n", "devices": {"nvidia.com/gpu": "0,1"}}}``)."""
        data: dict[str, Any] = {"plannedAt": self.planned_at, "nodes": dict(self.nodes)}
        if self.groups:
            data["groups"] = {group: {"node": holding.node,
                                      "devices": {resource: format_ids(ids) for resource, ids in holding.devices.items()}}
                              for group, holding in self.groups.items()}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str) -> Plan | None:
        """The record in an annotation value, or None when it is not one. Only the
        reconciler writes it (the webhook refuses anyone else), so a malformed value is
        ignored rather than refused: a record it cannot read reserves nothing."""
        read = _stamped_node_map(raw, "plannedAt")
        if read is None:
            return None
        data, at, nodes = read
        groups: dict[str, Holding] = {}
        raw_groups = data.get("groups") or {}
        if not isinstance(raw_groups, dict):
            return None
        for group, entry in raw_groups.items():
            node = entry.get("node") if isinstance(entry, dict) else None
            devices = entry.get("devices") if isinstance(entry, dict) else None
            if not isinstance(node, str) or not isinstance(devices, dict):
                return None
            try:
                groups[group] = Holding(group, node, {resource: parse_ids(ids) for resource, ids in sorted(devices.items())},
                                        f"plan {at}")
            except (ValueError, AttributeError):
                return None
        return cls(at, nodes, groups)


def _stamped_node_map(raw: str, stamp: str) -> tuple[dict[str, Any], str, dict[str, str]] | None:
    """A record the reconciler writes in an annotation (a plan, a nomination): a JSON
    object with a string under ``stamp`` and a ``nodes`` map of strings to strings.
    Returns ``(object, stamp, nodes)``, or None when ``raw`` is not such a record."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        return None
    if not isinstance(data, dict):
        return None
    at, nodes = data.get(stamp), data.get("nodes")
    if not isinstance(at, str) or not isinstance(nodes, dict):
        return None
    if not all(isinstance(uid, str) and isinstance(node, str) for uid, node in nodes.items()):
        return None
    return data, at, nodes


@dataclass(frozen=True)
class Nomination:
    """A preemptor gang's nomination (``reconciler.troupe.io/nomination``): when it was
    made (``at``, RFC 3339), the node each member will go to (pod UID -> node: capacity
    held for the gang from the moment it is written), the victim pods to evict and the
    victim pods whose eviction a PodDisruptionBudget refused (their gangs are not chosen
    again while this nomination stands), both by UID: the record is on the preemptor's pod,
    where whoever reads that namespace reads it, and names no pod of another
    (docs/decisions/064-preemption-names-no-other-tenant.md)."""

    at: str
    nodes: Mapping[str, str]
    victims: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    def encode(self) -> str:
        """The annotation value: compact JSON with sorted keys."""
        return json.dumps({"at": self.at, "nodes": dict(self.nodes), "victims": list(self.victims),
                           "refused": list(self.refused)}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str) -> Nomination | None:
        """The nomination in an annotation value, or None when it is not one (only the
        reconciler writes it: an unreadable value holds nothing). A record written before
        victims were kept by UID named them ``namespace/name`` and its refused gangs by gang
        key; such entries (a UID has no ``/``) are left out: the record still holds its
        nodes, and the next decision plans its victims again."""
        read = _stamped_node_map(raw, "at")
        if read is None:
            return None
        data, at, nodes = read
        victims, refused = data.get("victims", []), data.get("refused", [])
        if not isinstance(victims, list) or not isinstance(refused, list):
            return None
        if not all(isinstance(entry, str) for entry in (*victims, *refused)):
            return None
        return cls(at, nodes, tuple(v for v in victims if "/" not in v), tuple(r for r in refused if "/" not in r))
