"""A workload's size declares the gang (docs/decisions/014-workload-gangs.md):
``<prefix>-size: auto``, set by the user, by the webhook in a namespace labelled
``troupe.io/gang-mode: auto``, or for a pod asking with Kueue's topology annotations, makes
gang ``<namespace>/<workload id>`` (one per Job, JobSet restart attempt, LeaderWorkerSet
group or Kubeflow job: :func:`reconciler.engine.model.workloads.group`), sized from the
workload object (:func:`~reconciler.engine.model.declared.base.workload_sized`). Until that
object is known the gang waits, with the reason; a pod no supported workload made is held.
"""

from __future__ import annotations

from dataclasses import replace

import troupe.contract as contract
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.declared.base import Shape, Sizing, Source, named_key, workload_sized
from reconciler.engine.model.declared.memberkeys import gang_keys
from reconciler.engine.model.pods import PodInfo
from troupe.config import Config


class Workload(Source):
    """The gang of a pod with ``<prefix>-size: auto``."""

    name = "workload"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/<workload id>`` of a pod with ``<prefix>-size: auto`` and no name
        (``<namespace>/pod:<pod>`` when no supported workload made it); with a name (which
        admission refuses), the name's gang; None for any other pod."""
        keys = gang_keys(config.gang_annotation_prefix)
        if pod.gang_annotations.get(keys.size) != contract.AUTO_SIZE:
            return None
        if keys.name in pod.gang_annotations:
            return named_key(pod, config)
        found = wl.group(pod)
        return f"{pod.namespace}/{found[0]}" if found else f"{pod.namespace}/pod:{pod.name}"

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """Sized by the workload object; held when no supported workload made the first member."""
        first = shape.members[0]
        if shape.name.startswith("pod:") or wl.group(first) is None:
            keys = gang_keys(sizing.config.gang_annotation_prefix)
            return replace(shape, held=f"member {first.name}: {keys.size}: {contract.AUTO_SIZE}, but no "
                                       f"supported workload ({', '.join(k.kind for k in wl.KINDS)}) created it")
        return workload_sized(shape, sizing)
