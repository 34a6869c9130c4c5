"""Nodes as the engine sees them: :class:`NodeInfo`, parsed from a plain Node object (a
dict in the JSON shape, camelCase keys), with the member failures the reconciler records
on it (:func:`node_failures`, docs/decisions/041-failing-nodes.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.fields import filled, mapping, string, string_map
from reconciler.engine.model.resources import node_allocatable
from reconciler.engine.model.selectors import Taint, parse_taints
from troupe.contract import HOSTNAME_LABEL, NODE_FAILURES


@dataclass(frozen=True, eq=False, slots=True)
class NodeInfo:
    """A node as the engine sees it. ``allocatable`` is in units (:mod:`.resources`)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    #: When the node's ``Ready`` condition last turned away from ``True`` (RFC 3339), ``""``
    #: while it is Ready or when the condition says nothing.
    not_ready_since: str = ""
    #: The gang members that failed on it, as its ``reconciler.troupe.io/failures`` records
    #: them: ``(pod uid, when, namespace)`` (when in RFC 3339; the namespace of the member,
    #: ``""`` when the entry names none), oldest first; an unreadable record reads as none
    #: (only the reconciler writes it).
    failures: tuple[tuple[str, str, str], ...] = ()

    @property
    def hostname(self) -> str:
        """The ``kubernetes.io/hostname`` label (the name when the label is absent)."""
        return self.labels.get(HOSTNAME_LABEL, self.name)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """A Node object. Ready unless a ``Ready`` condition says otherwise (as the GKE
        daemon reads it, so hand-written snapshots need no conditions). Raises
        :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field."""
        meta = mapping(obj, "metadata", required=True)
        spec = mapping(obj, "spec")
        status = mapping(obj, "status", required=True)
        ready, since = True, ""
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            for condition in conditions:
                if isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") != "True":
                    ready = False
                    changed = condition.get("lastTransitionTime")
                    since = changed if isinstance(changed, str) else ""
        return filled(cls, {
            "name": string(meta, "name", "metadata", required=True),
            "labels": string_map(meta, "labels", "metadata", share=True),
            "allocatable": node_allocatable(status),
            "taints": parse_taints(spec),
            "ready": ready,
            "unschedulable": spec.get("unschedulable") is True,
            "not_ready_since": since,
            "failures": node_failures(string_map(meta, "annotations", "metadata").get(NODE_FAILURES)),
        })


def node_failures(raw: str | None) -> tuple[tuple[str, str, str], ...]:
    """The ``(pod uid, when, namespace)`` of each entry of a node's
    ``reconciler.troupe.io/failures`` (JSON, see :data:`troupe.contract.NODE_FAILURES`; the
    namespace is that of the entry's ``pod``, ``namespace/name``, ``""`` without one); ``()``
    when absent or unreadable."""
    if not raw:
        return ()
    try:
        entries = json.loads(raw)
    except (ValueError, RecursionError):
        return ()
    if not isinstance(entries, list):
        return ()
    return tuple((e["uid"], e["at"], pod.partition("/")[0] if isinstance(pod := e.get("pod"), str) else "")
                 for e in entries
                 if isinstance(e, dict) and isinstance(e.get("uid"), str) and isinstance(e.get("at"), str))
