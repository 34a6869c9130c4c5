"""Which pod group a pod names: the upstream Workload API's and the peer schedulers' ways
of joining a gang, read from the pod alone (docs/decisions/056-pod-groups.md).

Users who come to Troupe already declare their gangs with a group object and a reference
to it on every member:

=================  ==========================================  ===============================================
source             the group object                             how a pod joins it
=================  ==========================================  ===============================================
``workload``       ``scheduling.k8s.io`` ``PodGroup``           ``spec.schedulingGroup.podGroupName``
                   (KEP-4671; ``v1beta1`` in 1.37,
                   ``v1alpha2`` in 1.36)
``volcano``        ``scheduling.volcano.sh/v1beta1``            annotation ``scheduling.k8s.io/group-name``
                   ``PodGroup``
``coscheduling``   ``scheduling.x-k8s.io/v1alpha1``             label ``scheduling.x-k8s.io/pod-group``
                   ``PodGroup`` (scheduler-plugins)
``kai``            ``scheduling.run.ai/v2alpha2`` ``PodGroup``  annotation ``pod-group-name``
=================  ==========================================  ===============================================

A pod naming several is read by the first row it matches, in this order (kube-scheduler
itself acts on the upstream reference, so it wins).

Plain values only: no Kubernetes client, no I/O; the webhook and the reconciler both
call :func:`pod_group_ref`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The source names, as they appear in a gang key (``<namespace>/<source>:<group>``).
WORKLOAD = "workload"
VOLCANO = "volcano"
COSCHEDULING = "coscheduling"
KAI = "kai"

#: Volcano's pod annotation naming the PodGroup.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
#: scheduler-plugins coscheduling's pod label naming the PodGroup.
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: KAI scheduler's pod annotation naming the PodGroup.
KAI_GROUP_ANNOTATION = "pod-group-name"


@dataclass(frozen=True, slots=True)
class GroupAPI:
    """Where one source's group objects are served: API ``group``, resource ``plural``,
    the ``versions`` Troupe reads (preferred first; the first one the API server serves is
    used) and the ``kind``."""

    source: str
    group: str
    versions: tuple[str, ...]
    plural: str = "podgroups"
    kind: str = "PodGroup"


#: Every source's API, in the order a pod's references are read.
GROUP_APIS: tuple[GroupAPI, ...] = (
    GroupAPI(WORKLOAD, "scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2")),
    GroupAPI(VOLCANO, "scheduling.volcano.sh", ("v1beta1",)),
    GroupAPI(COSCHEDULING, "scheduling.x-k8s.io", ("v1alpha1",)),
    GroupAPI(KAI, "scheduling.run.ai", ("v2alpha2",)),
)

#: Source name -> its :class:`GroupAPI`.
API_BY_SOURCE: Mapping[str, GroupAPI] = {api.source: api for api in GROUP_APIS}


@dataclass(frozen=True, slots=True, order=True)
class PodGroupRef:
    """A pod's reference to a group object: ``source`` (one of :data:`WORKLOAD`,
    :data:`VOLCANO`, :data:`COSCHEDULING`, :data:`KAI`) and the group's ``name`` in the
    pod's own namespace."""

    source: str
    name: str

    @property
    def api(self) -> GroupAPI:
        """The API serving this source's group objects."""
        return API_BY_SOURCE[self.source]

    def gang_name(self) -> str:
        """``<source>:<name>``: the gang's name within its namespace (a ``:`` never
        appears in a Troupe gang name, so it cannot collide with one)."""
        return f"{self.source}:{self.name}"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def pod_group_ref(pod: Mapping[str, Any]) -> PodGroupRef | None:
    """The group ``pod`` (a Pod as JSON) names, or None.

    Reads, in order: ``spec.schedulingGroup.podGroupName`` (KEP-4671, core/v1
    ``PodSchedulingGroup``), Volcano's annotation :data:`VOLCANO_GROUP_ANNOTATION`,
    coscheduling's label :data:`COSCHEDULING_GROUP_LABEL`, KAI's annotation
    :data:`KAI_GROUP_ANNOTATION`. Values that are not non-empty strings are ignored (never
    raises)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    group = spec.get("schedulingGroup")
    if isinstance(group, Mapping) and (name := _text(group.get("podGroupName"))):
        return PodGroupRef(WORKLOAD, name)
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    return group_ref_from_meta(annotations, labels)


def group_ref_from_meta(annotations: Mapping[str, Any], labels: Mapping[str, Any],
                        scheduling_group: str | None = None) -> PodGroupRef | None:
    """:func:`pod_group_ref` on parts already read: ``scheduling_group`` is the pod's
    ``spec.schedulingGroup.podGroupName`` (or None)."""
    if scheduling_group:
        return PodGroupRef(WORKLOAD, scheduling_group)
    if name := _text(annotations.get(VOLCANO_GROUP_ANNOTATION)):
        return PodGroupRef(VOLCANO, name)
    if name := _text(labels.get(COSCHEDULING_GROUP_LABEL)):
        return PodGroupRef(COSCHEDULING, name)
    if name := _text(annotations.get(KAI_GROUP_ANNOTATION)):
        return PodGroupRef(KAI, name)
    return None


#: Where each source's reference is written on a pod, as an admission message names it.
REF_FIELDS: Mapping[str, str] = {
    WORKLOAD: "spec.schedulingGroup.podGroupName",
    VOLCANO: f"annotation {VOLCANO_GROUP_ANNOTATION}",
    COSCHEDULING: f"label {COSCHEDULING_GROUP_LABEL}",
    KAI: f"annotation {KAI_GROUP_ANNOTATION}",
}

#: The annotation keys that name a group (Volcano's and KAI's), and the label key
#: (coscheduling's): what the webhook's match conditions look for besides
#: ``spec.schedulingGroup``.
GROUP_ANNOTATIONS: tuple[str, ...] = (VOLCANO_GROUP_ANNOTATION, KAI_GROUP_ANNOTATION)
GROUP_LABELS: tuple[str, ...] = (COSCHEDULING_GROUP_LABEL,)

#: The annotation in which the webhook keeps the ``spec.schedulerName`` a pod was created
#: with when it hands the pod to kube-scheduler (configuration ``adoptSchedulerNames``,
#: docs/decisions/057-adopted-scheduler-names.md).
ORIGINAL_SCHEDULER_NAME = "troupe.io/original-scheduler-name"


def every_group_ref(pod: Mapping[str, Any]) -> tuple[PodGroupRef, ...]:
    """Every group ``pod`` (a Pod as JSON) names, in the order of :func:`pod_group_ref`
    (whose answer is the first): one per source at most, empty when it names none. A pod
    naming more than one is read by the first; the webhook warns about the others."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    group = spec.get("schedulingGroup")
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    found = (
        (WORKLOAD, group.get("podGroupName") if isinstance(group, Mapping) else None),
        (VOLCANO, annotations.get(VOLCANO_GROUP_ANNOTATION)),
        (COSCHEDULING, labels.get(COSCHEDULING_GROUP_LABEL)),
        (KAI, annotations.get(KAI_GROUP_ANNOTATION)),
    )
    return tuple(PodGroupRef(source, name) for source, value in found if (name := _text(value)))
