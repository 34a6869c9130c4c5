"""The one pass over a snapshot's pods: which of them the ledger must look at again.

:class:`~reconciler.engine.ledger.snapshot.Snapshot` is built over every pod of the cluster,
but only a few need more than their key: the pods whose use of a node is not counted yet
(a cache counts the bound ones, docs/decisions/061-bound-usage.md), those with pod terms or
an exclusive level (the filters and layers read them), those with a plan or nomination
record (:mod:`.recordindex`), the gated and the stamped (nominations set aside, ranks of
reservations filled). :class:`PodIndex` sorts them out in one pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from troupe.layers import TOPOLOGY_EXCLUSIVE_LEVEL


class PodIndex:
    """One pass over a snapshot's pods (100,000 in a large cluster): ``pods`` by key, and the
    few that carry pod terms or an exclusive level (their keys: ``terms_keys``,
    ``exclusive``), a plan or a nomination record (``planned``, ``nominating``), scheduling
    gates or a ``planned-at`` stamp (``gated``, ``stamped``), or are not among the pods
    ``counted`` already (``uncounted``; ``counted``: pod key -> its use, a
    :class:`~.usage.BoundUsage`'s). Raises ``ValueError`` on two pods of one key."""

    def __init__(self, pods: Iterable[PodInfo], counted: Mapping[str, Any]) -> None:
        self.pods: dict[PodKey, PodInfo] = {}
        self.terms_keys: list[PodKey] = []
        self.exclusive: list[PodKey] = []
        self.planned: list[PodInfo] = []
        self.nominating: list[PodInfo] = []
        self.uncounted: list[PodInfo] = []
        self.gated: list[PodInfo] = []
        self.stamped: list[PodInfo] = []
        for pod in pods:
            key = pod.key
            if key in self.pods:
                raise ValueError(f"duplicate pod {key!r}")
            self.pods[key] = pod
            if key not in counted:
                self.uncounted.append(pod)
            if pod.terms is not None:
                self.terms_keys.append(key)
            if pod.gang_annotations and TOPOLOGY_EXCLUSIVE_LEVEL in pod.gang_annotations:
                self.exclusive.append(key)
            if pod.plan is not None:
                self.planned.append(pod)
            if pod.nomination is not None:
                self.nominating.append(pod)
            if pod.gates:
                self.gated.append(pod)
            if pod.planned_at:
                self.stamped.append(pod)
