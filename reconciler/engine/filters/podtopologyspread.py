"""``PodTopologySpread``, ``whenUnsatisfiable: DoNotSchedule`` constraints
(``pkg/scheduler/framework/plugins/podtopologyspread``; Kubernetes docs "Pod Topology
Spread Constraints"; KEP-895, KEP-3022 ``minDomains``, KEP-3094 node inclusion policies).

For each constraint: the matching pods of the pod's namespace in the node's domain, plus
one when the pod matches its own selector, minus the fewest in any domain (0 when there are
fewer domains than ``minDomains``) is at most ``maxSkew``. Only nodes that carry every
constraint's key and pass the pod's node affinity (``nodeAffinityPolicy: Honor``) and
taints (``nodeTaintsPolicy: Honor``) make domains (:func:`domains`); terminating pods do
not count. Its PreFilter state (:class:`SpreadCounts`) keeps, per constraint of members
alike (:class:`SpreadGroup`), the matching pods per domain and the fewest
(:class:`DomainCounts`; kube-scheduler's ``TpPairToMatchNum`` with its critical paths).

The cluster's default constraints (``PodTopologySpreadArgs.defaultConstraints``) apply to a
pod with no constraints of its own; kube-scheduler selects, for them, the pods the
Services, ReplicaSets and StatefulSets selecting the pod select. Troupe reads no Services:
it selects the pods sharing the member's value of the first of :data:`SERVICE_LABELS` it
carries (the headless Services JobSet and LeaderWorkerSet make select on those), and
applies none to a pod with neither (:func:`default_constraints`).

Reasons, in this order: ``node(s) didn't match pod topology spread constraints (missing
required label)`` (``UnschedulableAndUnresolvable``), ``node(s) didn't match pod topology
spread constraints`` (``Unschedulable``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.engine.filters.status import Code, Cycle, Plugin, PreFilterState, Registered, Status
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import LabelSelector, SpreadConstraint
from reconciler.engine.model.selectors import NodeFilter, Requirement

SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
#: Pod labels the headless Services of JobSet and LeaderWorkerSet select on: the selector
#: the cluster's default spread constraints get (module docstring).
SERVICE_LABELS = ("jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name")

PLUGIN = Plugin("PodTopologySpread")
MISSING_LABEL = Status(Code.UNRESOLVABLE, PLUGIN, (SPREAD_MISSING_LABEL,))
SKEWED = Status(Code.UNSCHEDULABLE, PLUGIN, (SPREAD_MISMATCH,))


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


def domains(nodes: Sequence[NodeInfo], group: SpreadGroup) -> tuple[list[DomainCounts], list[bool]]:
    """Per constraint of ``group``, its domains: the values of the nodes that carry every
    key of the group and pass its inclusion policies (module docstring), no pod counted
    yet; and per node, whether it is one of those (only the pods on those count)."""
    keys = [c.topology_key for c in group.constraints]
    honor_affinity = any(c.honor_affinity for c in group.constraints)
    honor_taints = any(c.honor_taints for c in group.constraints)
    values: list[set[str]] = [set() for _ in keys]
    counted = [False] * len(nodes)
    for i, node in enumerate(nodes):
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


def check(group: SpreadGroup, counts: Sequence[DomainCounts], values: Sequence[str | None],
          mine: Sequence[bool]) -> Status | None:
    """None when a pod of ``group`` fits the skew of every constraint on a node whose
    value of each constraint's key is ``values`` (None: the node lacks it), ``counts`` the
    matching pods per domain, ``mine`` whether the pod matches each constraint's selector."""
    if any(value is None for value in values):
        return MISSING_LABEL
    for c, found, value, matches in zip(group.constraints, counts, values, mine, strict=True):
        low = 0 if len(found.count) < c.min_domains else found.low
        if found.count.get(value or "", 0) + int(matches) - low > c.max_skew:
            return SKEWED
    return None


Hits = list[tuple[SpreadGroup, int]]
"""The constraints (a group, a constraint's index in it) whose selector a pod matches."""


