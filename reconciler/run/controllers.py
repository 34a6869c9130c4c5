"""Where the reconciler's controllers are made and wired (:func:`compose`): each is given the
writer ports it writes through and the collaborators it uses, nothing more, and the gang
controller the handlers it interprets the actions with (docs/decisions/046-writer-ports-and-controllers.md).
The running reconciler (:class:`reconciler.run.reconciler.Reconciler`) composes them over the
API server's ports; the controller tests and the benchmarks over the in-memory fakes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.daemon import handlers
from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.conditions import DELAY_SECONDS as CONDITION_DELAY_SECONDS
from reconciler.daemon.conditions import ConditionSink
from reconciler.daemon.controller import GangController
from reconciler.daemon.devicegroups import DeviceGroupController
from reconciler.daemon.gangobjects import GangObjects
from reconciler.daemon.memory import Memories
from reconciler.daemon.taints import NominatedTaints
from reconciler.engine.gangs.avoidance import Avoidance
from reconciler.engine.gangs.queueing import Policy, QueueState
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.timestamps import rfc3339
from reconciler.ports import Writes
from troupe.config import Config


@dataclass(frozen=True)
class Controllers:
    """The controllers of one reconciler, as :func:`compose` wired them: ``gangs`` decides and
    acts for one gang at a time; ``groups`` reconciles SharedDeviceGroups; ``conditions`` and
    ``gang_objects`` write coalesced, each on a thread of its own (their ``run``), or when
    flushed; ``taints`` and ``rollbacks`` have a step a new leader takes once its cache has
    synced (:meth:`NominatedTaints.sweep`, :meth:`~reconciler.daemon.handlers.rollbacks.Rollbacks.restore`); ``waves`` are the
    release threads; ``reservations`` also removes the stray records of workloads Troupe
    does not plan (:meth:`~reconciler.daemon.handlers.reservations.Reservations.remove_stray`)."""

    gangs: GangController
    groups: DeviceGroupController
    conditions: ConditionSink
    gang_objects: GangObjects
    taints: NominatedTaints
    rollbacks: handlers.Rollbacks
    waves: handlers.Waves
    reservations: handlers.Reservations

    def close(self) -> None:
        """Stop the release threads (after the writes in flight)."""
        self.waves.close()


def _condition_of(cache: ClusterCache) -> Callable[[PodKey], tuple[str, str, str] | bool | None]:
    """What :class:`ConditionSink` asks of a pod: its ``troupe.io/Gang`` condition as the
    cache holds it (None: none), False when the pod is gone."""

    def current(ref: PodKey) -> tuple[str, str, str] | bool | None:
        info = cache.pod_info(ref)
        return False if info is None else info.condition

    return current


def compose(cache: ClusterCache, writes: Writes, config: Config, wall_clock: Callable[[], float] = time.time,
            release_concurrency: int | None = None,
            condition_delay: float = CONDITION_DELAY_SECONDS) -> Controllers:
    """The controllers over ``cache`` and the writer ports ``writes``, configured by
    ``config``. ``wall_clock`` returns seconds since the epoch: the ``now`` of every decision
    (the timestamps written and read survive a restart). ``release_concurrency`` defaults to
    the configuration's ``releaseConcurrency`` (the release threads); ``condition_delay``
    (seconds) is how long a member's new condition waits to be written
    (:mod:`reconciler.daemon.conditions`). Tests pass a fake clock and a
    :class:`~reconciler.ports.fake.FakeCluster`."""
    memories = Memories()
    waves = handlers.Waves(release_concurrency or config.release_concurrency, writes.fence)
    conditions = ConditionSink(writes.pods, _condition_of(cache), delay=condition_delay,
                               wall=lambda: rfc3339(wall_clock()))
    # A fifth of the API budget at most: releases never wait behind a flood of status writes (decision 043).
    gang_objects = GangObjects(writes.gang_objects, config.gang_objects, budget=config.kube_api_qps / 5,
                               wall=wall_clock)
    groups = DeviceGroupController(cache, writes.groups, wall_clock)
    taints = NominatedTaints(cache, writes.nodes, config.nomination_max_seconds, wall_clock)
    policy = Policy.from_config(config)
    notices = handlers.Notices(conditions, writes.pods, memories)
    rollbacks = handlers.Rollbacks(cache, writes.pods, writes.state, memories, notices, waves, wall_clock)
    reservations = handlers.Reservations(cache, writes.workloads, waves)
    gangs = GangController(
        cache=cache, memories=memories, policy=policy, queue=QueueState(config.queueing_strategy), notices=notices,
        releases=handlers.Releases(cache, writes.pods, waves, conditions, groups, notices, wall_clock, memories),
        rollbacks=rollbacks,
        preemptions=handlers.Preemptions(cache, writes.pods, taints, notices, waves, policy),
        reservations=reservations,
        failures=handlers.NodeFailures(writes.nodes, Avoidance.from_config(config)),
        taints=taints, gang_objects=gang_objects, capacity=handlers.CapacityRequests(writes.capacity),
        wall_clock=wall_clock,
    )
    return Controllers(gangs, groups, conditions, gang_objects, taints, rollbacks, waves, reservations)
