"""Who may be evicted to make room for a gang: the victim rule, the candidate gangs of a
snapshot, and the candidates as the search sees them.

DESIGN.md "Gang-aware preemption": candidates are running (or released) pods of strictly
lower priority than the preemptor, grouped by gang (a pod outside any gang is a gang of
one, ``namespace/pod:<name>``), never terminal pods, never the preemptor's own gang.
:func:`may_be_victim` is that rule for a gang, the one place it is written; the caller's
list (:func:`candidates`, :func:`candidate_gangs`) and the planner (:class:`CandidatePool`)
both apply it. :func:`victim_gangs` groups as :func:`~reconciler.engine.model.declared.gang_key`
groups Troupe's pods, once per snapshot (:meth:`Snapshot.memo`); the filters per
preemptor.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter

from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.budgets import budget_refusal
from reconciler.engine.model.declared import gang_key
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.preemption.capacity import CapacityModel, SearchPod
from reconciler.engine.preemption.naming import elsewhere, namespace_of
from troupe.config import Config

#: A priority above every pod's (``spec.priority`` is an int32).
_ANY = 1 << 32


def may_be_victim(gang: str, priority: int, preemptor: str, preemptor_priority: int,
                  refused: Collection[str] = ()) -> bool:
    """The victim rule (DESIGN.md "Gang-aware preemption"): gang ``gang`` of
    ``priority`` (its one priority: :meth:`Snapshot.priority_of` its pods) may be evicted for the gang
    ``preemptor`` of ``preemptor_priority`` when it is of strictly lower priority, is not
    the preemptor's own gang, and its eviction was not refused (``refused``: gang keys)."""
    return priority < preemptor_priority and gang != preemptor and gang not in refused


@dataclass(frozen=True)
class VictimGang:
    """A candidate victim gang.

    ``key``: the gang key (``namespace/name``, or ``namespace/pod:<name>`` for a pod
    outside any gang); ``priority``: the gang's, the highest :meth:`Snapshot.priority_of`
    its pods (the priority their pod group states, else their ``spec.priority``); ``pods``:
    its pods that use a node in the snapshot (``snapshot.using(pod.key) is not None``).
    """

    key: str
    priority: int
    pods: tuple[PodInfo, ...]

    @classmethod
    def of(cls, key: str, pods: Iterable[PodInfo], snapshot: Snapshot) -> VictimGang:
        """The gang ``key`` of ``pods``: those that use a node in ``snapshot``, priority
        the highest :meth:`Snapshot.priority_of` all of them (0 for none)."""
        pods = list(pods)
        return cls(key, max((snapshot.priority_of(pod) for pod in pods), default=0),
                   tuple(pod for pod in pods if snapshot.using(pod.key) is not None))


def candidate_gangs(snapshot: Snapshot, gang_of: Callable[[PodInfo], str | None], below: int,
                    exclude: str = "") -> list[VictimGang]:
    """The candidates for a preemptor of priority ``below``, sorted by key: every pod that
    uses a node in ``snapshot`` and is neither terminal, nor being deleted (its capacity
    comes back without an eviction), nor gated (a member of a release still in progress,
    or of another preemptor's nomination: running or released pods only, DESIGN.md),
    grouped by ``gang_of(pod)`` (e.g.
    :func:`reconciler.engine.model.declared.gang_key` with the configuration), a pod outside any gang
    being the gang of one ``namespace/pod:<name>``; gangs that :func:`may_be_victim`
    refuses for the gang ``exclude`` (the preemptor's own) of priority ``below`` are left
    out."""
    by_gang: dict[str, list[PodInfo]] = {}
    for pod in snapshot.pods.values():
        if pod.deleting or pod.gated or snapshot.node_index_of(pod.key) is None:
            continue
        key = gang_of(pod) or f"{pod.namespace}/pod:{pod.name}"
        by_gang.setdefault(key, []).append(pod)
    out = []
    for key in sorted(by_gang):
        pods = by_gang[key]
        priority = max(snapshot.priority_of(pod) for pod in pods)
        if may_be_victim(key, priority, exclude, below):
            out.append(VictimGang(key, priority, tuple(sorted(pods, key=lambda pod: pod.key))))
    return out


