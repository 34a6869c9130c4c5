"""``InterPodAffinity``, required terms (``pkg/scheduler/framework/plugins/interpodaffinity``;
Kubernetes docs "Assigning Pods to Nodes", inter-pod affinity and anti-affinity).

Every required affinity term has a matching pod in the node's domain of its key (or, when
no pod matches any of the terms and the pod matches them all itself, any node with the
keys: the first of a group with affinity to itself); no pod in the node's domain matches a
required anti-affinity term of the pod; and no pod in the domain has an anti-affinity term
matching the pod ("existing pods anti-affinity"). Its PreFilter state (:class:`TermCounts`)
counts per domain, never per pair of pods: for each distinct anti-affinity term, the placed
pods it selects and the placed pods that carry it (:class:`AntiAffinityCounts`), and for
each member's affinity terms, the placed pods that match them all (:class:`AffinityCounts`)
(kube-scheduler's ``topologyToMatchedTermCount``, kept by ``updateWithPod``).

Reasons, in this order: ``node(s) didn't satisfy existing pods anti-affinity rules``,
``node(s) didn't match pod affinity rules`` (``UnschedulableAndUnresolvable``), ``node(s)
didn't match pod anti-affinity rules``; the anti-affinity ones ``Unschedulable`` (evicting
the pods they see frees the node).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from reconciler.engine.filters.status import Code, Cycle, Plugin, PreFilterState, Registered, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import PodAffinityTerm
from troupe.contract import HOSTNAME_LABEL

EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"

PLUGIN = Plugin("InterPodAffinity")
EXISTING = Status(Code.UNSCHEDULABLE, PLUGIN, (EXISTING_ANTI_AFFINITY,))
AFFINITY = Status(Code.UNRESOLVABLE, PLUGIN, (AFFINITY_RULES,))
ANTI_AFFINITY = Status(Code.UNSCHEDULABLE, PLUGIN, (ANTI_AFFINITY_RULES,))


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


def check(i: int, affinity: AffinityCounts | None, alone: bool, anti: Sequence[AntiAffinityCounts],
          selected_by: Sequence[AntiAffinityCounts]) -> Status | None:
    """None when a pod passes on node ``i``: ``affinity`` its required affinity terms with
    their counts (None: none), ``alone`` whether it may satisfy them with no pod matching
    (the first of its group), ``anti`` its anti-affinity terms' counts, ``selected_by`` the
    counts of the placed pods' anti-affinity terms that select it."""
    if affinity is not None:
        exist = True
        for term, column in zip(affinity.terms, affinity.columns, strict=True):
            value = column[i]
            if value is None:
                return AFFINITY
            if affinity.pairs[(term.topology_key, value)] <= 0:
                exist = False
        if not exist and not alone:
            return AFFINITY
    for slot in anti:
        value = slot.column[i]
        if value is not None and slot.matched[value] > 0:
            return ANTI_AFFINITY
    for slot in selected_by:
        value = slot.column[i]
        if value is not None and slot.holders[value] > 0:
            return EXISTING
    return None


Counts = tuple[list[AntiAffinityCounts], list[AffinityCounts], list[AntiAffinityCounts]]
"""What one pod changes where it is placed: the members' anti-affinity terms that select it
(their ``matched``), the members' affinity terms it matches all of (their ``pairs``), and
the anti-affinity terms it carries (their ``holders``)."""


