"""What a pod group object does to a gang (docs/decisions/056-pod-groups.md): it sizes the
gang it declares (:func:`group_sized`, for a group the members name and for the group a
peer's controller would make) and binds any other gang whose members name it
(:func:`bound_by_group`). The field each source's minimum is written in is its
:class:`~troupe.podgroups.GroupAPI` row's ``min_field``.

Pure: plain data in, a :class:`~reconciler.engine.model.declared.base.Shape` out.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.engine.model.declared.base import AGREE_ON_TOPOLOGY, Shape, Sizing, disagreement
from reconciler.engine.model.declared.queued import beyond_queued_workload, group_fix
from troupe.podgroups import PodGroupSpec, constrained


def _min_declared(spec: PodGroupSpec) -> str:
    """``PodGroup ml/g (scheduling.volcano.sh) spec.minMember``: where the group's minimum is."""
    return f"{spec.describe()} {spec.ref.api.min_field}"


def group_sized(shape: Shape, sizing: Sizing, spec: PodGroupSpec | None = None, declared: str = "") -> Shape:
    """A gang its members declare by naming a pod group (docs/decisions/056-pod-groups.md):
    its minimum is the group's count (1 for upstream's ``basic`` policy, which is no
    gang: each member released as it fits), its size the members present, never below the
    minimum (docs/decisions/038-minimum-size.md); its level the group's, bound with any
    level the members ask (:func:`~troupe.podgroups.constrained`); its priority the group's
    ``priority`` when it states one; its timeout coscheduling's ``scheduleTimeoutSeconds``
    (capped as an annotation's is). It waits, with the reason, while the group object is
    not known, and is held when it cannot be read. ``spec``: the group no object declares
    (a peer's, its minimum ``declared`` so: docs/decisions/065-adopted-pods-join-their-peers-groups.md)."""
    workloads, config = sizing.workloads, sizing.config
    if spec is None:
        ref = shape.members[0].pod_group
        assert ref is not None  # the pod group source keys only such members
        spec = workloads.group(shape.namespace, ref)
        if spec is None:
            return replace(shape, settle_at=float("inf"), workload_missing=workloads.group_missing(shape.namespace, ref))
    if spec.error or shape.held:
        return replace(shape, size=len(shape.members), held=shape.held or f"{spec.error} (held until it is fixed)")
    minimum = spec.min_count if spec.min_count is not None else 1
    timeout = shape.timeout_seconds if spec.timeout_seconds is None else \
        min(spec.timeout_seconds, config.gang_schedule_timeout_seconds_limit)
    declared = declared or _min_declared(spec)
    held = disagreement(shape.members, AGREE_ON_TOPOLOGY) or beyond_queued_workload(
        shape.members, spec.min_count, declared, group_fix, workloads)
    return replace(shape, size=max(len(shape.members), minimum), min_size=minimum, held=held,
                   size_from=declared if spec.gang else f"{spec.describe()}: basic, no minimum",
                   topology=constrained(shape.topology, spec, config), timeout_seconds=timeout,
                   priority=spec.priority if spec.priority is not None else shape.priority)


def bound_by_group(shape: Shape, sizing: Sizing) -> Shape:
    """``shape``, declared by Troupe's own keys (or a workload), bound by the pod group its
    members name, if any (docs/decisions/056-pod-groups.md): its level intersected with
    the group's (:func:`~troupe.podgroups.constrained`), its minimum raised to the
    group's count (held when that is above the gang's size: kube-scheduler would never
    schedule fewer), its priority the group's when it states one (a gang's one priority, in
    the queue and in preemption: docs/decisions/064-preemption-names-no-other-tenant.md). It
    waits while the group is not known; it is held when its members name different groups
    or the group cannot be read. A gang the group itself declares is returned as it is."""
    ref = shape.members[0].pod_group
    if ref is None or shape.name == ref.gang_name():
        return shape
    names = sorted({p.pod_group.gang_name() if p.pod_group else "<none>" for p in shape.members})
    if len(names) > 1:
        return replace(shape, held=shape.held or f"members name different pod groups: {', '.join(names)} (held "
                                                 f"until they agree)")
    workloads = sizing.workloads
    spec = workloads.group(shape.namespace, ref)
    if spec is None:
        return replace(shape, workload_missing=shape.workload_missing or workloads.group_missing(shape.namespace, ref))
    held = shape.held or _group_problem(shape, spec) or beyond_queued_workload(
        shape.members, spec.min_count, _min_declared(spec), group_fix, workloads)
    return replace(shape, held=held, topology=constrained(shape.topology, spec, sizing.config),
                   min_size=_raised_minimum(shape, spec),
                   priority=spec.priority if spec.priority is not None and not spec.error else shape.priority)


def _group_problem(shape: Shape, spec: PodGroupSpec) -> str:
    if spec.error:
        return f"{spec.error} (held until it is fixed)"
    if spec.min_count is not None and shape.size is not None and spec.min_count > shape.size:
        return (f"{_min_declared(spec)}: {spec.min_count} is more than the gang's "
                f"{shape.size} members: kube-scheduler would never schedule it (held until it is fixed)")
    return ""


def _raised_minimum(shape: Shape, spec: PodGroupSpec) -> int | None:
    """The gang's minimum, never below the group's count (None: the gang's size, which is
    not below it, :func:`_group_problem`)."""
    if shape.min_size is None or spec.min_count is None:
        return shape.min_size
    return max(shape.min_size, spec.min_count)