# --- the daemon's view: every victim gang of a snapshot, once ----------------------------
@lru_cache(maxsize=8)
def _config(prefix: str) -> Config:
    return Config(gang_annotation_prefix=prefix)


def victim_gangs(snapshot: Snapshot, prefix: str) -> dict[str, VictimGang]:
    """Every gang of ``snapshot`` with a pod that could be evicted, by gang key (gang
    annotations of ``prefix``; :func:`candidate_gangs` at any priority), made once per
    snapshot."""
    config = _config(prefix)
    return snapshot.memo(f"victim-gangs:{prefix}", lambda: {
        victim.key: victim for victim in candidate_gangs(snapshot, lambda pod: gang_key(pod, config), below=_ANY)})


def gang_of_pod(snapshot: Snapshot, prefix: str) -> dict[str, str]:
    """Pod key -> the key of its victim gang, for every pod of :func:`victim_gangs`."""
    return snapshot.memo(f"victim-of:{prefix}", lambda: {
        pod.key: key for key, victim in victim_gangs(snapshot, prefix).items() for pod in victim.pods})


def candidates(snapshot: Snapshot, prefix: str, preemptor: str, priority: int,
               refused: frozenset[str] = frozenset()) -> list[VictimGang]:
    """The gangs ``preemptor`` (a gang key, of ``priority``) may evict
    (:func:`may_be_victim`: strictly lower priority, not itself, not one whose eviction
    was refused), those with a pod on a node."""
    return [victim for key, victim in victim_gangs(snapshot, prefix).items()
            if may_be_victim(key, victim.priority, preemptor, priority, refused) and victim.pods]


def held_by_budgets(snapshot: Snapshot, prefix: str, preemptor: str, priority: int,
                    mode: str) -> dict[str, str]:
    """Gang key -> why the PodDisruptionBudgets of ``snapshot`` forbid evicting it whole
    (:func:`~reconciler.engine.model.budgets.budget_refusal`), for the gangs ``preemptor`` (a
    gang key, of ``priority``) could otherwise evict; empty unless ``mode`` is ``atomic``
    (``minimal`` evicts a gang's pods one by one and takes a refusal as it comes). Such a
    gang is not a candidate: the plan takes another instead of a dry run that passes pod by
    pod and real evictions refused after the first
    (docs/decisions/030-preemption-budgets-and-fences.md)."""
    if mode != "atomic" or not snapshot.budgets:
        return {}
    gangs = victim_gangs(snapshot, prefix)
    refusals: dict[str, str] = snapshot.memo(f"budget-refusals:{prefix}", lambda: {
        key: why for key, victim in gangs.items() if (why := budget_refusal(victim.pods, snapshot.budgets))})
    return {key: why for key, why in refusals.items()
            if may_be_victim(key, gangs[key].priority, preemptor, priority)}


def budget_note(held: Mapping[str, str], namespace: str, shown: int = 3) -> str:
    """``held`` (:func:`held_by_budgets`) for a reason in ``namespace`` (the preemptor's):
    ``"; left whole by their budgets: team-a/a (PodDisruptionBudget team-a/keep allows 1
    ...)"``, at most ``shown`` gangs of ``namespace`` named, those of other namespaces
    counted (``and 2 gangs of other namespaces``, :mod:`.naming`); ``""`` for none."""
    if not held:
        return ""
    own = sorted((key, why) for key, why in held.items() if namespace_of(key) == namespace)
    named = [f"{key} ({why})" for key, why in own[:shown]]
    rest = [f"{len(own) - shown} more"] if len(own) > shown else []
    others = len(held) - len(own)
    rest += [elsewhere(others)] if others else []
    if not named:
        return f"; left whole by their budgets: {' and '.join(rest)}"
    return f"; left whole by their budgets: {', '.join(named)}{''.join(f' and {r}' for r in rest)}"


