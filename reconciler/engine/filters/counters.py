"""The counters :mod:`.gang` keeps per topology domain, so that kube-scheduler's
``PodTopologySpread`` and ``InterPodAffinity`` are checked with a few lookups per term,
never per pair of pods (the plugins' own PreFilter states: ``topologyToMatchedTermCount``,
``TpPairToMatchNum`` with its critical paths).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import HostPort, PodAffinityTerm, SpreadConstraint
from reconciler.engine.model.selectors import NodeFilter

T = TypeVar("T")


class DomainCounts:
    """Matching pods per domain value of one spread constraint, over a fixed set of
    domains, with the smallest count kept by a histogram of counts (O(1) per change)."""

    def __init__(self, domains: set[str]) -> None:
        self.count = dict.fromkeys(domains, 0)
        self.histogram: Counter[int] = Counter({0: len(domains)})
        self.low = 0

    def change(self, value: str, sign: int) -> None:
        """One more (``sign`` 1) or one fewer (-1) matching pod in domain ``value``."""
        before = self.count.get(value)
        if before is None:
            return
        after = before + sign
        self.count[value] = after
        self.histogram[before] -= 1
        self.histogram[after] += 1
        if after < self.low:
            self.low = after
        while self.histogram[self.low] == 0 and self.low < before + 1:
            self.low += 1


@dataclass(frozen=True)
class SpreadGroup:
    """The DoNotSchedule constraints of members alike: their namespace, constraints and
    node filter (which nodes make domains)."""

    namespace: str
    constraints: tuple[SpreadConstraint, ...]
    flt: NodeFilter


class AntiAffinityCounts:
    """One distinct pod anti-affinity term, its key's value on every node (``column``),
    and its counters: placed pods it selects per domain (``matched``), placed pods that
    carry it per domain (``holders``)."""

    __slots__ = ("column", "holders", "matched", "term")

    def __init__(self, term: PodAffinityTerm, column: tuple[str | None, ...]) -> None:
        self.term, self.column = term, column
        self.matched: Counter[str] = Counter()
        self.holders: Counter[str] = Counter()


class AffinityCounts:
    """A pod's required affinity terms, taken together as kube-scheduler takes them: a
    placed pod counts only when it matches every term, and then in its domain of each
    term's key (``pairs``: ``(key, value)`` -> pods; ``total``: every count); ``columns``:
    each term's key's value on every node; ``gang``: some member of the gang matches them
    all."""

    __slots__ = ("columns", "gang", "pairs", "terms", "total")

    def __init__(self, terms: tuple[PodAffinityTerm, ...], columns: list[tuple[str | None, ...]]) -> None:
        self.terms, self.columns = terms, columns
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.total = 0
        self.gang = False

    def selects(self, pod: PodInfo, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether ``pod`` matches every term."""
        return all(t.selects(pod.namespace, pod.labels, namespace_labels) for t in self.terms)


@dataclass
class PodCounts:
    """What one pod adds to the counters where it is placed."""

    namespace: str = ""
    selected_by: list[AntiAffinityCounts] = field(default_factory=list)
    within: list[AffinityCounts] = field(default_factory=list)
    holds: list[AntiAffinityCounts] = field(default_factory=list)
    spread_hits: list[tuple[SpreadGroup, int]] = field(default_factory=list)
    ports: tuple[HostPort, ...] = ()
    attached: list[tuple[str, str]] = field(default_factory=list)
    exclusive: set[tuple[str, str]] = field(default_factory=set)


class TermIndex:
    """Anti-affinity terms by what a pod must carry to be selected, so that finding the
    terms that select a pod looks at the terms its labels can satisfy, not at every term
    of the cluster (kube-scheduler's PreFilter state is keyed so too). A term is filed
    under its first ``In`` requirement's ``(key, value)`` pairs, else its first ``Exists``
    requirement's key; a term with neither (``NotIn`` or ``DoesNotExist`` only, or an empty
    selector, which selects every pod) is checked for every pod; one without a selector
    selects nothing and is not filed. ``slots`` are :class:`AntiAffinityCounts` in the
    order the caller's lists keep. Up to :data:`SCAN` terms are scanned instead: filing them
    costs more than it saves."""

    #: Terms scanned one by one rather than filed.
    SCAN = 16

    def __init__(self, slots: Sequence[AntiAffinityCounts]) -> None:
        self.slots = slots
        self.order = {id(slot): k for k, slot in enumerate(slots)}
        self.by_value: dict[tuple[str, str], list[AntiAffinityCounts]] = {}
        self.by_key: dict[str, list[AntiAffinityCounts]] = {}
        self.always: list[AntiAffinityCounts] = []
        for slot in slots:
            selector = slot.term.selector
            if selector is None:
                continue
            anchor = next((r for r in selector.requirements if r.operator == "In"), None)
            if anchor is not None:
                for value in anchor.values:
                    self.by_value.setdefault((anchor.key, value), []).append(slot)
                continue
            exists = next((r for r in selector.requirements if r.operator == "Exists"), None)
            if exists is not None:
                self.by_key.setdefault(exists.key, []).append(slot)
            else:
                self.always.append(slot)

    def selecting(self, pod: PodInfo, namespace_labels: Mapping[str, Mapping[str, str]]) -> list[AntiAffinityCounts]:
        """The terms that select ``pod`` (:meth:`PodAffinityTerm.selects`), in the order of
        the slots the index was made of."""
        if len(self.slots) <= self.SCAN:
            return [slot for slot in self.slots if slot.term.selects(pod.namespace, pod.labels, namespace_labels)]
        found: dict[int, AntiAffinityCounts] = {id(s): s for s in self.always}
        for key, value in pod.labels.items():
            for slot in self.by_value.get((key, value), ()):
                found[id(slot)] = slot
            for slot in self.by_key.get(key, ()):
                found[id(slot)] = slot
        chosen = [slot for slot in found.values() if slot.term.selects(pod.namespace, pod.labels, namespace_labels)]
        chosen.sort(key=lambda slot: self.order[id(slot)])
        return chosen


def tally(items: list[T], values: Sequence[T], sign: int) -> None:
    """Add ``values`` to ``items`` (``sign`` 1) or remove one of each (-1)."""
    for value in values:
        if sign > 0:
            items.append(value)
        else:
            items.remove(value)
