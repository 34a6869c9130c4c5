"""Carrying out ``RecordNodeFailures`` (:class:`NodeFailures`): each member failure recorded
on its node, and a node that becomes avoided told with an Event
(docs/decisions/041-failing-nodes.md)."""

from __future__ import annotations

import functools
import logging

from reconciler.daemon.handlers.done import Done
from reconciler.daemon.memory import Memory
from reconciler.daemon.metrics import NODE_AVOIDANCES, NODE_FAILURES_RECORDED
from reconciler.engine.decision.actions import RecordNodeFailures
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.avoidance import Avoidance, NodeFailure, merged
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.model.nodes import NodeInfo, node_failures
from reconciler.engine.model.timestamps import rfc3339
from reconciler.ports.base import Gone, WriteError
from reconciler.ports.nodes import NodeWrites

log = logging.getLogger("reconciler.daemon.controller")


class NodeFailures:
    """The ``RecordNodeFailures`` handler: the records and the Events written through
    ``nodes``; ``avoidance`` (the configuration's) says when a node is avoided."""

    def __init__(self, nodes: NodeWrites, avoidance: Avoidance) -> None:
        self.nodes = nodes
        self.avoidance = avoidance

    def record(self, gang: Gang, decision: Decision, action: RecordNodeFailures, memory: Memory,
               now: float) -> Done:
        """Record each member failure on its node (:func:`reconciler.engine.gangs.avoidance.merged`).
        A node that becomes avoided by this write gets a Warning Event ``NodeAvoided`` and is
        counted in ``troupe_node_avoidances_total``. Best effort: a write that fails is logged,
        and the next decision asks again."""
        by_node: dict[str, list[NodeFailure]] = {}
        for failure in action.failures:
            by_node.setdefault(failure.node, []).append(failure)
        avoidance = self.avoidance
        for name, failures in sorted(by_node.items()):
            try:
                before, after = self.nodes.record_failures(name, functools.partial(merged, failures=failures))
            except Gone:
                continue
            except WriteError as e:
                log.warning("node %s: member failures not recorded: %s", name, e)
                continue
            NODE_FAILURES_RECORDED.inc(len(failures))
            was, now_until = (avoidance.until(NodeInfo(name, failures=node_failures(raw))) for raw in (before, after))
            if now_until is not None and now_until > now and (was is None or was <= now):
                self.nodes.emit_event(
                    name, "Warning", "NodeAvoided",
                    f"{len(failures)} gang member(s) failed here ({', '.join(f.pod for f in failures)}); "
                    f"{avoidance.threshold} within {avoidance.window}s: new gang placements avoid this node until "
                    f"{rfc3339(now_until)} unless nothing else fits")
                NODE_AVOIDANCES.inc()
        return Done()
