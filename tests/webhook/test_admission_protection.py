"""Only the reconciler's identity may write the annotations that carry Troupe's decisions
(``troupe.contract.is_reserved_annotation``): on CREATE and on UPDATE (of the pod or of its
``pods/status``), add, change, remove; mirror pods included."""

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

NODE = "reconciler.troupe.io/node"
RANK = "reconciler.troupe.io/rank"
SELECTED = "deviceshare.io/selected-devices"
ENV = "deviceshare.io/env.NVIDIA_VISIBLE_DEVICES"


def member(**annotations: str) -> dict[str, Any]:
    """A gated gang member as the reconciler sees it after admission."""
    return gated_member("2", **annotations)


def keyed(**kw: str | None) -> dict[str, str | None]:
    """Annotation changes keyed by their real names (``node=`` -> ``reconciler.troupe.io/node``)."""
    names = {"node": NODE, "rank": RANK, "selected": SELECTED, "env": ENV}
    return {names[k]: v for k, v in kw.items()}


@dataclass
class Case:
    """An UPDATE or CREATE by ``user``; ``want_in_message`` must all appear in a denial."""

    name: str
    user: str
    operation: str
    pod: dict[str, Any]
    old: dict[str, Any] | None = None
    want_allowed: bool = True
    want_in_message: list[str] = field(default_factory=list)
    config: Config = field(default_factory=Config)
    sub_resource: str | None = None
    groups: list[str] | None = None


KUBELET = "system:node:gpu-0"
NODES = ["system:nodes", "system:authenticated"]
MIRROR = "kubernetes.io/config.mirror"
BEFORE = member(**{NODE: "node-a", RANK: "0"})

