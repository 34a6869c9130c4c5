"""The plugins that read only the node match kube-scheduler (NodeUnschedulable,
TaintToleration, NodeAffinity), and NodeResourcesFit names every resource short."""

import pytest

from reconciler.engine.filters import noderesources
from reconciler.engine.filters.nodeaffinity import AFFINITY_MISMATCH, SELECTOR_MISMATCH
from reconciler.engine.filters.nodeunschedulable import NOT_READY, UNSCHEDULABLE
from reconciler.engine.filters.profile import node_status, rank
from reconciler.engine.filters.status import Code
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.selectors import parse_node_filter
from testbed.engine_builders import expr, make_node, make_pod


def reason(node_builder, pod_builder):
    node, pod = node_builder.info(), pod_builder.build()
    flt = parse_node_filter(pod["spec"])
    status = node_status(flt, node)
    if status is None:
        return None
    assert len(status.reasons) == 1 and status.code is Code.UNRESOLVABLE
    return status.reasons[0]


TAINT_CASES = [
    ("a NoSchedule taint keeps an intolerant pod off",
     make_node("n").taint("dedicated", "infer"), make_pod("p"), "untolerated taint dedicated=infer"),
    ("a NoExecute taint keeps it off too",
     make_node("n").taint("gpu", effect="NoExecute"), make_pod("p"), "untolerated taint gpu"),
    ("PreferNoSchedule only scores, so it is ignored",
     make_node("n").taint("spot", "true", "PreferNoSchedule"), make_pod("p"), None),
    ("Exists without a key tolerates every taint",
     make_node("n").taint("a", "1").taint("b", effect="NoExecute"), make_pod("p").tolerate(operator="Exists"), None),
    ("Exists with a key tolerates any value of it",
     make_node("n").taint("dedicated", "infer"), make_pod("p").tolerate("dedicated", "Exists"), None),
    ("Equal needs the same value",
     make_node("n").taint("dedicated", "infer"), make_pod("p").tolerate("dedicated", value="train"),
     "untolerated taint dedicated=infer"),
    ("Equal with the same value tolerates",
     make_node("n").taint("dedicated", "infer"), make_pod("p").tolerate("dedicated", value="infer"), None),
    ("an empty operator means Equal",
     make_node("n").taint("dedicated", "infer"), make_pod("p").tolerate("dedicated", operator="", value="infer"), None),
    ("a toleration for another effect does not tolerate",
     make_node("n").taint("gpu", effect="NoExecute"), make_pod("p").tolerate("gpu", "Exists", effect="NoSchedule"),
     "untolerated taint gpu"),
    ("an unknown operator tolerates nothing",
     make_node("n").taint("gpu"), make_pod("p").tolerate("gpu", "Gte", value="1"), "untolerated taint gpu"),
    ("every taint must be tolerated, the first one that is not is named",
     make_node("n").taint("a", "1").taint("b", "2"), make_pod("p").tolerate("a", "Exists"), "untolerated taint b=2"),
]


@pytest.mark.parametrize(("case", "node", "pod", "want"), TAINT_CASES, ids=[c[0] for c in TAINT_CASES])
def test_taints_and_tolerations(case, node, pod, want):
    assert reason(node, pod) == want


ZONE = "topology.kubernetes.io/zone"
AFFINITY_CASES = [
    ("In matches a listed value", [{"matchExpressions": [expr(ZONE, "In", "a", "b")]}], True),
    ("In does not match an unlisted value", [{"matchExpressions": [expr(ZONE, "In", "c")]}], False),
    ("In does not match a missing label", [{"matchExpressions": [expr("missing", "In", "a")]}], False),
    ("NotIn matches an unlisted value", [{"matchExpressions": [expr(ZONE, "NotIn", "c")]}], True),
    ("NotIn matches a missing label", [{"matchExpressions": [expr("missing", "NotIn", "a")]}], True),
    ("NotIn does not match a listed value", [{"matchExpressions": [expr(ZONE, "NotIn", "a")]}], False),
    ("Exists matches a present label", [{"matchExpressions": [expr(ZONE, "Exists")]}], True),
    ("Exists does not match a missing label", [{"matchExpressions": [expr("missing", "Exists")]}], False),
    ("DoesNotExist matches a missing label", [{"matchExpressions": [expr("missing", "DoesNotExist")]}], True),
    ("DoesNotExist does not match a present label", [{"matchExpressions": [expr(ZONE, "DoesNotExist")]}], False),
    ("Gt compares integers", [{"matchExpressions": [expr("gpus", "Gt", "4")]}], True),
    ("Gt is strict", [{"matchExpressions": [expr("gpus", "Gt", "8")]}], False),
    ("Lt compares integers, not strings", [{"matchExpressions": [expr("gpus", "Lt", "10")]}], True),
    ("Gt on a label that is not an integer never matches", [{"matchExpressions": [expr(ZONE, "Gt", "1")]}], False),
    ("Lt on a missing label never matches", [{"matchExpressions": [expr("missing", "Lt", "1")]}], False),
    ("expressions of a term are ANDed",
     [{"matchExpressions": [expr(ZONE, "In", "a"), expr("gpus", "Lt", "8")]}], False),
    ("terms are ORed",
     [{"matchExpressions": [expr(ZONE, "In", "x")]}, {"matchExpressions": [expr("gpus", "In", "8")]}], True),
    ("matchFields matches the node name", [{"matchFields": [expr("metadata.name", "In", "n1")]}], True),
    ("matchFields NotIn excludes the node", [{"matchFields": [expr("metadata.name", "NotIn", "n1")]}], False),
    ("an empty term matches no node", [{}], False),
    ("no terms at all match no node", [], False),
]


