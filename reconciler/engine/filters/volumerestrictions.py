"""``VolumeRestrictions``, for ``ReadWriteOncePod`` claims: a claim of that access mode that
another pod uses keeps the pod off every node (``pkg/scheduler/framework/plugins/volumerestrictions``;
Kubernetes docs "Persistent Volumes", access modes). Inline GCE PD, AWS EBS, RBD and iSCSI
disk conflicts are not modeled (:mod:`.unmodeled`).

Reason: ``node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod
access mode`` (``Unschedulable``: evicting the user frees the claim).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.engine.filters.status import Code, Plugin, Registered, Status

RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"

PLUGIN = Plugin("VolumeRestrictions")
CONFLICT = Status(Code.UNSCHEDULABLE, PLUGIN, (RWOP_CONFLICT,))


def check(exclusive: Iterable[tuple[str, str]], users: Mapping[tuple[str, str], int]) -> Status | None:
    """None when no claim of ``exclusive`` (the pod's ``ReadWriteOncePod`` claims,
    ``(namespace, name)``) has a user in ``users`` (pods per claim, placed)."""
    return CONFLICT if any(users.get(claim, 0) > 0 for claim in exclusive) else None


REGISTERED = Registered(PLUGIN, (RWOP_CONFLICT,), "pkg/scheduler/framework/plugins/volumerestrictions")
