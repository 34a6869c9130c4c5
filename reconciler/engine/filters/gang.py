"""The loop: the plugins of :data:`~reconciler.engine.filters.profile.PROFILE` that read a
member beyond its node filter, run in profile order for one gang.

kube-scheduler's framework runs a profile's plugins in its order: each PreFilter once, then
on a node each Filter until one fails, and each plugin's ``AddPod``/``RemovePod`` when a pod
is added to or taken from the cycle (``pkg/scheduler/framework/runtime/framework.go``:
``RunPreFilterPlugins``, ``RunFilterPlugins``, ``RunPreFilterExtensionAddPod`` and
``RemovePod``). :class:`GangFilters` is that loop for a gang: it makes the
:class:`~reconciler.engine.filters.status.PreFilterState` of every plugin that registers one
(:attr:`~reconciler.engine.filters.status.Registered.state`) and that the gang needs, in
profile order; it runs their filters in that order with ``NodeResourcesFit`` at its place
(the caller's check, since the caller keeps the free capacity: :meth:`GangFilters.first`),
and tells every state each member placed and taken back. Each plugin's rule, reasons and
counts are in its own module; this one knows none of them.

The plugins that read only the node and the member's node filter run before, once per node
filter (:func:`~reconciler.engine.filters.profile.node_status`, cached by
:meth:`~reconciler.engine.ledger.snapshot.Snapshot.eligible`). A gang none of whose
members has pod terms and that no plugin wants (:func:`needed`) pays nothing here: most
gangs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from reconciler.engine.filters import noderesources, profile
from reconciler.engine.filters.status import Cycle, PreFilterState, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo

R = TypeVar("R")

#: The plugin classes whose states the loop may make, in profile order.
_STATES: tuple[type[PreFilterState], ...] = tuple(r.state for r in profile.PROFILE if r.state is not None)


def needed(snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
    """Whether any plugin run here can refuse a node to ``members``: one of them has pod
    terms (:class:`~reconciler.engine.model.podterms.PodTerms`: what it asks of its
    neighbours, ports or volumes), or a plugin wants them for what is not in their terms
    (:meth:`~reconciler.engine.filters.status.PreFilterState.wanted`: a node name, a
    default spread constraint, a running pod's anti-affinity that selects one of them).
    False for most gangs, which then cost nothing here."""
    return any(m.terms is not None for m in members) or any(state.wanted(snapshot, members) for state in _STATES)


class GangFilters:
    """The loop (module docstring) for the members ``order`` of one gang on ``snapshot`` (its
    pods using nodes counted from the start). Member indexes are positions in ``order``.
    :meth:`first` gives the first failing plugin's status for a member on a node (None: it
    passes), :meth:`admits` whether none fails; :meth:`place` counts a member on a node,
    :meth:`rollback` forgets every member placed.

    ``states``: the states made, in profile order: ``before`` ``NodeResourcesFit``, then
    ``after`` it. ``refused``: why the last member-by-member fill
    stopped (nodes per status over the nodes it tried)."""

    def __init__(self, snapshot: Snapshot, order: Sequence[PodInfo]) -> None:
        self.snapshot, self.order = snapshot, order
        cycle = Cycle(snapshot, order)
        fit = profile.position(noderesources.PLUGIN)
        made = [(profile.position(r.plugin), state) for r in profile.PROFILE
                if r.state is not None and (state := r.state.prefilter(cycle)) is not None]
        self.states: list[PreFilterState] = [state for _, state in made]
        self.before = [state for k, state in made if k < fit]
        self.after = [state for k, state in made if k > fit]
        self._log: list[tuple[int, int]] = []
        self.refused: Counter[Status] = Counter()
        self._fill_order = sorted(range(len(order)), key=lambda m: (any(s.placed_last(m) for s in self.states), m))

    def first(self, m: int, i: int, fit: Callable[[], R | None] | None = None) -> Status | R | None:
        """The first plugin that refuses member ``m`` on node ``i``, in profile order: a
        state's status, or what ``fit`` (the caller's ``NodeResourcesFit`` for the member on
        the node: None when it fits) returns, run at that plugin's place; None when all
        pass. Without ``fit``, the states only."""
        for state in self.before:
            why = state.filter(m, i)
            if why is not None:
                return why
        if fit is not None:
            found = fit()
            if found is not None:
                return found
        for state in self.after:
            why = state.filter(m, i)
            if why is not None:
                return why
        return None

    def admits(self, m: int, i: int) -> bool:
        """Whether member ``m`` passes every state's filter on node ``i`` now (the caller
        checks its resources)."""
        for state in self.states:  # noqa: SIM110  a loop: all() over a generator costs twice as much here
            if state.filter(m, i) is not None:
                return False
        return True

    def place(self, m: int, i: int) -> None:
        """Member ``m`` is placed on node ``i``: every state counts it (``AddPod``)."""
        for state in self.states:
            state.add_pod(m, i)
        self._log.append((m, i))

    def rollback(self) -> None:
        """Forget every member placed since the start (``RemovePod``, latest first)."""
        while self._log:
            m, i = self._log.pop()
            for state in self.states:
                state.remove_pod(m, i)

    def note_refusal(self, m: int, nodes: Sequence[int]) -> None:
        """Record, in :attr:`refused` (nodes per status), why member ``m`` fits on none of
        ``nodes`` now (the ones the states refuse)."""
        self.refused = Counter(why for i in nodes if (why := self.first(m, i)) is not None)

    def static(self, m: int, eligible: Sequence[bool]) -> list[bool]:
        """Per node: ``eligible`` and passing every state's filter for member ``m`` with no
        member placed yet (call before :meth:`place`;
        :meth:`~reconciler.engine.filters.status.PreFilterState.filter_unplaced`)."""
        out = list(eligible)
        for state in self.states:
            for i, ok in enumerate(out):
                if ok and state.filter_unplaced(m, i) is not None:
                    out[i] = False
        return out

    def one_per_node(self, m: int) -> bool:
        """Whether two members like ``m`` never share a node (a state says so: host ports,
        a hostname anti-affinity that selects itself)."""
        return any(state.one_per_node(m) for state in self.states)

    def together_key(self, m: int) -> list[str]:
        """The node label keys whose one domain must hold every member like ``m`` (its
        affinity terms when only the gang itself can satisfy them)."""
        return [key for state in self.states for key in state.together_keys(m)]

    def partitions(self, nodes: Sequence[int]) -> list[list[int]]:
        """``nodes`` split by their values of the keys the gang's affinity keeps it together
        on (:meth:`together_key`) that are not topology levels, so that a member-by-member
        fill tries each domain of those keys apart; ``[nodes]`` when there are none."""
        levels = self.snapshot.levels
        keys = sorted({key for m in range(len(self.order)) for key in self.together_key(m)
                       if levels.depth_of(key) is None})
        if not keys:
            return [list(nodes)]
        columns = [self.snapshot.table.label_column(key) for key in keys]
        parts: dict[tuple[str | None, ...], list[int]] = {}
        for i in nodes:
            parts.setdefault(tuple(column[i] for column in columns), []).append(i)
        return [part for values, part in parts.items() if None not in values]

    def signature(self, m: int) -> tuple[object, ...]:
        """What :meth:`static` depends on besides the member's filter: members with equal
        signatures pass on the same nodes."""
        pod = self.order[m]
        found: tuple[object, ...] = (pod.terms, pod.node_name, pod.namespace)
        for state in self.states:
            found += state.signature(m)
        return found

    def verify(self, nodes: Sequence[int]) -> bool:
        """Whether every member passes these filters on its node of ``nodes`` (member
        order), placed one by one in :meth:`fill_order`; nothing stays placed."""
        try:
            for m in self.fill_order():
                if not self.admits(m, nodes[m]):
                    return False
                self.place(m, nodes[m])
            return True
        finally:
            self.rollback()

    def together_depths(self, depths: list[int]) -> list[int]:
        """``depths`` (of the snapshot's topology tree) without those whose domains are
        larger than the domain of a key the gang's own affinity keeps it in
        (:meth:`together_key`), when that key is a topology level (other keys are left to
        the member-by-member fill); unchanged when that leaves none."""
        deepest = 0
        for m in range(len(self.order)):
            for key in self.together_key(m):
                depth = self.snapshot.levels.depth_of(key)
                if depth is not None:
                    deepest = max(deepest, depth)
        return [d for d in depths if d >= deepest] or depths

    def fill_order(self) -> list[int]:
        """The members in the order to place them one by one: rank order, those a state
        places last after the others (a worker with affinity to its gang's parameter server
        follows the server)."""
        return list(self._fill_order)
