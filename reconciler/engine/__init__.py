"""Troupe's engine: pure functions over plain data, no I/O, no clock, no client.

Seven rooms, each importing only those below it (the import contract in
``pyproject.toml`` keeps the order; docs/decisions/045-engine-rooms.md says why):

=============  =====================================================================
room           what it offers
=============  =====================================================================
``decision``   :func:`~reconciler.engine.decision.decide.decide` and
               :func:`~reconciler.engine.decision.step.step`: one decision per gang,
               its typed actions, the pod condition and Gang status it renders to
``preemption`` :func:`~reconciler.engine.preemption.plan.plan_preemption`: the victims
               that let a gang be placed, and that placement
``gangs``      :class:`~reconciler.engine.gangs.gang.Gang`, parsed once; the lifecycle
               table, clocks, failures, refusals, nominations, the queue
``placement``  :func:`~reconciler.engine.placement.place.place_gang`: every member or
               none, topology-aware and rank-ordered; slices, devices, shortfalls
``filters``    kube-scheduler's filters for what Troupe models, with their reasons
``ledger``     :class:`~reconciler.engine.ledger.snapshot.Snapshot`: the topology tree
               and who uses what on each node, made by one builder,
               :func:`~reconciler.engine.ledger.builder.build_snapshot`
``model``      cluster objects parsed once: pods, nodes, volumes, DRA, workloads,
               the reconciler's records
=============  =====================================================================

The reconciler and the simulator call the same :func:`~reconciler.engine.decision.step.step`
on snapshots made by the same builder of the same objects, so a what-if is never a second
opinion (docs/decisions/047-one-snapshot-builder.md). The placement
objective and its trade-offs: docs/decisions/001-placement-objective.md.
"""
