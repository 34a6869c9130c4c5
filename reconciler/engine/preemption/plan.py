"""The entry of the preemption planner: :func:`plan_preemption` and its result,
:class:`PreemptionPlan` (the package docstring has the contract).

The entry converts ``gangPreemptionMode`` to :class:`~.search.Mode`, builds the search's
state, sweeps for objective (1), gathers the greedy's and (when small) the exact search's
proposals, settles them best estimate first and keeps the least objective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.text import plural
from reconciler.engine.placement.place import NO_REQUEST, PlacementResult
from reconciler.engine.preemption.candidates import CandidatePool, SearchGang, VictimGang
from reconciler.engine.preemption.capacity import CapacityModel, Fit, SearchPod, Target, scope
from reconciler.engine.preemption.exact import (
    EXACT_BUDGET,
    EXACT_PODS,
    exact,
    exact_work,
    relevant_pods,
)
from reconciler.engine.preemption.greedy import greedy
from reconciler.engine.preemption.naming import evicting
from reconciler.engine.preemption.search import (
    PLACEMENT_BUDGET,
    Budget,
    Mode,
    OutOfBudget,
    Proposal,
    Search,
)
from reconciler.engine.preemption.settle import settle
from troupe.config import PREEMPTION_MODES
from troupe.contract import TopologyRequest

#: Greedy plans (best estimated objective first) settled and compared.
GREEDY_SETTLED = 3

#: A settled plan: (its objective and tie-breaks, the victims, their placement)
Settled = tuple[tuple[object, ...], list[SearchPod], PlacementResult]


@dataclass(frozen=True)
class PreemptionPlan:
    """Victims whose eviction lets the gang be placed, and that placement.

    ``victims``: pod keys (``namespace/name``) to evict, sorted; ``gangs``: their gang
    keys, sorted; ``placement``: :func:`~reconciler.engine.placement.place.place_gang` on the snapshot without the victims
    (``placed`` is true). The objective: ``max_priority`` (1), ``len(gangs)`` (2), ``pods``
    (3, ``len(victims)``) and ``overage`` (4): ``(resource, units)`` pairs in comparison
    order (package docstring). ``method``: ``exact`` or ``greedy``; ``reason``: one line
    for the preemptor's conditions and Events, naming the victim gangs of its own
    namespace and counting the others (:func:`~.naming.evicting`), e.g. ``evict 2 gangs
    (5 pods, priority <= 10: ml/a and 1 gang of another namespace) to place 4 members in
    cloud.google.com/gce-topology-subblock=b0/b0s1, freeing 4 nvidia.com/gpu beyond the
    need``. ``nodes``: victim pod key -> node.
    """

    victims: tuple[PodKey, ...]
    gangs: tuple[str, ...]
    placement: PlacementResult
    max_priority: int
    pods: int
    overage: tuple[tuple[str, int], ...]
    method: str
    reason: str
    nodes: Mapping[PodKey, str] = field(default_factory=dict)

    def objective(self) -> tuple[int, int, int, tuple[int, ...]]:
        """(1)-(4) as one comparable tuple."""
        return (self.max_priority, len(self.gangs), self.pods, tuple(amount for _, amount in self.overage))


def plan_preemption(
    snapshot: Snapshot,
    members: Sequence[PodInfo],
    candidates: Sequence[VictimGang],
    mode: str,
    request: TopologyRequest = NO_REQUEST,
    *,
    near: Sequence[str] = (),
    gang: str = "",
    priority: int | None = None,
    exact: bool = True,
) -> PreemptionPlan | None:
    """The victims that let ``members`` be placed, least by the package docstring's
    objective, and the placement; None when no set of candidates makes the gang
    placeable, or ``mode`` is ``off``.

    ``members``: the preemptor gang's unplaced pods, as :func:`~reconciler.engine.placement.place.place_gang` takes them
    (``priority``, the preemptor gang's one priority, :attr:`~reconciler.engine.gangs.gang.Gang.priority`;
    default: their highest :meth:`Snapshot.priority_of`); ``request`` (its level, slices,
    placement and exclusive level: every plan is one that placement, layers and all,
    accepts) and ``near`` as for :func:`~reconciler.engine.placement.place.place_gang`. ``candidates``: gangs of
    lower priority (:class:`VictimGang`); ``gang``: the preemptor's own gang key, never a
    victim. ``mode``: ``off``, ``minimal`` or ``atomic`` (``gangPreemptionMode``).
    ``exact=False`` skips the exact search (benchmarks compare the two). A gang that fits
    without evicting anything gets a plan with no victims. ``snapshot`` is left as it
    was (candidate victims are removed from it in place and restored, as
    :meth:`Snapshot.without` does: do not share it with another thread during the call).
    Deterministic: the same input in any candidate order gives the same plan.

    Raises ``ValueError`` naming the value for an unknown mode, a candidate gang given
    twice, or a pod in two candidate gangs.
    """
    if mode not in PREEMPTION_MODES:
        raise ValueError(f"gangPreemptionMode: expected one of {', '.join(PREEMPTION_MODES)}, got {mode!r}")
    if mode == "off":
        return None
    search = new_search(snapshot, members, candidates, Mode(mode), request, near, gang, priority)
    if search is None:
        return None
    model = search.model
    if any(model.status(sums) is not Fit.NO for sums in model.base_sums.values()):
        placement = search.place([])
        if placement.placed:
            return _plan(search, [], placement, "exact")
    found = search.sweep()
    if found is None:
        return None
    priority, feasible = found
    relevant = search.relevant(feasible)
    budget = Budget(EXACT_BUDGET, PLACEMENT_BUDGET)
    proposals, method, relevant = _proposals(search, priority, relevant, budget, exact)
    best = _best(search, proposals, budget)
    if best is None:
        best = _fallback(search, relevant)
        method = "greedy"
    if best is None:
        return None
    return _plan(search, best[1], best[2], method)


def _proposals(search: Search, priority: int, relevant: dict[int, list[SearchGang]], budget: Budget,
               use_exact: bool) -> tuple[list[Proposal], str, dict[int, list[SearchGang]]]:
    """The proposals to settle, best estimate first, and the search that made them: the
    greedy's best :data:`GREEDY_SETTLED`, or every tie of the exact search when it is
    small enough and within ``budget`` (at most :data:`PLACEMENT_BUDGET`); with the
    domains left to the exact search (those whose bound allows the greedy's gangs)."""
    bounds = {domain: search.least_gangs(domain, gangs) for domain, gangs in relevant.items()}
    proposals = greedy(search, relevant, bounds, Target.EACH_SHAPE)
    proposals.sort(key=lambda proposal: proposal.estimate)
    proposals = proposals[:GREEDY_SETTLED]
    # The greedy's best plan bounds the gangs of a better one (a plan evicting nothing is
    # one the arithmetic could not confirm: no bound then).
    most: int | None = len({pod.gang for pod in proposals[0].pods}) if proposals else 0
    if most:
        relevant = {domain: gangs for domain, gangs in relevant.items() if bounds[domain] <= most}
    else:
        most = None
    if use_exact and relevant and exact_work(relevant, most) <= EXACT_BUDGET and (
            search.atomic or relevant_pods(relevant) <= EXACT_PODS):
        try:
            ties = exact(search, priority, relevant, budget, most)
        except OutOfBudget:
            budget.placements = PLACEMENT_BUDGET
        else:
            if ties:
                # Equal in (1)-(3): best-first by the overage's lower bound (estimate).
                ties.sort(key=lambda proposal: proposal.estimate)
                return ties[:PLACEMENT_BUDGET], "exact", relevant
    return proposals, "greedy", relevant


def _best(search: Search, proposals: Sequence[Proposal], budget: Budget) -> Settled | None:
    """The least settled proposal, settling them in order until one's estimate is no
    better than the best so far or ``budget`` has no placement left."""
    best: Settled | None = None
    for proposal in proposals:
        if best is not None and proposal.estimate >= best[0]:
            break
        try:
            settled = settle(search, proposal.pods, budget)
        except OutOfBudget:
            break
        if settled is None:
            continue
        pods, placement = settled
        key = search.key(pods, placement)
        if best is None or key < best[0]:
            best = (key, pods, placement)
    return best


def _fallback(search: Search, relevant: Mapping[int, list[SearchGang]]) -> Settled | None:
    """Several shapes whose fill failed on every proposal: aim at the envelope, then at
    everything the sweep removed in a feasible domain; the first that settles."""
    budget = Budget(0, PLACEMENT_BUDGET)
    fallback = greedy(search, relevant, dict.fromkeys(relevant, 1), Target.ENVELOPE)
    fallback += [Proposal(search.victims(domain, gangs), ()) for domain, gangs in sorted(relevant.items())]
    for proposal in fallback:
        settled = settle(search, proposal.pods, budget)
        if settled is not None:
            return (search.key(*settled), *settled)
    return None


def new_search(snapshot: Snapshot, members: Sequence[PodInfo], candidates: Sequence[VictimGang], mode: Mode,
               request: TopologyRequest, near: Sequence[str], gang: str, priority: int | None = None) -> Search | None:
    """The search's state for one call; None when no domain is allowed (an unknown level,
    ``near`` nodes none of which exist) or there are no members."""
    members = list(members)
    if not members:
        return None
    allowed = scope(snapshot, request.required_level, near)
    if allowed is None or not allowed[1]:
        return None
    depth, domains = allowed
    model = CapacityModel(snapshot, members, depth, domains)
    pool = CandidatePool(snapshot, members, candidates, gang, model, priority)
    return Search(snapshot, members, pool, mode, request, near, model)


def _amount(resource: str, units: int) -> str:
    """``units`` of ``resource`` as a person reads them: millicores as ``400m cpu``, bytes as
    ``2Gi memory``, anything else as a count (``4 nvidia.com/gpu``)."""
    if resource == "cpu":
        return f"{units // 1000} cpu" if units % 1000 == 0 else f"{units}m cpu"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if units >= size and units % size == 0:
                return f"{units // size}{suffix} {resource}"
        return f"{units} bytes of {resource}"
    return f"{units} {resource}"


def _plan(search: Search, pods: Sequence[SearchPod], placement: PlacementResult, method: str) -> PreemptionPlan:
    """The plan of victims ``pods`` and their ``placement``, with its reason line. A
    victim gang the snapshot evicts only whole (:attr:`Snapshot.whole_victims`) loses every
    pod, in ``minimal`` mode too."""
    snapshot = search.snapshot
    if snapshot.whole_victims and not search.atomic:
        chosen, have = sorted({pod.gang for pod in pods}), {pod.key for pod in pods}
        pods = [*pods, *(p for index in chosen if search.gangs[index].key in snapshot.whole_victims
                         for p in search.gangs[index].pods if p.key not in have)]
    gang_keys = sorted({search.gangs[pod.gang].key for pod in pods})
    top = max((search.gangs[pod.gang].priority for pod in pods), default=0)
    overage = search.overage(pods, placement) if pods else tuple((resource, 0) for resource in search.over_resources)
    where = str(placement.domain) if placement.domain is not None else "cluster"
    members = plural(len(placement.assignments), "member")
    if not pods:
        reason = f"fits without evicting anything: placed {members} in {where}"
    else:  # told as the preemptor's namespace may read it: other namespaces' gangs counted
        namespace = search.members[0].namespace if search.members else ""
        reason = f"{evicting(gang_keys, len(pods), top, namespace)} to place {members} in {where}"
        extra = [_amount(resource, amount) for resource, amount in overage if amount]
        if extra:
            reason += f", freeing {', '.join(extra)} beyond the need"
    return PreemptionPlan(
        victims=tuple(sorted(pod.key for pod in pods)),
        gangs=tuple(gang_keys),
        placement=placement,
        max_priority=top,
        pods=len(pods),
        overage=overage,
        method=method,
        reason=reason,
        nodes={pod.key: snapshot.nodes[pod.node].name for pod in sorted(pods, key=lambda pod: pod.key)},
    )
