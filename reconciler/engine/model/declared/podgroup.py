"""A pod group the pod names declares the gang (docs/decisions/056-pod-groups.md): the
upstream Workload API's ``spec.schedulingGroup.podGroupName``, or a peer scheduler's key
(:func:`troupe.podgroups.pod_group_ref`, whose rows are :data:`troupe.podgroups.GROUP_APIS`),
with no gang name or size of Troupe's: gang ``<namespace>/<source>:<group>``, sized by the
group object (:func:`~reconciler.engine.model.declared.groups.group_sized`). Any source of
:data:`~troupe.podgroups.GROUP_APIS` is read here alike.
"""

from __future__ import annotations

from reconciler.engine.model.declared.base import Shape, Sizing, Source, annotated, keyed
from reconciler.engine.model.declared.groups import group_sized
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config


class PodGroup(Source):
    """The gang of the pod group a Troupe-gated (or planned, or released) pod names."""

    name = "pod group"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/<source>:<group>`` of a pod naming a group that Troupe holds or
        placed, else None."""
        ref = pod.pod_group
        if ref is None or not (pod.gated or pod.planned_at or pod.released_at):
            return None
        return f"{pod.namespace}/{ref.gang_name()}"

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """Sized by the group object; by Troupe's keys when the first member carries one
        (a ``<prefix>-min-size`` alone)."""
        if annotated(shape.members[0], sizing.config):
            return keyed(shape, sizing)
        return group_sized(shape, sizing)
