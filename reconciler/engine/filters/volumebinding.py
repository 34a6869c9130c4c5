"""``VolumeBinding``, for bound claims: every claim the pod mounts exists (its PreFilter), a
bound claim's volume exists, and that volume's required node affinity matches the node
(``pkg/scheduler/framework/plugins/volumebinding``; Kubernetes docs "Persistent Volumes",
node affinity). Unbound claims (``WaitForFirstConsumer``, provisioning) are not modeled
(:mod:`.unmodeled`).

It counts no pods; its state for a gang (:class:`ClaimChecks`) keeps each member's result
per node, since several fills ask again.

Reasons, in this order: ``persistentvolumeclaim "x" not found`` (by claim name),
``node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)``, ``node(s) had
volume node affinity conflict``; all ``UnschedulableAndUnresolvable``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from reconciler.engine.filters.status import Code, MemberClaimChecks, Plugin, Registered, Status
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.volumes import VolumeCatalog

MISSING_VOLUME = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
VOLUME_AFFINITY = "node(s) had volume node affinity conflict"
#: The first word of the reason for a claim that does not exist.
_NOT_FOUND = "persistentvolumeclaim "


def not_found(claim: str) -> str:
    """The reason for a claim that does not exist: ``persistentvolumeclaim "x" not found``."""
    return f'{_NOT_FOUND}"{claim}" not found'


_FIXED = (MISSING_VOLUME, VOLUME_AFFINITY)


def _order(reason: str) -> tuple[int, str]:
    """Claims not found first, by name; then :data:`_FIXED` in order."""
    if reason.startswith(_NOT_FOUND):
        return (0, reason)
    return (1 + _FIXED.index(reason), "") if reason in _FIXED else (1 + len(_FIXED), reason)


PLUGIN = Plugin("VolumeBinding")
MISSING = Status(Code.UNRESOLVABLE, PLUGIN, (MISSING_VOLUME,))
CONFLICT = Status(Code.UNRESOLVABLE, PLUGIN, (VOLUME_AFFINITY,))


def prefilter(catalog: VolumeCatalog, namespace: str, claims: Iterable[str]) -> Status | None:
    """Before any node: None when every claim exists, else the first that does not."""
    for name in claims:
        if (namespace, name) not in catalog.claims:
            return Status(Code.UNRESOLVABLE, PLUGIN, (not_found(name),))
    return None


def check(catalog: VolumeCatalog, namespace: str, claims: Iterable[str], node: str,
          labels: Mapping[str, str]) -> Status | None:
    """For node ``node`` with ``labels``: None when every bound claim's volume exists and
    its required node affinity (if any) matches the node."""
    for _, volume in catalog.bound(namespace, claims):
        if volume is None:
            return MISSING
        if volume.terms is not None and not any(t.matches(labels, node) for t in volume.terms):
            return CONFLICT
    return None


class ClaimChecks(MemberClaimChecks):
    """:func:`prefilter` then :func:`check` for each member that mounts claims, on each node
    asked, worked out once."""

    __slots__ = ()

    def check(self, namespace: str, claims: Sequence[str], node: NodeInfo) -> Status | None:
        """:func:`prefilter`, then the module's :func:`check` on ``node``."""
        return prefilter(self.catalog, namespace, claims) or check(self.catalog, namespace, claims, node.name,
                                                                      node.labels)


REGISTERED = Registered(PLUGIN, _FIXED, "pkg/scheduler/framework/plugins/volumebinding", _order, state=ClaimChecks)