class TermCounts(PreFilterState):
    """Per member: its affinity terms with their counts (``affinity``, None: none), its
    anti-affinity terms' counts (``anti``), the counts of the anti-affinity terms, of the pods
    using nodes or of members, that select it (``selected_by``), and whether it matches its own
    affinity terms (``self_affine``). Every distinct term is counted once, whoever carries it."""

    __slots__ = (
        "affinity",
        "anti",
        "counts",
        "holder_terms",
        "match_terms",
        "matching",
        "order",
        "selected_by",
        "self_affine",
        "sets",
        "slots",
        "snapshot",
        "terms_sets",
    )

    def __init__(self, cycle: Cycle) -> None:
        snapshot, order = cycle.snapshot, cycle.order
        self.snapshot, self.order = snapshot, order
        spaces = snapshot.namespaces
        self.slots: dict[PodAffinityTerm, AntiAffinityCounts] = {}
        self.terms_sets: dict[tuple[PodAffinityTerm, ...], AffinityCounts] = {}
        self.affinity = [self._affinity(m.terms.affinity) if m.terms is not None and m.terms.affinity else None
                         for m in order]
        self.sets = list(self.terms_sets.values())
        self.anti = [[self._slot(t) for t in m.terms.anti_affinity] if m.terms is not None else [] for m in order]
        self.match_terms = list(self.slots.values())
        for pod, _ in cycle.existing:
            for t in pod.terms.anti_affinity if pod.terms is not None else ():
                self._slot(t)
        self.holder_terms = list(self.slots.values())
        self.matching = TermIndex(self.match_terms)
        self.counts = [self.counts_of(m) for m in order]
        for _, within, _ in self.counts:
            for found in within:
                found.gang = True
        holders = TermIndex(self.holder_terms)
        self.selected_by = [holders.selecting(m, spaces) for m in order]
        self.self_affine = [terms is not None and terms.selects(m, spaces)
                            for m, terms in zip(order, self.affinity, strict=True)]

    @classmethod
    def wanted(cls, snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
        """Whether a pod using a node has an anti-affinity term that selects a member."""
        for key in snapshot.terms_keys:
            pod = snapshot.pods[key]
            if pod.terms is not None and pod.terms.anti_affinity and snapshot.node_index_of(key) is not None:
                for term in pod.terms.anti_affinity:
                    if any(term.selects(m.namespace, m.labels, snapshot.namespaces) for m in members):
                        return True
        return False

    @classmethod
    def prefilter(cls, cycle: Cycle) -> TermCounts | None:
        """None when no member has an affinity or anti-affinity term and no pod using a
        node has an anti-affinity term."""
        snapshot = cycle.snapshot
        if not any(m.terms is not None and (m.terms.affinity or m.terms.anti_affinity) for m in cycle.order) and \
                not any((terms := snapshot.pods[key].terms) is not None and terms.anti_affinity
                        and snapshot.node_index_of(key) is not None for key in snapshot.terms_keys):
            return None
        state = cls(cycle)
        for pod, i in cycle.existing:
            if pod.terms is not None or state.match_terms or state.sets:
                state.update(state.counts_of(pod), i, 1)
        return state

    def _affinity(self, terms: tuple[PodAffinityTerm, ...]) -> AffinityCounts:
        found = self.terms_sets.get(terms)
        if found is None:
            column = self.snapshot.table.label_column
            found = self.terms_sets[terms] = AffinityCounts(terms, [column(t.topology_key) for t in terms])
        return found

    def _slot(self, term: PodAffinityTerm) -> AntiAffinityCounts:
        slot = self.slots.get(term)
        if slot is None:
            slot = self.slots[term] = AntiAffinityCounts(term, self.snapshot.table.label_column(term.topology_key))
        return slot

    def counts_of(self, pod: PodInfo) -> Counts:
        """What ``pod`` changes where it is placed (:data:`Counts`)."""
        spaces = self.snapshot.namespaces
        holds = [self.slots[t] for t in pod.terms.anti_affinity] if pod.terms is not None else []
        return (self.matching.selecting(pod, spaces), [found for found in self.sets if found.selects(pod, spaces)],
                holds)

    @staticmethod
    def update(counts: Counts, i: int, sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) a pod that changes ``counts`` on node ``i``
        (kube-scheduler's ``updateWithPod``)."""
        selected_by, within, holds = counts
        for slot in selected_by:
            value = slot.column[i]
            if value is not None:
                slot.matched[value] += sign
        for found in within:
            for term, column in zip(found.terms, found.columns, strict=True):
                value = column[i]
                if value is not None:
                    found.pairs[(term.topology_key, value)] += sign
                    found.total += sign
        for slot in holds:
            value = slot.column[i]
            if value is not None:
                slot.holders[value] += sign

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m`` on node ``i``: alone (the first of its group) when it
        matches its own affinity terms and no placed pod does."""
        found = self.affinity[m]
        alone = found is not None and self.self_affine[m] and found.total == 0
        return check(i, found, alone, self.anti[m], self.selected_by[m])

    def filter_unplaced(self, m: int, i: int) -> Status | None:
        """:meth:`filter` with affinity terms that some member of the gang matches taken as
        satisfiable among the members."""
        found = self.affinity[m]
        alone = found is not None and ((self.self_affine[m] and found.total == 0) or found.gang)
        return check(i, found, alone, self.anti[m], self.selected_by[m])

    def add_pod(self, m: int, i: int) -> None:
        """Member ``m`` counts on node ``i``."""
        self.update(self.counts[m], i, 1)

    def remove_pod(self, m: int, i: int) -> None:
        """Member ``m`` no longer counts on node ``i``."""
        self.update(self.counts[m], i, -1)

    def one_per_node(self, m: int) -> bool:
        """A member with a hostname anti-affinity term that selects itself."""
        pod = self.order[m]
        return any(t.term.topology_key == HOSTNAME_LABEL
                   and t.term.selects(pod.namespace, pod.labels, self.snapshot.namespaces) for t in self.anti[m])

    def together_keys(self, m: int) -> tuple[str, ...]:
        """Its affinity terms' keys when only the gang itself can satisfy them (no placed pod
        matches them and it matches them itself)."""
        found = self.affinity[m]
        if found is not None and self.self_affine[m] and found.total == 0:
            return tuple(t.topology_key for t in found.terms)
        return ()

    def placed_last(self, m: int) -> bool:
        """A member with affinity terms follows the others (a worker with affinity to its
        gang's parameter server follows the server)."""
        return self.affinity[m] is not None

    def signature(self, m: int) -> tuple[object, ...]:
        """Which terms select member ``m`` and whether it matches its own affinity."""
        return (tuple(id(slot) for slot in self.selected_by[m]), self.self_affine[m])


REGISTERED = Registered(PLUGIN, (EXISTING_ANTI_AFFINITY, AFFINITY_RULES, ANTI_AFFINITY_RULES),
                        "pkg/scheduler/framework/plugins/interpodaffinity", state=TermCounts)
