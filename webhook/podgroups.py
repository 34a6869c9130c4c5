"""Admission of pods that name a pod group, and of pods written for a second scheduler
(docs/decisions/057-adopted-scheduler-names.md); the rules are in :mod:`webhook.admission`.

- *Pod groups* (:mod:`troupe.podgroups`: the upstream Workload API's
  ``spec.schedulingGroup.podGroupName``, Volcano's, coscheduling's and KAI's keys): the
  reference is read, not rewritten (as Kueue's annotations are, decision 039), on pods
  kube-scheduler will schedule (:func:`kube_schedulers`). What the
  webhook can check without reading the group is the name: a group is an object, so its
  name must be a DNS-1123 subdomain (:func:`group_errors`). A pod naming groups in several
  ways is read by the first (:func:`troupe.podgroups.pod_group_ref`) and gets a warning
  naming the others (:func:`group_warnings`).
- *Updates*: while Troupe's gate holds a pod, its Volcano, KAI or coscheduling reference
  is fixed (:func:`reference_changes`), as Troupe's own keys are (decision 013).
- *Adopted scheduler names* (``adoptSchedulerNames``): a pod created with one of them in
  ``spec.schedulerName`` is handed to kube-scheduler, its original name kept in
  :data:`troupe.podgroups.ORIGINAL_SCHEDULER_NAME` (:func:`adoption_ops`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from troupe.adoption import FIXED_WHILE_GATED
from troupe.config import DEFAULT_SCHEDULER_NAME, Config
from troupe.contract import GATE
from troupe.errors import quoted
from troupe.podgroups import (
    GROUP_LABELS,
    ORIGINAL_SCHEDULER_NAME,
    REF_FIELDS,
    PodGroupRef,
)
from webhook.patches import PatchOp, pointer

#: A DNS-1123 subdomain of at most 253 characters: what an object's name, a PodGroup's of
#: any of the four APIs included, must be (Kubernetes API conventions, "Names").
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def group_errors(refs: tuple[PodGroupRef, ...]) -> list[str]:
    """One message per group reference of ``refs`` whose name cannot be a PodGroup's (not
    a DNS-1123 subdomain of at most 253 characters), naming the field and the value, e.g.
    ``annotation scheduling.k8s.io/group-name: must name a PodGroup (...), got 'Train_1'``."""
    return [
        f"{REF_FIELDS[ref.source]}: must name a PodGroup (lower-case letters, digits, '-' and '.', "
        f"at most 253 characters), got {quoted(ref.name)}"
        for ref in refs
        if len(ref.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(ref.name)
    ]


def group_warnings(refs: tuple[PodGroupRef, ...]) -> list[str]:
    """A warning when ``refs`` (a pod's references, first one read) name more than one
    group: Troupe reads the first, each peer scheduler its own."""
    if len(refs) < 2:
        return []
    first, *rest = refs
    others = ", ".join(f"{REF_FIELDS[r.source]} = {quoted(r.name)}" for r in rest)
    return [f"{REF_FIELDS[first.source]} = {quoted(first.name)} names this pod's gang; Troupe does not read "
            f"{others}"]


def _reference(values: object, key: str) -> str | None:
    value = values.get(key) if isinstance(values, Mapping) else None
    return value if isinstance(value, str) and value else None


def reference_changes(old: Mapping[str, Any], new: object) -> list[str]:
    """One message per group reference in metadata (Volcano's and KAI's annotations,
    coscheduling's label, the scheduler the pod was adopted from:
    :data:`troupe.adoption.FIXED_WHILE_GATED`) that an UPDATE from ``old`` to ``new`` (Pods as JSON) adds,
    changes or removes; the caller asks only while Troupe's gate holds the pod, whose gang
    the reference names (``spec.schedulingGroup`` is immutable: the API server refuses its
    changes itself). An empty value counts as none, as at creation."""
    old_meta = old.get("metadata")
    new_meta = new.get("metadata") if isinstance(new, Mapping) else None
    problems = []
    for where, keys in (("annotations", FIXED_WHILE_GATED), ("labels", GROUP_LABELS)):
        before_all = old_meta.get(where) if isinstance(old_meta, Mapping) else None
        after_all = new_meta.get(where) if isinstance(new_meta, Mapping) else None
        for key in keys:
            before, after = _reference(before_all, key), _reference(after_all, key)
            if before == after:
                continue
            if before is None:
                what = f"cannot be added, got {quoted(after or '')}"
            elif after is None:
                what = f"cannot be removed (it is {quoted(before)})"
            else:
                what = f"cannot change, from {quoted(before)} to {quoted(after)}"
            problems.append(f"{where[:-1]} {key}: {what}, while Troupe's gate {GATE} holds the pod for the gang it "
                            f"names; delete the pod and create it again with the value wanted")
    return problems


def kube_schedulers(spec: object, config: Config) -> bool:
    """Whether kube-scheduler will schedule a pod of ``spec`` (its ``spec``, any JSON):
    ``spec.schedulerName`` absent, ``default-scheduler``, or one of
    ``config.adopt_scheduler_names``, which :func:`adoption_ops` rewrites. A pod bound for
    another scheduler is that scheduler's: Troupe does not gate it for its group."""
    name = spec.get("schedulerName") if isinstance(spec, dict) else None
    return name is None or name == DEFAULT_SCHEDULER_NAME or name in config.adopt_scheduler_names


def adoption_ops(spec: Mapping[str, Any], meta: Mapping[str, Any], config: Config) -> list[PatchOp]:
    """The ops that hand a pod created for a second scheduler to kube-scheduler: when its
    ``spec.schedulerName`` (``spec``) is one of ``config.adopt_scheduler_names``, replace it
    with ``default-scheduler`` and keep it in the annotation
    :data:`~troupe.podgroups.ORIGINAL_SCHEDULER_NAME` of ``meta`` (the pod's metadata),
    replacing a value there. None otherwise, so a reinvocation, which sees
    ``default-scheduler``, adds nothing. Never raises: a malformed annotations map gets
    no annotation op (the caller denies such a pod before)."""
    name = spec.get("schedulerName")
    if not isinstance(name, str) or name not in config.adopt_scheduler_names:
        return []
    ops: list[PatchOp] = [{"op": "replace", "path": "/spec/schedulerName", "value": DEFAULT_SCHEDULER_NAME}]
    annotations = meta.get("annotations")
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ORIGINAL_SCHEDULER_NAME: name}})
    elif isinstance(annotations, dict):
        op = "replace" if ORIGINAL_SCHEDULER_NAME in annotations else "add"
        ops.append({"op": op, "path": pointer("metadata", "annotations", ORIGINAL_SCHEDULER_NAME), "value": name})
    return ops
