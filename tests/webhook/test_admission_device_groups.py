"""Two rules for pods of a SharedDeviceGroup (``deviceshare.io/group``): they may not request
a shared resource themselves, and they get the toleration of the shared-node taint
``deviceshare.io/mode=shared:NoSchedule`` (once, whatever they already tolerate)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.webhook_builders import PodBuilder, admit, make_pod
from troupe import contract
from troupe.config import Config

SHARED_TOLERATION = {"key": "deviceshare.io/mode", "operator": "Equal", "value": "shared", "effect": "NoSchedule"}
#: Every pod Troupe gates tolerates its nominated-node taint (docs/decisions/033).
NOMINATED_TOLERATION = {"key": "troupe.io/nominated", "operator": "Exists", "effect": "NoSchedule"}
GPUS = {"limits": {"nvidia.com/gpu": "2"}}


def group_pod() -> PodBuilder:
    return make_pod().annotate("deviceshare.io/group", "team-a")


@dataclass
class Case:
    name: str
    pod: dict[str, Any]
    config: Config = field(default_factory=Config)
    want_allowed: bool = True
    want_in_message: list[str] = field(default_factory=list)
    want_tolerations: list[dict[str, Any]] | None = None


REQUEST_CASES = [
    Case("a container asking for GPUs itself is denied, naming it and the resource",
         group_pod().container("trainer", resources=GPUS).obj(),
         want_allowed=False, want_in_message=["container trainer", "resources.limits[nvidia.com/gpu]", "'2'",
                                              "deviceshare.io/group", "other devices than the group's"]),
    Case("a request without a limit is denied too",
         group_pod().container("main", resources={"requests": {"nvidia.com/gpu": "1"}}).obj(),
         want_allowed=False, want_in_message=["container main", "resources.requests[nvidia.com/gpu]"]),
    Case("an init container asking for GPUs is denied, named as an init container",
         group_pod().init_container("warmup", resources=GPUS).container("main").obj(),
         want_allowed=False, want_in_message=["init container warmup", "nvidia.com/gpu"]),
    Case("pod-level resources asking for GPUs are denied",
         group_pod().pod_resources({"limits": {"nvidia.com/gpu": "1"}}).container("main").obj(),
         want_allowed=False, want_in_message=["the pod-level resources", "nvidia.com/gpu"]),
    Case("every offending container is named in one answer",
         group_pod().container("a", resources=GPUS).container("b", resources=GPUS).obj(),
         want_allowed=False, want_in_message=["container a", "container b"]),
    Case("a container without a name is named by its index",
         dict(group_pod().obj(), spec={"containers": [{"resources": GPUS}]}),
         want_allowed=False, want_in_message=["container #0"]),
    Case("a configured shared resource is the one checked",
         group_pod().container("main", resources={"limits": {"example.com/fpga": 1}}).obj(),
         config=Config(shared_device_resources=("example.com/fpga",)),
         want_allowed=False, want_in_message=["example.com/fpga", "= 1"]),
    Case("a zero request of a shared resource is harmless",
         group_pod().container("main", resources={"limits": {"nvidia.com/gpu": "0"}, "requests": {"nvidia.com/gpu": 0}})
         .obj(), want_tolerations=[SHARED_TOLERATION]),
    Case("cpu, memory and unshared devices are the pod's own business",
         group_pod().container("main", resources={"limits": {"cpu": "2", "memory": "1Gi", "example.com/nic": "1"}})
         .obj(), want_tolerations=[SHARED_TOLERATION]),
    Case("a pod outside any group may request GPUs",
         make_pod().gang().container("main", resources=GPUS).obj()),
]

TOLERATION_CASES = [
    Case("a group pod gets the shared-node toleration", group_pod().container().obj(),
         want_tolerations=[SHARED_TOLERATION]),
    Case("it is added after the pod's own tolerations",
         group_pod().toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule").container().obj(),
         want_tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                           SHARED_TOLERATION]),
    Case("a pod that already has it is not given a second one",
         group_pod().toleration(**SHARED_TOLERATION).container().obj(), want_tolerations=[SHARED_TOLERATION]),
    Case("an Equal toleration without an effect already tolerates it",
         group_pod().toleration(key="deviceshare.io/mode", value="shared").container().obj(),
         want_tolerations=[{"key": "deviceshare.io/mode", "value": "shared"}]),
    Case("an Exists toleration of the key already tolerates it",
         group_pod().toleration(key="deviceshare.io/mode", operator="Exists").container().obj(),
         want_tolerations=[{"key": "deviceshare.io/mode", "operator": "Exists"}]),
    Case("a toleration of every taint already tolerates it",
         group_pod().toleration(operator="Exists").container().obj(), want_tolerations=[{"operator": "Exists"}]),
    Case("a toleration of another value does not",
         group_pod().toleration(key="deviceshare.io/mode", value="exclusive", effect="NoSchedule").container().obj(),
         want_tolerations=[{"key": "deviceshare.io/mode", "value": "exclusive", "effect": "NoSchedule"},
                           SHARED_TOLERATION]),
    Case("a toleration of another effect does not",
         group_pod().toleration(key="deviceshare.io/mode", operator="Exists", effect="NoExecute").container().obj(),
         want_tolerations=[{"key": "deviceshare.io/mode", "operator": "Exists", "effect": "NoExecute"},
                           SHARED_TOLERATION]),
    Case("tolerations that are not a list are refused, naming the field",
         dict(group_pod().obj(), spec={"containers": [], "tolerations": {"key": "x"}}),
         want_allowed=False, want_in_message=["spec.tolerations"]),
    Case("a gang member outside any group gets no shared-node toleration", make_pod().gang().container().obj()),
]


@pytest.mark.parametrize("case", REQUEST_CASES + TOLERATION_CASES, ids=lambda c: c.name)
def test_device_group_pods(case: Case) -> None:
    got = admit(case.pod, case.config)
    assert got.allowed == case.want_allowed, got.response
    if not case.want_allowed:
        assert got.code == 400
    for text in case.want_in_message:
        assert text in got.message, got.message
    if case.want_allowed:
        tolerations = got.pod["spec"].get("tolerations") or []
        assert ([t for t in tolerations if t != NOMINATED_TOLERATION] or None) == case.want_tolerations
        everything = {"operator": "Exists"} in tolerations
        assert tolerations.count(NOMINATED_TOLERATION) == (0 if everything else 1), tolerations


def test_the_toleration_matches_the_contracts_taint() -> None:
    t = contract.device_shared_toleration()
    assert (t["key"], t["value"], t["effect"]) == (
        contract.DEVICE_SHARED_TAINT_KEY, contract.DEVICE_SHARED_TAINT_VALUE, contract.DEVICE_SHARED_TAINT_EFFECT)
    assert t["key"] == contract.DEVICE_MODE_LABEL


def test_reinvocation_adds_no_second_toleration() -> None:
    once = admit(group_pod().container().obj())
    again = admit(once.pod)
    assert again.allowed and again.ops == [] and again.pod["spec"]["tolerations"] == [NOMINATED_TOLERATION,
                                                                                       SHARED_TOLERATION]
