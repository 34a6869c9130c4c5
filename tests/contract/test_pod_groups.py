"""The group objects of the four sources read into one spec (troupe/podgroups.py,
docs/decisions/056-pod-groups.md): every field, and every bad value naming the group,
the field and the value."""

from __future__ import annotations

from typing import Any

import pytest

from troupe.config import Config, ConfigError, from_mapping
from troupe.contract import TopologyRequest
from troupe.podgroups import (
    COSCHEDULING,
    KAI,
    VOLCANO,
    WORKLOAD,
    PodGroupRef,
    PodGroupSpec,
    constrained,
    parse_pod_group,
    pod_group_ref,
    source_of,
    volcano_tier_level,
)

BLOCK, SUBBLOCK, HOST = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock", \
    "cloud.google.com/gce-topology-host"
CONFIG = Config()


def group(spec: Any, name: str = "train", namespace: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


# --- upstream (KEP-4671) -------------------------------------------------------------------
def test_an_upstream_gang_reads_its_min_count_topology_disruption_mode_and_priority() -> None:
    spec = parse_pod_group(WORKLOAD, group({
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": SUBBLOCK}]},
        "disruptionMode": {"all": {}}, "priorityClassName": "high", "priority": 1000}), CONFIG)
    assert (spec.ref, spec.namespace, spec.min_count, spec.required_level, spec.preferred_level) == \
        (PodGroupRef(WORKLOAD, "train"), "team", 4, SUBBLOCK, None)
    assert (spec.whole_victim, spec.priority, spec.priority_class_name, spec.error) == (True, 1000, "high", "")
    assert spec.gang


def test_a_basic_upstream_group_is_no_gang() -> None:
    spec = parse_pod_group(WORKLOAD, group({"schedulingPolicy": {"basic": {}}}), CONFIG)
    assert (spec.min_count, spec.gang, spec.error) == (None, False, "")


@pytest.mark.parametrize("mode, whole", [({"single": {}}, False), ({"all": {}}, True), ("PodGroup", True),
                                         ("Pod", False), (None, False)])
def test_the_disruption_mode_reads_as_v1beta1_struct_and_v1alpha2_string(mode: Any, whole: bool) -> None:
    spec = parse_pod_group(WORKLOAD, group({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": mode}),
                           CONFIG)
    assert (spec.whole_victim, spec.error) == (whole, "")


def test_a_hostname_topology_key_is_one_node() -> None:
    spec = parse_pod_group(WORKLOAD, group({"schedulingPolicy": {"gang": {"minCount": 2}},
                                            "schedulingConstraints": {"topology": [{"key": "kubernetes.io/hostname"}]}}),
                           CONFIG)
    assert spec.required_level == "kubernetes.io/hostname"


PREFIX = "PodGroup team/train (scheduling.k8s.io): "


@pytest.mark.parametrize("spec, want", [
    ({"schedulingPolicy": {"gang": {"minCount": 0}}},
     "spec.schedulingPolicy.gang.minCount: must be an integer from 1 to 2147483647, got 0"),
    ({"schedulingPolicy": {"gang": {"minCount": "4"}}},
     "spec.schedulingPolicy.gang.minCount: must be an integer from 1 to 2147483647, got '4'"),
    ({"schedulingPolicy": {"gang": {"minCount": True}}},
     "spec.schedulingPolicy.gang.minCount: must be an integer from 1 to 2147483647, got True"),
    ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minCount: missing field"),
    ({"schedulingPolicy": {}}, "spec.schedulingPolicy: sets neither basic nor gang"),
    ({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}}, "spec.schedulingPolicy: sets both basic and gang"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": {"topology": [{"key": "rack"}]}},
     "spec.schedulingConstraints.topology[0].key: must name a configured topology level (" + ", ".join(
         (*CONFIG.all_levels, "kubernetes.io/hostname")) + "), got 'rack'"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}},
      "schedulingConstraints": {"topology": [{"key": BLOCK}, {"key": SUBBLOCK}]}},
     "spec.schedulingConstraints.topology: holds at most one level, got 2"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": {"topology": [{}]}},
     "spec.schedulingConstraints.topology[0].key: missing field"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": "All"},
     "spec.disruptionMode: must be Pod or PodGroup, got 'All'"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}, "single": {}}},
     "spec.disruptionMode: sets both single and all"),
    ({"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": 2**31}, "spec.priority: must be an int32, got 2147483648"),
    ("nope", "spec: must be an object, got 'nope'"),
])
def test_a_bad_upstream_field_names_the_group_the_field_and_the_value(spec: Any, want: str) -> None:
    found = parse_pod_group(WORKLOAD, group(spec), CONFIG)
    assert found.error == PREFIX + want


