"""``atomic`` plans whose victim gangs the PodDisruptionBudgets let go together.

Each candidate gang is held to the budgets on its own before planning
(:func:`~.candidates.held_by_budgets`). A budget can still cover several gangs of one plan
and allow fewer disruptions than they need together: one disruption allowed over two
one-pod gangs, say. Every dry run passes, and the evictions of the second gang are
refused, part-way through when gangs are evicted in parallel. So an ``atomic`` plan is
checked as a whole too: while a budget covers more of the plan's victims than it allows,
the last of the plan's gangs it covers (by key) is left out and the planner asked again
(docs/decisions/030-preemption-budgets-and-fences.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.budgets import Budget, counted
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import NO_REQUEST
from reconciler.engine.preemption.candidates import VictimGang
from reconciler.engine.preemption.plan import PreemptionPlan, plan_preemption
from troupe.contract import TopologyRequest

#: Plans asked for at most, each without one more gang that a shared budget refused.
ATTEMPTS = 4


def _exceeded(chosen: Sequence[VictimGang], budgets: Sequence[Budget]) -> tuple[Budget, list[str]] | None:
    """The first budget (by key) that covers more of the pods of ``chosen`` than it allows,
    with the keys of the gangs it covers; None when there is none."""
    for budget in sorted(budgets, key=lambda b: b.key):
        covering = {victim.key: sum(1 for pod in counted(victim.pods) if budget.covers(pod)) for victim in chosen}
        if sum(covering.values()) > budget.disruptions_allowed:
            return budget, sorted(key for key, count in covering.items() if count)
    return None


def plan_within_budgets(snapshot: Snapshot, members: Sequence[PodInfo], candidates: Sequence[VictimGang],
                        mode: str, request: TopologyRequest = NO_REQUEST, *, near: Sequence[str] = (),
                        gang: str = "", priority: int | None = None) -> tuple[PreemptionPlan | None, dict[str, str]]:
    """:func:`~.plan.plan_preemption` with the same arguments, then, in ``atomic`` mode
    with budgets in ``snapshot``, the plan's victim gangs held to the budgets together.
    Returns the plan (None: no plan, or none within the budgets after :data:`ATTEMPTS`
    plans) and the gangs left out, gang key -> why (``"PodDisruptionBudget ns/b allows 1
    disruption(s) over 2 gangs of the plan"``). Raises what
    :func:`~.plan.plan_preemption` raises."""
    left_out: dict[str, str] = {}
    pool = list(candidates)
    for _ in range(ATTEMPTS):
        plan = plan_preemption(snapshot, members, pool, mode, request, near=near, gang=gang, priority=priority)
        if plan is None or mode != "atomic" or not snapshot.budgets or len(plan.gangs) < 2:
            return plan, left_out
        found = _exceeded([victim for victim in pool if victim.key in plan.gangs], snapshot.budgets)
        if found is None:
            return plan, left_out
        budget, covered = found
        left_out[covered[-1]] = (f"PodDisruptionBudget {budget.key} allows {budget.disruptions_allowed} "
                                 f"disruption(s) over {len(covered)} gangs of the plan")
        pool = [victim for victim in pool if victim.key != covered[-1]]
    return None, left_out
