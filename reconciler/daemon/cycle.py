"""One pass of the worker over the gangs ready in the work queue (:class:`Cycle`): decided in
queue order on one snapshot, each release applied to it before the next gang is decided
(docs/decisions/068-release-pipeline.md).

A snapshot of a cluster of 2,048 nodes and 16,000 pods costs milliseconds to build, and
every release changes the cache (its members are assumed, :mod:`reconciler.daemon.cache.assumed`),
so a snapshot per gang would make a burst of gangs cost the cluster times the gangs. A
cycle takes one snapshot from the cache, copies it once the first release is applied, and
applies each new release to its copy in place (:meth:`~reconciler.engine.ledger.snapshot.Snapshot.assume`),
as the simulator applies each decision to the snapshot the next gang is decided on
(:mod:`reconciler.tools.interpret`): what each further gang costs is its own decision and
the nodes its release touches.

The cycle takes a fresh snapshot from the cache (which holds the assumed members of every
release decided so far) whenever the one it has may not be what the cache would give:

- the gang about to be decided has a member the snapshot does not hold as the cache does
  (created, changed or deleted since the snapshot was taken);
- a decision did something whose effect on capacity the cycle does not replay: a
  preemption's nomination and evictions, a rollback's deletions, a reservation written or
  dropped. Those are rare, and the cache's snapshot counts them as the cluster will
  (a pod being deleted still uses its node until it is gone).

Decisions that change no capacity (a gang waiting or held, the clean-up of records) or that
finish a release already committed by its plan record leave the snapshot as it is.
"""

from __future__ import annotations

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.decision import actions
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import Gang
from reconciler.engine.ledger.snapshot import Snapshot

#: Actions whose effect on capacity a cycle need not replay: they change none, or they free
#: capacity (a nomination or a plan record cleared), which the next snapshot from the cache
#: counts; not replaying them only keeps the cycle's snapshot on the safe side.
_NO_CAPACITY = frozenset({actions.Wait, actions.Hold, actions.ForgetBackoff, actions.ClearNominations,
                          actions.ClearPlans, actions.RecordNodeFailures, actions.RequestCapacity,
                          actions.DropCapacityRequest})


class Cycle:
    """The snapshot the gangs of one pass of the worker are decided on, over ``cache``
    (module docstring). ``taken``: snapshots taken from the cache so far; ``applied``:
    releases applied in place."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._snapshot: Snapshot | None = None
        self._owned = False
        self.taken = 0
        self.applied = 0

    def snapshot_for(self, gang: Gang) -> Snapshot:
        """The snapshot to decide ``gang`` on: the cycle's own, or a fresh one from the cache
        when the cycle's does not hold the gang's members as the cache does."""
        snapshot = self._snapshot
        if snapshot is None or any(snapshot.pods.get(p.key) is not p for p in gang.members):
            snapshot = self._snapshot = self.cache.snapshot()
            self._owned = False
            self.taken += 1
        return snapshot

    def decided(self, decision: Decision) -> None:
        """Apply what ``decision`` (made on :meth:`snapshot_for`'s snapshot) changes of
        capacity to the cycle's snapshot: a new release's members use their nodes (and the
        SharedDeviceGroups it binds hold their devices); an action the cycle does not
        replay makes the next gang take a fresh snapshot from the cache."""
        if self._snapshot is None:
            return
        fresh = False
        for action in decision.actions:
            if type(action) in _NO_CAPACITY:
                continue
            if isinstance(action, actions.Release):
                if action.finishing or decision.placement is None:
                    continue  # committed already: the snapshot counts it by its plan record
                if not self._owned:
                    self._snapshot, self._owned = self._snapshot.copy(), True
                try:
                    self._snapshot.assume(decision.placement, action.bindings)
                except KeyError:  # a node the snapshot does not know: let the cache's count it
                    fresh = True
                else:
                    self.applied += 1
                continue
            fresh = True
        if fresh:
            self._snapshot = None
