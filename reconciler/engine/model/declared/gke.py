"""GKE's topology gate declares the gang (``seeds/002``): a pod created with a
``gke.io/topology-aware-auto-*`` gate and no gang keys of Troupe's joins gang
``<namespace>/gke:<group>``, grouped as the GKE daemon groups them (``job-name``,
``training.kubeflow.org/job-name``, owner UID, ``name`` label:
:func:`troupe.contract.auto_gang_group`). Its size is the owning Job's ``parallelism`` when
the Job is known, else the members present once none has been created for
``autoGangSettleSeconds`` (read from creation timestamps, so a restarted reconciler and
the simulator agree).
"""

from __future__ import annotations

from dataclasses import replace

import troupe.contract as contract
from reconciler.engine.model.declared.base import Shape, Sizing, Source, alone
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.timestamps import epoch
from troupe.config import Config


class GKE(Source):
    """The gang of a pod with GKE's topology gate."""

    name = "gke"

    def key(self, pod: PodInfo, config: Config) -> str | None:
        """``<namespace>/gke:<group>`` of a pod with a ``gke.io/topology-aware-auto-*``
        gate (``<namespace>/pod:<pod>`` when no group can be read), else None."""
        if not any(g.startswith(contract.GKE_GATE_PREFIX) for g in pod.gates):
            return None
        group = contract.auto_gang_group(pod.labels, pod.owner.uid if pod.owner else None)
        return f"{pod.namespace}/gke:{group}" if group else f"{pod.namespace}/pod:{pod.name}"

    def shape(self, shape: Shape, sizing: Sizing) -> Shape:
        """The owning Job's parallelism when the Job is known, else the members present
        once ``autoGangSettleSeconds`` have passed since the newest one was created
        (``settle_at``); a gang of one when no group could be read."""
        if not shape.name.startswith("gke:"):
            return alone(shape, sizing)
        owner = shape.members[0].owner
        if owner is not None and owner.kind == "Job" and owner.api_version.startswith("batch/"):
            size = sizing.parallelism.get((shape.namespace, owner.name))
            if size is not None:
                return replace(shape, size=max(size, 1), size_from=f"Job {owner.name} parallelism")
        stamps = [t for p in shape.members if (t := epoch(p.creation_timestamp)) is not None]
        newest = max(stamps, default=0.0)
        return replace(shape, settle_at=newest + sizing.config.auto_gang_settle_seconds)
