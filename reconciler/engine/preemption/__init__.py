"""Gang-aware preemption: which lower-priority gangs to evict so that a gang can be placed.

:func:`plan_preemption` is the entry point; docs/decisions/009-preemption-planner.md has
the reasoning, worked examples and measurements. DESIGN.md "Gang-aware preemption" is the
contract; the Volcano proposal (``seeds/003``) is the behaviour it improves on.

**Victims.** Candidates are the caller's :class:`VictimGang` values: gangs of running (or
released) pods of strictly lower priority than the preemptor, a pod outside any gang being
a gang of one (the rule: :func:`~.candidates.may_be_victim`). The planner also drops,
defensively, candidates that are not of strictly lower priority than every member, the
preemptor's own gang (``gang``), pods that use no node in the snapshot (terminal ones use
none) and the members themselves; it never returns a pod that is not among what remains.

**Feasibility.** A plan is feasible when :func:`~reconciler.engine.placement.place.place_gang`,
on the snapshot without the victims, places every member, with the gang's required or
preferred level and ``near`` nodes; that placement is part of the plan. With a required
level the victims come from one domain of that level (the one the placement uses).

**Objective**, lexicographic, in this order:

1. the highest priority among the victim gangs;
2. the number of gangs disrupted (gangs with at least one pod evicted);
3. the number of pods evicted;
4. the *overage*: capacity freed beyond the need. For each resource ``r`` the members
   request (``pods`` excluded: evicted pods are (3)), in the units of
   :mod:`reconciler.engine.model.resources` (millicores for ``cpu``, bytes for ``memory``, devices for extended
   resources)::

       overage[r] = sum over nodes n of  freed[n][r] - clamp(demand[n][r] - free[n][r], 0, freed[n][r])

   where ``freed[n][r]`` is what the victims on ``n`` request, ``free[n][r]`` what ``n``
   has free before the eviction and ``demand[n][r]`` what the placement's members on ``n``
   request: the freed capacity that the placement does not use. The vector is compared
   in the order: extended resources by name (``nvidia.com/gpu``), then ``cpu``,
   ``memory``, ``ephemeral-storage``; for members asking only for GPUs it reads as GPUs.

Then, for equal objectives, the victims' nodes in topology order (earlier first), then
the gang keys: the same input gives the same plan whatever the order of the candidates.

**Modes** (``gangPreemptionMode``; :class:`~.search.Mode` inside): ``off`` returns None.
``minimal`` evicts only pods the plan needs: every victim pod ``v`` is needed, that is the
returned placement does not fit on the snapshot without the other victims. ``atomic``
evicts every pod of each chosen gang, on every node; (3) then counts whole gangs.

**Search.** The capacity model (:mod:`.capacity`), the placement engine's capacity
arithmetic (members per node, summed over the domains of the scope level,
:meth:`~reconciler.engine.ledger.topology.TopologyTree.caps_by_depth` in spirit) decides feasibility without calling it,
exactly for members of one shape; for several shapes a necessary test (each shape fits)
and a sufficient one (their envelope fits) bound it and the placement engine decides
between them. Then:

- a sweep over candidate priorities, lowest first, finds (1) and the domains that can hold
  the gang at that priority, in ``O(candidate pods)``; gangs above (1) are never looked at
  further;
- **greedy**, in the feasible domains (least lower bound of gangs first, at most
  :data:`GREEDY_DOMAINS`, skipping domains whose bound exceeds the best found): repeatedly
  evict the move (one gang, or every remaining candidate gang of one node) with the most
  member slots gained per gang, unless a move that completes the need costs no more gangs
  than the rest would (then the completing move with the fewest pods and least freed: the
  proposal's "least overage", keeping the next :data:`ALTERNATIVES` - 1 as other plans);
  then a reverse pass keeps the fewest of the chosen gangs that suffice and, in
  ``minimal`` mode, drops their pods that are not needed;
- **exact** when it is small: the gang sets of at most the greedy's number of gangs, in
  the domains whose bound allows it, are at most :data:`EXACT_BUDGET`, and in ``minimal``
  mode the relevant pods (on nodes a member can use, in those domains) at most
  :data:`EXACT_PODS`. Gang sets by increasing size, then (``minimal``) their pod sets by
  increasing size, each checked by the arithmetic, give every set tied on (1)-(3); they
  are placed best-first by a lower bound of their overage
  (:meth:`.search.Search.estimate`), at most :data:`PLACEMENT_BUDGET`, until the bound
  passes the best overage found. Past :data:`EXACT_BUDGET` evaluations in all, the
  greedy's plans stand.

Every candidate plan is then *settled*: placed, trimmed against its placement (gangs,
then per node the fewest pods that cover the deficit), placed again, until nothing more
can be dropped. The plan with the least objective wins. Exactness: with members of one
shape and at most :data:`PLACEMENT_BUDGET` ties, the exact search returns an optimal plan
(the property tests hold it to a brute force over every subset).

**Modules**, one per job: :mod:`.candidates` (the victim rule, the candidate gangs, the
search's view of them), :mod:`.capacity` (the capacity model), :mod:`.search` (one call's
state, the objective, the sweep, the subset enumeration), :mod:`.greedy`, :mod:`.exact`,
:mod:`.settle`, :mod:`.plan` (the entry and the plan) and :mod:`.budgeted` (an ``atomic``
plan held to the PodDisruptionBudgets that cover several of its gangs).
"""

from reconciler.engine.preemption.candidates import VictimGang, candidate_gangs, may_be_victim
from reconciler.engine.preemption.capacity import overage_order
from reconciler.engine.preemption.exact import EXACT_BUDGET, EXACT_PODS
from reconciler.engine.preemption.greedy import (
    ALTERNATIVES,
    GREEDY_DOMAINS,
    REVERSE_BUDGET,
    REVERSE_GANGS,
)
from reconciler.engine.preemption.plan import GREEDY_SETTLED, PreemptionPlan, plan_preemption
from reconciler.engine.preemption.search import PLACEMENT_BUDGET
from reconciler.engine.preemption.settle import TRIM_GANGS

__all__ = [
    "ALTERNATIVES",
    "EXACT_BUDGET",
    "EXACT_PODS",
    "GREEDY_DOMAINS",
    "GREEDY_SETTLED",
    "PLACEMENT_BUDGET",
    "REVERSE_BUDGET",
    "REVERSE_GANGS",
    "TRIM_GANGS",
    "PreemptionPlan",
    "VictimGang",
    "candidate_gangs",
    "may_be_victim",
    "overage_order",
    "plan_preemption",
]
