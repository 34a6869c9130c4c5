"""What a plan says of the parts of a member kube-scheduler checks that the engine does not model.

The engine models every filter plugin of kube-scheduler's default profile that reads what
Troupe can read (:data:`~reconciler.engine.filters.profile.PROFILE`, one module per plugin;
the table in docs/contract.md). What is left (inline volumes whose conflicts and attach
counts need objects Troupe does not read, claims not yet bound to a volume) is named per
pod by :func:`~reconciler.engine.filters.unmodeled.unmodeled`. Troupe pins each member to a
node and kube-scheduler, the final authority, runs every filter there, so a member that
uses one of these may be refused on its node. The decision still places it, and says so
("placed without modeling: inline csi volume scratch (kube-scheduler will check it)", in
the condition, the Event and ``kubectl troupe why``); a refusal is then read back from the
pod and the gang planned again off that node (:mod:`reconciler.engine.gangs.refusals`,
docs/decisions/032-scheduler-refusals.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.volumes import VolumeCatalog


def note(members: Sequence[PodInfo], volumes: VolumeCatalog | None = None) -> str:
    """The note a placement of ``members`` carries when some use what the engine does not
    model: ``placed without modeling: inline csi volume scratch (kube-scheduler will check
    it)``; ``""`` when none does. ``volumes``: the snapshot's catalog (claims not bound to a
    volume are named only with it). Phrases in first-seen order, each once."""
    phrases = list(dict.fromkeys(phrase for pod in members for phrase in unmodeled(pod, volumes)))
    if not phrases:
        return ""
    them = "it" if len(phrases) == 1 else "them"
    return f"placed without modeling: {', '.join(phrases)} (kube-scheduler will check {them})"


def unmodeled(pod: PodInfo, volumes: VolumeCatalog | None = None) -> tuple[str, ...]:
    """Short phrases naming what ``pod`` uses that the engine does not model, so a plan
    kube-scheduler refuses can say why (empty: everything it asks for is modeled):
    ``inline csi volume scratch``, and,
    given the cluster's :class:`~reconciler.engine.model.volumes.VolumeCatalog`,
    ``unbound PersistentVolumeClaim data (volume provisioning)``. Scoring (preferred
    affinity, ``ScheduleAnyway`` spread) is not filtering and is never listed."""
    terms = pod.terms
    if terms is None:
        return ()
    if volumes is None or not terms.claims:
        return terms.unmodeled
    return terms.unmodeled + volumes.unmodeled(pod.namespace, terms.claims)
