"""``VolumeRestrictions``, for ``ReadWriteOncePod`` claims: a claim of that access mode that
another pod uses keeps the pod off every node (``pkg/scheduler/framework/plugins/volumerestrictions``;
Kubernetes docs "Persistent Volumes", access modes). Inline GCE PD, AWS EBS, RBD and iSCSI
disk conflicts are not modeled (:mod:`.unmodeled`).

Its PreFilter state (:class:`ClaimUsers`) counts the users of each such claim.

Reason: ``node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod
access mode`` (``Unschedulable``: evicting the user frees the claim).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from reconciler.engine.filters.status import Code, Cycle, Plugin, PreFilterState, Registered, Status

RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"

PLUGIN = Plugin("VolumeRestrictions")
CONFLICT = Status(Code.UNSCHEDULABLE, PLUGIN, (RWOP_CONFLICT,))


def check(exclusive: Iterable[tuple[str, str]], users: Mapping[tuple[str, str], int]) -> Status | None:
    """None when no claim of ``exclusive`` (the pod's ``ReadWriteOncePod`` claims,
    ``(namespace, name)``) has a user in ``users`` (pods per claim, placed)."""
    return CONFLICT if any(users.get(claim, 0) > 0 for claim in exclusive) else None


class ClaimUsers(PreFilterState):
    """Each member's ``ReadWriteOncePod`` claims, and the pods using each such claim (those
    using nodes, then the members placed)."""

    __slots__ = ("exclusive", "users")

    def __init__(self, exclusive: list[set[tuple[str, str]]]) -> None:
        self.exclusive = exclusive
        self.users: Counter[tuple[str, str]] = Counter()

    @classmethod
    def prefilter(cls, cycle: Cycle) -> ClaimUsers | None:
        """None without a volume catalog or when no member mounts a ``ReadWriteOncePod`` claim."""
        volumes = cycle.snapshot.volumes
        if volumes is None:
            return None
        exclusive = [volumes.read_write_once_pod(m.namespace, m.terms.claims) if m.terms is not None else set()
                     for m in cycle.order]
        if not any(exclusive):
            return None
        state = cls(exclusive)
        for pod, _ in cycle.existing:
            if pod.terms is not None and pod.terms.claims:
                state.users.update(volumes.read_write_once_pod(pod.namespace, pod.terms.claims))
        return state

    def filter(self, m: int, i: int) -> Status | None:
        """:func:`check` for member ``m``'s claims (on any node)."""
        return check(self.exclusive[m], self.users) if self.exclusive[m] else None

    def add_pod(self, m: int, i: int) -> None:
        """Member ``m`` uses its claims."""
        self.users.update(self.exclusive[m])

    def remove_pod(self, m: int, i: int) -> None:
        """Member ``m`` no longer uses its claims."""
        self.users.subtract(self.exclusive[m])


REGISTERED = Registered(PLUGIN, (RWOP_CONFLICT,), "pkg/scheduler/framework/plugins/volumerestrictions",
                        state=ClaimUsers)
