"""Properties of ``mutate`` over arbitrary pods (hypothesis): it never raises, always answers
a well-formed AdmissionReview, its patch applies, and a reinvocation adds nothing."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.webhook_builders import ALICE, RECONCILER, make_review
from troupe.config import Config
from webhook.admission import mutate, patch_of
from webhook.patches import apply_ops

CONFIGS = [
    Config(),
    Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang"),
    Config(shared_device_resources=("nvidia.com/gpu", "amd.com/gpu", "example.com/fpga"),
           excluded_namespaces=()),
]
TROUPE_KEYS = [
    "troupe.io/gang-name", "troupe.io/gang-size", "troupe.io/gang-schedule-timeout-seconds",
    "gang-scheduling.preferred.jp/gang-name", "gang-scheduling.preferred.jp/gang-size",
    "gang-scheduling.preferred.jp/gang-schedule-timeout-seconds",
    "troupe.io/topology-required-level", "troupe.io/topology-preferred-level", "deviceshare.io/group",
    # a pod group's references (Volcano's, KAI's): gated like Troupe's keys (decision 057)
    "scheduling.k8s.io/group-name", "pod-group-name",
]
OTHER_KEYS = [
    "reconciler.troupe.io/node", "deviceshare.io/selected-devices", "deviceshare.io/env.NVIDIA_VISIBLE_DEVICES",
    "kubernetes.io/config.mirror", "example.com/team",
]
PLAUSIBLE_VALUES = [
    "0", "1", "4", "30", "045", "500", "-1", "1.5", "", "g", "my gang", "team-a", "Team_A",
    "cloud.google.com/gce-topology-subblock", "topology.gke.io/rack", "rack",
]

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
annotation_values = st.one_of(st.sampled_from(PLAUSIBLE_VALUES), st.text(max_size=70), json_values)
annotations = st.one_of(
    st.dictionaries(st.sampled_from(TROUPE_KEYS + OTHER_KEYS) | st.text(max_size=20), annotation_values,
                    max_size=6),
    json_values,
)
env_entry = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES", "A"])},
                          optional={"value": st.text(max_size=5), "valueFrom": json_values}),
    json_values,
)
container = st.one_of(
    st.fixed_dictionaries({"name": st.text(max_size=8)}, optional={"env": st.one_of(st.lists(env_entry, max_size=3),
                                                                                       json_values)}),
    json_values,
)
gates = st.lists(st.one_of(st.fixed_dictionaries({"name": st.sampled_from(
    ["troupe.io/placement", "gke.io/topology-aware-auto-x", "example.com/other"])}), json_values), max_size=3)
spec = st.fixed_dictionaries({}, optional={
    "containers": st.one_of(st.lists(container, max_size=3), json_values),
    "initContainers": st.one_of(st.lists(container, max_size=2), json_values),
    "schedulingGates": st.one_of(gates, json_values),
})
metadata = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=10), "namespace": st.sampled_from(["ml", "kube-system", ""]),
    "annotations": annotations, "labels": json_values,
})



@st.composite
def troupe_annotations(draw: st.DrawFn, prefix: str) -> dict[str, Any]:
    """Mostly valid Troupe annotations (so that many pods get patched), with some noise."""
    out: dict[str, Any] = {}
    kinds = draw(st.sets(st.sampled_from(["gang", "group", "topology"]), min_size=1))
    if "gang" in kinds:
        out[prefix + "-name"] = draw(st.sampled_from(["g", "llama-train", "a.b_c"]))
        out[prefix + "-size"] = draw(st.sampled_from(["1", "4", "64"]))
        if draw(st.booleans()):
            out[prefix + "-schedule-timeout-seconds"] = draw(st.sampled_from(["1", "30", "045", "100", "500"]))
    if "group" in kinds:
        out["deviceshare.io/group"] = draw(st.sampled_from(["team-a", "g.example"]))
    if "topology" in kinds:
        key = draw(st.sampled_from(["troupe.io/topology-required-level", "troupe.io/topology-preferred-level"]))
        out[key] = draw(st.sampled_from(list(Config().all_levels)))
    if draw(st.integers(0, 3)) == 0:
        out.update(draw(st.dictionaries(st.sampled_from(TROUPE_KEYS + OTHER_KEYS), annotation_values, max_size=1)))
    return out


valid_container = st.fixed_dictionaries({"name": st.sampled_from(["main", "sidecar"])}, optional={
    "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "A", "B"])},
                                          optional={"value": st.text(max_size=5)}), max_size=3)})
valid_spec = st.fixed_dictionaries({}, optional={
    "containers": st.lists(st.one_of(valid_container, valid_container, container), max_size=3),
    "initContainers": st.lists(valid_container, max_size=2),
    "schedulingGates": st.lists(st.fixed_dictionaries({"name": st.sampled_from(
        ["troupe.io/placement", "gke.io/topology-aware-auto-x", "example.com/other"])}), max_size=2),
})


def pods_for(config: Config) -> st.SearchStrategy[Any]:
    """Pods for ``config``: half of them with mostly valid Troupe keys of its prefix, the
    rest arbitrary metadata and spec, or any JSON at all."""
    troupe_pods = st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
        {"annotations": troupe_annotations(config.gang_annotation_prefix)},
        optional={"name": st.text(max_size=10)}), "spec": valid_spec})
    return st.one_of(
        troupe_pods,
        troupe_pods,
        st.fixed_dictionaries({"metadata": metadata}, optional={"spec": st.one_of(spec, json_values)}),
        json_values,
    )


def _check_shape(out: dict[str, Any], uid: str) -> None:
    json.dumps(out)  # serialisable as it is sent
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == uid
    assert isinstance(resp["allowed"], bool)
    if resp["allowed"]:
        assert "status" not in resp
    else:
        assert isinstance(resp["status"]["code"], int) and resp["status"]["message"]
        assert "patch" not in resp
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(resp["patch"])), list)
    assert all(isinstance(w, str) for w in resp.get("warnings", []))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), config=st.sampled_from(CONFIGS),
       operation=st.sampled_from(["CREATE", "CREATE", "CREATE", "UPDATE", "DELETE", ""]), user=st.sampled_from([ALICE, RECONCILER]),
       namespace=st.sampled_from(["ml", "ml", "ml", "kube-system", ""]), dry_run=st.booleans())
def test_mutate_always_answers_and_a_reinvocation_adds_nothing(
    data: st.DataObject, config: Config, operation: str, user: str, namespace: str, dry_run: bool
) -> None:
    pod = data.draw(pods_for(config), label="pod")
    old = data.draw(st.none() | pods_for(config), label="oldObject")
    original = copy.deepcopy(pod)
    review = make_review(pod, operation=operation, user=user, old=old, namespace=namespace, dry_run=dry_run)
    out = mutate(review, config)
    _check_shape(out, "uid-1")
    assert pod == original, "mutate must not modify its input"
    ops = patch_of(out)
    event("patched" if ops else ("denied" if not out["response"]["allowed"] else "allowed untouched"))
    if not ops:
        return
    once = jsonpatch.apply_patch(pod, ops)
    again = mutate(make_review(once, operation=operation, user=user, old=old, namespace=namespace), config)
    _check_shape(again, "uid-1")
    assert again["response"]["allowed"] is True
    assert patch_of(again) == []
    twice = jsonpatch.apply_patch(once, patch_of(again))
    assert twice == once


@settings(max_examples=300, deadline=None)
@given(annotations=st.dictionaries(st.text(max_size=30).filter(
           lambda k: k not in TROUPE_KEYS and not k.startswith(("reconciler.troupe.io/", "deviceshare.io/"))),
           st.text(max_size=20), max_size=5),
       spec=spec)
def test_a_pod_without_troupe_keys_is_never_patched(annotations: dict[str, str], spec: dict[str, Any]) -> None:
    pod = {"metadata": {"name": "p", "namespace": "ml", "annotations": annotations}, "spec": spec}
    out = mutate(make_review(pod), Config())["response"]
    assert out == {"uid": "uid-1", "allowed": True}


@settings(max_examples=300, deadline=None)
@given(review=json_values | st.fixed_dictionaries(
    {"apiVersion": st.sampled_from(["admission.k8s.io/v1", "v1"]), "kind": st.just("AdmissionReview")},
    optional={"request": json_values}))
def test_mutate_never_raises_on_arbitrary_json(review: Any) -> None:
    out = mutate(review, Config())
    json.dumps(out)
    assert isinstance(out["response"]["allowed"], bool)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), config=st.sampled_from(CONFIGS), kueue=st.booleans(), owned=st.booleans(),
       gang_mode_auto=st.booleans())
def test_the_webhooks_own_patch_application_gives_what_jsonpatch_gives(
    data: st.DataObject, config: Config, kueue: bool, owned: bool, gang_mode_auto: bool
) -> None:
    """``apply_ops`` (what ``kubectl troupe plan`` applies the patch with) agrees with the
    ``jsonpatch`` library on every patch the webhook answers, Kueue's and the opt-in's included."""
    pod = data.draw(pods_for(config), label="pod")
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        if kueue:
            meta["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "cloud.google.com/gce-topology-host"
        if owned:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                                        "controller": True}]
    ops = patch_of(mutate(make_review(pod), config, gang_mode_auto=gang_mode_auto))
    event("patched" if ops else "not patched")
    if not ops:
        return
    want = jsonpatch.apply_patch(pod, ops)
    got = copy.deepcopy(pod)
    apply_ops(got, ops)
    assert got == want


@pytest.mark.parametrize(("ops", "message"), [
    ([{"op": "remove", "path": "/spec"}], "only add and replace at a pointer are applied"),
    ([{"op": "add", "path": "spec"}], "only add and replace at a pointer are applied"),
    ([{"op": "add", "path": "/spec/nothing/here", "value": 1}], "/spec/nothing/here does not lead into the document"),
    ([{"op": "replace", "path": "/metadata/absent", "value": 1}], "/metadata/absent does not lead into the document"),
    ([{"op": "add", "path": "/spec/schedulingGates/5", "value": {}}],
     "/spec/schedulingGates/5 does not lead into the document"),
])
def test_a_patch_the_webhook_never_builds_is_refused_naming_the_operation(ops: list[Any], message: str) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "a"}]}}
    with pytest.raises(ValueError, match="JSON Patch operation") as e:
        apply_ops(pod, ops)
    assert message in str(e.value)


def test_patch_application_adds_at_an_index_at_the_end_and_under_escaped_keys() -> None:
    pod: dict[str, Any] = {"metadata": {"annotations": {}}, "spec": {"tolerations": [{"key": "b"}]}}
    entry = {"key": "c"}
    apply_ops(pod, [{"op": "add", "path": "/spec/tolerations/0", "value": {"key": "a"}},
                    {"op": "add", "path": "/spec/tolerations/-", "value": entry},
                    {"op": "add", "path": "/metadata/annotations/troupe.io~1gang-size", "value": "auto"},
                    {"op": "replace", "path": "/metadata/annotations/troupe.io~1gang-size", "value": "4"}])
    assert pod == {"metadata": {"annotations": {"troupe.io/gang-size": "4"}},
                   "spec": {"tolerations": [{"key": "a"}, {"key": "b"}, {"key": "c"}]}}
    assert pod["spec"]["tolerations"][2] is not entry, "values are copied"