@pytest.mark.parametrize(("case", "terms", "want_match"), AFFINITY_CASES, ids=[c[0] for c in AFFINITY_CASES])
def test_required_node_affinity(case, terms, want_match):
    node = make_node("n1").label(ZONE, "a").label("gpus", "8")
    pod = make_pod("p").affinity(*terms)
    assert reason(node, pod) == (None if want_match else AFFINITY_MISMATCH)


def test_a_node_selector_needs_every_pair():
    node = make_node("n1").label("pool", "gpu").label("zone", "a")
    assert reason(node, make_pod("p").node_selector("pool", "gpu")) is None
    assert reason(node, make_pod("p").node_selector("pool", "gpu").node_selector("zone", "b")) == SELECTOR_MISMATCH


def test_filters_run_in_kube_schedulers_order_and_the_first_failure_is_the_reason():
    pod = make_pod("p").node_selector("pool", "none")
    assert reason(make_node("n").not_ready().unschedulable().taint("t"), pod) == NOT_READY
    assert reason(make_node("n").unschedulable().taint("t"), pod) == UNSCHEDULABLE
    assert reason(make_node("n").taint("t"), pod) == "untolerated taint t"
    assert reason(make_node("n"), pod) == SELECTOR_MISMATCH


def test_every_short_resource_is_named_and_pods_are_too_many_pods():
    free = {"cpu": 1000, "memory": 10, "pods": 0, "nvidia.com/gpu": 8}
    want = {"cpu": 2000, "memory": 5, "pods": 1, "nvidia.com/gpu": 9, "example.com/fpga": 1}
    reasons = ["insufficient cpu", "too many pods", "insufficient example.com/fpga", "insufficient nvidia.com/gpu"]
    assert noderesources.insufficient(free, want) == reasons
    status = noderesources.check(free, want)
    assert status is not None and status.reasons == tuple(reasons) and status.code is Code.UNSCHEDULABLE
    assert status.plugin == "NodeResourcesFit"
    assert noderesources.check(free, want) is status, "one status per set of resources short"
    assert noderesources.insufficient(free, {"cpu": 1000, "pods": 0}) == []
    assert noderesources.check(free, {"cpu": 1000, "pods": 0}) is None


def test_a_claim_allocated_on_another_node_is_unresolvable_and_devices_short_are_not():
    claim = "resourceclaim/team-a/gpus"
    pinned = noderesources.check({}, {claim: 1})
    assert pinned is not None and pinned.code is Code.UNRESOLVABLE and pinned.reasons == (f"insufficient {claim}",)
    devices = noderesources.check({"devices/gpu.example.com": 1}, {"devices/gpu.example.com": 2})
    assert devices is not None and devices.code is Code.UNSCHEDULABLE


def test_reasons_sort_in_profile_order():
    given = [("NodeResourcesFit", "insufficient nvidia.com/gpu"), ("NodeResourcesFit", "insufficient cpu"),
             ("NodeAffinity", AFFINITY_MISMATCH), ("TaintToleration", "untolerated taint b"),
             ("TaintToleration", "untolerated taint a"), ("NodeUnschedulable", NOT_READY),
             ("NodeAffinity", SELECTOR_MISMATCH), ("NodeUnschedulable", UNSCHEDULABLE),
             ("NodeResourcesFit", "too many pods")]
    assert [r for _, r in sorted(given, key=lambda t: rank(*t))] == [
        NOT_READY, UNSCHEDULABLE, "untolerated taint a", "untolerated taint b", SELECTOR_MISMATCH,
        AFFINITY_MISMATCH, "insufficient cpu", "too many pods", "insufficient nvidia.com/gpu",
    ]


PARSE_ERRORS = [
    ("an unknown operator",
     make_pod("p").affinity({"matchExpressions": [expr("a", "Like", "x")]}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator: unknown operator 'Like'"),
    ("Gt with two values",
     make_pod("p").affinity({"matchExpressions": [expr("a", "Gt", "1", "2")]}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values: Gt needs exactly one value"),
    ("a selector value YAML read as a number",
     make_pod("p").node_selector("gpus", 8), "spec.nodeSelector.gpus: expected a string, got int"),
]


@pytest.mark.parametrize(("case", "pod", "want"), PARSE_ERRORS, ids=[c[0] for c in PARSE_ERRORS])
def test_a_malformed_filter_names_its_field(case, pod, want):
    with pytest.raises(ObjectError) as err:
        parse_node_filter(pod.build()["spec"])
    assert str(err.value) == want
