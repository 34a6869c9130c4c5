"""Pods that name a pod group (the upstream Workload API, Volcano, coscheduling, KAI) and
pods written for a second scheduler (``adoptSchedulerNames``), at admission
(docs/decisions/057-adopted-scheduler-names.md): gated, the reference read and never
rewritten, bad names denied naming the field and the value, adopted scheduler names handed
to kube-scheduler with the original kept; the match conditions that send them (CEL,
evaluated with cel-python) and the same over real HTTPS."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.webhook_builders import (
    ALICE,
    PodBuilder,
    Server,
    admit,
    make_pod,
    make_review,
    review_over_https,
    start_server,
)
from troupe.config import Config, ConfigError, from_mapping
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME
from webhook.admission import mutate, patch_of
from webhook.registration import match_conditions

celpy = pytest.importorskip("celpy", reason="cel-python evaluates the matchConditions")

GATE = {"name": "troupe.io/placement"}
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
ADOPTING = Config(adopt_scheduler_names=("volcano", "kai-scheduler", "scheduler-plugins-scheduler"))


def job_pod(builder: PodBuilder, job: str = "train") -> dict[str, Any]:
    pod: dict[str, Any] = builder.container().obj()
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u-1", "controller": True}]
    return pod


def upstream(builder: PodBuilder, group: Any = "train") -> PodBuilder:
    """The upstream Workload API's reference, ``spec.schedulingGroup.podGroupName`` (1.37)."""
    builder._pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return builder


SCHEDULERS = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "kai": "kai-scheduler"}


def named(source: str, group: Any = "train", builder: PodBuilder | None = None,
          peer_scheduler: bool = False) -> dict[str, Any]:
    """A Job's pod naming ``group`` the way ``source``'s users write it; ``peer_scheduler``:
    with the peer's ``schedulerName`` too, as its users write it today (else kube-scheduler's,
    as the API server defaults it)."""
    b = builder or make_pod()
    if source == "workload":
        upstream(b, group)
    elif source == "volcano":
        b.annotate("scheduling.k8s.io/group-name", group)
    elif source == "coscheduling":
        b.label("scheduling.x-k8s.io/pod-group", group)
    else:
        b.annotate("pod-group-name", group)
    b._pod["spec"]["schedulerName"] = SCHEDULERS[source] if peer_scheduler and source in SCHEDULERS \
        else "default-scheduler"
    return job_pod(b)


SOURCES = ["workload", "volcano", "coscheduling", "kai"]
FIELDS = {"workload": "spec.schedulingGroup.podGroupName", "volcano": "annotation scheduling.k8s.io/group-name",
          "coscheduling": "label scheduling.x-k8s.io/pod-group", "kai": "annotation pod-group-name"}


# --- gated, read, not rewritten ----------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
def test_a_pod_naming_a_group_is_gated_and_otherwise_left_as_written(source: str) -> None:
    pod = named(source)
    got = admit(pod, Config())
    assert got.allowed, got.response
    assert got.pod["spec"]["schedulingGates"] == [GATE]
    assert got.pod["metadata"].get("annotations", {}) == pod["metadata"].get("annotations", {}), \
        "the reference is read, not rewritten, and no gang key is stamped"
    assert got.pod["metadata"].get("labels") == pod["metadata"].get("labels")
    assert got.pod["spec"]["schedulerName"] == "default-scheduler"
    assert got.warnings == []


@pytest.mark.parametrize("source", ["volcano", "coscheduling", "kai"])
def test_a_group_pod_bound_for_a_scheduler_not_adopted_is_that_schedulers(source: str) -> None:
    pod = named(source, peer_scheduler=True)
    assert admit(pod, Config()).response == {"uid": "uid-1", "allowed": True}
    assert not sent(Config(), "CREATE", pod), "its creation does not depend on Troupe's webhook"


def test_a_pod_bound_for_another_scheduler_with_troupes_keys_is_still_gated() -> None:
    pod = named("volcano", builder=make_pod().gang("g", "4"), peer_scheduler=True)
    got = admit(pod, Config())
    assert got.allowed and got.pod["spec"]["schedulingGates"] == [GATE]


