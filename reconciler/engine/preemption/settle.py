"""Settling a proposed victim set (package docstring): place it, trim it against that
placement (gangs, then per node the fewest pods that cover the deficit), place again,
until nothing more can be dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import combinations

from reconciler.engine.model.resources import PODS
from reconciler.engine.placement.place import PlacementResult
from reconciler.engine.preemption.capacity import SearchPod
from reconciler.engine.preemption.search import Budget, Search, least_subsets

#: Settling tries every subset of a plan's gangs (of a node's victim pods) to drop (to
#: keep) when they are at most this many; else it goes in order.
TRIM_GANGS = 9

#: Node index -> units per resource
PerNode = dict[int, dict[str, int]]


def settle(search: Search, pods: list[SearchPod], budget: Budget) -> tuple[list[SearchPod], PlacementResult] | None:
    """Place ``pods`` removed, trim them against the placement, place again, until
    nothing more can be dropped; None when the first placement fails. Raises
    :class:`~.search.OutOfBudget` when ``budget`` has no placement left for the first."""
    placement = search.spend_place(pods, budget)
    if not placement.placed:
        return None
    while True:
        trimmed = trim(search, pods, placement)
        if len(trimmed) == len(pods):
            return pods, placement
        again = search.spend_place(trimmed, budget, force=True)
        if again.placed:
            pods, placement = trimmed, again
            continue
        # Several shapes: the engine's fill can miss a placement that exists. Drop
        # what it confirms, one pod at a time.
        for pod in [pod for pod in pods if pod not in trimmed]:
            rest = [other for other in pods if other is not pod]
            again = search.spend_place(rest, budget, force=True)
            if again.placed:
                pods, placement = rest, again
                break
        else:
            return pods, placement


def slack(search: Search, pods: Sequence[SearchPod], demand: PerNode) -> PerNode:
    """Per node the placement uses (``demand``): free + freed by ``pods`` - demand, per
    requested resource."""
    out: PerNode = {}
    for node, need in demand.items():
        free = search.snapshot.free(node)
        out[node] = {resource: free.get(resource, 0) - amount for resource, amount in need.items()}
    for pod in pods:
        spare = out.get(pod.node)
        if spare is not None:
            for resource in spare:
                spare[resource] += pod.requests.get(resource, 0)
    return out


def can_drop(drop: Iterable[SearchPod], spare: PerNode) -> bool:
    """Whether the placement still fits with the pods ``drop`` kept (``spare``:
    :func:`slack`)."""
    taken: PerNode = {}
    for pod in drop:
        room = spare.get(pod.node)
        if room is None:
            continue
        kept = taken.setdefault(pod.node, {})
        for resource in room:
            kept[resource] = kept.get(resource, 0) + pod.requests.get(resource, 0)
            if kept[resource] > room[resource]:
                return False
    return True


def trim(search: Search, pods: list[SearchPod], placement: PlacementResult) -> list[SearchPod]:
    """The victims ``placement`` needs: gangs whose pods it can do without are dropped
    (most at once, then most pods), then, in ``minimal`` mode, on each node the fewest
    pods that cover the deficit there (preferring gangs evicted elsewhere anyway)."""
    demand = search.demand(placement)
    spare = slack(search, pods, demand)
    by_gang: dict[int, list[SearchPod]] = {}
    for pod in pods:
        by_gang.setdefault(pod.gang, []).append(pod)
    order = sorted(by_gang, key=lambda index: (-len(by_gang[index]), search.gangs[index].key))
    dropped: list[int] = []
    if len(order) <= TRIM_GANGS:

        def rank(combo: tuple[int, ...], _: object) -> tuple[tuple[int, int, str], tuple[int, ...]] | None:
            if not can_drop((pod for index in combo for pod in by_gang[index]), spare):
                return None
            return (-len(combo), -sum(len(by_gang[index]) for index in combo),
                    ",".join(search.gangs[index].key for index in combo)), combo

        found = least_subsets(range(len(order), 0, -1), partial(combinations, order), rank)
        dropped = list(found[1][0]) if found is not None else []
    else:
        for gang in order:
            if can_drop((pod for index in [*dropped, gang] for pod in by_gang[index]), spare):
                dropped.append(gang)
    gone = set(dropped)
    kept = [pod for pod in pods if pod.gang not in gone]
    if search.atomic:
        return kept
    return trim_pods(search, kept, demand)


def trim_pods(search: Search, pods: list[SearchPod], demand: PerNode) -> list[SearchPod]:
    """On each node of ``pods``, in node order, the fewest that cover the deficit of the
    placement's ``demand`` there (:func:`cover`); none on a node it does not use."""
    by_node: dict[int, list[SearchPod]] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    nodes_of: dict[int, set[int]] = {}
    for pod in pods:
        nodes_of.setdefault(pod.gang, set()).add(pod.node)
    keep: dict[int, list[SearchPod]] = {}
    for node in sorted(by_node):
        need = demand.get(node)
        victims = by_node[node]
        if need is None:
            keep[node] = []
            for pod in victims:
                nodes_of[pod.gang].discard(node)
            continue
        free = search.snapshot.free(node)
        deficit = {resource: amount - free.get(resource, 0) for resource, amount in need.items()
                   if amount - free.get(resource, 0) > 0}
        keep[node] = cover(search, victims, deficit, nodes_of, node) if deficit else []
        still = {pod.gang for pod in keep[node]}
        for pod in victims:
            if pod.gang not in still:
                nodes_of[pod.gang].discard(node)
    chosen = {id(pod) for kept in keep.values() for pod in kept}
    return [pod for pod in pods if id(pod) in chosen]


def cover(search: Search, victims: list[SearchPod], deficit: dict[str, int], nodes_of: dict[int, set[int]],
          node: int) -> list[SearchPod]:
    """The victims on one node that cover its ``deficit``, least by (gangs with no victim
    on another node (``nodes_of``: gang -> its victims' nodes), pods, freed in overage
    order, position)."""
    victims = sorted(victims, key=lambda pod: pod.key)

    def covers(chosen: Sequence[SearchPod]) -> bool:
        return all(sum(pod.requests.get(resource, 0) for pod in chosen) >= amount
                   for resource, amount in deficit.items())

    if len(victims) <= TRIM_GANGS:

        def rank(combo: tuple[SearchPod, ...], _: object) -> tuple[tuple[object, ...], list[SearchPod]] | None:
            if not covers(combo):
                return None
            only_here = len({pod.gang for pod in combo if nodes_of.get(pod.gang, set()) <= {node}})
            freed = tuple(sum(pod.requests.get(resource, 0) for pod in combo) for resource in search.over_resources)
            return (only_here, len(combo), freed, tuple(pod.key for pod in combo)), list(combo)

        found = least_subsets(range(1, len(victims) + 1), partial(combinations, victims), rank, every_size=True)
        return found[1][0] if found is not None else victims
    primary = search.over_resources[0] if search.over_resources else PODS
    chosen = sorted(victims, key=lambda pod: (-pod.requests.get(primary, 0), pod.key))
    for pod in sorted(chosen, key=lambda pod: (pod.requests.get(primary, 0), pod.key)):
        rest = [other for other in chosen if other is not pod]
        if covers(rest):
            chosen = rest
    return chosen
