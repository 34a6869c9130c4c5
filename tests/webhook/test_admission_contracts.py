"""``mutate`` on CREATE: the gang, topology and shared-device-group contracts, pods left
untouched, idempotence under reinvocation, and malformed requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.webhook_builders import ALICE, admit, make_pod, make_review
from troupe.config import Config
from webhook.admission import envelope_error, mutate, patch_of

GATE = {"name": "troupe.io/placement"}
TIMEOUT = "troupe.io/gang-schedule-timeout-seconds"
MIN = "troupe.io/gang-min-size"
PFN = Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang")


def nvidia_from_downward_api(var: str = "NVIDIA_VISIBLE_DEVICES") -> dict[str, Any]:
    return {"name": var, "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": f"metadata.annotations['deviceshare.io/env.{var}']"}}}


@dataclass
class Case:
    """One admission: ``pod`` in, and what must come out."""

    name: str
    pod: dict[str, Any]
    config: Config = field(default_factory=Config)
    want_allowed: bool = True
    want_gates: list[dict[str, str]] | None = None
    want_annotations: dict[str, str] | None = None
    want_untouched: bool = False
    want_env: dict[str, list[dict[str, Any]]] | None = None  # container name -> env
    want_warnings: list[str] = field(default_factory=list)
    want_code: int | None = None
    want_in_message: list[str] = field(default_factory=list)
    review: dict[str, Any] = field(default_factory=dict)


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = pod["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec.get("containers", [])]}


def assert_review_matches(case: Case) -> None:
    got = admit(case.pod, case.config, **case.review)
    assert got.allowed == case.want_allowed, got.response
    if case.want_code is not None:
        assert got.code == case.want_code, got.response
    for text in case.want_in_message:
        assert text in got.message, got.message
    if case.want_untouched:
        assert got.ops == [] and got.pod == case.pod
    if case.want_gates is not None:
        assert got.pod["spec"]["schedulingGates"] == case.want_gates
    if case.want_annotations is not None:
        assert got.pod["metadata"]["annotations"] == case.want_annotations
    if case.want_env is not None:
        assert {n: c.get("env") for n, c in _containers(got.pod).items()} == case.want_env
    assert got.warnings == case.want_warnings


GANG_CASES = [
    Case("a gang member is gated and its timeout defaulted to 30 seconds",
         make_pod().gang("g", "4").container().obj(),
         want_gates=[GATE],
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "4", TIMEOUT: "30"}),
    Case("a timeout above the limit is capped at 100 seconds",
         make_pod().gang("g", "4", timeout="500").container().obj(),
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "4", TIMEOUT: "100"}),
    Case("a minimum size from 1 to the size is kept as written",
         make_pod().gang("g", "8").annotate(MIN, "4").container().obj(),
         want_gates=[GATE],
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "8", MIN: "4", TIMEOUT: "30"}),
    Case("a minimum size with size auto is kept (the reconciler checks it against the workload)",
         make_pod().annotate("troupe.io/gang-size", "auto").annotate(MIN, "4").container().obj(),
         want_gates=[GATE],
         want_annotations={"troupe.io/gang-size": "auto", MIN: "4", TIMEOUT: "30"}),
    Case("a RestartGang failure policy is kept and the member gated",
         make_pod().gang("g", "4").annotate("troupe.io/gang-failure-policy", "RestartGang").container().obj(),
         want_gates=[GATE],
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "4",
                           "troupe.io/gang-failure-policy": "RestartGang", TIMEOUT: "30"}),
    Case("a timeout within the limit is kept as written",
         make_pod().gang("g", "4", timeout="45").container().obj(),
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "4", TIMEOUT: "45"}),
    Case("a timeout with leading zeros is written back in canonical form",
         make_pod().gang("g", "4", timeout="045").container().obj(),
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "4", TIMEOUT: "45"}),
    Case("a configured default and limit are what gets written",
         make_pod().gang("g", "2").container().obj(),
         config=Config(gang_schedule_default_timeout_seconds=7, gang_schedule_timeout_seconds_limit=9),
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "2", TIMEOUT: "7"}),
    Case("another component's gate is kept and Troupe's is added after it",
         make_pod().gang().gate("example.com/quota").container().obj(),
         want_gates=[{"name": "example.com/quota"}, GATE]),
    Case("a pod that already has Troupe's gate is not gated twice",
         make_pod().gang().gate("troupe.io/placement").container().obj(),
         want_gates=[GATE]),
    Case("the PFN plugin's keys work when gangAnnotationPrefix names them",
         make_pod().gang("awesome_pfn", "2", timeout="100", prefix="gang-scheduling.preferred.jp/gang")
         .container().obj(),
         config=PFN, want_gates=[GATE],
         want_annotations={"gang-scheduling.preferred.jp/gang-name": "awesome_pfn",
                           "gang-scheduling.preferred.jp/gang-size": "2",
                           "gang-scheduling.preferred.jp/gang-schedule-timeout-seconds": "100"}),
    Case("Troupe's default keys mean nothing under another prefix, so the pod is untouched",
         make_pod().gang("g", "0").container().obj(), config=PFN, want_untouched=True),
]

BAD_GANG_CASES = [
    Case(f"a {what} is denied, naming the key and the value",
         make_pod().gang(**kwargs).container().obj(),
         want_allowed=False, want_code=400, want_in_message=[key, repr(value)])
    for what, kwargs, key, value in [
        ("size of zero", {"size": "0"}, "troupe.io/gang-size", "0"),
        ("negative size", {"size": "-1"}, "troupe.io/gang-size", "-1"),
        ("size that is a word", {"size": "four"}, "troupe.io/gang-size", "four"),
        ("fractional size", {"size": "1.5"}, "troupe.io/gang-size", "1.5"),
        ("empty size", {"size": ""}, "troupe.io/gang-size", ""),
        ("timeout of zero", {"timeout": "0"}, TIMEOUT, "0"),
        ("negative timeout", {"timeout": "-5"}, TIMEOUT, "-5"),
        ("timeout with a unit", {"timeout": "10s"}, TIMEOUT, "10s"),
        ("name with a space", {"name": "my gang"}, "troupe.io/gang-name", "my gang"),
        ("name starting with a dash", {"name": "-g"}, "troupe.io/gang-name", "-g"),
        ("name of 64 characters", {"name": "g" * 64}, "troupe.io/gang-name", "g" * 64),
        ("empty name", {"name": ""}, "troupe.io/gang-name", ""),
    ]
] + [
    Case("a size without a name is denied, naming the missing name",
         make_pod().annotate("troupe.io/gang-size", "2").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/gang-name", "missing"]),
    Case("a name without a size is denied, naming the missing size",
         make_pod().annotate("troupe.io/gang-name", "g").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/gang-size", "missing"]),
    Case("a minimum size alone is denied, naming the missing name",
         make_pod().annotate(MIN, "2").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/gang-name", "missing"]),
] + [
    Case(f"a minimum size {what} is denied, naming the key and the value",
         make_pod().gang(size="4").annotate(MIN, value).container().obj(),
         want_allowed=False, want_code=400, want_in_message=[MIN, repr(value), want])
    for what, value, want in [
        ("of zero", "0", "from 1 to the gang's troupe.io/gang-size (4)"),
        ("above the size", "5", "from 1 to the gang's troupe.io/gang-size (4)"),
        ("that is a word", "two", "from 1"),
        ("of ten digits", "1234567890", "at most 9 digits"),
    ]
] + [
    Case("a failure policy that is neither ReplaceMember nor RestartGang is denied, naming the key and the value",
         make_pod().gang(size="4").annotate("troupe.io/gang-failure-policy", "Restart").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/gang-failure-policy", "'Restart'", "ReplaceMember, RestartGang"]),
    Case("a minimum size that is not a whole number of slices is denied",
         make_pod().gang(size="8").annotate(MIN, "6").annotate("troupe.io/topology-slice-size", "4")
         .annotate("troupe.io/topology-slice-required-level", "cloud.google.com/gce-topology-host").container().obj(),
         want_allowed=False, want_code=400, want_in_message=[MIN, "'6'", "multiple of the outermost slice size 4"]),
    Case("a bad size and a bad topology level are both reported",
         make_pod().gang(size="0").annotate("troupe.io/topology-required-level", "rack").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/gang-size", "troupe.io/topology-required-level", "'rack'"]),
]

LEVELS = ", ".join(Config().all_levels)
TOPOLOGY_CASES = [
    Case("a required level that is configured gates the pod",
         make_pod().gang().annotate("troupe.io/topology-required-level",
                                    "cloud.google.com/gce-topology-subblock").container().obj(),
         want_gates=[GATE]),
    Case("a preferred level from the older label set is accepted",
         make_pod().gang().annotate("troupe.io/topology-preferred-level", "topology.gke.io/rack")
         .container().obj(),
         want_gates=[GATE]),
    Case("a topology request alone opts the pod in and gates it",
         make_pod().annotate("troupe.io/topology-preferred-level", "cloud.google.com/gce-topology-block")
         .container().obj(),
         want_gates=[GATE], want_annotations={
             "troupe.io/topology-preferred-level": "cloud.google.com/gce-topology-block"}),
    Case("an unknown required level is denied, listing the configured levels",
         make_pod().gang().annotate("troupe.io/topology-required-level", "rack").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-required-level", "'rack'", LEVELS]),
    Case("an unknown preferred level is denied, listing the configured levels",
         make_pod().annotate("troupe.io/topology-preferred-level", "kubernetes.io/hostname").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-preferred-level", "'kubernetes.io/hostname'", LEVELS]),
    Case("a required and a preferred level together are denied",
         make_pod().annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-block")
         .annotate("troupe.io/topology-preferred-level", "cloud.google.com/gce-topology-host").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["cannot be set together"]),
    Case("levels come from the configuration",
         make_pod().annotate("troupe.io/topology-required-level", "example.com/rack").container().obj(),
         config=Config(topology_levels=("example.com/zone", "example.com/rack"), topology_fallback_levels=()),
         want_gates=[GATE]),
    Case("a pod created with a GKE topology gate and no Troupe key is left for the reconciler",
         make_pod().label("job-name", "train").gate("gke.io/topology-aware-auto-train").container().obj(),
         want_untouched=True),
    Case("a pod with a GKE topology gate and gang keys gets Troupe's gate as well",
         make_pod().gang().gate("gke.io/topology-aware-auto-train").container().obj(),
         want_gates=[{"name": "gke.io/topology-aware-auto-train"}, GATE]),
    Case("slices of a size that divides the gang size, at a configured level, gate the pod",
         make_pod().gang(size="8").annotate("troupe.io/topology-slice-size", "4")
         .annotate("troupe.io/topology-slice-required-level", "cloud.google.com/gce-topology-subblock")
         .container().obj(),
         want_gates=[GATE]),
    Case("nested slices, outermost first, down to one node, gate the pod",
         make_pod().gang(size="64").annotate("troupe.io/topology-slice-size", "32,4")
         .annotate("troupe.io/topology-slice-required-level",
                   "cloud.google.com/gce-topology-subblock,kubernetes.io/hostname")
         .annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-block")
         .annotate("troupe.io/topology-placement", "Balanced")
         .annotate("troupe.io/topology-exclusive-level", "cloud.google.com/gce-topology-subblock")
         .container().obj(),
         want_gates=[GATE]),
    Case("a gang size that is not a multiple of the slice size is denied, naming key and value",
         make_pod().gang(size="6").annotate("troupe.io/topology-slice-size", "4")
         .annotate("troupe.io/topology-slice-required-level", "cloud.google.com/gce-topology-subblock")
         .container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-slice-size", "'4'", "gang size 6"]),
    Case("a slice level that is not configured is denied, naming key and value",
         make_pod().gang(size="8").annotate("troupe.io/topology-slice-size", "4")
         .annotate("troupe.io/topology-slice-required-level", "rack").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-slice-required-level", "'rack'", LEVELS]),
    Case("a slice level above the gang's required level is denied, naming key and value",
         make_pod().gang(size="8").annotate("troupe.io/topology-slice-size", "4")
         .annotate("troupe.io/topology-slice-required-level", "cloud.google.com/gce-topology-block")
         .annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-subblock")
         .container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-slice-required-level", "'cloud.google.com/gce-topology-block'",
                          "at or below the gang's troupe.io/topology-required-level"]),
    Case("a slice size without a slice level is denied",
         make_pod().gang(size="8").annotate("troupe.io/topology-slice-size", "4").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-slice-required-level", "is required with"]),
    Case("nested sizes that do not divide are denied",
         make_pod().gang(size="24").annotate("troupe.io/topology-slice-size", "12,8")
         .annotate("troupe.io/topology-slice-required-level",
                   "cloud.google.com/gce-topology-subblock,cloud.google.com/gce-topology-host")
         .container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/topology-slice-size", "'12,8'", "divide"]),
    Case("more than three layers are denied",
         make_pod().gang(size="16").annotate("troupe.io/topology-slice-size", "16,8,4,2")
         .annotate("troupe.io/topology-slice-required-level", "a,b,c,d").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/topology-slice-size", "1 to 3 layers"]),
    Case("a placement other than Compact or Balanced is denied",
         make_pod().gang().annotate("troupe.io/topology-placement", "Spread").container().obj(),
         want_allowed=False, want_code=400,
         want_in_message=["troupe.io/topology-placement", "'Spread'", "Compact, Balanced"]),
    Case("an exclusive level that is not configured is denied",
         make_pod().gang().annotate("troupe.io/topology-exclusive-level", "zone").container().obj(),
         want_allowed=False, want_code=400, want_in_message=["troupe.io/topology-exclusive-level", "'zone'"]),
]

DEVICE_CASES = [
    Case("a group member is gated and every container and init container reads the device IDs",
         make_pod().annotate("deviceshare.io/group", "team-a").init_container("fetch").container("main")
         .container("sidecar").obj(),
         want_gates=[GATE],
         want_env={n: [nvidia_from_downward_api()] for n in ("fetch", "main", "sidecar")}),
    Case("one variable per configured resource, named by the seed's rule",
         make_pod().annotate("deviceshare.io/group", "team-a").container("main").obj(),
         config=Config(shared_device_resources=("nvidia.com/gpu", "amd.com/gpu", "huawei.com/Ascend910",
                                                "example.com/fpga")),
         want_env={"main": [nvidia_from_downward_api(), nvidia_from_downward_api("AMD_VISIBLE_DEVICES"),
                            nvidia_from_downward_api("ASCEND_VISIBLE_DEVICES"),
                            nvidia_from_downward_api("EXAMPLE_FPGA_VISIBLE_DEVICES")]}),
    Case("two resources that share a variable add it once",
         make_pod().annotate("deviceshare.io/group", "team-a").container("main").obj(),
         config=Config(shared_device_resources=("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")),
         want_env={"main": [nvidia_from_downward_api()]}),
    Case("existing variables are kept in order and the device variable is appended",
         make_pod().annotate("deviceshare.io/group", "team-a")
         .container("main", env=[{"name": "A", "value": "1"}]).container("empty", env=[]).obj(),
         want_env={"main": [{"name": "A", "value": "1"}, nvidia_from_downward_api()],
                   "empty": [nvidia_from_downward_api()]}),
    Case("a variable the user already set is not overwritten and a warning names it",
         make_pod().annotate("deviceshare.io/group", "team-a")
         .container("main", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]).container("other").obj(),
         want_env={"main": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                   "other": [nvidia_from_downward_api()]},
         want_warnings=["container main: env NVIDIA_VISIBLE_DEVICES is already set and was kept, so it "
                        "will not carry the devices of deviceshare.io/group"]),
    Case("a group member that is also a gang member gets both treatments",
         make_pod().gang("g", "2").annotate("deviceshare.io/group", "team-a").container("main").obj(),
         want_gates=[GATE], want_env={"main": [nvidia_from_downward_api()]},
         want_annotations={"troupe.io/gang-name": "g", "troupe.io/gang-size": "2", TIMEOUT: "30",
                           "deviceshare.io/group": "team-a"}),
    Case("with no shared device resources configured the member is only gated",
         make_pod().annotate("deviceshare.io/group", "team-a").container("main").obj(),
         config=Config(shared_device_resources=()), want_gates=[GATE], want_env={"main": None}),
    Case("a group name that is not a valid object name is denied, naming key and value",
         make_pod().annotate("deviceshare.io/group", "Team_A").container("main").obj(),
         want_allowed=False, want_code=400, want_in_message=["deviceshare.io/group", "'Team_A'"]),
]

UNTOUCHED_CASES = [
    Case("a pod without Troupe annotations passes untouched", make_pod().container().obj(),
         want_untouched=True),
    Case("a pod with only unrelated annotations passes untouched",
         make_pod().annotate("example.com/team", "a").annotate("troupe.io/unrelated", "x").container().obj(),
         want_untouched=True),
    Case("a pod in an excluded namespace passes untouched, even with bad gang keys",
         make_pod(namespace="kube-system").gang(size="0").container().obj(), want_untouched=True),
    Case("a configured excluded namespace is honoured",
         make_pod(namespace="batch-legacy").gang().container().obj(),
         config=Config(excluded_namespaces=("batch-legacy",)), want_untouched=True),
    Case("a mirror pod made by its kubelet passes untouched",
         make_pod().gang().annotate("kubernetes.io/config.mirror", "abc").container().obj(),
         review={"user": "system:node:gpu-0", "groups": ["system:nodes", "system:authenticated"]},
         want_untouched=True),
]

MALFORMED_CASES = [
    Case("a gang member without a spec is denied, naming spec",
         {"metadata": {"name": "x", "annotations": {"troupe.io/gang-name": "g", "troupe.io/gang-size": "1"}}},
         want_allowed=False, want_code=400, want_in_message=["spec"]),
    Case("annotations that are not a map are denied",
         {"metadata": {"name": "x", "annotations": ["troupe.io/gang-name"]}, "spec": {}},
         want_allowed=False, want_code=400, want_in_message=["metadata.annotations"]),
    Case("scheduling gates that are not a list are denied",
         {"metadata": {"annotations": {"troupe.io/gang-name": "g", "troupe.io/gang-size": "1"}},
          "spec": {"schedulingGates": "x"}},
         want_allowed=False, want_code=400, want_in_message=["spec.schedulingGates"]),
    Case("containers that are not a list are denied for a group member",
         {"metadata": {"annotations": {"deviceshare.io/group": "a"}}, "spec": {"containers": {"name": "c"}}},
         want_allowed=False, want_code=400, want_in_message=["spec.containers"]),
    Case("a container env that is not a list is denied for a group member",
         {"metadata": {"annotations": {"deviceshare.io/group": "a"}},
          "spec": {"containers": [{"name": "c", "env": "A=1"}]}},
         want_allowed=False, want_code=400, want_in_message=["spec.containers[0].env"]),
    Case("a non-string annotation value is denied naming the key",
         {"metadata": {"annotations": {"troupe.io/gang-name": "g", "troupe.io/gang-size": 3}}, "spec": {}},
         want_allowed=False, want_code=400, want_in_message=["troupe.io/gang-size", "'3'"]),
]


def _cases(cases: list[Case]) -> Any:
    return pytest.mark.parametrize("case", cases, ids=[c.name for c in cases])


@_cases(GANG_CASES)
def test_gang_members_are_gated_and_their_timeout_is_stamped(case: Case) -> None:
    assert_review_matches(case)


@_cases(BAD_GANG_CASES)
def test_bad_gang_input_is_denied_with_key_and_value(case: Case) -> None:
    assert_review_matches(case)


@_cases(TOPOLOGY_CASES)
def test_topology_requests_must_name_a_configured_level(case: Case) -> None:
    assert_review_matches(case)


@_cases(DEVICE_CASES)
def test_device_group_members_get_the_device_variables_from_the_downward_api(case: Case) -> None:
    assert_review_matches(case)


@_cases(UNTOUCHED_CASES)
def test_pods_outside_troupe_pass_untouched(case: Case) -> None:
    assert_review_matches(case)


@_cases(MALFORMED_CASES)
def test_malformed_pods_are_denied_not_crashed_on(case: Case) -> None:
    assert_review_matches(case)


ALLOWED = [c for c in GANG_CASES + TOPOLOGY_CASES + DEVICE_CASES + UNTOUCHED_CASES if c.want_allowed]


@_cases(ALLOWED)
def test_a_second_call_on_the_patched_pod_adds_nothing(case: Case) -> None:
    first = admit(case.pod, case.config, **case.review)
    again = admit(first.pod, case.config, **case.review)
    assert again.ops == []
    assert again.pod == first.pod
    assert again.allowed
    assert again.warnings == first.warnings, "only the user's own variables may warn, every time"


def test_the_timeout_op_replaces_an_existing_value_and_adds_a_missing_one() -> None:
    with_timeout = admit(make_pod().gang(timeout="500").container().obj())
    without = admit(make_pod().gang().container().obj())
    assert {"op": "replace", "path": "/metadata/annotations/troupe.io~1gang-schedule-timeout-seconds",
            "value": "100"} in with_timeout.ops
    assert {"op": "add", "path": "/metadata/annotations/troupe.io~1gang-schedule-timeout-seconds",
            "value": "30"} in without.ops


def test_a_timeout_already_canonical_produces_no_annotation_op() -> None:
    got = admit(make_pod().gang(timeout="45").container().obj())
    assert [op["path"] for op in got.ops] == ["/spec/schedulingGates", "/spec/tolerations"]


def test_a_dry_run_is_answered_exactly_like_a_real_request() -> None:
    pod = make_pod().gang(timeout="500").annotate("deviceshare.io/group", "a").container().obj()
    real = mutate(make_review(pod), Config())
    dry = mutate(make_review(pod, dry_run=True), Config())
    assert dry == real


Mutation = Callable[[dict[str, Any]], None]


@pytest.mark.parametrize(("name", "change"), [
    ("another resource", lambda r: r["request"].update(resource={"group": "apps", "version": "v1",
                                                                    "resource": "deployments"})),
    ("a subresource other than status", lambda r: r["request"].update(subResource="ephemeralcontainers")),
    ("an update of another subresource", lambda r: r["request"].update(
        operation="UPDATE", subResource="resize", oldObject=make_pod().obj())),
    ("a create of the status subresource", lambda r: r["request"].update(subResource="status")),
    ("a DELETE", lambda r: r["request"].update(operation="DELETE", object=None)),
    ("a CONNECT", lambda r: r["request"].update(operation="CONNECT")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_requests_that_are_not_pod_create_or_update_are_allowed_untouched(name: str, change: Mutation) -> None:
    review = make_review(make_pod().gang(size="0").container().obj())
    change(review)
    out = mutate(review, Config())["response"]
    assert out == {"uid": "uid-1", "allowed": True}


@pytest.mark.parametrize(("name", "review", "want_in_error"), [
    ("a list instead of an object", [1, 2], "JSON object"),
    ("another API version", {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                             "request": {"uid": "u"}}, "admission.k8s.io/v1"),
    ("no request", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
    ("no uid", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}, "request.uid"),
    ("a numeric uid", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": 7}}, "request.uid"),
])
def test_a_malformed_envelope_is_named_and_denied(name: str, review: Any, want_in_error: str) -> None:
    problem = envelope_error(review)
    assert problem is not None and want_in_error in problem
    out = mutate(review, Config())["response"]
    assert out["allowed"] is False and out["status"]["code"] == 400
    assert want_in_error in out["status"]["message"]


def test_a_create_without_an_object_is_denied() -> None:
    review = make_review(None)
    out = mutate(review, Config())["response"]
    assert out["allowed"] is False and "request.object" in out["status"]["message"]


def test_a_bug_in_decide_becomes_an_internal_error_denial(monkeypatch: pytest.MonkeyPatch) -> None:
    import webhook.admission as admission

    def boom(request: Any, config: Config, gang_mode_auto: bool = False) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr(admission, "admit", boom)
    out = mutate(make_review(make_pod().gang().obj()), Config())["response"]
    assert out["uid"] == "uid-1" and out["allowed"] is False
    assert out["status"]["code"] == 500 and "KeyError" in out["status"]["message"]
    assert "Traceback" not in out["status"]["message"]


def test_the_patch_is_base64_json_patch_that_jsonpatch_accepts() -> None:
    out = mutate(make_review(make_pod().gang().container().obj()), Config())
    assert out["response"]["patchType"] == "JSONPatch"
    ops = patch_of(out)
    assert all(op["op"] in ("add", "replace") for op in ops)
    assert ALICE  # the default requester is an ordinary user


@pytest.mark.parametrize(("key", "value"), [
    ("troupe.io/gang-size", "5" * 5000),
    ("troupe.io/gang-size", "4\n"),
    ("troupe.io/gang-name", "train\n"),
    ("deviceshare.io/group", "gpus\n"),
])
def test_a_huge_or_newline_ended_value_is_refused_with_400_naming_the_key_never_500(key, value):
    pod = make_pod().gang("train", "2").container().obj()
    pod["metadata"]["annotations"][key] = value
    got = admit(pod)
    assert (got.allowed, got.code) == (False, 400), got.message
    assert key in got.message and len(got.message) < 400, got.message