@pytest.mark.parametrize("source", SOURCES)
def test_a_reinvocation_adds_nothing(source: str) -> None:
    once = admit(named(source, peer_scheduler=True), ADOPTING)
    again = admit(once.pod, ADOPTING)
    assert again.allowed and again.ops == [] and again.pod == once.pod


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("bad", ["Train_1", "-train", "a" * 254, "train..1"])
def test_a_group_name_that_cannot_be_a_podgroups_is_denied_naming_the_field_and_the_value(
    source: str, bad: str
) -> None:
    got = admit(named(source, bad), Config())
    assert not got.allowed and got.code == 400
    assert got.message.startswith(f"{FIELDS[source]}: must name a PodGroup"), got.message
    assert repr(bad[:64]) in got.message


@pytest.mark.parametrize("source", ["volcano", "coscheduling", "kai"])
def test_an_empty_reference_names_no_group_and_the_pod_is_left_alone(source: str) -> None:
    got = admit(named(source, ""), Config())
    assert got.response == {"uid": "uid-1", "allowed": True}


def test_a_pod_naming_groups_in_two_ways_is_read_by_the_first_and_warned_about_the_other() -> None:
    pod = named("workload", "train", make_pod().annotate("scheduling.k8s.io/group-name", "other"))
    got = admit(pod, Config())
    assert got.allowed and got.pod["spec"]["schedulingGates"] == [GATE]
    assert got.warnings == ["spec.schedulingGroup.podGroupName = 'train' names this pod's gang; Troupe does not read "
                            "annotation scheduling.k8s.io/group-name = 'other'"]


def test_a_second_bad_reference_is_denied_too() -> None:
    pod = named("volcano", "train", make_pod().annotate("pod-group-name", "Bad"))
    got = admit(pod, Config())
    assert not got.allowed and got.message == (
        "annotation pod-group-name: must name a PodGroup (lower-case letters, digits, '-' and '.', "
        "at most 253 characters), got 'Bad'")


def test_troupes_gang_keys_name_the_gang_of_a_pod_that_also_names_a_group() -> None:
    pod = named("workload", builder=make_pod().gang("g", "4"))
    got = admit(pod, Config())
    assert got.allowed and got.pod["spec"]["schedulingGates"] == [GATE]
    assert got.pod["metadata"]["annotations"] == {"troupe.io/gang-name": "g", "troupe.io/gang-size": "4",
                                                  "troupe.io/gang-schedule-timeout-seconds": "30"}


def test_a_bad_troupe_key_and_a_bad_group_name_are_both_named() -> None:
    got = admit(named("volcano", "Bad", make_pod().gang("g", "zero")), Config())
    assert not got.allowed
    assert "troupe.io/gang-size" in got.message and "scheduling.k8s.io/group-name" in got.message


def test_a_topology_request_beside_a_group_is_validated_as_usual() -> None:
    ok = admit(named("kai", builder=make_pod().annotate("troupe.io/topology-required-level", SUBBLOCK)), Config())
    assert ok.allowed and ok.pod["spec"]["schedulingGates"] == [GATE]
    bad = admit(named("kai", builder=make_pod().annotate("troupe.io/topology-required-level", "rack")), Config())
    assert not bad.allowed and "troupe.io/topology-required-level" in bad.message


def test_the_namespace_opt_in_stamps_no_size_on_a_pod_that_names_a_group() -> None:
    review = make_review(named("coscheduling"))
    out = mutate(review, Config(), gang_mode_auto=True)
    pod = jsonpatch.apply_patch(review["request"]["object"], patch_of(out))
    assert "annotations" not in pod["metadata"], "the group is the gang"
    assert pod["spec"]["schedulingGates"] == [GATE]


