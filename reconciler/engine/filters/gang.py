"""The filters that depend on the pods around a member, counted per domain, for one gang.

kube-scheduler's default profile runs, after ``NodeUnschedulable``, ``TaintToleration``,
``NodeAffinity`` and ``NodeResourcesFit`` (:mod:`reconciler.engine.model.selectors`), these filters, in this order
(``pkg/scheduler/framework/plugins``; Kubernetes docs "Scheduling Framework"):

1. ``NodeName``: a pod that names its node (``spec.nodeName``) fits only there;
2. ``NodePorts``: no host port of the pod is in use on the node (:class:`~reconciler.engine.model.podterms.HostPort`);
3. (``NodeResourcesFit``, the caller's); then ``VolumeRestrictions`` (a ``ReadWriteOncePod``
   claim another pod uses), ``NodeVolumeLimits``, ``VolumeBinding``, ``VolumeZone``
   (:mod:`reconciler.engine.model.volumes`);
4. ``PodTopologySpread``, ``DoNotSchedule`` constraints: for each, the matching pods of
   the pod's namespace in the node's domain, plus one when the pod matches its own
   selector, minus the fewest in any domain (0 when there are fewer domains than
   ``minDomains``) is at most ``maxSkew``; only nodes that carry every constraint's key and
   pass the pod's node affinity (``nodeAffinityPolicy: Honor``) and taints
   (``nodeTaintsPolicy: Honor``) make domains; terminating pods do not count;
5. ``InterPodAffinity``: every required affinity term has a matching pod in the node's
   domain of its key (or, when no pod matches any of the terms and the pod matches them
   all itself, any node with the keys: the first of a group with affinity to itself);
   no pod in the node's domain matches a required anti-affinity term of the pod; and no
   pod in the domain has an anti-affinity term matching the pod ("existing pods
   anti-affinity").

The cluster's default spread constraints (``PodTopologySpreadArgs.defaultConstraints``)
apply to a pod with no constraints of its own; kube-scheduler selects, for them, the pods
the Services, ReplicaSets and StatefulSets selecting the pod select. Troupe reads no
Services: it selects the pods sharing the member's value of the first of
:data:`SERVICE_LABELS` it carries (the headless Services JobSet and LeaderWorkerSet make
select on those), and applies none to a pod with neither (a Job's pods, which no Service of
the workload selects).

Everything is counted per domain, never per pair of pods: for each distinct term, how many
placed pods it selects in each domain of its key, and how many carry it; for each spread
constraint, the matching pods per domain and the smallest count. :class:`GangFilters`
starts from the pods using nodes in the snapshot and counts the gang's members as they
are placed (:meth:`GangFilters.place`, undone by :meth:`GangFilters.rollback`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from reconciler.engine.filters.counters import (
    AffinityCounts,
    AntiAffinityCounts,
    DomainCounts,
    PodCounts,
    SpreadGroup,
    tally,
)
from reconciler.engine.filters.node import (
    AFFINITY_RULES,
    ANTI_AFFINITY_RULES,
    EXISTING_ANTI_AFFINITY,
    NODE_NAME_MISMATCH,
    PORTS_IN_USE,
    SPREAD_MISMATCH,
    SPREAD_MISSING_LABEL,
)
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import (
    HostPort,
    LabelSelector,
    PodAffinityTerm,
    SpreadConstraint,
)
from reconciler.engine.model.selectors import Requirement
from reconciler.engine.model.volumes import MAX_VOLUMES, RWOP_CONFLICT
from troupe.contract import HOSTNAME_LABEL

#: Pod labels the headless Services of JobSet and LeaderWorkerSet select on: the selector
#: the cluster's default spread constraints get (module docstring).
SERVICE_LABELS = ("jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name")


def default_constraints(pod: PodInfo, defaults: Sequence[SpreadConstraint]) -> tuple[SpreadConstraint, ...]:
    """The cluster's default DoNotSchedule constraints for ``pod`` (module docstring):
    none when it has spread constraints of its own or carries none of
    :data:`SERVICE_LABELS`."""
    if not defaults or (pod.terms is not None and pod.terms.any_spread):
        return ()
    key = next((k for k in SERVICE_LABELS if k in pod.labels), None)
    if key is None:
        return ()
    selector = LabelSelector((Requirement(key, "In", (pod.labels[key],)),))
    return tuple(SpreadConstraint(c.topology_key, c.max_skew, selector, c.min_domains, c.honor_affinity,
                                  c.honor_taints) for c in defaults)


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
    :meth:`early` and :meth:`late` give the first failing filter's reason for a member on a
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
        #: Per group: the domains of each constraint, and which nodes count (their pods).
        self.domains: dict[SpreadGroup, list[DomainCounts]] = {}
        self.counted: dict[SpreadGroup, list[bool]] = {}
        for group in self.groups:
            self.domains[group], self.counted[group] = self._domains(group)
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
        self.entries = [self._entry(m) for m in order]
        for entry in self.entries:
            for found in entry.within:
                found.gang = True
        self._static = False
        self.selected_by = [[t for t in self.holder_terms if t.term.selects(m.namespace, m.labels, spaces)]
                            for m in order]
        self.self_affine = [terms is not None and terms.selects(m, spaces)
                            for m, terms in zip(order, self.affinity, strict=True)]
        self.self_match = [tuple(c.selector is not None and c.selector.matches(m.labels) for c in g.constraints)
                           if g is not None else () for m, g in zip(order, self.spread_of, strict=True)]
        for pod, i in existing:
            if pod.terms is not None or self.match_terms or self.sets or self.groups:
                self._count(self._entry(pod), i, 1)
        self._log: list[tuple[int, int]] = []
        #: Why the last member-by-member fill stopped: reasons over the nodes it tried.
        self.refused: Counter[str] = Counter()
        self._volume_reasons: dict[tuple[int, int], str | None] = {}

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

    def _domains(self, group: SpreadGroup) -> tuple[list[DomainCounts], list[bool]]:
        """Per constraint, the domains: values of the nodes that carry every key of the
        group and pass its policies (module docstring, 4); and per node, whether it is one
        of those (only the pods on those count)."""
        snapshot, keys = self.snapshot, [c.topology_key for c in group.constraints]
        honor_affinity = any(c.honor_affinity for c in group.constraints)
        honor_taints = any(c.honor_taints for c in group.constraints)
        values: list[set[str]] = [set() for _ in keys]
        counted = [False] * len(snapshot.nodes)
        for i, node in enumerate(snapshot.nodes):
            if not all(k in node.labels for k in keys):
                continue
            if honor_affinity and not (group.flt.selector_matches(node.labels)
                                       and group.flt.affinity_matches(node.labels, node.name)):
                continue
            if honor_taints and group.flt.untolerated(node.taints) is not None:
                continue
            counted[i] = True
            for found, key in zip(values, keys, strict=True):
                found.add(node.labels[key])
        return [DomainCounts(found) for found in values], counted

    def _entry(self, pod: PodInfo) -> PodCounts:
        spaces, terms = self.snapshot.namespaces, pod.terms
        entry = PodCounts(pod.namespace, [t for t in self.match_terms if t.term.selects(pod.namespace, pod.labels, spaces)],
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

    def early(self, m: int, i: int) -> str | None:
        """``NodeName`` then ``NodePorts`` for member ``m`` on node ``i``."""
        pod = self.order[m]
        if pod.node_name and pod.node_name != self.names[i]:
            return NODE_NAME_MISMATCH
        ports = self.entries[m].ports
        if ports:
            used = self.ports.get(i)
            if used and any(mine.conflicts(other) for mine in ports for other in used):
                return PORTS_IN_USE
        return None

    def late(self, m: int, i: int) -> str | None:
        """The volume filters, ``PodTopologySpread``, then ``InterPodAffinity`` for member
        ``m`` on node ``i`` (module docstring)."""
        why = self._volume(m, i)
        if why is None:
            why = self._spread(m, i)
        if why is None:
            why = self._inter_pod(m, i)
        return why

    def _volume(self, m: int, i: int) -> str | None:
        pod, entry = self.order[m], self.entries[m]
        if pod.terms is None or not pod.terms.claims or self.volumes is None:
            return None
        if any(self.exclusive[claim] > 0 for claim in entry.exclusive):
            return RWOP_CONFLICT
        if entry.attached and self.volumes.exceeds(self.names[i], self.attached.get(i, ()), entry.attached):
            return MAX_VOLUMES
        key = (m, i)
        if key not in self._volume_reasons:
            node = self.snapshot.nodes[i]
            volumes = self.volumes
            self._volume_reasons[key] = (volumes.claim_reason(pod.namespace, pod.terms.claims)
                                         or volumes.node_reason(pod.namespace, pod.terms.claims, node.name, node.labels))
        return self._volume_reasons[key]

    def _spread(self, m: int, i: int) -> str | None:
        group = self.spread_of[m]
        if group is None:
            return None
        values = [self._value(c.topology_key, i) for c in group.constraints]
        if any(value is None for value in values):
            return SPREAD_MISSING_LABEL
        for c, domains, value, mine in zip(group.constraints, self.domains[group], values, self.self_match[m],
                                           strict=True):
            low = 0 if len(domains.count) < c.min_domains else domains.low
            if domains.count.get(value or "", 0) + int(mine) - low > c.max_skew:
                return SPREAD_MISMATCH
        return None

    def _inter_pod(self, m: int, i: int) -> str | None:
        found = self.affinity[m]
        if found is not None:
            exist = True
            for term, column in zip(found.terms, found.columns, strict=True):
                value = column[i]
                if value is None:
                    return AFFINITY_RULES
                if found.pairs[(term.topology_key, value)] <= 0:
                    exist = False
            if not exist and not (self.self_affine[m] and found.total == 0) and not (self._static and found.gang):
                return AFFINITY_RULES
        for slot in self.anti[m]:
            value = slot.column[i]
            if value is not None and slot.matched[value] > 0:
                return ANTI_AFFINITY_RULES
        for slot in self.selected_by[m]:
            value = slot.column[i]
            if value is not None and slot.holders[value] > 0:
                return EXISTING_ANTI_AFFINITY
        return None

    def note_refusal(self, m: int, nodes: Sequence[int]) -> None:
        """Record, in :attr:`refused`, why member ``m`` fits on none of ``nodes`` now (the
        ones these filters refuse)."""
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
