"""A pod's spec is parsed once per distinct spec (docs/decisions/060-pod-spec-memo.md): the
pods of one template share what was read from it, and a pod parses exactly as it would
without the memo, whatever its spec, name, namespace, labels or node. The memo keeps a
parse while a parsed pod holds it and no longer (docs/decisions/063-memos-held-by-their-users.md)."""

from __future__ import annotations

import copy
import dataclasses
import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.model import pods as pods_module
from reconciler.engine.model import specs
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.specs import SPEC_MEMO_MAX_BYTES, spec_values
from testbed.reconciler_builders import make_pod


def _fields(info: PodInfo) -> list[object]:
    return [getattr(info, f.name) for f in dataclasses.fields(info)]


def _unmemoized(obj: dict, monkeypatch: pytest.MonkeyPatch) -> PodInfo:
    with monkeypatch.context() as m:
        m.setattr(pods_module, "spec_values", specs._parse_spec)
        return PodInfo.from_object(obj)


ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "labelSelector": {"matchLabels": {"app": "trainer"}}, "matchLabelKeys": ["job-name"],
    "topologyKey": "kubernetes.io/hostname"}]}}
SPREAD = [{"maxSkew": 1, "topologyKey": "cloud.google.com/gce-topology-block", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "trainer"}}, "matchLabelKeys": ["job-name"]}]
EPHEMERAL = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}]

extras = st.fixed_dictionaries({}, optional={
    "affinity": st.sampled_from([ANTI_AFFINITY, {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}]),
    "topologySpreadConstraints": st.just(SPREAD),
    "volumes": st.just(EPHEMERAL),
    "tolerations": st.just([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "priority": st.sampled_from([0, 1000, -5, 2**31, "high", True]),
    "terminationGracePeriodSeconds": st.sampled_from([0, 5, -1, "30"]),
    "schedulingGroup": st.sampled_from([{"podGroupName": "pg"}, {"podGroupName": 7}]),
    "nodeSelector": st.sampled_from([{"pool": "a"}, {"pool": 3}]),
})


def _pod(name: str, namespace: str, job: str, node: str | None, gpus: int, spec_extras: dict) -> dict:
    b = make_pod(name, namespace=namespace).gpus(gpus).label("job-name", job)
    if node:
        b = b.running_on(node)
    pod = b.build()
    pod["spec"].update(copy.deepcopy(spec_extras))
    return pod


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["w-0", "w-1"]), st.sampled_from(["ml", "research"]), st.sampled_from(["a", "b"]),
       st.sampled_from([None, "n1", "n2"]), st.integers(0, 8), extras)
def test_a_pod_parses_with_the_memo_exactly_as_without_it(name, namespace, job, node, gpus, spec_extras):
    pod = _pod(name, namespace, job, node, gpus, spec_extras)
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            expected = _unmemoized(pod, monkeypatch)
        except ObjectError as e:
            with pytest.raises(ObjectError) as raised:
                PodInfo.from_object(pod)
            assert raised.value.field == e.field
            with pytest.raises(ObjectError):  # a refused spec is refused again, not remembered
                PodInfo.from_object(pod)
            return
    assert _fields(PodInfo.from_object(pod)) == _fields(expected)
    assert _fields(PodInfo.from_object(copy.deepcopy(pod))) == _fields(expected), "remembered, the same"


def test_the_pods_of_one_template_on_different_nodes_share_what_was_read_from_the_spec():
    first, second = (PodInfo.from_object(_pod(f"w-{k}", "ml", "a", f"n{k}", 8, {})) for k in (1, 2))
    assert (first.node_name, second.node_name) == ("n1", "n2")
    assert first.requests is second.requests and first.node_filter is second.node_filter
    assert first.requests["nvidia.com/gpu"] == 8


def test_terms_that_read_the_pods_labels_namespace_and_name_are_each_pods_own():
    spec = {"affinity": ANTI_AFFINITY, "topologySpreadConstraints": SPREAD, "volumes": EPHEMERAL}
    a = PodInfo.from_object(_pod("w-0", "ml", "a", None, 0, spec))
    b = PodInfo.from_object(_pod("w-1", "research", "b", None, 0, spec))
    assert a.terms is not None and b.terms is not None
    assert a.terms != b.terms
    assert a.terms.claims == ("w-0-scratch",) and b.terms.claims == ("w-1-scratch",)
    assert a.terms.anti_affinity[0].namespaces == frozenset({"ml"})


def test_a_spec_larger_than_the_bound_is_parsed_each_time_not_remembered():
    big = {"nodeSelector": {f"key-{k}": "x" * 64 for k in range(SPEC_MEMO_MAX_BYTES // 64)}}
    pod = _pod("w-0", "ml", "a", None, 0, big)
    before = specs.remembered()
    first, second = PodInfo.from_object(pod), PodInfo.from_object(copy.deepcopy(pod))
    assert specs.remembered() == before
    assert first.node_filter == second.node_filter and first.node_filter is not second.node_filter


def test_a_spec_json_cannot_carry_is_parsed_as_it_is():
    spec = _pod("w-0", "ml", "a", None, 2, {})["spec"]
    spec["annotationsOfMine"] = {1, 2}  # a set: no JSON text, so no key
    assert spec_values(spec).requests["nvidia.com/gpu"] == 2


def test_a_spec_is_remembered_while_a_pod_of_it_is_held_and_forgotten_with_the_last_one():
    pod = _pod("w-0", "ml", "a", None, 3, {"nodeSelector": {"pool": "only-this-test"}})
    first = PodInfo.from_object(pod)
    held = specs.remembered()
    second = PodInfo.from_object(copy.deepcopy(pod))
    assert second.spec_values is first.spec_values, "one parse while a pod holds it"
    assert specs.remembered() == held
    del first, second
    gc.collect()
    assert specs.remembered() == held - 1