def test_kueues_plain_pod_rule_stamps_no_gang_on_a_pod_that_names_a_group_but_its_level_is_read() -> None:
    pod = named("volcano", builder=make_pod().label("kueue.x-k8s.io/pod-group-name", "kq")
                .annotate("kueue.x-k8s.io/pod-group-total-count", "4")
                .annotate("kueue.x-k8s.io/podset-required-topology", SUBBLOCK))
    got = admit(pod, Config())
    assert got.allowed and got.pod["spec"]["schedulingGates"] == [GATE]
    assert "troupe.io/gang-name" not in got.pod["metadata"]["annotations"]
    bad = copy.deepcopy(pod)
    bad["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "rack"
    assert "kueue.x-k8s.io/podset-required-topology" in admit(bad, Config()).message


def test_a_pod_kueue_manages_is_kueues_whatever_group_it_names() -> None:
    pod = named("workload", builder=make_pod().label("kueue.x-k8s.io/managed", "true")
                .annotate("kueue.x-k8s.io/podset-required-topology", SUBBLOCK))
    assert admit(pod, Config()).response == {"uid": "uid-1", "allowed": True}


def test_an_update_of_a_group_pod_is_never_patched() -> None:
    pod = named("volcano", "train")
    got = admit(pod, ADOPTING, operation="UPDATE", old=pod)
    assert got.response == {"uid": "uid-1", "allowed": True}


def gated(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as stored after admission: behind Troupe's gate."""
    return dict(pod, spec=dict(pod["spec"], schedulingGates=[GATE]))


def relabelled(pod: dict[str, Any], where: str, key: str, value: str | None) -> dict[str, Any]:
    """A copy of ``pod`` whose ``metadata.<where>[key]`` is ``value`` (None: removed)."""
    out = copy.deepcopy(pod)
    values = out["metadata"].setdefault(where, {})
    if value is None:
        values.pop(key, None)
    else:
        values[key] = value
    return out


@pytest.mark.parametrize(("where", "key", "value", "want"), [
    ("annotations", "scheduling.k8s.io/group-name", "other",
     "annotation scheduling.k8s.io/group-name: cannot change, from 'train' to 'other', while Troupe's gate "
     "troupe.io/placement holds the pod for the gang it names; delete the pod and create it again with the value "
     "wanted"),
    ("annotations", "scheduling.k8s.io/group-name", None,
     "annotation scheduling.k8s.io/group-name: cannot be removed (it is 'train')"),
    ("annotations", "pod-group-name", "second", "annotation pod-group-name: cannot be added, got 'second'"),
    ("labels", "scheduling.x-k8s.io/pod-group", "x", "label scheduling.x-k8s.io/pod-group: cannot be added, got 'x'"),
    # The scheduler a pod was adopted from says whose group it joins when it names none
    # (docs/decisions/065-adopted-pods-join-their-peers-groups.md).
    ("annotations", ORIGINAL_SCHEDULER_NAME, "kai-scheduler",
     f"annotation {ORIGINAL_SCHEDULER_NAME}: cannot be added, got 'kai-scheduler', while Troupe's gate"),
])
def test_a_group_reference_is_fixed_while_troupes_gate_holds_the_pod(
    where: str, key: str, value: str | None, want: str
) -> None:
    old = gated(named("volcano"))
    new = relabelled(old, where, key, value)
    got = admit(new, Config(), operation="UPDATE", old=old)
    assert not got.allowed and got.code == 400
    assert got.message.startswith(want), got.message
    assert sent(Config(), "UPDATE", new, old)


def test_a_coscheduling_label_is_fixed_too_and_other_changes_pass() -> None:
    old = gated(named("coscheduling"))
    moved = relabelled(old, "labels", "scheduling.x-k8s.io/pod-group", "other")
    assert admit(moved, Config(), operation="UPDATE", old=old).message.startswith(
        "label scheduling.x-k8s.io/pod-group: cannot change, from 'train' to 'other'")
    team = relabelled(old, "labels", "team", "a")
    assert admit(team, Config(), operation="UPDATE", old=old).response == {"uid": "uid-1", "allowed": True}
    assert not sent(Config(), "UPDATE", team, old)


def test_a_released_pods_reference_may_change() -> None:
    old = named("volcano")
    new = relabelled(old, "annotations", "scheduling.k8s.io/group-name", "other")
    assert admit(new, Config(), operation="UPDATE", old=old).response == {"uid": "uid-1", "allowed": True}
    assert not sent(Config(), "UPDATE", new, old)


_updates = st.sampled_from([None, "train", "other", ""])


@settings(max_examples=300, deadline=None)
@given(old_refs=st.tuples(_updates, _updates, _updates, _updates),
       new_refs=st.tuples(_updates, _updates, _updates, _updates), gate=st.booleans(), status=st.booleans())
def test_an_update_not_sent_is_allowed_untouched_and_a_refused_one_is_sent(
    old_refs: tuple[str | None, ...], new_refs: tuple[str | None, ...], gate: bool, status: bool
) -> None:
    def with_refs(refs: tuple[str | None, ...]) -> dict[str, Any]:
        pod = make_pod().container().obj()
        for (where, key), value in zip(
                [("annotations", "scheduling.k8s.io/group-name"), ("annotations", "pod-group-name"),
                 ("labels", "scheduling.x-k8s.io/pod-group"), ("annotations", ORIGINAL_SCHEDULER_NAME)], refs,
                strict=True):
            if value is not None:
                pod = relabelled(pod, where, key, value)
        return gated(pod) if gate else pod

    old, new = with_refs(old_refs), with_refs(new_refs)
    answer = mutate(make_review(new, operation="UPDATE", old=old, sub_resource="status" if status else None),
                    Config())["response"]
    if not sent(Config(), "UPDATE", new, old):
        assert answer == {"uid": "uid-1", "allowed": True}
    if not answer["allowed"]:
        assert sent(Config(), "UPDATE", new, old)


# --- adoptSchedulerNames -----------------------------------------------------------------


@pytest.mark.parametrize(("source", "scheduler"), [
    ("volcano", "volcano"), ("coscheduling", "scheduler-plugins-scheduler"), ("kai", "kai-scheduler")])
def test_an_adopted_group_pod_goes_to_kube_scheduler_gated_with_its_original_name_kept(
    source: str, scheduler: str
) -> None:
    got = admit(named(source, peer_scheduler=True), ADOPTING)
    assert got.allowed, got.response
    assert got.pod["spec"]["schedulerName"] == "default-scheduler"
    assert got.pod["metadata"]["annotations"][ORIGINAL_SCHEDULER_NAME] == scheduler
    assert got.pod["spec"]["schedulingGates"] == [GATE]


def test_an_adopted_pod_that_names_no_group_is_adopted_but_not_gated() -> None:
    pod = make_pod().container().obj()
    pod["spec"]["schedulerName"] = "volcano"
    got = admit(pod, ADOPTING)
    assert got.allowed
    assert got.ops == [{"op": "replace", "path": "/spec/schedulerName", "value": "default-scheduler"},
                       {"op": "add", "path": "/metadata/annotations", "value": {ORIGINAL_SCHEDULER_NAME: "volcano"}}]
    assert "schedulingGates" not in got.pod["spec"]


def test_an_adopted_pod_keeps_its_other_annotations_and_a_stale_original_name_is_replaced() -> None:
    pod = make_pod().annotate("example.com/team", "a").annotate(ORIGINAL_SCHEDULER_NAME, "old").container().obj()
    pod["spec"]["schedulerName"] = "kai-scheduler"
    got = admit(pod, ADOPTING)
    assert got.pod["metadata"]["annotations"] == {"example.com/team": "a", ORIGINAL_SCHEDULER_NAME: "kai-scheduler"}


def test_an_adopted_pod_in_an_opted_in_namespace_gets_both_annotations() -> None:
    pod = job_pod(make_pod())
    pod["spec"]["schedulerName"] = "volcano"
    review = make_review(pod)
    patched = jsonpatch.apply_patch(pod, patch_of(mutate(review, ADOPTING, gang_mode_auto=True)))
    assert patched["metadata"]["annotations"] == {"troupe.io/gang-size": "auto", ORIGINAL_SCHEDULER_NAME: "volcano",
                                                  "troupe.io/gang-schedule-timeout-seconds": "30"}
    assert patched["spec"]["schedulerName"] == "default-scheduler"


@pytest.mark.parametrize("scheduler", ["default-scheduler", "my-scheduler", None])
def test_a_scheduler_name_not_listed_is_left_alone(scheduler: str | None) -> None:
    pod = make_pod().container().obj()
    if scheduler is not None:
        pod["spec"]["schedulerName"] = scheduler
    assert admit(pod, ADOPTING).response == {"uid": "uid-1", "allowed": True}


def test_an_excluded_namespaces_pod_is_not_adopted() -> None:
    pod = make_pod(namespace="kube-system").container().obj()
    pod["spec"]["schedulerName"] = "volcano"
    assert admit(pod, ADOPTING).response == {"uid": "uid-1", "allowed": True}


def test_a_denied_pod_is_not_adopted() -> None:
    got = admit(named("volcano", "Bad", peer_scheduler=True), ADOPTING)
    assert not got.allowed and got.ops == []


@pytest.mark.parametrize(("raw", "want"), [
    (["Volcano"], "adoptSchedulerNames[0]: must be a scheduler name as spec.schedulerName takes it"),
    (["volcano", "default-scheduler"], "adoptSchedulerNames[1]: 'default-scheduler' is kube-scheduler's own name"),
    (["volcano", "volcano"], "adoptSchedulerNames: must not repeat an entry"),
    ("volcano", "adoptSchedulerNames: must be a list of non-empty strings, got 'volcano'"),
])
def test_a_bad_adopted_scheduler_name_is_refused_naming_the_key_and_the_value(raw: Any, want: str) -> None:
    with pytest.raises(ConfigError, match=want.replace("[", r"\[").replace("]", r"\]")):
        from_mapping({"adoptSchedulerNames": raw})


def test_the_configuration_reads_the_adopted_names() -> None:
    assert from_mapping({"adoptSchedulerNames": ["volcano", "kai-scheduler"]}).adopt_scheduler_names == (
        "volcano", "kai-scheduler")
    assert from_mapping({"adoptSchedulerNames": []}).adopt_scheduler_names == ()


# --- the invariant: a group pod's patch touches only gates, tolerations, the scheduler ----
# --- name and annotations -----------------------------------------------------------------

_names = st.sampled_from(["train", "a.b", "g-1", "", "Bad"])
_ref_annotations = st.dictionaries(
    st.sampled_from(["scheduling.k8s.io/group-name", "pod-group-name", "example.com/x", ORIGINAL_SCHEDULER_NAME,
                     "troupe.io/gang-name", "troupe.io/gang-size"]), _names | st.just("4"), max_size=4)


@st.composite
def group_pods(draw: st.DrawFn) -> dict[str, Any]:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                           "spec": {"containers": [{"name": "main", "image": "i"}]}}
    if draw(st.booleans()):
        pod["metadata"]["annotations"] = draw(_ref_annotations)
    if draw(st.booleans()):
        pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": draw(_names)}
    if draw(st.booleans()):
        pod["spec"]["schedulingGroup"] = {"podGroupName": draw(_names)}
    if scheduler := draw(st.sampled_from([None, "volcano", "kai-scheduler", "default-scheduler", "other"])):
        pod["spec"]["schedulerName"] = scheduler
    extra = {"nodeSelector": {"a": "b"}, "priorityClassName": "high", "tolerations": [{"key": "k", "operator": "Exists"}]}
    for field in draw(st.sets(st.sampled_from(sorted(extra)))):
        pod["spec"][field] = copy.deepcopy(extra[field])
    if draw(st.booleans()):
        pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    if draw(st.booleans()):
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                                               "controller": True}]
    return pod