CASES = [
    Case("a user creating a pod that carries a node decision is denied",
         ALICE, "CREATE", make_pod().gang().container().annotate(NODE, "node-a").obj(),
         want_allowed=False, want_in_message=[NODE, "may set it", ALICE, RECONCILER]),
    Case("a user creating a pod with selected devices is denied",
         ALICE, "CREATE", make_pod().annotate(SELECTED, '{"nvidia.com/gpu":"0,1"}').container().obj(),
         want_allowed=False, want_in_message=[SELECTED, ALICE]),
    Case("a user creating a pod with a device env value is denied",
         ALICE, "CREATE", make_pod().annotate("deviceshare.io/group", "a").annotate(ENV, "0").container().obj(),
         want_allowed=False, want_in_message=[ENV]),
    Case("a user creating a plain pod with a reserved annotation is denied too",
         ALICE, "CREATE", make_pod().annotate(RANK, "3").container().obj(),
         want_allowed=False, want_in_message=[RANK]),
    Case("the reconciler creating a pod with its annotations is allowed",
         RECONCILER, "CREATE", make_pod().gang().annotate(NODE, "node-a").container().obj()),
    Case("a configured reconciler identity is the one allowed",
         "system:serviceaccount:ops:placer", "CREATE", make_pod().annotate(NODE, "node-a").container().obj(),
         config=Config(reconciler_username="system:serviceaccount:ops:placer")),
    Case("the default reconciler identity is refused when another one is configured",
         RECONCILER, "CREATE", make_pod().annotate(NODE, "node-a").container().obj(),
         config=Config(reconciler_username="system:serviceaccount:ops:placer"),
         want_allowed=False, want_in_message=[NODE, "system:serviceaccount:ops:placer"]),
    Case("a user adding a node decision on update is denied",
         ALICE, "UPDATE", with_annotations(member(), **keyed(node="node-b")), old=member(),
         want_allowed=False, want_in_message=[NODE, "may add it", ALICE]),
    Case("a user changing the node decision is denied",
         ALICE, "UPDATE", with_annotations(BEFORE, **keyed(node="node-b")), old=BEFORE,
         want_allowed=False, want_in_message=[NODE, "may change it"]),
    Case("a user removing the node decision is denied",
         ALICE, "UPDATE", with_annotations(BEFORE, **keyed(node=None)), old=BEFORE,
         want_allowed=False, want_in_message=[NODE, "may remove it"]),
    Case("a user removing every decision is told about each key",
         ALICE, "UPDATE", with_annotations(BEFORE, **keyed(node=None, rank=None)), old=BEFORE,
         want_allowed=False, want_in_message=[NODE, RANK]),
    Case("a user changing device env values is denied",
         ALICE, "UPDATE", with_annotations(member(**{ENV: "0,1"}), **keyed(env="2,3")),
         old=member(**{ENV: "0,1"}), want_allowed=False, want_in_message=[ENV, "may change it"]),
    Case("a user changing only a label of a placed pod is allowed",
         ALICE, "UPDATE", dict(BEFORE, metadata=dict(BEFORE["metadata"], labels={"team": "a"})), old=BEFORE),
    Case("a user changing an ordinary annotation of a placed pod is allowed",
         ALICE, "UPDATE", with_annotations(BEFORE, **{"example.com/note": "hi"}), old=BEFORE),
    Case("an unrelated update of an ordinary pod is allowed",
         ALICE, "UPDATE", make_pod().label("a", "b").container().obj(), old=make_pod().container().obj()),
    Case("the reconciler adding its decisions is allowed",
         RECONCILER, "UPDATE", with_annotations(member(), **keyed(node="node-a", rank="0", selected="{}")),
         old=member()),
    Case("the reconciler changing its decisions is allowed",
         RECONCILER, "UPDATE", with_annotations(BEFORE, **keyed(node="node-b")), old=BEFORE),
    Case("the reconciler removing its decisions is allowed",
         RECONCILER, "UPDATE", with_annotations(BEFORE, **keyed(node=None, rank=None)), old=BEFORE),
    Case("a user lifting Troupe's gate from a gang member is denied",
         ALICE, "UPDATE", make_pod().gang("g", "2", timeout="30").container().obj(), old=member(),
         want_allowed=False, want_in_message=["scheduling gate troupe.io/placement", "whole gang", "alice"]),
    Case("a user lifting another component's gate keeps Troupe's and is allowed",
         ALICE, "UPDATE", member(),
         old=make_pod().gang("g", "2", timeout="30").gate("example.com/quota").gate("troupe.io/placement").container().obj()),
    Case("the reconciler lifting Troupe's gate is allowed",
         RECONCILER, "UPDATE", make_pod().gang("g", "2", timeout="30").container().obj(), old=member()),
    Case("a user changing decisions in an excluded namespace is not Troupe's business",
         ALICE, "UPDATE", with_annotations(make_pod(namespace="kube-system").annotate(NODE, "a").obj(),
                                           **keyed(node="b")),
         old=make_pod(namespace="kube-system").annotate(NODE, "a").obj()),
    # pods/status: its strategy resets the spec but keeps metadata, so annotations change there too.
    Case("a user adding a node decision through pods/status is denied",
         ALICE, "UPDATE", with_annotations(member(), **keyed(node="node-b")), old=member(), sub_resource="status",
         want_allowed=False, want_in_message=[NODE, "may add it", ALICE]),
    Case("a user changing device env values through pods/status is denied",
         ALICE, "UPDATE", with_annotations(member(**{ENV: "0,1"}), **keyed(env="2,3")), old=member(**{ENV: "0,1"}),
         sub_resource="status", want_allowed=False, want_in_message=[ENV, "may change it"]),
    Case("a kubelet removing a decision through pods/status is denied",
         KUBELET, "UPDATE", with_annotations(BEFORE, **keyed(rank=None)), old=BEFORE, sub_resource="status",
         groups=NODES, want_allowed=False, want_in_message=[RANK, "may remove it", KUBELET]),
    Case("a kubelet's status update of a placed pod is allowed",
         KUBELET, "UPDATE", dict(BEFORE, status={"phase": "Running"}), old=BEFORE, sub_resource="status",
         groups=NODES),
    Case("the reconciler writing decisions through pods/status is allowed",
         RECONCILER, "UPDATE", with_annotations(member(), **keyed(node="node-a")), old=member(), sub_resource="status"),
    Case("a status update whose object lacks the gate is not a gate removal (the spec is reset)",
         ALICE, "UPDATE", make_pod().gang("g", "2", timeout="30").container().obj(), old=member(),
         sub_resource="status"),
    # Mirror pods: only a kubelet makes real ones.
    Case("a user's pod posing as a mirror pod with decisions is denied",
         ALICE, "CREATE", make_pod().gang().annotate(MIRROR, "abc").annotate(NODE, "node-a").container().obj(),
         want_allowed=False, want_in_message=[NODE, "may set it", ALICE]),
    Case("a kubelet's mirror pod carrying a decision is denied",
         KUBELET, "CREATE", make_pod().annotate(MIRROR, "abc").annotate(SELECTED, "{}").container().obj(),
         groups=NODES, want_allowed=False, want_in_message=[SELECTED, KUBELET]),
    Case("a node name outside the nodes group is not a kubelet",
         "system:node:gpu-0", "CREATE", make_pod().annotate(MIRROR, "abc").annotate(RANK, "0").container().obj(),
         want_allowed=False, want_in_message=[RANK]),
    Case("a user changing a decision of a mirror pod is denied",
         ALICE, "UPDATE", with_annotations(make_pod().annotate(MIRROR, "a").annotate(NODE, "x").obj(), **keyed(node="y")),
         old=make_pod().annotate(MIRROR, "a").annotate(NODE, "x").obj(), want_allowed=False, want_in_message=[NODE]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_only_the_reconciler_writes_troupe_decisions(case: Case) -> None:
    got = admit(case.pod, case.config, operation=case.operation, user=case.user, old=case.old,
                sub_resource=case.sub_resource, groups=case.groups)
    assert got.allowed == case.want_allowed, got.response
    if not case.want_allowed:
        assert got.code == 403
        assert got.response["status"]["reason"] == "Forbidden"
    for text in case.want_in_message:
        assert text in got.message, got.message


@pytest.mark.parametrize("user", [ALICE, RECONCILER])
def test_an_update_is_never_mutated(user: str) -> None:
    # A gang member whose gate was removed and timeout changed: UPDATE leaves it as it is.
    pod = make_pod().gang("g", "2", timeout="999").container().obj()
    got = admit(pod, operation="UPDATE", user=user, old=pod)
    assert got.allowed and got.ops == [] and got.pod == pod


def test_an_update_without_the_old_object_is_denied_as_bad_request() -> None:
    got = admit(member(), operation="UPDATE", user=ALICE, old=None)
    assert not got.allowed and got.code == 400 and "oldObject" in got.message


def test_a_denied_create_says_why_the_key_is_protected() -> None:
    got = admit(make_pod().annotate(NODE, "x").container().obj())
    assert got.message == (
        f"annotation {NODE}: only Troupe's reconciler ({RECONCILER}) may set it, because it records "
        f"Troupe's decisions; requested by {ALICE}"
    )
