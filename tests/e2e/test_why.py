"""Why is my gang waiting: the answer on the objects people already look at.

``kubectl describe pod`` of a gated member shows the ``troupe.io/Gang`` condition and the
Event of its last transition, with numbers; ``kubectl get pod -o yaml`` shows the
condition's reason and message.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.e2e import gang_annotations, pod_body, wait_for
from troupe import contract


def gang_condition(cluster: Any, namespace: str, pod: str) -> dict[str, Any] | None:
    out = yaml.safe_load(cluster.kubectl("get", "pod", pod, "-n", namespace, "-o", "yaml").stdout)
    return next((c for c in out["status"].get("conditions") or [] if c["type"] == contract.GANG_CONDITION), None)


def describe(cluster: Any, namespace: str, pod: str) -> str:
    return cluster.kubectl("describe", "pod", pod, "-n", namespace).stdout


def test_a_member_of_an_incomplete_gang_says_how_many_are_there(troupe, cluster, admin_core, namespace):
    for i in range(3):
        admin_core.create_namespaced_pod(namespace, pod_body(f"w-{i}", gang_annotations("train", 4), gpus=1))
    condition = wait_for("the condition of w-0", lambda: (c := gang_condition(cluster, namespace, "w-0"))
                         and c["message"] == "3 of 4 members present" and c)
    assert (condition["status"], condition["reason"]) == ("False", "WaitingForMembers")
    text = describe(cluster, namespace, "w-0")
    print(text)
    assert "troupe.io/Gang" in text
    assert "GangWaiting" in text and "of 4 members present" in text


def test_a_member_of_a_gang_that_does_not_fit_says_why_with_numbers(troupe, cluster, admin_core, namespace):
    for i in range(2):
        admin_core.create_namespaced_pod(namespace, pod_body(f"big-{i}", gang_annotations("big", 2), gpus=9))
    condition = wait_for("the condition of big-0", lambda: (c := gang_condition(cluster, namespace, "big-0"))
                         and c["reason"] == "Unschedulable" and c)
    assert condition["message"].startswith("fits 0 of 2 members; 16 nodes excluded: insufficient nvidia.com/gpu: 16")
    text = describe(cluster, namespace, "big-0")
    assert "GangUnschedulable" in text and "insufficient nvidia.com/gpu: 16" in text


def test_a_member_of_a_held_gang_says_which_keys_disagree(troupe, cluster, admin_core, namespace):
    admin_core.create_namespaced_pod(namespace, pod_body("odd-0", gang_annotations("odd", 2), gpus=1))
    admin_core.create_namespaced_pod(namespace, pod_body("odd-1", gang_annotations("odd", 3), gpus=1))
    condition = wait_for("the condition of odd-0", lambda: (c := gang_condition(cluster, namespace, "odd-0"))
                         and c["reason"] == "Held" and c)
    assert condition["message"] == "members disagree on troupe.io/gang-size: 2, 3 (held until they agree)"
    text = describe(cluster, namespace, "odd-0")
    assert "GangSpecMismatch" in text and "members disagree on troupe.io/gang-size: 2, 3" in text


def test_a_released_member_says_where_it_went(troupe, cluster, admin_core, namespace):
    admin_core.create_namespaced_pod(namespace, pod_body("r-0", gang_annotations("r", 2), gpus=1))
    wait_for("r-0 waiting", lambda: gang_condition(cluster, namespace, "r-0"))
    admin_core.create_namespaced_pod(namespace, pod_body("r-1", gang_annotations("r", 2), gpus=1))
    condition = wait_for("r-0 released", lambda: (c := gang_condition(cluster, namespace, "r-0"))
                         and c["reason"] == "Released" and c)
    node = admin_core.read_namespaced_pod("r-0", namespace).spec.node_selector[contract.HOSTNAME_LABEL]
    assert condition["status"] == "True"
    assert condition["message"] == f"released onto node {node} as rank 0 of 2"
