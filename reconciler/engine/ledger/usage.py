"""What the bound pods use on each node, kept up to date one pod at a time
(:class:`BoundUsage`), so that a snapshot of a cluster of 100,000 running pods starts from
it instead of adding every pod up again (docs/decisions/061-bound-usage.md).

kube-scheduler's cache does the same: each ``NodeInfo`` keeps the sum of its pods'
requests, updated as a pod is added or removed, and a snapshot copies it
(``pkg/scheduler/backend/cache``). Here the sums are the free columns of
:class:`~reconciler.engine.ledger.snapshot.Snapshot`, and what the cache keeps is exactly
what a snapshot built from scratch computes for those pods: a test builds both after random
changes and compares them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo

Columns = dict[str, list[int]]
"""Free units per resource, one entry per node of a table, in its order (may be negative)."""
Using = dict[str, tuple[int, Mapping[str, int]]]
"""What uses capacity: a pod key (or a holding's key) -> (node index, units per resource)."""


def take(free: Columns, using: Using, key: str, node: int, requests: Mapping[str, int], nodes: int) -> None:
    """``key`` uses ``requests`` (units) on node ``node`` of ``nodes``: subtracted from
    ``free`` (a column made, all zeros, for a resource no node offers) and recorded in
    ``using``. Raises ``ValueError`` when ``key`` uses a node already."""
    if key in using:
        raise ValueError(f"pod {key} already uses node index {using[key][0]}")
    for resource, amount in requests.items():
        col = free.get(resource)
        if col is None:
            col = free[resource] = [0] * nodes
        col[node] -= amount
    using[key] = (node, requests)


def give_back(free: Columns, using: Using, key: str) -> tuple[int, Mapping[str, int]]:
    """``key`` uses nothing any more (:func:`take` undone); returns its node index and
    requests. Raises ``KeyError`` when it used nothing."""
    node, requests = using.pop(key)
    for resource, amount in requests.items():
        free[resource][node] += amount
    return node, requests


class UsageCopy(NamedTuple):
    """A :class:`BoundUsage` as it was when copied: its table, free columns and uses, the
    snapshot's own to change."""

    table: NodeTable
    free: Columns
    using: Using


class BoundUsage:
    """The capacity the bound pods of a cluster use on the nodes of ``table``: the free
    columns (:data:`Columns`: allocatable less their requests) and what each uses
    (:data:`Using`), for the pods :meth:`covers` says a snapshot may take from here.
    Not thread-safe: its owner (the cache) updates and copies it under its own lock."""

    def __init__(self, table: NodeTable, pods: Iterable[PodInfo] = ()) -> None:
        self.table = table
        self.free: Columns = {resource: list(col) for resource, col in table.allocatable.items()}
        self.using: Using = {}
        for pod in pods:
            self.add(pod)

    def covers(self, pod: PodInfo) -> bool:
        """Whether ``pod``'s use of its node is the same in every snapshot on this table,
        whatever the other pods and objects say: bound (``spec.nodeName``) to a node of the
        table and not terminal. A bound pod holding SharedDeviceGroup devices is left to the
        snapshot, which counts the devices with the pod (the module docstring of
        :mod:`~reconciler.engine.ledger.snapshot`)."""
        return (bool(pod.node_name) and not pod.terminal and pod.node_name in self.table.index
                and not (pod.device_group and pod.devices is not None))

    def add(self, pod: PodInfo) -> None:
        """Count ``pod`` when :meth:`covers` says so (after :meth:`remove` of its former
        version)."""
        if self.covers(pod):
            take(self.free, self.using, pod.key, self.table.index[pod.node_name], pod.requests, len(self.table.nodes))

    def remove(self, key: PodKey) -> None:
        """Stop counting the pod ``key`` (nothing when it was not counted). A column of a
        resource no node offers goes once nothing uses it, as a snapshot built from scratch
        would not have it."""
        if key not in self.using:
            return
        _, requests = give_back(self.free, self.using, key)
        for resource in requests:
            if resource not in self.table.allocatable and not any(self.free[resource]):
                del self.free[resource]

    def copy(self) -> UsageCopy:
        """The free columns and the uses, copied: a snapshot's own, which its plans change."""
        return UsageCopy(self.table, {resource: list(col) for resource, col in self.free.items()}, dict(self.using))
