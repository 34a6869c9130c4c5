"""``PodTopologySpread``, ``whenUnsatisfiable: DoNotSchedule`` constraints
(``pkg/scheduler/framework/plugins/podtopologyspread``; Kubernetes docs "Pod Topology
Spread Constraints"; KEP-895, KEP-3022 ``minDomains``, KEP-3094 node inclusion policies).

For each constraint: the matching pods of the pod's namespace in the node's domain, plus
one when the pod matches its own selector, minus the fewest in any domain (0 when there are
fewer domains than ``minDomains``) is at most ``maxSkew``. Only nodes that carry every
constraint's key and pass the pod's node affinity (``nodeAffinityPolicy: Honor``) and
taints (``nodeTaintsPolicy: Honor``) make domains (:func:`domains`); terminating pods do
not count. The counts per domain are :class:`~reconciler.engine.filters.counters.DomainCounts`,
kept by :class:`~reconciler.engine.filters.gang.GangFilters`.

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

from collections.abc import Sequence

from reconciler.engine.filters.counters import DomainCounts, SpreadGroup
from reconciler.engine.filters.status import Code, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import LabelSelector, SpreadConstraint
from reconciler.engine.model.selectors import Requirement

SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
#: Pod labels the headless Services of JobSet and LeaderWorkerSet select on: the selector
#: the cluster's default spread constraints get (module docstring).
SERVICE_LABELS = ("jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name")

PLUGIN = Plugin("PodTopologySpread")
MISSING_LABEL = Status(Code.UNRESOLVABLE, PLUGIN, (SPREAD_MISSING_LABEL,))
SKEWED = Status(Code.UNSCHEDULABLE, PLUGIN, (SPREAD_MISMATCH,))


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


REGISTERED = Registered(PLUGIN, (SPREAD_MISSING_LABEL, SPREAD_MISMATCH), "pkg/scheduler/framework/plugins/podtopologyspread")
