"""``mutate`` on pods written for Kueue's topology-aware scheduling
(docs/decisions/039-kueue-annotations.md): read as Troupe's keys on pods Kueue does not
manage, errors naming the Kueue key, the gang a Kueue plain-pod group or a workload makes,
and pods Kueue manages left to Kueue, or refused when Troupe would place them too."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.webhook_builders import PodBuilder, admit, make_pod
from troupe.config import Config

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
GATE = {"name": "troupe.io/placement"}
TIMEOUT = "troupe.io/gang-schedule-timeout-seconds"


def job_pod(builder: PodBuilder) -> dict[str, Any]:
    pod: dict[str, Any] = builder.container().obj()
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u-1", "controller": True}]
    return pod


def test_a_jobs_pod_that_asks_with_kueues_required_topology_joins_its_workloads_gang_and_is_gated() -> None:
    got = admit(job_pod(make_pod().annotate(REQUIRED, SUBBLOCK)), Config())
    assert got.allowed, got.response
    assert GATE in got.pod["spec"]["schedulingGates"]
    assert got.pod["metadata"]["annotations"] == {REQUIRED: SUBBLOCK, "troupe.io/gang-size": "auto", TIMEOUT: "30"}


def test_a_kueue_plain_pod_group_is_the_gang_of_its_name_and_total_count() -> None:
    pod = (make_pod().label("kueue.x-k8s.io/pod-group-name", "trainers")
           .annotate("kueue.x-k8s.io/pod-group-total-count", "4").annotate(REQUIRED, SUBBLOCK).container().obj())
    got = admit(pod, Config())
    assert got.allowed, got.response
    assert got.pod["metadata"]["annotations"]["troupe.io/gang-name"] == "trainers"
    assert got.pod["metadata"]["annotations"]["troupe.io/gang-size"] == "4"


def test_a_bare_pod_with_kueues_annotation_is_gated_as_a_gang_of_one() -> None:
    got = admit(make_pod().annotate("kueue.x-k8s.io/podset-unconstrained-topology", "true").container().obj(),
                Config())
    assert got.allowed and GATE in got.pod["spec"]["schedulingGates"]
    assert "troupe.io/gang-size" not in got.pod["metadata"]["annotations"]


@pytest.mark.parametrize(("annotations", "want"), [
    ({REQUIRED: "rack"}, [REQUIRED, "'rack'", "must name a configured level"]),
    ({REQUIRED: SUBBLOCK, "kueue.x-k8s.io/podset-preferred-topology": SUBBLOCK},
     ["kueue.x-k8s.io/podset-preferred-topology", f"cannot be set together with {REQUIRED}"]),
    ({"kueue.x-k8s.io/podset-slice-size": "2"},
     ["kueue.x-k8s.io/podset-slice-required-topology", "is required with kueue.x-k8s.io/podset-slice-size"]),
    ({"kueue.x-k8s.io/podset-slice-required-topology": SUBBLOCK, "kueue.x-k8s.io/podset-slice-size": "two"},
     ["kueue.x-k8s.io/podset-slice-size", "'two'"]),
    ({"kueue.x-k8s.io/podset-slice-required-topology-constraints": "[{]"},
     ["kueue.x-k8s.io/podset-slice-required-topology-constraints", "'[{]'", "JSON list"]),
    ({"kueue.x-k8s.io/podset-unconstrained-topology": "yes"},
     ["kueue.x-k8s.io/podset-unconstrained-topology", "'yes'"]),
])
def test_a_bad_kueue_annotation_is_denied_naming_the_kueue_key_and_the_value(annotations: dict[str, str],
                                                                             want: list[str]) -> None:
    builder = make_pod()
    for k, v in annotations.items():
        builder.annotate(k, v)
    got = admit(job_pod(builder), Config())
    assert not got.allowed and got.code == 400
    for text in want:
        assert text in got.message, got.message
    assert "troupe.io/topology" not in got.message, "the error names the key the user wrote"


def test_a_gang_size_that_kueues_slice_size_does_not_divide_is_denied_naming_the_kueue_key() -> None:
    pod = (make_pod().gang("g", "6").annotate("kueue.x-k8s.io/podset-slice-required-topology", SUBBLOCK)
           .annotate("kueue.x-k8s.io/podset-slice-size", "4").container().obj())
    got = admit(pod, Config())
    assert not got.allowed
    assert "annotation kueue.x-k8s.io/podset-slice-size" in got.message and "'4'" in got.message, got.message


def test_troupes_own_topology_keys_win_and_kueues_are_not_read() -> None:
    pod = job_pod(make_pod().annotate("troupe.io/topology-required-level", SUBBLOCK).annotate(REQUIRED, "rack"))
    got = admit(pod, Config())
    assert got.allowed, got.response
    assert "troupe.io/gang-size" not in got.pod["metadata"]["annotations"], "no gang without Troupe's gang keys"


@pytest.mark.parametrize("mark", ["label", "annotation", "gate"])
def test_a_pod_kueue_manages_is_left_to_kueue(mark: str) -> None:
    builder = make_pod().annotate(REQUIRED, "rack")
    if mark == "label":
        builder.label("kueue.x-k8s.io/podset", "main")
    elif mark == "annotation":
        builder.annotate("kueue.x-k8s.io/workload", "job-train-1a2b3")
    else:
        builder.gate("kueue.x-k8s.io/topology")
    pod = job_pod(builder)
    got = admit(pod, Config())
    assert got.allowed and got.ops == [] and got.pod == pod


def test_a_pod_kueue_places_that_also_carries_troupes_keys_is_denied_naming_both() -> None:
    pod = job_pod(make_pod().gang("g", "2").annotate(REQUIRED, SUBBLOCK).label("kueue.x-k8s.io/podset", "main"))
    got = admit(pod, Config())
    assert not got.allowed and got.code == 400
    for text in (REQUIRED, "label kueue.x-k8s.io/podset", "troupe.io/gang-name", "keep one of them"):
        assert text in got.message, got.message


def test_a_kueue_pod_group_whose_count_is_not_a_size_is_denied_naming_the_count() -> None:
    pod = (make_pod().label("kueue.x-k8s.io/pod-group-name", "g").annotate("kueue.x-k8s.io/pod-group-total-count",
                                                                            "many").annotate(REQUIRED, SUBBLOCK)
           .container().obj())
    got = admit(pod, Config())
    assert not got.allowed
    assert "annotation kueue.x-k8s.io/pod-group-total-count" in got.message and "'many'" in got.message


def test_a_reinvocation_of_a_kueue_pod_adds_nothing() -> None:
    first = admit(job_pod(make_pod().annotate(REQUIRED, SUBBLOCK)), Config())
    again = admit(first.pod, Config())
    assert again.allowed and again.ops == []


def test_kueues_hostname_level_is_accepted_as_one_node_while_troupes_own_key_keeps_to_configured_levels() -> None:
    got = admit(job_pod(make_pod().annotate(REQUIRED, "kubernetes.io/hostname")), Config())
    assert got.allowed, got.response
    own = admit(job_pod(make_pod().annotate("troupe.io/topology-required-level", "kubernetes.io/hostname")), Config())
    assert not own.allowed and "must name a configured level" in own.message