def leaving(snapshot: Snapshot) -> list[str]:
    """Keys of the pods being deleted that still use a node: room that is being freed."""
    return snapshot.memo("leaving", lambda: [pod.key for pod in snapshot.pods.values()
                                             if pod.deleting and not pod.terminal
                                             and snapshot.using(pod.key) is not None])


# --- the search's view: candidates normalised against the capacity model -----------------
@dataclass(eq=False)
class SearchGang:
    """A candidate gang as the search sees it: ``key``, ``priority`` (its highest pod's),
    ``index`` in :attr:`CandidatePool.gangs`, its ``pods`` on nodes (by node, then key)
    and ``local``: scope domain -> its relevant pods there."""

    key: str
    priority: int
    index: int
    pods: list[SearchPod] = field(default_factory=list)
    local: dict[int, list[SearchPod]] = field(default_factory=dict)


_pod_order = attrgetter("node", "key")


class CandidatePool:
    """The candidate gangs the planner may use, by priority; a level's gangs are turned
    into :class:`SearchGang` values (sorted by key, their pods on nodes sorted by node)
    only when the sweep reaches it, so gangs above objective (1) cost almost nothing.

    Defensively, the caller's ``candidates`` are held to :func:`may_be_victim` for the
    preemptor ``gang`` of ``priority`` (the gang's one priority; default: the highest
    :meth:`Snapshot.priority_of` its ``members``), counting every pod's
    :meth:`Snapshot.priority_of`. Raises ``ValueError`` for a candidate gang given twice."""

    def __init__(self, snapshot: Snapshot, members: Sequence[PodInfo], candidates: Sequence[VictimGang],
                 gang: str, model: CapacityModel, priority: int | None = None) -> None:
        self.snapshot = snapshot
        self.model = model
        self.member_keys = {pod.key for pod in members}
        ceiling = max(snapshot.priority_of(pod) for pod in members) if priority is None else priority
        seen: set[str] = set()
        #: priority -> the candidate gangs of that priority not yet admitted
        self.levels: dict[int, list[VictimGang]] = {}
        for candidate in candidates:
            if candidate.key in seen:
                raise ValueError(f"candidate gang {candidate.key!r} given twice")
            seen.add(candidate.key)
            priority = candidate.priority
            for pod in candidate.pods:
                if (counted := snapshot.priority_of(pod)) > priority:
                    priority = counted
            if may_be_victim(candidate.key, priority, gang, ceiling):
                self.levels.setdefault(priority, []).append(candidate)
        self.gangs: list[SearchGang] = []
        self._owner: dict[str, str] = {}
        self._vectors: dict[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]] = {}

    def admit(self, priority: int) -> list[SearchGang]:
        """The gangs of one priority level, now part of :attr:`gangs`; their pods that use
        no node, are terminal or are members are left out. Raises ``ValueError`` for a pod
        that is in two candidate gangs."""
        model, owner, vectors = self.model, self._owner, self._vectors
        index, scope_of, usable = model.index, model.scope_of, model.usable
        node_of = self.snapshot.node_index_of
        out = []
        for candidate in sorted(self.levels.get(priority, ()), key=lambda candidate: candidate.key):
            gang = SearchGang(candidate.key, priority, len(self.gangs))
            for pod in candidate.pods:
                key = pod.key
                if key in owner:
                    raise ValueError(f"pod {key!r} is in candidate gangs {owner[key]!r} and {candidate.key!r}")
                owner[key] = candidate.key
                node = node_of(key)
                if node is None or pod.terminal or key in self.member_keys:
                    continue
                items = tuple(pod.requests.items())
                vector = vectors.get(items)
                if vector is None:
                    vector = vectors[items] = tuple((index[resource], amount) for resource, amount in items
                                                    if amount > 0 and resource in index)
                gang.pods.append(SearchPod(key, gang.index, node, pod.requests, vector, scope_of[node],
                                           usable[node]))
            if gang.pods:
                gang.pods.sort(key=_pod_order)
                for search_pod in gang.pods:
                    if search_pod.relevant:
                        gang.local.setdefault(search_pod.scope, []).append(search_pod)
                self.gangs.append(gang)
                out.append(gang)
        return out
