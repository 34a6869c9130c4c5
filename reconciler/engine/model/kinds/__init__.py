"""The workload kinds' modules, registered once (docs/decisions/070-a-workload-kind-is-one-module.md).

:data:`REGISTRY` holds one :class:`~reconciler.engine.model.kinds.base.WorkloadKind` per
kind of :data:`troupe.workloadkinds.KINDS`, in the order a pod's gang is looked for: a
JobSet's pods are also owned by its Jobs, and a LeaderWorkerSet's labels come first, so the
kinds that know their pods by labels come before those that know them by their controller
(an MPIJob's launcher is its launcher Job's pod: the MPIJob comes before the Job).
A new kind is its contract facts (``troupe/workloadkinds.py``), its module here and its row
in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.engine.model.kinds.base import WorkloadKind
from reconciler.engine.model.kinds.job import JobKind
from reconciler.engine.model.kinds.jobset import JobSetKind
from reconciler.engine.model.kinds.kubeflow import PYTORCH
from reconciler.engine.model.kinds.leaderworkerset import LeaderWorkerSetKind
from reconciler.engine.model.kinds.mpijob import MPIJobKind
from reconciler.engine.model.kinds.ray import RayClusterKind, RayJobKind

#: Every kind's module, in the order a pod's gang is looked for.
REGISTRY: tuple[WorkloadKind, ...] = (LeaderWorkerSetKind(), JobSetKind(), MPIJobKind(), PYTORCH, RayClusterKind(),
                                      RayJobKind(), JobKind())
#: Each kind's module by its ``kind``.
MODULE_OF: Mapping[str, WorkloadKind] = {k.facts.kind: k for k in REGISTRY}
