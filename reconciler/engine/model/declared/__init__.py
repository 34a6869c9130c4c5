"""The ways a gang is declared, one module each, and their precedence kept as data
(docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md; ``docs/contract.md``,
"Which pods form a gang").

Each source (:class:`~.base.Source`) gives the gang key of a pod it declares and the
gang's shape (:class:`~.base.Shape`: its size, minimum, wait, level, priority, timeout):

- :mod:`.workload`: ``<prefix>-size: auto``, the workload object's size;
- :mod:`.annotations`: Troupe's gang annotations (``seeds/001``; a Kueue plain-pod group
  is written as them at admission);
- :mod:`.podgroup`: a pod group the pod names (the Workload API's or a peer's,
  :data:`troupe.podgroups.GROUP_APIS`);
- :mod:`.adopted`: the group a peer's controller would make for a pod adopted from Volcano
  or KAI;
- :mod:`.gke`: GKE's ``gke.io/topology-aware-auto-*`` gate (``seeds/002``);
- :mod:`.alone`: Troupe's gate and nothing else, a gang of one.

They share :mod:`.base` (the interface, Troupe's keys sizing a gang, a gang of one, a
workload sizing one), :mod:`.groups` (what a group object does to a gang, and how it binds
a gang something else declares), :mod:`.memberkeys` (a member's annotations parsed once, for
its key and its gang's size alike) and :mod:`.queued` (what Kueue's queueing holds). An
import contract keeps the source modules independent of each other.

A new source is its module and its row in :data:`SOURCES`; a new peer's PodGroup is its
:class:`~troupe.podgroups.GroupAPI` row, which :mod:`.podgroup` reads as any other.
"""

from __future__ import annotations

from reconciler.engine.model.declared.adopted import Adopted
from reconciler.engine.model.declared.alone import Alone
from reconciler.engine.model.declared.annotations import Annotations
from reconciler.engine.model.declared.base import Shape, Sizing, Source, keyed
from reconciler.engine.model.declared.gke import GKE
from reconciler.engine.model.declared.groups import bound_by_group
from reconciler.engine.model.declared.podgroup import PodGroup
from reconciler.engine.model.declared.workload import Workload
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config

#: The sources in the order a pod's gang is looked for, the first that declares it wins:
#: Troupe's keys whatever else the pod says (a workload's size first, since ``auto`` is
#: one of them), then a group the pod names (docs/decisions/056-pod-groups.md), then a
#: peer's implicit group only when the pod names neither (decision 065), then GKE's gate,
#: then Troupe's gate alone.
SOURCES: tuple[Source, ...] = (Workload(), Annotations(), PodGroup(), Adopted(), GKE(), Alone())


def declaring(pod: PodInfo, config: Config) -> tuple[Source, str] | None:
    """The source that declares ``pod``'s gang and that gang's key (``namespace/id``), or
    None when Troupe does not manage the pod."""
    for source in SOURCES:
        key = source.key(pod, config)
        if key is not None:
            return source, key
    return None


def gang_key(pod: PodInfo, config: Config) -> str | None:
    """The key of the gang ``pod`` belongs to (:func:`declaring`), or None when Troupe does
    not manage the pod."""
    found = declaring(pod, config)
    return found[1] if found is not None else None


def shaped(shape: Shape, sizing: Sizing) -> Shape:
    """``shape`` (at least one member) sized by the source that declares its first member,
    then bound by the pod group its members name when another source declares it
    (:func:`~.groups.bound_by_group`); by Troupe's keys (:func:`~.base.keyed`) when no
    source declares it (a workload's slot outside its gang). Never raises: what cannot be
    read holds the gang."""
    found = declaring(shape.members[0], sizing.config)
    shape = found[0].shape(shape, sizing) if found is not None else keyed(shape, sizing)
    return bound_by_group(shape, sizing)
