"""The ways a gang is declared, one module each, their precedence a tuple
(docs/decisions/072-the-ways-a-gang-is-declared-are-one-room.md): which source declares a
pod that several would, each source's key, and a member's keys parsed once for its key and
its gang's size alike. A pod group source is one ``GroupAPI`` row.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.model.declared import SOURCES, declaring, gang_key
from reconciler.engine.model.declared.memberkeys import member_keys
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.workloads import Workloads
from testbed.engine_builders import PodBuilder, make_pod
from troupe.config import Config
from troupe.contract import GKE_GATE_PREFIX
from troupe.podgroups import (
    COSCHEDULING_GROUP_LABEL,
    GROUP_ANNOTATIONS,
    GROUP_APIS,
    GROUP_LABELS,
    KAI_GROUP_ANNOTATION,
    ORIGINAL_SCHEDULER_NAME,
    REF_FIELDS,
    VOLCANO_GROUP_ANNOTATION,
    every_group_ref,
    pod_group_ref,
)

CONFIG = Config(adopt_scheduler_names=("volcano",))


def info(builder: PodBuilder) -> PodInfo:
    return PodInfo.from_object(builder.build())


def source_of(pod: PodInfo) -> str | None:
    found = declaring(pod, CONFIG)
    return found[0].name if found is not None else None


def test_the_precedence_is_a_tuple_of_one_source_per_way() -> None:
    assert [s.name for s in SOURCES] == ["workload", "annotations", "pod group", "adopted", "gke", "alone"]


@pytest.mark.parametrize(("builder", "source", "key"), [
    # Troupe's keys win over a group the pod names, GKE's gate and Troupe's gate.
    (make_pod("w-0", "ml").gated().gang("train", 2).annotate(VOLCANO_GROUP_ANNOTATION, "g")
     .gated(f"{GKE_GATE_PREFIX}x"), "annotations", "ml/train"),
    # An unreadable name: the pod's own gang of one, declared by the annotations still.
    (make_pod("w-0", "ml").gated().gang("Bad Name", 2), "annotations", "ml/pod:w-0"),
    # size: auto is a workload's size, even with a name (which admission refuses).
    (make_pod("w-0", "ml").gated().annotate("troupe.io/gang-size", "auto"), "workload", "ml/pod:w-0"),
    (make_pod("w-0", "ml").gated().annotate("troupe.io/gang-size", "auto").annotate("troupe.io/gang-name", "t"),
     "workload", "ml/t"),
    # A group the pod names wins over a peer's implicit group and the gates.
    (make_pod("w-0", "ml").gated().label(COSCHEDULING_GROUP_LABEL, "g").annotate(ORIGINAL_SCHEDULER_NAME, "volcano"),
     "pod group", "ml/coscheduling:g"),
    (make_pod("w-0", "ml").gated().annotate(ORIGINAL_SCHEDULER_NAME, "volcano"), "adopted", "ml/volcano:podgroup-"),
    (make_pod("w-0", "ml").gated().gated(f"{GKE_GATE_PREFIX}x").label("job-name", "j"), "gke", "ml/gke:job-name=j"),
    (make_pod("w-0", "ml").gated(), "alone", "ml/pod:w-0"),
    # Not Troupe's: a group pod no gate of Troupe's holds, a plain pod.
    (make_pod("w-0", "ml").annotate(KAI_GROUP_ANNOTATION, "g"), None, None),
    (make_pod("w-0", "ml"), None, None),
])
def test_the_first_source_that_declares_a_pod_gives_its_key(builder: PodBuilder, source: str | None,
                                                            key: str | None) -> None:
    pod = info(builder)
    assert source_of(pod) == source
    found = gang_key(pod, CONFIG)
    assert (found is None) == (key is None)
    assert found is None or key is None or found.startswith(key)


def test_a_members_keys_are_parsed_once_for_its_key_and_its_gangs_size() -> None:
    pods = [info(make_pod(f"w-{i}", "ml").gated().gang("train", 2)) for i in range(2)]
    read = member_keys(pods[0], CONFIG)
    assert read.named and read.spec is not None and read.spec.size == 2
    assert member_keys(pods[1], CONFIG) is read  # one parse serves every member
    gang = build_gang("ml/train", pods, CONFIG, {}, Workloads())
    assert gang.size == 2 and not gang.held
    bad = info(make_pod("w-0", "ml").gated().gang("Bad Name", 2))
    assert not member_keys(bad, CONFIG).named


def test_a_size_that_cannot_be_read_keeps_the_gang_it_names_held() -> None:
    pods = [info(make_pod(f"w-{i}", "ml").gated().annotate("troupe.io/gang-name", "t")
                 .annotate("troupe.io/gang-size", "zero")) for i in range(2)]
    assert {gang_key(p, CONFIG) for p in pods} == {"ml/t"}
    gang = build_gang("ml/t", pods, CONFIG, {}, Workloads())
    assert "troupe.io/gang-size" in gang.held


def test_every_group_source_is_one_row_and_the_lists_are_derived_from_the_rows() -> None:
    fields = {"workload": "spec.schedulingGroup.podGroupName", "volcano": f"annotation {VOLCANO_GROUP_ANNOTATION}",
              "coscheduling": f"label {COSCHEDULING_GROUP_LABEL}", "kai": f"annotation {KAI_GROUP_ANNOTATION}"}
    assert dict(REF_FIELDS) == fields
    assert GROUP_ANNOTATIONS == (VOLCANO_GROUP_ANNOTATION, KAI_GROUP_ANNOTATION)
    assert GROUP_LABELS == (COSCHEDULING_GROUP_LABEL,)
    assert {api.source: api.min_field for api in GROUP_APIS} == {
        "workload": "spec.schedulingPolicy.gang.minCount", "volcano": "spec.minMember",
        "coscheduling": "spec.minMember", "kai": "spec.minMember"}


def test_a_pod_naming_every_group_is_read_by_the_first_row() -> None:
    pod: dict[str, Any] = make_pod("w-0", "ml").annotate(VOLCANO_GROUP_ANNOTATION, "v") \
        .annotate(KAI_GROUP_ANNOTATION, "k").label(COSCHEDULING_GROUP_LABEL, "c").build()
    assert [r.source for r in every_group_ref(pod)] == ["volcano", "coscheduling", "kai"]
    pod["spec"]["schedulingGroup"] = {"podGroupName": "w"}
    assert [r.source for r in every_group_ref(pod)] == ["workload", "volcano", "coscheduling", "kai"]
    found = pod_group_ref(pod)
    assert found is not None and found.gang_name() == "workload:w"