class SpreadCounts(PreFilterState):
    """Each member's :class:`SpreadGroup` (None: no DoNotSchedule constraint) and whether it
    matches each of its constraints' selectors; per group, its constraints' domains
    (:func:`domains`) with the matching pods counted (those using nodes, then the members
    placed)."""

    __slots__ = ("counted", "domains", "groups", "hits", "self_match", "snapshot", "spread_of")

    def __init__(self, snapshot: Snapshot, spread_of: list[SpreadGroup | None]) -> None:
        self.snapshot, self.spread_of = snapshot, spread_of
        self.groups = list(dict.fromkeys(g for g in spread_of if g is not None))
        self.domains: dict[SpreadGroup, list[DomainCounts]] = {}
        self.counted: dict[SpreadGroup, list[bool]] = {}
        for group in self.groups:
            self.domains[group], self.counted[group] = domains(snapshot.nodes, group)
        self.hits: list[Hits] = []
        self.self_match: list[tuple[bool, ...]] = []

    @classmethod
    def wanted(cls, snapshot: Snapshot, members: Sequence[PodInfo]) -> bool:
        """Whether the cluster's default constraints apply to a member."""
        return bool(snapshot.spread_defaults) and any(default_constraints(m, snapshot.spread_defaults)
                                                      for m in members)

    @classmethod
    def prefilter(cls, cycle: Cycle) -> SpreadCounts | None:
        """None when no member has a DoNotSchedule constraint, of its own or by default."""
        defaults = cycle.snapshot.spread_defaults
        spread_of: list[SpreadGroup | None] = []
        for m in cycle.order:
            constraints = m.terms.spread if m.terms is not None and m.terms.spread else default_constraints(m, defaults)
            spread_of.append(SpreadGroup(m.namespace, constraints, m.node_filter) if constraints else None)
        if not any(spread_of):
            return None
        state = cls(cycle.snapshot, spread_of)
        state.hits = [state.matched(m) for m in cycle.order]
        state.self_match = [tuple(c.selector is not None and c.selector.matches(m.labels) for c in g.constraints)
                            if g is not None else () for m, g in zip(cycle.order, spread_of, strict=True)]
        for pod, i in cycle.existing:
            state.update(state.matched(pod), i, 1)
        return state

    def matched(self, pod: PodInfo) -> Hits:
        """The constraints of the gang's groups whose selector ``pod`` matches, in its
        namespace; none for a pod being deleted (it does not count)."""
        if pod.deleting:
            return []
        return [(g, k) for g in self.groups if g.namespace == pod.namespace for k, c in enumerate(g.constraints)
                if c.selector is not None and c.selector.matches(pod.labels)]

    def update(self, hits: Hits, i: int, sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) a pod matching ``hits`` on node ``i``, where
        the node makes a domain of the group."""
        for group, k in hits:
            if self.counted[group][i]:
                value = self.snapshot.table.label_column(group.constraints[k].topology_key)[i]
                self.domains[group][k].change(value or "", sign)

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m`` on node ``i``."""
        group = self.spread_of[m]
        if group is None:
            return None
        column = self.snapshot.table.label_column
        values = [column(c.topology_key)[i] for c in group.constraints]
        return check(group, self.domains[group], values, self.self_match[m])

    def add_pod(self, m: int, i: int) -> None:
        """Member ``m`` counts on node ``i``."""
        self.update(self.hits[m], i, 1)

    def remove_pod(self, m: int, i: int) -> None:
        """Member ``m`` no longer counts on node ``i``."""
        self.update(self.hits[m], i, -1)

    def signature(self, m: int) -> tuple[object, ...]:
        """Member ``m``'s group and whether it matches each constraint's selector."""
        return (self.spread_of[m], self.self_match[m])


REGISTERED = Registered(PLUGIN, (SPREAD_MISSING_LABEL, SPREAD_MISMATCH),
                        "pkg/scheduler/framework/plugins/podtopologyspread", state=SpreadCounts)
