"""The memo of :func:`~reconciler.engine.model.membership.planned_gangs`
(docs/decisions/068-release-pipeline.md): a workload is read again only when its object
changed, and the answer is the one found without the memo, whatever the workloads went
through (added, changed, deleted, two naming one gang, a namespace turned auto)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.model import workloads as wl
from reconciler.engine.model.membership import PlannedMemo, planned_gangs
from testbed.as_created import NAMESPACE, job_object
from troupe.config import Config

CONFIG = Config()
NAMES = ("a", "b", "c", "d")

#: One version of a Job: its release mode, its gang's name and size (None: ``auto``), and
#: whether it finished.
versions = st.tuples(st.sampled_from(["AsCreated", "WhenComplete", "Bogus"]),
                     st.sampled_from([None, "shared", "own"]),
                     st.sampled_from([None, 2, 3]),
                     st.booleans())


def job(name: str, version: tuple[str, str | None, int | None, bool]) -> dict[str, Any]:
    """The Job ``name`` of 2 pods as ``version`` describes it."""
    release, gang, size, finished = version
    annotations = {"troupe.io/release": release}
    if gang is not None:
        annotations["troupe.io/gang-name"] = name if gang == "own" else gang
    if size is not None:
        annotations["troupe.io/gang-size"] = str(size)
    obj = job_object(name, 2, annotations=annotations)
    if gang is None and size is None:
        del obj["spec"]["template"]["metadata"]["annotations"]["troupe.io/gang-size"]
    if finished:
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    return obj


steps = st.lists(st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), versions), st.booleans()),
                 min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_the_memo_answers_as_a_fresh_read_through_any_history(history):
    objects: dict[Any, wl.Workload] = {}
    memo: PlannedMemo = {}
    for name, version, auto in history:
        key = ("Job", NAMESPACE, name)
        if version is None:
            objects.pop(key, None)  # deleted
        else:
            objects.update(wl.workloads_of("Job", [job(name, version)]))
        workloads = wl.Workloads(dict(objects))
        namespaces = frozenset({NAMESPACE}) if auto else frozenset()

        assert planned_gangs(workloads, CONFIG, namespaces, memo) == planned_gangs(workloads, CONFIG, namespaces)
        assert set(memo) <= set(objects), "a deleted workload's entry stays"


def test_an_unchanged_workload_is_not_read_again():
    objects = wl.workloads_of("Job", [job(n, ("AsCreated", "own", 2, False)) for n in NAMES])
    memo: PlannedMemo = {}
    first = planned_gangs(wl.Workloads(dict(objects)), CONFIG, frozenset(), memo)
    assert sorted(first) == [f"{NAMESPACE}/{n}" for n in NAMES]
    kept = {k: v[2] for k, v in memo.items()}

    objects.update(wl.workloads_of("Job", [job("a", ("WhenComplete", "own", 2, False))]))
    second = planned_gangs(wl.Workloads(dict(objects)), CONFIG, frozenset(), memo)

    assert sorted(second) == [f"{NAMESPACE}/{n}" for n in NAMES[1:]]
    assert all(memo[k][2] is kept[k] for k in kept if k[2] != "a"), "the unchanged Jobs were read again"
