"""A gang that does not fit asks for its whole room with one ProvisioningRequest, waits with
the request's state as its reason, and is placed whole on what it brings
(docs/decisions/080-provisioning-requests.md).

Nodes (8 GPUs each), one subblock ``b0-s0`` of four: a gang of eight whole nodes does not fit.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.actions import (
    DropCapacityRequest,
    Preempt,
    Release,
    RequestCapacity,
    Wait,
)
from reconciler.engine.decision.capacity import PROVISIONED_GRACE_SECONDS
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs import lifecycle
from reconciler.engine.gangs.capacity import (
    Ask,
    Condition,
    Observed,
    OwnerRef,
    ask_for,
    backoff,
    pod_sets,
    request_name,
)
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.gangs.queueing import Policy
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.timestamps import rfc3339
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config
from troupe.provisioning import (
    CLASS_POD_ANNOTATION,
    CONSUME_ANNOTATION,
    QUEUED_PROVISIONING,
    Provisioning,
)

CONFIG = Config()
NOW = 1_800_000_000.0
OWNER = OwnerRef("batch/v1", "Job", "train", "uid-job-train")
ASK = Ask(QUEUED_PROVISIONING, {"maxRunDurationSeconds": "3600"}, prefer_preemption=True, owner=OWNER)
NAME = request_name("default/train")


def nodes(count=4, subblock="b0-s0", first=0):
    return [make_node(f"n{i}").topology("b0", subblock, f"n{i}").allocatable(gpu=8)
            for i in range(first, first + count)]


def members(size=8, name="train", gpus=8, priority=100, selector=None):
    out = []
    for i in range(size):
        p = make_pod(f"{name}-{i}").gang(name, size).index(i).requests(gpu=gpus).priority(priority).gated()
        if selector:
            p = p.node_selector(*selector)
        out.append(p)
    return out


def decide_gang(snapshot, ask=ASK, request=None, now=NOW, policy=None, key="default/train"):
    gang = build_gang(key, group_by_gang(snapshot.pods.values(), CONFIG)[key], CONFIG, {})
    return decide(replace(gang, capacity=ask, capacity_request=request), snapshot, now, policy)


def observed(*conditions, attempt=1, owner=OWNER.uid, class_name=QUEUED_PROVISIONING):
    return Observed("default", NAME, "uid-req", (owner,), class_name, attempt, rfc3339(NOW - 60),
                    tuple(conditions), (f"{NAME}-abcde",))


def cond(kind, at=NOW - 30, message=""):
    return Condition(kind, "True", kind, message, rfc3339(at))


def test_a_gang_that_does_not_fit_asks_once_for_its_whole_room():
    d = decide_gang(snapshot_of(nodes(), members()))
    asked = d.find(RequestCapacity)
    assert d.rule is lifecycle.PROVISIONING and d.phase is Phase.UNSCHEDULABLE
    assert asked is not None and [type(a) for a in d.actions].count(RequestCapacity) == 1
    assert (asked.namespace, asked.name, asked.class_name, asked.owner, asked.attempt) == (
        "default", NAME, QUEUED_PROVISIONING, OWNER, 1)
    assert dict(asked.parameters) == {"maxRunDurationSeconds": "3600"}
    assert [(s.count, s.model.name) for s in asked.pod_sets] == [(8, "train-0")]
    assert d.reason.startswith(f"ProvisioningRequest {NAME}: asked for 8 pod(s) of 1 shape(s) ({QUEUED_PROVISIONING})")
    assert d.find(Wait) is not None


def test_the_name_is_the_gang_id_and_a_hash_a_dns_label():
    assert NAME.startswith("train-") and len(NAME) == len("train-") + 8
    long = request_name("ns/Very_Long.Gang:Name" + "x" * 80)
    assert len(long) <= 54 and long == long.lower() and all(c.isalnum() or c == "-" for c in long)
    assert request_name("a/x_y") != request_name("a/x-y")


def test_one_pod_set_per_distinct_shape_with_its_count():
    pods = [p.info() for p in members(3)] + [make_pod("train-3").requests(cpu="1").gated().info()]
    sets = pod_sets("default/train", pods)
    assert [(s.count, s.model.name) for s in sets] == [(3, "train-0"), (1, "train-3")]
    assert len({s.template for s in sets}) == 2 and all(s.template.startswith(NAME) for s in sets)


def test_the_state_of_the_request_is_the_reason():
    snap = snapshot_of(nodes(), members())
    for conditions, told in [((), "Pending"), ((cond("Accepted"),), "Accepted"),
                             ((cond("Accepted"), cond("Provisioned")), "Provisioned")]:
        d = decide_gang(snap, request=observed(*conditions))
        assert d.rule is lifecycle.PROVISIONING
        assert d.reason.startswith(f"ProvisioningRequest {NAME}: {told}"), d.reason
        assert d.find(RequestCapacity) is None


def test_failed_waits_with_the_message_then_asks_again_after_the_backoff():
    failed = observed(cond("Failed", at=NOW - 1, message="no capacity in zone"), attempt=2)
    d = decide_gang(snapshot_of(nodes(), members()), request=failed)
    assert d.reason.startswith(f"ProvisioningRequest {NAME}: Failed: no capacity in zone; asking again in ")
    assert d.find(RequestCapacity) is None and d.recheck_at == NOW - 1 + backoff(2)
    later = decide_gang(snapshot_of(nodes(), members()), request=failed, now=NOW - 1 + backoff(2))
    again = later.find(RequestCapacity)
    assert again is not None and (again.attempt, again.replaces, again.replaced_templates) == (
        3, "uid-req", (f"{NAME}-abcde",))


def test_an_expired_booking_makes_a_new_request():
    expired = observed(cond("Provisioned", at=NOW - 900), cond("BookingExpired", at=NOW - 300))
    d = decide_gang(snapshot_of(nodes(), members()), request=expired)
    assert "BookingExpired" in d.reason and d.find(RequestCapacity) is not None


def test_provisioned_nodes_are_used_whole_and_the_members_consume_the_request():
    snap = snapshot_of(nodes() + nodes(4, "b0-s1", 4), members())
    d = decide_gang(snap, request=observed(cond("Provisioned")))
    release = d.find(Release)
    assert d.phase is Phase.PLACED and release is not None and len(release.members) == 8
    assert all(dict(m.annotations) == {CONSUME_ANNOTATION: NAME, CLASS_POD_ANNOTATION: QUEUED_PROVISIONING}
               for m in release.members)
    assert d.find(DropCapacityRequest) is None  # kept until the gang is bound


def test_provisioned_nodes_that_do_not_take_the_gang_are_told_then_asked_again():
    required = [p.annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-subblock")
                for p in members()]
    snap = snapshot_of(nodes() + nodes(4, "b0-s1", 4), required)  # 8 nodes, but in two subblocks
    within = decide_gang(snap, request=observed(cond("Provisioned", at=NOW - 10)))
    assert within.reason.startswith(f"ProvisioningRequest {NAME}: Provisioned")
    assert within.recheck_at == NOW - 10 + PROVISIONED_GRACE_SECONDS
    at = NOW - 10 + PROVISIONED_GRACE_SECONDS
    past = decide_gang(snap, request=observed(cond("Provisioned", at=NOW - 10)), now=at)
    assert "Provisioned, but the nodes it added do not take the gang; asking again in 10s" in past.reason
    retried = decide_gang(snap, request=observed(cond("Provisioned", at=NOW - 10)), now=at + backoff(1))
    assert retried.find(RequestCapacity) is not None


def test_a_gang_placed_while_its_request_is_live_consumes_it_before_it_says_provisioned():
    d = decide_gang(snapshot_of(nodes(8), members()), request=observed(cond("Accepted")))
    release = d.find(Release)
    assert d.phase is Phase.PLACED and release is not None and d.find(DropCapacityRequest) is None
    assert all(m.annotations[CONSUME_ANNOTATION] == NAME for m in release.members)


def test_a_gang_placed_without_its_request_deletes_it_and_a_bound_gang_too():
    d = decide_gang(snapshot_of(nodes(8), members()), request=observed(cond("Failed", at=NOW - 1)))
    assert d.phase is Phase.PLACED and d.find(DropCapacityRequest) == DropCapacityRequest(
        "default", NAME, "uid-req", "the gang was placed without it", (f"{NAME}-abcde",))
    assert all(not m.annotations for m in d.find(Release).members)
    bound = [make_pod(f"train-{i}").gang("train", 2).index(i).requests(gpu=8).on(f"n{i}") for i in range(2)]
    b = decide_gang(snapshot_of(nodes(), bound), request=observed(cond("Provisioned")))
    assert b.rule is lifecycle.ALL_RELEASED and b.find(DropCapacityRequest) is not None


def test_a_forged_request_is_not_consumed():
    for forged in (observed(cond("Provisioned"), owner="uid-other"),
                   observed(cond("Provisioned"), class_name="check-capacity.autoscaling.x-k8s.io")):
        d = decide_gang(snapshot_of(nodes() + nodes(4, "b0-s1", 4), members()), request=forged)
        release = d.find(Release)
        assert release is not None and all(not m.annotations for m in release.members)  # placed, not consuming it
        assert d.find(DropCapacityRequest) is None  # and not deleted either
        waiting = decide_gang(snapshot_of(nodes(), members()), request=forged)
        assert "is not this gang's" in waiting.reason and waiting.find(RequestCapacity) is None


def test_a_gang_that_fits_or_cannot_be_read_asks_nothing():
    assert decide_gang(snapshot_of(nodes(8), members())).find(RequestCapacity) is None
    unreadable = [p.annotate("troupe.io/topology-required-level", "example.com/not-a-level") for p in members()]
    assert decide_gang(snapshot_of(nodes(), unreadable)).find(RequestCapacity) is None
    pool = decide_gang(snapshot_of(nodes(), members(selector=("pool", "new"))))  # the autoscaler may make that pool
    assert pool.find(RequestCapacity) is not None
    assert decide_gang(snapshot_of(nodes(), members()), ask=None).rule is lifecycle.UNPLACED
    assert decide_gang(snapshot_of(nodes(), members()), ask=replace(ASK, owner=None)).rule is lifecycle.UNPLACED


def test_preemption_first_or_second_as_configured():
    low = [make_pod(f"low-{i}").gang("low", 4).index(i).requests(gpu=8).priority(0).on(f"n{i}") for i in range(4)]
    snap = snapshot_of(nodes(), low + members(4))
    first = decide_gang(snap, policy=Policy("atomic"))
    assert first.find(Preempt) is not None and first.find(RequestCapacity) is None
    second = decide_gang(snap, ask=replace(ASK, prefer_preemption=False), policy=Policy("atomic"))
    assert second.find(RequestCapacity) is not None and second.find(Preempt) is None


def test_ask_for_follows_the_namespace_selector():
    config = Provisioning(match_labels=(("team", "ml"),), prefer_preemption=False)
    assert ask_for(None, {"team": "ml"}, OWNER) is None
    assert ask_for(config, {"team": "web"}, OWNER) is None
    assert ask_for(config, {"team": "ml"}, OWNER) == Ask(config.class_name, {}, False, OWNER)


@settings(max_examples=40, deadline=None)
@given(node_count=st.integers(0, 6), size=st.integers(1, 6), gpus=st.sampled_from([2, 4, 8]),
       state=st.sampled_from([None, "Accepted", "Provisioned", "Failed", "BookingExpired"]))
def test_at_most_one_request_per_gang_and_none_for_a_gang_that_fits(node_count, size, gpus, state):
    snap = snapshot_of(nodes(node_count), members(size, gpus=gpus))
    request = None if state is None else observed(cond(state, at=NOW - 1000))
    d = decide_gang(snap, request=request)
    asked = [a for a in d.actions if isinstance(a, RequestCapacity)]
    assert len(asked) <= 1
    if d.find(Release) is not None:
        assert not asked
    if asked:
        assert sum(s.count for s in asked[0].pod_sets) == size and asked[0].name == NAME
