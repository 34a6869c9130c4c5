"""Troupe's keys (gang keys of the configured prefix, topology level requests,
``deviceshare.io/group``) are fixed when the pod is created: an UPDATE that adds, changes or
removes one is denied naming the key and both values (``docs/decisions/013-update-rules.md``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.webhook_builders import (
    ALICE,
    RECONCILER,
    admit,
    gated_member,
    make_pod,
    with_annotations,
)
from troupe.config import Config

PFN = Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang")
SIZE = "troupe.io/gang-size"
LEVEL = "troupe.io/topology-required-level"
HOST = "cloud.google.com/gce-topology-host"


def gated(**annotations: str) -> dict[str, Any]:
    return gated_member("4", **annotations)


def changed(pod: dict[str, Any], **changes: str | None) -> dict[str, Any]:
    """``pod`` with annotations (real keys, via a dict) set, or removed when None."""
    return with_annotations(pod, **changes)


def released(pod: dict[str, Any]) -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "schedulingGates": []}}


@dataclass
class Case:
    name: str
    old: dict[str, Any]
    new: dict[str, Any]
    want_allowed: bool
    want_in_message: list[str] = field(default_factory=list)
    user: str = ALICE
    config: Config = field(default_factory=Config)
    sub_resource: str | None = None


CASES = [
    Case("the size of a waiting member cannot change", gated(), changed(gated(), **{SIZE: "8"}), False,
         [SIZE, "from '4' to '8'", "create it again"]),
    Case("a malformed size cannot replace a valid one", gated(), changed(gated(), **{SIZE: "eight"}), False,
         [SIZE, "'eight'"]),
    Case("the gang name cannot be removed", gated(), changed(gated(), **{"troupe.io/gang-name": None}), False,
         ["troupe.io/gang-name", "cannot be removed", "'g'"]),
    Case("a minimum size cannot be added later", gated(), changed(gated(), **{"troupe.io/gang-min-size": "2"}), False,
         ["troupe.io/gang-min-size", "cannot be added", "'2'"]),
    Case("a failure policy cannot change", gated(**{"troupe.io/gang-failure-policy": "ReplaceMember"}),
         changed(gated(**{"troupe.io/gang-failure-policy": "ReplaceMember"}),
                 **{"troupe.io/gang-failure-policy": "RestartGang"}), False,
         ["troupe.io/gang-failure-policy", "from 'ReplaceMember' to 'RestartGang'"]),
    Case("a topology level cannot be added later", gated(), changed(gated(), **{LEVEL: HOST}), False,
         [LEVEL, "cannot be added", HOST]),
    Case("a bad topology level cannot be added later either", gated(), changed(gated(), **{LEVEL: "rack"}), False,
         [LEVEL, "'rack'"]),
    Case("a slice size cannot change", gated(**{"troupe.io/topology-slice-size": "2"}),
         changed(gated(**{"troupe.io/topology-slice-size": "2"}), **{"troupe.io/topology-slice-size": "4"}), False,
         ["troupe.io/topology-slice-size", "from '2' to '4'"]),
    Case("an exclusive level cannot be added later", gated(),
         changed(gated(), **{"troupe.io/topology-exclusive-level": HOST}), False,
         ["troupe.io/topology-exclusive-level", "cannot be added"]),
    Case("the device group cannot change", gated(**{"deviceshare.io/group": "a"}),
         changed(gated(**{"deviceshare.io/group": "a"}), **{"deviceshare.io/group": "b"}), False,
         ["deviceshare.io/group", "from 'a' to 'b'"]),
    Case("a released member's gang keys are fixed too", released(gated()),
         changed(released(gated()), **{"troupe.io/gang-schedule-timeout-seconds": "90"}), False,
         ["troupe.io/gang-schedule-timeout-seconds"]),
    Case("gang keys cannot be put on a running pod that never had them", make_pod().container().obj(),
         changed(make_pod().container().obj(), **{"troupe.io/gang-name": "g", SIZE: "2"}), False,
         ["troupe.io/gang-name", SIZE]),
    Case("a change through pods/status is denied as well", gated(), changed(gated(), **{SIZE: "2"}), False, [SIZE],
         sub_resource="status"),
    Case("the configured prefix's keys are the fixed ones", gated(),
         changed(gated(), **{"gang-scheduling.preferred.jp/gang-size": "2"}), False,
         ["gang-scheduling.preferred.jp/gang-size"], config=PFN),
    Case("under another prefix, the default keys are ordinary annotations", gated(),
         changed(gated(), **{SIZE: "8"}), True, config=PFN),
    Case("other annotations of a waiting member may change", gated(),
         changed(gated(), **{"example.com/owner": "team-b"}), True),
    Case("an update that keeps every key is allowed", gated(), changed(gated()), True),
    Case("the reconciler is not checked (it never changes them)", gated(), changed(gated(), **{SIZE: "8"}), True,
         user=RECONCILER),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_troupe_keys_are_fixed_at_creation(case: Case) -> None:
    got = admit(case.new, case.config, operation="UPDATE", old=case.old, user=case.user,
                sub_resource=case.sub_resource)
    assert got.allowed == case.want_allowed, got.response
    if not case.want_allowed:
        assert got.code == 400
    for text in case.want_in_message:
        assert text in got.message, got.message
    assert got.ops == []
