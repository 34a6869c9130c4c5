"""Time limits users already write, and the expected end of a running pod or gang they give.

A limit counts only when something in the cluster enforces it (docs/decisions/079-reservation-at-earliest-start-and-backfill.md):

- a Job's ``spec.activeDeadlineSeconds`` (a JobSet's child Jobs carry their own), counted
  from the Job's ``status.startTime``: the Job controller fails the Job and deletes its
  pods (Kubernetes, "Job termination and cleanup"); read as the workload's
  :attr:`~reconciler.engine.model.workloads.Workload.ends_at`, an absolute time;
- a pod's ``spec.activeDeadlineSeconds``, counted from its ``status.startTime``: the
  kubelet ends the pod (``pkg/kubelet/active_deadline.go``);
- Kueue's ``kueue.x-k8s.io/max-exec-time-seconds`` label (on the pod or its workload):
  Kueue deactivates a workload that runs longer (Kueue, "Maximum execution time").

:class:`Limit` is one pod's: an absolute end (``at``) and a duration from its start
(``seconds``). A pod's expected end is the earlier of the two (:func:`expected_end`); a
gang's is its latest member's (:func:`gang_end`): it has ended when all of them have.
Without any limit a pod runs "until it ends" (None). Pure: plain data in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.engine.model.timestamps import epoch

#: Kueue's label for the longest a workload may run, in seconds (Kueue, "Maximum execution
#: time"; ``pkg/controller/constants``: ``MaxExecTimeSecondsLabel``).
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


def label_seconds(labels: Mapping[str, str]) -> int | None:
    """The seconds of :data:`MAX_EXEC_TIME_LABEL` in ``labels``, None when absent or not a
    positive integer (Kueue refuses such a value at admission)."""
    raw = labels.get(MAX_EXEC_TIME_LABEL)
    if raw is None or not raw.isdigit():
        return None
    value = int(raw)
    return value if 0 < value < 2**63 else None


def smallest(*seconds: int | None) -> int | None:
    """The smallest of the limits given (seconds), None when none is set."""
    known = [s for s in seconds if s is not None]
    return min(known) if known else None


@dataclass(frozen=True)
class Limit:
    """One pod's time limits: ``at``, an absolute end (seconds since the epoch: its
    workload's deadline), and ``seconds``, how long it may run from its start (its own
    ``activeDeadlineSeconds``, Kueue's label); ``started``, its start (seconds since the
    epoch), None while it has not started. Either limit may be None."""

    at: float | None = None
    seconds: int | None = None
    started: float | None = None

    def end(self, now: float) -> float | None:
        """:func:`expected_end` of this limit at ``now``."""
        return expected_end(self, now)


def expected_end(limit: Limit | None, now: float) -> float | None:
    """When a pod of ``limit`` is expected to end (seconds since the epoch): the earlier of
    its absolute end and its start plus its duration, a pod not started yet starting at
    ``now``; None when it has no limit ("until it ends")."""
    if limit is None:
        return None
    ends = [] if limit.at is None else [limit.at]
    if limit.seconds is not None:
        ends.append((limit.started if limit.started is not None else now) + limit.seconds)
    return min(ends) if ends else None


def gang_end(limits: Iterable[Limit | None], now: float) -> float | None:
    """When a gang whose members have ``limits`` is expected to end: its last member's
    expected end, None when some member has no limit (or there is no member)."""
    ends = [expected_end(limit, now) for limit in limits]
    if not ends or any(e is None for e in ends):
        return None
    return max(e for e in ends if e is not None)


def pod_limit(deadline_seconds: int | None, labels: Mapping[str, str], started_at: str,
              workload_ends_at: float | None, workload_seconds: int | None = None,
              workload_started: float | None = None) -> Limit | None:
    """The :class:`Limit` of one pod: its own ``spec.activeDeadlineSeconds``
    (``deadline_seconds``) and Kueue label (``labels``) from ``started_at`` (its
    ``status.startTime``, RFC 3339, ``""`` before it starts), and its workload's absolute
    deadline ``workload_ends_at`` and Kueue label (``workload_seconds`` from
    ``workload_started``, seconds since the epoch). None when it has no limit at all."""
    at = workload_ends_at
    if workload_seconds is not None and workload_started is not None:
        at = workload_started + workload_seconds if at is None else min(at, workload_started + workload_seconds)
    seconds = smallest(deadline_seconds, label_seconds(labels))
    if workload_seconds is not None and workload_started is None:
        seconds = smallest(seconds, workload_seconds)
    if at is None and seconds is None:
        return None
    return Limit(at, seconds, epoch(started_at) if started_at else None)
