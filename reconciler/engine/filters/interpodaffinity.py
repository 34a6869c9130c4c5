"""``InterPodAffinity``, required terms (``pkg/scheduler/framework/plugins/interpodaffinity``;
Kubernetes docs "Assigning Pods to Nodes", inter-pod affinity and anti-affinity).

Every required affinity term has a matching pod in the node's domain of its key (or, when
no pod matches any of the terms and the pod matches them all itself, any node with the
keys: the first of a group with affinity to itself); no pod in the node's domain matches a
required anti-affinity term of the pod; and no pod in the domain has an anti-affinity term
matching the pod ("existing pods anti-affinity"). The counts per domain are
:mod:`.counters`', kept by :class:`~reconciler.engine.filters.gang.GangFilters`.

Reasons, in this order: ``node(s) didn't satisfy existing pods anti-affinity rules``,
``node(s) didn't match pod affinity rules`` (``UnschedulableAndUnresolvable``), ``node(s)
didn't match pod anti-affinity rules``; the anti-affinity ones ``Unschedulable`` (evicting
the pods they see frees the node).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.filters.counters import AffinityCounts, AntiAffinityCounts
from reconciler.engine.filters.status import Code, Plugin, Registered, Status

EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"

PLUGIN = Plugin("InterPodAffinity")
EXISTING = Status(Code.UNSCHEDULABLE, PLUGIN, (EXISTING_ANTI_AFFINITY,))
AFFINITY = Status(Code.UNRESOLVABLE, PLUGIN, (AFFINITY_RULES,))
ANTI_AFFINITY = Status(Code.UNSCHEDULABLE, PLUGIN, (ANTI_AFFINITY_RULES,))


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


REGISTERED = Registered(PLUGIN, (EXISTING_ANTI_AFFINITY, AFFINITY_RULES, ANTI_AFFINITY_RULES), "pkg/scheduler/framework/plugins/interpodaffinity")