# --- Volcano --------------------------------------------------------------------------------
def test_a_volcano_group_maps_its_hard_tier_to_a_required_level() -> None:
    spec = parse_pod_group(VOLCANO, group({"minMember": 4, "priorityClassName": "p",
                                           "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}), CONFIG)
    assert (spec.min_count, spec.required_level, spec.preferred_level, spec.priority_class_name) == (4, SUBBLOCK, None, "p")


def test_a_soft_volcano_tier_is_a_preferred_level_and_a_tier_above_the_last_is_the_cluster() -> None:
    soft = parse_pod_group(VOLCANO, group({"minMember": 2, "networkTopology": {"mode": "soft", "highestTierAllowed": 2}}),
                           CONFIG)
    assert (soft.required_level, soft.preferred_level) == (None, BLOCK)
    high = parse_pod_group(VOLCANO, group({"minMember": 2, "networkTopology": {"highestTierAllowed": 3}}), CONFIG)
    assert (high.required_level, high.preferred_level, high.error) == (None, None, "")


def test_volcano_tiers_follow_the_configuration() -> None:
    config = from_mapping({"volcanoTierLevels": [HOST, BLOCK]})
    assert [volcano_tier_level(t, config) for t in (1, 2, 3)] == [HOST, BLOCK, None]
    assert CONFIG.tier_levels == (SUBBLOCK, BLOCK)
    with pytest.raises(ConfigError, match=r"volcanoTierLevels\[0\]: 'rack' is not a configured level"):
        from_mapping({"volcanoTierLevels": ["rack"]})


@pytest.mark.parametrize("spec, want", [
    ({"minMember": -1}, "spec.minMember: must be an integer from 1 to 2147483647, got -1"),
    ({"minMember": 2, "networkTopology": {"mode": "strict"}}, "spec.networkTopology.mode: must be hard or soft, got 'strict'"),
    ({"minMember": 2, "networkTopology": {"highestTierAllowed": 0}},
     "spec.networkTopology.highestTierAllowed: must be an integer from 1 to 2147483647, got 0"),
    ({"minMember": 2, "networkTopology": "hard"}, "spec.networkTopology: must be an object, got 'hard'"),
])
def test_a_bad_volcano_field_names_it(spec: Any, want: str) -> None:
    assert parse_pod_group(VOLCANO, group(spec), CONFIG).error == "PodGroup team/train (scheduling.volcano.sh): " + want


# --- coscheduling --------------------------------------------------------------------------
def test_a_coscheduling_group_reads_its_minimum_and_timeout() -> None:
    spec = parse_pod_group(COSCHEDULING, group({"minMember": 3, "scheduleTimeoutSeconds": 60}), CONFIG)
    assert (spec.min_count, spec.timeout_seconds, spec.required_level) == (3, 60, None)
    assert parse_pod_group(COSCHEDULING, group({}), CONFIG).min_count == 1


@pytest.mark.parametrize("spec, want", [
    ({"minMember": 0}, "spec.minMember: must be an integer from 1 to 2147483647, got 0"),
    ({"minMember": 2, "scheduleTimeoutSeconds": 0},
     "spec.scheduleTimeoutSeconds: must be an integer from 1 to 2147483647, got 0"),
])
def test_a_bad_coscheduling_field_names_it(spec: Any, want: str) -> None:
    assert parse_pod_group(COSCHEDULING, group(spec), CONFIG).error == "PodGroup team/train (scheduling.x-k8s.io): " + want


# --- KAI -----------------------------------------------------------------------------------
def test_a_kai_group_reads_its_levels_as_node_label_keys() -> None:
    spec = parse_pod_group(KAI, group({"minMember": 4, "topologyConstraint": {
        "requiredTopologyLevel": BLOCK, "preferredTopologyLevel": SUBBLOCK, "topology": "gke"}}), CONFIG)
    assert (spec.min_count, spec.required_level, spec.preferred_level) == (4, BLOCK, SUBBLOCK)


def test_a_bad_kai_level_names_it() -> None:
    spec = parse_pod_group(KAI, group({"minMember": 4, "topologyConstraint": {"preferredTopologyLevel": "zone"}}),
                           CONFIG)
    assert spec.error.startswith("PodGroup team/train (scheduling.run.ai): spec.topologyConstraint.preferredTopologyLevel:"
                                 " must name a configured topology level (")
    assert spec.error.endswith("got 'zone'")


# --- where they are served -----------------------------------------------------------------
@pytest.mark.parametrize("api_version, want", [
    ("scheduling.k8s.io/v1beta1", WORKLOAD), ("scheduling.k8s.io/v1alpha2", WORKLOAD),
    ("scheduling.k8s.io/v1", None), ("scheduling.volcano.sh/v1beta1", VOLCANO),
    ("scheduling.x-k8s.io/v1alpha1", COSCHEDULING), ("scheduling.run.ai/v2alpha2", KAI), ("v1", None),
])
def test_the_source_of_an_api_version(api_version: str, want: str | None) -> None:
    assert source_of(api_version) == want


def test_a_pod_names_its_group_by_the_first_key_it_carries() -> None:
    pod = {"metadata": {"annotations": {"scheduling.k8s.io/group-name": "v"}, "labels": {
        "scheduling.x-k8s.io/pod-group": "c"}}, "spec": {"schedulingGroup": {"podGroupName": "w"}}}
    assert pod_group_ref(pod) == PodGroupRef(WORKLOAD, "w")
    assert pod_group_ref({**pod, "spec": {}}) == PodGroupRef(VOLCANO, "v")


# --- a group binding Troupe's own request ----------------------------------------------------
@pytest.mark.parametrize("mine, groups, want", [
    (TopologyRequest(required_level=BLOCK), (SUBBLOCK, None), (SUBBLOCK, None)),
    (TopologyRequest(required_level=HOST), (SUBBLOCK, None), (HOST, None)),
    (TopologyRequest(required_level=SUBBLOCK), ("kubernetes.io/hostname", None), ("kubernetes.io/hostname", None)),
    (TopologyRequest(preferred_level=HOST), (BLOCK, None), (BLOCK, None)),
    (TopologyRequest(), (None, SUBBLOCK), (None, SUBBLOCK)),
    (TopologyRequest(preferred_level=HOST), (None, SUBBLOCK), (None, HOST)),
    (TopologyRequest(), (BLOCK, SUBBLOCK), (BLOCK, None)),
], ids=["the group's deeper level wins", "Troupe's deeper level wins", "one node is the deepest",
        "a required level drops a preferred one", "the group's preference", "Troupe's preference first",
        "a group's own required and preferred: required"])
def test_a_group_binds_troupes_request_to_the_deeper_required_level(mine: TopologyRequest,
                                                                   groups: tuple[str | None, str | None],
                                                                   want: tuple[str | None, str | None]) -> None:
    spec = PodGroupSpec(PodGroupRef(KAI, "g"), "team", 2, *groups)
    got = constrained(mine, spec, CONFIG)
    assert (got.required_level, got.preferred_level) == want
