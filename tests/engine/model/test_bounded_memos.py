"""The engine's process-wide memos that a tenant's objects fill are bounded by what they hold,
not by how many entries they have (docs/decisions/063-memos-held-by-their-users.md): a
member's gang keys, compiled CEL selectors and their answers, a pod's owner.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import celpy
import pytest

from reconciler.engine.model import cel
from reconciler.engine.model import pods as pods_module
from reconciler.engine.model.declared import memberkeys
from reconciler.engine.model.memo import ChargedMemo
from reconciler.engine.model.pods import PodInfo
from testbed.reconciler_builders import make_pod
from troupe.config import Config

celpy.Environment()  # cel-python raises the recursion limit on its first environment


def _kept(work: Callable[[], None]) -> int:
    """Bytes still allocated after ``work`` and a garbage collection (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_charged_memo_drops_the_least_recently_used_to_stay_within_its_budget():
    memo: ChargedMemo[str, str] = ChargedMemo(100, lambda key, value: len(value))
    memo.put("a", "x" * 40)
    memo.put("b", "x" * 40)
    assert memo.get("a") is not None  # a is now the most recently used
    memo.put("c", "x" * 40)
    assert (memo.get("a"), memo.get("b"), memo.held) == ("x" * 40, None, 80)
    assert memo.put("huge", "x" * 101) == "x" * 101 and memo.get("huge") is None, "more than the budget: not kept"
    assert len(memo) == 2


def test_members_of_huge_distinct_annotations_leave_no_more_than_the_gang_keys_budget():
    def churn() -> None:
        for n in range(300):
            pod = PodInfo(namespace="attacker", name=f"p{n}", gang_annotations={
                "troupe.io/gang-name": f"g{n}", "troupe.io/gang-size": "1", "x-name": f"{n}" + "z" * 100_000})
            memberkeys.member_keys(pod, Config())

    kept = _kept(churn)

    assert kept < memberkeys.KEYS_MEMO_BYTES + 2**20, f"{kept / 2**20:.1f} MiB kept"


def test_members_of_one_gang_share_one_parse_of_their_keys():
    pods = [PodInfo(namespace="ml", name=f"w-{i}", gang_annotations={"troupe.io/gang-name": "g",
                                                                       "troupe.io/gang-size": "2"}) for i in range(2)]
    first, second = (memberkeys.member_keys(p, Config()) for p in pods)
    assert first is second and first.spec is not None and first.spec.size == 2


#: A selector of 10 KiB, the API's limit, that parses into 56,000 nodes and tokens (35 MiB).
def _dense(n: int) -> str:
    return f'device.driver in ["d{n}",' + ",".join(["1"] * 5090) + "]"


def test_selectors_too_large_to_keep_compiled_are_refused_and_leave_little_behind():
    def churn() -> None:
        for n in range(2):
            with pytest.raises(cel.SelectorError, match="larger than Troupe keeps compiled"):
                cel.check(_dense(n))
            with pytest.raises(cel.SelectorError, match="larger than Troupe keeps compiled"):
                cel.check(_dense(n))  # the refusal is remembered, not parsed again

    kept = _kept(churn)

    assert kept < 2**20, f"{kept / 2**20:.1f} MiB kept"


def test_a_selector_deeper_than_the_stack_is_refused_not_raised():
    deep = 'device.driver == "d" || ' + " || ".join(["true"] * 1700)
    with pytest.raises(cel.SelectorError):
        cel.check(deep)


def test_an_ordinary_selector_is_compiled_once_and_its_answers_hold_no_copy_of_it():
    selector = 'device.attributes["gpu.example.com"].model == "H100"'
    device = cel.view("gpu.example.com", {"model": "H100", "uuid": "GPU-1"}, {})
    assert cel.evaluate(selector, device) == (True, True)
    assert cel.evaluate(selector, device) == (True, False)
    assert cel._compiled(selector) is cel._compiled(selector)
    assert all(isinstance(key[0], int) for key in cel._memo._entries), "answers are keyed by the compiled selector"


def test_owners_are_shared_while_their_pods_exist_and_forgotten_with_them():
    def owned(name: str) -> dict:
        pod = make_pod(name, "ml").build()
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "only-this-test",
                                               "uid": "uid-only-this-test", "controller": True}]
        return pod

    a, b = PodInfo.from_object(owned("a")), PodInfo.from_object(owned("b"))
    assert a.owner is not None and a.owner is b.owner
    remembered = len(pods_module._owners)
    del a, b
    gc.collect()
    assert len(pods_module._owners) == remembered - 1