_TOUCHED = {("spec", "schedulingGates"), ("spec", "tolerations"), ("spec", "schedulerName"),
            ("metadata", "annotations")}


def _untouched(pod: dict[str, Any]) -> dict[str, Any]:
    return {part: {k: v for k, v in pod[part].items() if (part, k) not in _TOUCHED} for part in ("metadata", "spec")}


@settings(max_examples=400, deadline=None)
@given(pod=group_pods(), config=st.sampled_from([Config(), ADOPTING]), auto=st.booleans())
def test_the_patch_of_a_group_pod_changes_only_gates_tolerations_the_scheduler_name_and_annotations(
    pod: dict[str, Any], config: Config, auto: bool
) -> None:
    out = mutate(make_review(pod), config, gang_mode_auto=auto)
    patched = jsonpatch.apply_patch(pod, patch_of(out))
    assert _untouched(patched) == _untouched(pod)
    before, after = pod["metadata"].get("annotations", {}), patched["metadata"].get("annotations", {})
    adopted = patched["spec"].get("schedulerName") != pod["spec"].get("schedulerName")
    kept = {k: v for k, v in before.items() if not (adopted and k == ORIGINAL_SCHEDULER_NAME)}
    assert {k: after.get(k) for k in kept} == kept, "no annotation the user wrote is changed or removed"
    old_gates = pod["spec"].get("schedulingGates", [])
    assert patched["spec"].get("schedulingGates", [])[:len(old_gates)] == old_gates, "gates are only added"
    if adopted:
        assert pod["spec"]["schedulerName"] in config.adopt_scheduler_names
        assert after[ORIGINAL_SCHEDULER_NAME] == pod["spec"]["schedulerName"]
    if out["response"]["allowed"]:
        again = mutate(make_review(patched), config, gang_mode_auto=auto)
        assert patch_of(again) == [], "a reinvocation adds nothing"


