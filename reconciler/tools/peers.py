"""What becomes of a pod bound for a second scheduler that Troupe did not adopt: what
``kubectl troupe plan``, ``status`` and ``why`` say of it
(docs/decisions/065-adopted-pods-join-their-peers-groups.md).

A pod whose ``spec.schedulerName`` is neither kube-scheduler's (``default-scheduler``) nor
rewritten to it by Troupe's webhook (``adoptSchedulerNames``, decision 057) is never seen by
kube-scheduler, and Troupe has no scheduler of its own: it waits for a scheduler of that
name, and stays ``Pending`` for good once that scheduler is gone. :func:`fate` says so, and
what would hand such pods over instead; :func:`unscheduled` finds them among a cluster's
objects.

Pure: plain dicts in (pods as JSON, as the API server stores them), text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from troupe.adoption import at_creation, peer_source
from troupe.config import DEFAULT_SCHEDULER_NAME, Config
from troupe.contract import pod_meta
from troupe.podgroups import KAI, VOLCANO, every_group_ref

#: How each grouping peer's controller is named in :func:`fate`.
_PEER_NAMES = {VOLCANO: "Volcano's controller", KAI: "KAI's pod-grouper"}


def fate(pod: Mapping[str, Any], config: Config) -> str | None:
    """What will happen to ``pod`` (a Pod as JSON, as stored) because of its
    ``spec.schedulerName``, or None when kube-scheduler schedules it (no name,
    ``default-scheduler``: Troupe's adopted pods have it). Names the scheduler, that
    kube-scheduler never sees the pod and that no scheduler of that name is Troupe's, and
    what ``adoptSchedulerNames`` would do: hand such pods to kube-scheduler through Troupe
    (gated and ganged by the group they name, or their peer's), or, for a KAI pod whose
    group Troupe cannot size, why it would not (:func:`troupe.adoption.at_creation`)."""
    spec = pod.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if not isinstance(name, str) or not name or name == DEFAULT_SCHEDULER_NAME:
        return None
    waits = (f"spec.schedulerName {name}: kube-scheduler never sees it and no scheduler of that name is Troupe's, "
             f"so it waits for a scheduler named {name}")
    source = peer_source(name)
    refused = at_creation(source, pod).refused if source is not None and not every_group_ref(pod) else ""
    if refused:
        return f"{waits}; adoptSchedulerNames would not hand it over: {refused.removeprefix('not adopted from ')}"
    if name in config.adopt_scheduler_names:
        return (f"{waits}; adoptSchedulerNames names {name}, but the pod was created before, or without Troupe's "
                f"webhook in the path: created again, it is handed to kube-scheduler")
    how = ("gated and ganged by the group it names" if every_group_ref(pod)
           else f"ganged as {_PEER_NAMES[source]} groups it" if source is not None else "placed alone")
    return f"{waits}; adoptSchedulerNames: [{name}] would hand such pods to kube-scheduler through Troupe, {how}"


def unscheduled(pods: Iterable[Mapping[str, Any]], config: Config) -> dict[str, str]:
    """``namespace/name`` -> :func:`fate` of each pod of ``pods`` that is not bound, has not
    ended and has one, in the order of ``pods``."""
    out: dict[str, str] = {}
    for pod in pods:
        spec, status = pod.get("spec"), pod.get("status")
        if not isinstance(spec, Mapping) or spec.get("nodeName"):
            continue
        if isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"):
            continue
        why = fate(pod, config)
        if why is not None:
            meta = pod_meta(pod)
            out[f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"] = why
    return out
