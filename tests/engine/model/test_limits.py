"""Time limits read where users write them, and the expected ends they give
(docs/decisions/079-reservation-at-earliest-start-and-backfill.md)."""

from __future__ import annotations

from typing import Any

from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.model.limits import (
    MAX_EXEC_TIME_LABEL,
    Limit,
    expected_end,
    gang_end,
    label_seconds,
    pod_limit,
    smallest,
)
from reconciler.engine.model.timestamps import epoch
from troupe.config import Config

T0 = "2026-01-01T00:00:00Z"
T10 = "2026-01-01T00:00:10Z"
E0 = epoch(T0) or 0.0


def test_label_seconds_reads_only_positive_integers() -> None:
    assert label_seconds({MAX_EXEC_TIME_LABEL: "90"}) == 90
    for bad in ("0", "-5", "1.5", "x", ""):
        assert label_seconds({MAX_EXEC_TIME_LABEL: bad}) is None
    assert label_seconds({}) is None


def test_smallest_of_the_limits_set() -> None:
    assert smallest(None, 30, 20) == 20
    assert smallest(None, None) is None


def test_expected_end_is_the_earlier_of_absolute_and_from_start() -> None:
    assert expected_end(Limit(at=E0 + 50, seconds=100, started=E0 + 10), now=E0 + 20) == E0 + 50
    assert expected_end(Limit(at=E0 + 500, seconds=100, started=E0 + 10), now=E0 + 20) == E0 + 110
    # not started yet: it would start now
    assert expected_end(Limit(seconds=100), now=E0 + 20) == E0 + 120
    assert expected_end(None, now=E0) is None
    assert expected_end(Limit(), now=E0) is None


def test_a_gang_ends_with_its_last_member_and_never_without_a_limit() -> None:
    a, b = Limit(seconds=60, started=E0), Limit(seconds=30, started=E0 + 40)
    assert gang_end([a, b], now=E0 + 50) == E0 + 70
    assert gang_end([a, None], now=E0) is None
    assert gang_end([], now=E0) is None


def test_pod_limit_takes_pod_and_workload_limits() -> None:
    limit = pod_limit(100, {MAX_EXEC_TIME_LABEL: "40"}, T10, E0 + 300, 200, E0)
    assert limit == Limit(at=E0 + 200, seconds=40, started=E0 + 10)
    assert expected_end(limit, E0 + 20) == E0 + 50
    assert pod_limit(None, {}, T10, None) is None
    # a workload label without a start counts from the pod's own start
    assert pod_limit(None, {}, T10, None, 30, None) == Limit(None, 30, E0 + 10)


def _node() -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": {}},
            "status": {"allocatable": {"cpu": "4", "pods": "10"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, deadline: int | None = None, owner: str = "", labels: dict[str, str] | None = None,
         phase: str = "Running") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "d", "uid": f"u-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"j-{owner}",
                                    "controller": True}]
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": "c"}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "startTime": T10}}


def _job(name: str, deadline: int | None, label: str | None = None) -> dict[str, Any]:
    labels = {MAX_EXEC_TIME_LABEL: label} if label else {}
    spec: dict[str, Any] = {"parallelism": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "d", "uid": f"j-{name}",
            "labels": labels}, "spec": spec, "status": {"startTime": T0}}


def test_the_snapshot_holds_each_pods_limits_from_pod_and_job() -> None:
    snapshot = snapshot_of_objects(
        [_node()],
        [_pod("own", deadline=100), _pod("job", owner="j"), _pod("kueue", owner="k"), _pod("none"),
         _pod("labelled", labels={MAX_EXEC_TIME_LABEL: "25"}), _pod("done", deadline=5, phase="Succeeded")],
        objects=[_job("j", 200), _job("k", None, label="50")], config=Config(queueing_strategy="Backfill"))
    ends = {str(k): expected_end(v, E0 + 20) for k, v in snapshot.limits.items()}
    assert ends == {"d/own": E0 + 110, "d/job": E0 + 200, "d/kueue": E0 + 50, "d/labelled": E0 + 35}
    assert not snapshot_of_objects([_node()], [_pod("own", deadline=100)]).limits, "read only under Backfill"