# --- the match conditions -----------------------------------------------------------------


class _Object(celpy.celtypes.MapType):  # type: ignore[misc, name-defined]
    """A top-level object variable; cel-go compares any value with null, cel-python only
    for ``==`` (see test_registration.py)."""

    def __ne__(self, other: Any) -> bool:
        return True if other is None else bool(super().__ne__(other))


_programs: dict[Config, list[Any]] = {}


def _compiled(config: Config) -> list[Any]:
    if config not in _programs:
        env = celpy.Environment()
        _programs[config] = [env.program(env.compile(c["expression"])) for c in match_conditions(config)]
    return _programs[config]


def sent(config: Config, operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    """Whether every matchCondition holds for this request."""
    activation = {
        "object": _Object(celpy.json_to_cel(obj)), "oldObject": None if old is None else _Object(celpy.json_to_cel(old)),
        "request": _Object(celpy.json_to_cel({"operation": operation, "userInfo": {"username": ALICE, "groups": []},
                                              "namespace": "ml", "name": "w-0"})),
    }
    results = [program.evaluate(activation) for program in _compiled(config)]
    assert all(isinstance(r, celpy.celtypes.BoolType) for r in results), results
    return all(bool(r) for r in results)


def _scheduled_by(name: str) -> dict[str, Any]:
    pod = make_pod().container().obj()
    pod["spec"]["schedulerName"] = name
    return pod


@pytest.mark.parametrize(("name", "config", "pod", "want_sent"), [
    *[(f"a {s} group pod is sent", Config(), named(s), True) for s in SOURCES],
    *[(f"a {s} group pod bound for its scheduler is sent when adopted", ADOPTING, named(s, peer_scheduler=True), True)
      for s in SCHEDULERS],
    *[(f"an empty {s} reference is not sent", Config(), named(s, ""), False) for s in SOURCES],
    ("a pod with another group-like label is not sent", Config(), make_pod().label("pod-group", "x").obj(), False),
    ("a listed scheduler's pod is sent", ADOPTING, _scheduled_by("kai-scheduler"), True),
    ("an unlisted scheduler's pod is not sent", ADOPTING, _scheduled_by("my-scheduler"), False),
    ("kube-scheduler's pod is not sent", ADOPTING, _scheduled_by("default-scheduler"), False),
    ("nothing is adopted without a list", Config(), _scheduled_by("volcano"), False),
    ("a pod without a spec is not sent and does not fail", ADOPTING, {"metadata": {"labels": {}}}, False),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_match_conditions_send_group_pods_and_adopted_ones_on_create(
    name: str, config: Config, pod: dict[str, Any], want_sent: bool
) -> None:
    assert sent(config, "CREATE", pod) == want_sent


def test_an_update_of_a_group_pod_or_an_adopted_one_is_not_sent() -> None:
    pod = named("volcano", peer_scheduler=True)
    assert not sent(ADOPTING, "UPDATE", pod, old=pod)


@settings(max_examples=300, deadline=None)
@given(pod=group_pods(), config=st.sampled_from([Config(), ADOPTING]))
def test_a_create_that_is_not_sent_is_one_the_webhook_allows_untouched(pod: dict[str, Any], config: Config) -> None:
    if not sent(config, "CREATE", pod):
        assert mutate(make_review(pod), config)["response"] == {"uid": "uid-1", "allowed": True}


# --- over real HTTPS ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def adopting_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real ``python -m webhook serve`` whose configuration adopts Volcano's and KAI's names."""
    s = start_server(tmp_path_factory.mktemp("webhook-groups"),
                     config_yaml="adoptSchedulerNames: [volcano, kai-scheduler, scheduler-plugins-scheduler]\n")
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.parametrize("source", SOURCES)
def test_over_https_each_source_is_gated_adopted_and_a_reinvocation_adds_nothing(
    adopting_server: Server, source: str
) -> None:
    pod = named(source, peer_scheduler=True)
    answer = review_over_https(adopting_server, make_review(pod, uid=f"group-{source}"))
    assert answer["response"]["uid"] == f"group-{source}" and answer["response"]["allowed"]
    patched = jsonpatch.apply_patch(pod, patch_of(answer))
    assert patched["spec"]["schedulingGates"] == [GATE]
    if source == "workload":
        assert patched["spec"]["schedulerName"] == "default-scheduler"
    else:
        assert patched["spec"]["schedulerName"] == "default-scheduler"
        assert patched["metadata"]["annotations"][ORIGINAL_SCHEDULER_NAME] == pod["spec"]["schedulerName"]
    again = review_over_https(adopting_server, make_review(patched, uid=f"again-{source}"))
    assert again["response"] == {"uid": f"again-{source}", "allowed": True}


def test_over_https_a_bad_group_name_is_denied_naming_the_field_and_the_value(adopting_server: Server) -> None:
    answer = review_over_https(adopting_server, make_review(named("coscheduling", "Train_1"), uid="bad-group"))
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"].startswith("label scheduling.x-k8s.io/pod-group: must name a PodGroup")
    assert "'Train_1'" in response["status"]["message"]
