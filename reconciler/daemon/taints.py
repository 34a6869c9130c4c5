"""Troupe's taint on the nodes of a preemptor's nomination: written before the evictions,
removed once no nomination or unbound release needs it
(docs/decisions/033-nominated-nodes-are-tainted.md; the rule is
:mod:`reconciler.engine.gangs.nominated`).

:class:`NominatedTaints` is called from the controller's one worker thread: by the
``Preempt`` handler (:meth:`NominatedTaints.add`) and after every reconcile, and once by a
new leader when its cache has synced (:meth:`NominatedTaints.sweep`). Each node it writes
is fed back to the cache at once, so the next decision and the next sweep see it. Writes go
through the nodes' writer port, hence its fence: a follower writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.gangs import nominated
from reconciler.ports.base import Gone, LostLeadership, WriteError
from reconciler.ports.nodes import NodeWrites

log = logging.getLogger("reconciler.daemon.controller")

Each = Callable[[Callable[[str], Any], Iterable[str]], Iterator[Any]]
"""How the taints' writes are made: ``map`` (one after the other) or the release threads'
(:meth:`~reconciler.daemon.handlers.waves.Waves.map`)."""


class NominatedTaints:
    """The taint's writes over ``cache`` and ``nodes``; ``max_seconds`` is the
    configuration's ``nominationMaxSeconds`` and ``wall_clock`` returns seconds since the
    epoch."""

    def __init__(self, cache: ClusterCache, nodes: NodeWrites, max_seconds: float,
                 wall_clock: Callable[[], float]) -> None:
        self.cache = cache
        self.nodes = nodes
        self.max_seconds = max_seconds
        self.wall_clock = wall_clock
        #: The nodes known to carry the taint (None until the first sweep looks at all).
        self._known: set[str] | None = None

    def add(self, nodes: Iterable[str], each: Each = map) -> str:
        """Taint each of ``nodes`` that the cache does not show tainted, the writes made
        through ``each`` (``map``: one after the other; the release threads' ``map``: all at
        once, as a preemption of 64 nodes needs); returns ``""``, or why this replica must
        not go on (it lost the Lease: nothing may be evicted). A node that is gone is
        skipped; any other failure is logged and the preemption goes on unprotected, as it
        did before the taint existed (a replacement from another controller may then take
        the room)."""
        todo = []
        for name in sorted(set(nodes)):
            info = self.cache.node_info(name)
            if info is not None and nominated.is_tainted(info):
                if self._known is not None:
                    self._known.add(name)
                continue
            todo.append(name)
        lost = ""
        for name, written, why in list(each(self._taint, todo)):
            lost = lost or why
            if written is not None:
                self.cache.node_event("MODIFIED", written)
            if self._known is not None and not why:
                self._known.add(name)
        return lost

    def _taint(self, name: str) -> tuple[str, dict[str, Any] | None, str]:
        """Taint node ``name``: ``(name, the node written or None, why this replica lost the
        right to write or "")``."""
        try:
            return name, self.nodes.taint_node(name), ""
        except LostLeadership as e:
            return name, None, str(e)
        except Gone:
            return name, None, ""
        except WriteError as e:
            log.warning("node %s: nominated-node taint not written (the freed room is not protected "
                        "from other controllers' pods): %s", name, e)
            return name, None, ""

    def sweep(self) -> int:
        """Remove the taint from every node that carries it and whose nomination or release
        no longer needs it (:func:`reconciler.engine.gangs.nominated.wanted`); returns how many
        were removed. The first sweep looks at every node in the cache (what an earlier
        leader left); later ones only at the nodes this one found or tainted since, so a
        reconcile with no tainted node costs nothing. Write failures are logged: the next
        sweep tries again."""
        if self._known is None:
            self._known = set(nominated.tainted(self.cache.snapshot().nodes))
        if not self._known:
            return 0
        self._known = {name for name in self._known
                       if (info := self.cache.node_info(name)) is not None and nominated.is_tainted(info)}
        stale = self._known - nominated.wanted(self.cache.snapshot().pods.values(), self.wall_clock(),
                                               self.max_seconds)
        removed = 0
        for name in sorted(stale):
            try:
                written = self.nodes.untaint_node(name)
            except Gone:
                self._known.discard(name)
                continue
            except WriteError as e:  # LostLeadership included: the next leader sweeps
                log.warning("node %s: nominated-node taint not removed: %s", name, e)
                return removed
            self._known.discard(name)
            if written is not None:
                self.cache.node_event("MODIFIED", written)
                removed += 1
                log.info("node %s: nominated-node taint removed (no nomination holds it any more)", name)
        return removed
