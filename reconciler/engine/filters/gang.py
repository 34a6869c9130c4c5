"""The plugins that read the pods around a member, counted per domain, for one gang.

After the plugins that read only the node (:func:`~reconciler.engine.filters.profile.node_status`),
kube-scheduler's default profile runs, in the order of :data:`~reconciler.engine.filters.profile.PROFILE`:
``NodeName`` (:mod:`.nodename`) and ``NodePorts`` (:mod:`.nodeports`) before
``NodeResourcesFit`` (the caller's, :mod:`.noderesources`): :meth:`GangFilters.early`;
then ``VolumeRestrictions``, ``NodeVolumeLimits``, ``VolumeBinding``, ``VolumeZone``,
``PodTopologySpread`` and ``InterPodAffinity`` (:mod:`.volumerestrictions`,
:mod:`.nodevolumelimits`, :mod:`.volumebinding`, :mod:`.volumezone`,
:mod:`.podtopologyspread`, :mod:`.interpodaffinity`): :meth:`GangFilters.late`. Each
plugin's rule and reasons are in its module; this one keeps their PreFilter state.

Everything is counted per domain, never per pair of pods (:mod:`.counters`): for each
distinct term, how many placed pods it selects in each domain of its key, and how many
carry it; for each spread constraint, the matching pods per domain and the smallest count;
host ports, attached CSI volumes and ``ReadWriteOncePod`` users per node. :class:`GangFilters`
starts from the pods using nodes in the snapshot and counts the gang's members as they are
placed (:meth:`GangFilters.place`, undone by :meth:`GangFilters.rollback`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from reconciler.engine.filters import (
    interpodaffinity,
    nodename,
    nodeports,
    nodevolumelimits,
    podtopologyspread,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from reconciler.engine.filters.counters import (
    AffinityCounts,
    AntiAffinityCounts,
    DomainCounts,
    PodCounts,
    SpreadGroup,
    TermIndex,
    tally,
)
from reconciler.engine.filters.podtopologyspread import default_constraints
from reconciler.engine.filters.status import Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import HostPort, PodAffinityTerm
from troupe.contract import HOSTNAME_LABEL


def needed(snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
    """Whether any of these filters can refuse a node to ``members``: one of them asks for
    something (:class:`~reconciler.engine.model.podterms.PodTerms`, a default spread constraint), or a pod using a
    node has an anti-affinity term that selects one of them. False for most gangs, which
    then cost nothing here."""
    if any(m.terms is not None or m.node_name for m in members):
        return True
    if snapshot.spread_defaults and any(default_constraints(m, snapshot.spread_defaults) for m in members):
        return True
    for key in snapshot.terms_keys:
        pod = snapshot.pods[key]
        if pod.terms is not None and pod.terms.anti_affinity and snapshot.node_index_of(key) is not None:
            for term in pod.terms.anti_affinity:
                if any(term.selects(m.namespace, m.labels, snapshot.namespaces) for m in members):
                    return True
    return False


class GangFilters:
    """The filters above for the members ``order`` of one gang on ``snapshot`` (its pods
    using nodes counted from the start). Member indexes are positions in ``order``.
    :meth:`early` and :meth:`late` give the first failing plugin's status for a member on a
    node (None: it passes), before and after ``NodeResourcesFit``; :meth:`place` counts a
    member on a node; :meth:`rollback` forgets every member placed."""

    def __init__(self, snapshot: Snapshot, order: Sequence[PodInfo]) -> None:
        self.snapshot, self.order = snapshot, order
        self.names = [node.name for node in snapshot.nodes]
        self.volumes = snapshot.volumes
        spaces = snapshot.namespaces
        self.spread_of: list[SpreadGroup | None] = []
        for m in order:
            constraints = m.terms.spread if m.terms is not None and m.terms.spread else default_constraints(
                m, snapshot.spread_defaults)
            self.spread_of.append(SpreadGroup(m.namespace, constraints, m.node_filter) if constraints else None)
        self.groups = list(dict.fromkeys(g for g in self.spread_of if g is not None))
        #: Per group: the domains of each constraint, and which nodes count (their pods)
        #: (:func:`.podtopologyspread.domains`).
        self.domains: dict[SpreadGroup, list[DomainCounts]] = {}
        self.counted: dict[SpreadGroup, list[bool]] = {}
        for group in self.groups:
            self.domains[group], self.counted[group] = podtopologyspread.domains(snapshot.nodes, group)
        self._slots: dict[PodAffinityTerm, AntiAffinityCounts] = {}
        self._sets: dict[tuple[PodAffinityTerm, ...], AffinityCounts] = {}
        self.affinity = [self._affinity(m.terms.affinity) if m.terms is not None and m.terms.affinity else None
                         for m in order]
        self.sets = list(self._sets.values())
        self.anti = [[self._slot(t) for t in m.terms.anti_affinity] if m.terms is not None else [] for m in order]
        self.match_terms = list(self._slots.values())
        existing = [(pod, i) for pod in snapshot.pods.values() if (i := snapshot.node_index_of(pod.key)) is not None]
        for pod, _ in existing:
            for t in pod.terms.anti_affinity if pod.terms is not None else ():
                self._slot(t)
        self.holder_terms = list(self._slots.values())
        self.ports: dict[int, list[HostPort]] = {}
        self.attached: dict[int, list[tuple[str, str]]] = {}
        self.exclusive: Counter[tuple[str, str]] = Counter()
        self._matching = TermIndex(self.match_terms)
        self.entries = [self._entry(m) for m in order]
        for entry in self.entries:
            for found in entry.within:
                found.gang = True
        self._static = False
        holders = TermIndex(self.holder_terms)
        self.selected_by = [holders.selecting(m, spaces) for m in order]
        self.self_affine = [terms is not None and terms.selects(m, spaces)
                            for m, terms in zip(order, self.affinity, strict=True)]
        self.self_match = [tuple(c.selector is not None and c.selector.matches(m.labels) for c in g.constraints)
                           if g is not None else () for m, g in zip(order, self.spread_of, strict=True)]
        for pod, i in existing:
            if pod.terms is not None or self.match_terms or self.sets or self.groups:
                self._count(self._entry(pod), i, 1)
        self._log: list[tuple[int, int]] = []
        #: Why the last member-by-member fill stopped: reasons over the nodes it tried.
        self.refused: Counter[Status] = Counter()
        self._volume_status: dict[tuple[int, int], Status | None] = {}

    def _affinity(self, terms: tuple[PodAffinityTerm, ...]) -> AffinityCounts:
        found = self._sets.get(terms)
        if found is None:
            column = self.snapshot.table.label_column
            found = self._sets[terms] = AffinityCounts(terms, [column(t.topology_key) for t in terms])
        return found

    def _slot(self, term: PodAffinityTerm) -> AntiAffinityCounts:
        slot = self._slots.get(term)
        if slot is None:
            slot = self._slots[term] = AntiAffinityCounts(term, self.snapshot.table.label_column(term.topology_key))
        return slot

    def _entry(self, pod: PodInfo) -> PodCounts:
        spaces, terms = self.snapshot.namespaces, pod.terms
        entry = PodCounts(pod.namespace, self._matching.selecting(pod, spaces),
                       [found for found in self.sets if found.selects(pod, spaces)])
        if not pod.deleting:
            entry.spread_hits = [(g, k) for g in self.groups if g.namespace == pod.namespace
                                 for k, c in enumerate(g.constraints)
                                 if c.selector is not None and c.selector.matches(pod.labels)]
        if terms is not None:
            entry.holds, entry.ports = [self._slots[t] for t in terms.anti_affinity], terms.host_ports
            if terms.claims and self.volumes is not None:
                entry.attached = self.volumes.attached(pod.namespace, terms.claims)
                entry.exclusive = self.volumes.read_write_once_pod(pod.namespace, terms.claims)
        return entry

    def _value(self, key: str, i: int) -> str | None:
        return self.snapshot.table.label_column(key)[i]

    def _count(self, entry: PodCounts, i: int, sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) a pod described by ``entry`` on node ``i``."""
        for slot in entry.selected_by:
            value = slot.column[i]
            if value is not None:
                slot.matched[value] += sign
        for found in entry.within:
            for term, column in zip(found.terms, found.columns, strict=True):
                value = column[i]
                if value is not None:
                    found.pairs[(term.topology_key, value)] += sign
                    found.total += sign
        for slot in entry.holds:
            value = slot.column[i]
            if value is not None:
                slot.holders[value] += sign
        for group, k in entry.spread_hits:
            if self.counted[group][i]:
                self.domains[group][k].change(self._value(group.constraints[k].topology_key, i) or "", sign)
        if entry.ports:
            tally(self.ports.setdefault(i, []), entry.ports, sign)
        if entry.attached:
            tally(self.attached.setdefault(i, []), entry.attached, sign)
        for claim in entry.exclusive:
            self.exclusive[claim] += sign

    def place(self, m: int, i: int) -> None:
        """Member ``m`` is placed on node ``i``: it counts for every later check."""
        self._count(self.entries[m], i, 1)
        self._log.append((m, i))

    def rollback(self) -> None:
        """Forget every member placed since the start."""
        while self._log:
            m, i = self._log.pop()
            self._count(self.entries[m], i, -1)

    def one_per_node(self, m: int) -> bool:
        """Whether two members like ``m`` never share a node: it has host ports, or a
        hostname anti-affinity term that selects itself."""
        pod = self.order[m]
        return bool(self.entries[m].ports) or any(
            t.term.topology_key == HOSTNAME_LABEL and t.term.selects(pod.namespace, pod.labels, self.snapshot.namespaces)
            for t in self.anti[m])

    def together_key(self, m: int) -> list[str]:
        """The topology keys whose one domain must hold every member like ``m``: its affinity
        terms when only the gang itself can satisfy them (no pod matches them yet and it
        matches them itself)."""
        found = self.affinity[m]
        if found is not None and self.self_affine[m] and found.total == 0:
            return [t.topology_key for t in found.terms]
        return []

    def early(self, m: int, i: int) -> Status | None:
        """``NodeName`` then ``NodePorts`` for member ``m`` on node ``i``."""
        wanted = self.order[m].node_name
        found = nodename.check(wanted, self.names[i]) if wanted else None
        if found is None:
            ports = self.entries[m].ports
            if ports:
                found = nodeports.check(ports, self.ports.get(i))
        return found

    def late(self, m: int, i: int) -> Status | None:
        """The volume plugins, ``PodTopologySpread``, then ``InterPodAffinity`` for member
        ``m`` on node ``i`` (module docstring)."""
        found = self._volume(m, i)
        if found is None:
            found = self._spread(m, i)
        if found is None:
            found = self._inter_pod(m, i)
        return found

    def _volume(self, m: int, i: int) -> Status | None:
        pod, entry = self.order[m], self.entries[m]
        if pod.terms is None or not pod.terms.claims or self.volumes is None:
            return None
        found = volumerestrictions.check(entry.exclusive, self.exclusive)
        if found is None and entry.attached:
            found = nodevolumelimits.check(self.volumes, self.names[i], self.attached.get(i, ()), entry.attached)
        if found is not None:
            return found
        key = (m, i)
        if key not in self._volume_status:
            node, volumes, claims = self.snapshot.nodes[i], self.volumes, pod.terms.claims
            self._volume_status[key] = (volumebinding.prefilter(volumes, pod.namespace, claims)
                                        or volumebinding.check(volumes, pod.namespace, claims, node.name, node.labels)
                                        or volumezone.check(volumes, pod.namespace, claims, node.labels))
        return self._volume_status[key]

    def _spread(self, m: int, i: int) -> Status | None:
        group = self.spread_of[m]
        if group is None:
            return None
        values = [self._value(c.topology_key, i) for c in group.constraints]
        return podtopologyspread.check(group, self.domains[group], values, self.self_match[m])

    def _inter_pod(self, m: int, i: int) -> Status | None:
        found = self.affinity[m]
        alone = found is not None and ((self.self_affine[m] and found.total == 0) or (self._static and found.gang))
        return interpodaffinity.check(i, found, alone, self.anti[m], self.selected_by[m])

    def note_refusal(self, m: int, nodes: Sequence[int]) -> None:
        """Record, in :attr:`refused` (nodes per status), why member ``m`` fits on none of
        ``nodes`` now (the ones these plugins refuse)."""
        self.refused = Counter(why for i in nodes if (why := self.early(m, i) or self.late(m, i)) is not None)

    def admits(self, m: int, i: int) -> bool:
        """Whether member ``m`` passes every filter here on node ``i`` now."""
        return self.early(m, i) is None and self.late(m, i) is None

    def static(self, m: int, eligible: Sequence[bool]) -> list[bool]:
        """Per node: ``eligible`` and passing these filters for member ``m`` with no member
        placed yet (call before :meth:`place`). An affinity term that members of the gang
        match is taken as one they may satisfy (the fill checks it as they are placed)."""
        self._static = True
        try:
            return [ok and self.admits(m, i) for i, ok in enumerate(eligible)]
        finally:
            self._static = False

    def partitions(self, nodes: Sequence[int]) -> list[list[int]]:
        """``nodes`` split by their values of the keys the gang's affinity keeps it together
        on (:meth:`together_key`) that are not topology levels, so that a member-by-member
        fill tries each domain of those keys apart; ``[nodes]`` when there are none."""
        levels = self.snapshot.levels
        keys = sorted({key for m in range(len(self.order)) for key in self.together_key(m)
                       if levels.depth_of(key) is None})
        if not keys:
            return [list(nodes)]
        columns = [self.snapshot.table.label_column(key) for key in keys]
        parts: dict[tuple[str | None, ...], list[int]] = {}
        for i in nodes:
            parts.setdefault(tuple(column[i] for column in columns), []).append(i)
        return [part for values, part in parts.items() if None not in values]

    def signature(self, m: int) -> tuple[object, ...]:
        """What :meth:`static` depends on besides the member's filter: members with equal
        signatures pass on the same nodes."""
        pod = self.order[m]
        return (pod.terms, pod.node_name, pod.namespace, self.spread_of[m], self.self_match[m],
                tuple(id(slot) for slot in self.selected_by[m]), self.self_affine[m])

    def verify(self, nodes: Sequence[int]) -> bool:
        """Whether every member passes these filters on its node of ``nodes`` (member
        order), placed one by one in :meth:`fill_order`; nothing stays placed."""
        try:
            for m in self.fill_order():
                if not self.admits(m, nodes[m]):
                    return False
                self.place(m, nodes[m])
            return True
        finally:
            self.rollback()

    def together_depths(self, depths: list[int]) -> list[int]:
        """``depths`` (of the snapshot's topology tree) without those whose domains are
        larger than the domain of a key the gang's own affinity keeps it in
        (:meth:`together_key`), when that key is a topology level (other keys are left to
        the member-by-member fill); unchanged when that leaves none."""
        deepest = 0
        for m in range(len(self.order)):
            for key in self.together_key(m):
                depth = self.snapshot.levels.depth_of(key)
                if depth is not None:
                    deepest = max(deepest, depth)
        return [d for d in depths if d >= deepest] or depths

    def fill_order(self) -> list[int]:
        """The members in the order to place them one by one: rank order, those with
        affinity terms last (a worker with affinity to its gang's parameter server follows
        the server)."""
        return sorted(range(len(self.order)), key=lambda m: (self.affinity[m] is not None, m))
