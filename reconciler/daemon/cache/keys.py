"""The work-queue keys of SharedDeviceGroups and of workloads' stray reservation records,
typed apart from gang keys."""

from __future__ import annotations

from reconciler.engine.model.keys import WorkloadKey


class GroupKey(str):
    """The work-queue key of a SharedDeviceGroup: its name, typed, so the queue's worker
    tells it from a gang's key by its type and not by a prefix (a gang key is a plain
    ``namespace/name`` string; a group's name, a DNS subdomain, never holds a ``/``, so
    the two never compare equal)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"GroupKey({str(self)!r})"


def group_key(name: str) -> GroupKey:
    """The work-queue key of SharedDeviceGroup ``name``."""
    return GroupKey(name)


def group_of_key(key: str) -> str | None:
    """The group name of a :func:`group_key`, or None for a gang key."""
    return str(key) if isinstance(key, GroupKey) else None


class RecordKey(str):
    """The work-queue key of a workload whose reservation record holds nothing and is to be
    removed (``Kind/namespace/name``: kinds, namespaces and names hold no ``/``), typed
    apart from gang and group keys (docs/decisions/049-hostile-tenants-third-round.md)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"RecordKey({str(self)!r})"


def record_key(workload: WorkloadKey) -> RecordKey:
    """The work-queue key of the stray record of ``workload`` (``(kind, namespace, name)``)."""
    return RecordKey("/".join(workload))


def workload_of_key(key: str) -> WorkloadKey | None:
    """The workload of a :func:`record_key`, or None for another key."""
    if not isinstance(key, RecordKey):
        return None
    kind, namespace, name = key.split("/", 2)
    return (kind, namespace, name)
