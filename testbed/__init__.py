"""Builders of plain cluster objects and scenarios shared by the tests and the benchmarks.

Not shipped (the wheel and the images hold ``troupe``, ``webhook``, ``reconciler`` and
``certs``): chained Node and Pod builders for the engine (:mod:`testbed.engine_builders`),
clusters and gangs for the reconciler (:mod:`testbed.reconciler_builders`), DRA objects
(:mod:`testbed.dra_builders`), gangs released as created (:mod:`testbed.as_created`),
the preemption oracle (:mod:`testbed.preemption_oracle`) and hostile tenants
(:mod:`testbed.hostile_tenants`). The harnesses that start servers and clusters stay in
``tests/support``.
"""
