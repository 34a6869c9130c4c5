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
- *Adopted scheduler names* (``adoptSchedulerNames``): a pod created with one of them in
  ``spec.schedulerName`` is handed to kube-scheduler, its original name kept in
  :data:`troupe.podgroups.ORIGINAL_SCHEDULER_NAME` (:func:`adoption_ops`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from troupe.config import DEFAULT_SCHEDULER_NAME, Config
from troupe.errors import quoted
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME, REF_FIELDS, PodGroupRef
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
