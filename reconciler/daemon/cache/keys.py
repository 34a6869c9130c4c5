"""The work-queue keys of SharedDeviceGroups, typed apart from gang keys."""

from __future__ import annotations


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
