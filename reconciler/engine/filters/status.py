"""What a filter plugin says of one node for one pod: a typed :class:`Status`, as
kube-scheduler's framework returns it (``pkg/scheduler/framework/interface.go``:
``Status{code, reasons, plugin}``; Kubernetes docs "Scheduling Framework").

A passing filter returns None (kube-scheduler's nil status is Success); only failures are
objects, and the plugins keep a constant per fixed reason, so the hot loops allocate
nothing. Strings are rendered from statuses only where a message is written
(:mod:`.profile` lists reasons in the profile's order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import NewType

from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.selectors import NodeFilter

Plugin = NewType("Plugin", str)
"""A filter plugin's name, as kube-scheduler's profile names it (``NodeResourcesFit``)."""


class Code(StrEnum):
    """kube-scheduler's status codes, for a node (a filter's :class:`Status`) and for a
    gang (a placement's outcome)."""

    #: It fits: the caller places the pod there (the gang: every member has a node).
    SUCCESS = "Success"
    #: Not now: freeing room (pods finishing, preemption) may help, so a caller counts the
    #: node as a preemption candidate.
    UNSCHEDULABLE = "Unschedulable"
    #: Not here, whatever is freed (a taint, the node's labels, a missing volume): a caller
    #: leaves the node out of preemption. For a gang: no allowed domain holds it even empty,
    #: or the request is unknown.
    UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class Status:
    """One plugin's failure on one node: its ``code``, the ``plugin`` that gave it, and its
    ``reasons`` worded as the plugin's ``ErrReason`` constants (several only for
    ``NodeResourcesFit``, one per resource short, in :func:`~reconciler.engine.model.resources.resource_order`)."""

    code: Code
    plugin: Plugin
    reasons: tuple[str, ...]


Order = Callable[[str], tuple[int, str]]
"""A plugin's own order of its reasons: a sort key for one reason text."""

NodeCheck = Callable[[NodeFilter, NodeInfo], "Status | None"]
"""A filter that reads only the node and the pod's node filter: None when it passes."""


@dataclass(frozen=True)
class Registered:
    """What a plugin module registers with the profile (:data:`~reconciler.engine.filters.profile.PROFILE`):
    its ``plugin`` name, its fixed ``reasons`` in the plugin's own order, its ``source``
    (the plugin's path in kube-scheduler), for a plugin whose reasons carry a value (a
    taint, a resource, a claim) the ``order`` of those, and for a plugin that reads only
    the node and the pod's node filter, its ``node`` check (run by
    :func:`~reconciler.engine.filters.profile.node_status` in profile order)."""

    plugin: Plugin
    reasons: tuple[str, ...]
    source: str
    order: Order | None = None
    node: NodeCheck | None = None

    def rank(self, reason: str) -> tuple[int, str]:
        """``reason``'s place among this plugin's: its ``order``, else its position in
        ``reasons`` (one not listed goes last, by its text)."""
        if self.order is not None:
            return self.order(reason)
        try:
            return (self.reasons.index(reason), "")
        except ValueError:
            return (len(self.reasons), reason)
