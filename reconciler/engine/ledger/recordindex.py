"""Which gated members the reconciler's records hold nodes for: the plan records of releases
in progress and preemptors' nominations (:mod:`reconciler.engine.model.records`), indexed by ``(namespace, pod uid)``
for the snapshot (:class:`~reconciler.engine.ledger.snapshot.Snapshot`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from reconciler.engine.model.pods import PodInfo

Record = tuple[str, Mapping[str, str]]
"""A stamped node map: a plan's ``(planned_at, uid -> node)`` or a nomination's ``(at, ...)``."""


def records(pods: Iterable[PodInfo], record: Callable[[PodInfo], Record | None]
             ) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """``(namespace, uid) -> node`` and ``-> the record's time`` for every member named by a
    record (``record(pod)``: its plan's or its nomination's) that a live pod carries (a
    terminal or deleting holder's record is over). When two records name the same pod, the
    later wins (it can only be a retry of the same gang after the earlier one ran out or
    was rolled back)."""
    nodes: dict[tuple[str, str], str] = {}
    at: dict[tuple[str, str], str] = {}
    held = sorted((found[0], pod.key, pod.namespace, found[1]) for pod in pods
                  if pod.active and (found := record(pod)) is not None)
    for stamp, _, namespace, named in held:
        for uid, node in named.items():
            nodes[(namespace, uid)] = node
            at[(namespace, uid)] = stamp
    return nodes, at


def plan_record(pod: PodInfo) -> Record | None:
    """The pod's plan record as a :data:`Record`, or None."""
    return (pod.plan.planned_at, pod.plan.nodes) if pod.plan is not None else None


def nomination_record(pod: PodInfo) -> Record | None:
    """The pod's nomination as a :data:`Record`, or None."""
    return (pod.nomination.at, pod.nomination.nodes) if pod.nomination is not None else None
