"""A release cut short by a refused write, and the simulator deciding as the reconciler does,
on the local control plane.

The refusal comes from the API server itself: a ValidatingAdmissionPolicy denies the
reconciler's updates of one chosen member, as a policy engine or a quota would.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.e2e import (
    debug_gangs,
    gang_annotations,
    indexed_job,
    job_pods,
    pod_body,
    wait_for,
)
from troupe import contract
from troupe.config import Config
from troupe.policies import RELEASE_MODE, WHEN_COMPLETE

RECONCILER = Config().reconciler_username


def refuse_updates(api: Any, namespace: str, pods: list[str]) -> str:
    """Deny the reconciler's UPDATEs of ``pods`` in ``namespace`` (a ValidatingAdmissionPolicy
    and its binding, both named after the namespace); returns the name. Waits until the
    API server enforces it (an update of the ``probe`` pod, which must be in ``pods``)."""
    reg = client.AdmissionregistrationV1Api(api)
    name = f"refuse-{namespace}"
    names = ", ".join(f"'{p}'" for p in pods)
    reg.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "reconciler", "expression": f"request.userInfo.username == '{RECONCILER}'"}],
            "validations": [{"expression": f"!(object.metadata.name in [{names}])",
                             "message": "updates of this pod are refused by policy (test)"}],
        },
    })
    reg.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}},
    })
    return name


def test_a_refused_write_mid_release_holds_the_reserved_node_and_the_release_finishes(
        troupe, cluster, admin_api, admin_core, namespace):
    core_as_reconciler = client.CoreV1Api(cluster.api_client("reconciler"))
    admin_core.create_namespaced_pod(namespace, pod_body("probe"))
    policy = refuse_updates(admin_api, namespace, ["hold-2", "probe"])

    def enforced() -> bool:
        try:
            core_as_reconciler.patch_namespaced_pod("probe", namespace, {"metadata": {"labels": {"t": str(time.time_ns())}}})
        except ApiException as e:
            return "refused by policy" in (e.body or "")
        return False

    wait_for("the policy to be enforced", lambda: enforced() or None, timeout=30)
    # Gang A: 4 whole-node members; the write of hold-2 is refused.
    for i in range(4):
        admin_core.create_namespaced_pod(namespace, pod_body(f"hold-{i}", gang_annotations("hold", 4, timeout=90), gpus=8))
    pods = lambda: {p.metadata.name: p for p in admin_core.list_namespaced_pod(namespace).items}  # noqa: E731
    wait_for("3 of 4 members bound", lambda: sum(1 for n in ("hold-0", "hold-1", "hold-3")
                                                if pods()[n].spec.node_name) == 3 or None, timeout=60)
    held = pods()["hold-2"]
    assert [g.name for g in held.spec.scheduling_gates] == [contract.GATE], "the refused member is still gated"
    assert not (held.spec.node_selector or {}), "and not pinned"
    record = json.loads(pods()["hold-0"].metadata.annotations[contract.PLAN])
    reserved = record["nodes"][held.metadata.uid]
    # Gang B needs 13 whole nodes: 16 - 4 = 12 are free only if hold-2's reservation counts.
    for i in range(13):
        admin_core.create_namespaced_pod(namespace, pod_body(f"other-{i}", gang_annotations("other", 13), gpus=8))

    def gang_phase(key: str) -> str | None:
        return next((g["phase"] for g in debug_gangs(troupe) if g["gang"] == key), None)

    wait_for("gang other Unschedulable", lambda: gang_phase(f"{namespace}/other") == "Unschedulable" or None, timeout=30)
    assert gang_phase(f"{namespace}/hold") == "Releasing"
    assert not any(p.spec.node_name for n, p in pods().items() if n.startswith("other-")), "B never took A's reserved node"
    # The policy goes; the reconciler's retry finishes the release on the reserved node.
    reg = client.AdmissionregistrationV1Api(admin_api)
    reg.delete_validating_admission_policy_binding(policy)
    reg.delete_validating_admission_policy(policy)
    bound = wait_for("hold-2 bound", lambda: pods()["hold-2"].spec.node_name, timeout=90)
    assert bound == reserved, "released on the node its plan reserved"
    assert all(pods()[f"hold-{i}"].status.phase != "Failed" for i in range(4))
    wait_for("gang hold Released", lambda: gang_phase(f"{namespace}/hold") == "Released" or None, timeout=30)
    for i in range(13):
        admin_core.delete_namespaced_pod(f"other-{i}", namespace, grace_period_seconds=0)


def test_the_simulator_decides_as_the_reconciler_on_the_clusters_snapshot(troupe, cluster, admin_core, namespace, tmp_path):
    # A released gang, one waiting for a member, one that does not fit, one whose members disagree.
    for i in range(2):
        admin_core.create_namespaced_pod(namespace, pod_body(f"ok-{i}", gang_annotations("ok", 2), gpus=4))
    for i in range(3):
        admin_core.create_namespaced_pod(namespace, pod_body(f"wait-{i}", gang_annotations("wait", 4), gpus=1))
    for i in range(17):
        admin_core.create_namespaced_pod(namespace, pod_body(f"big-{i}", gang_annotations("big", 17), gpus=8))
    admin_core.create_namespaced_pod(namespace, pod_body("odd-0", gang_annotations("odd", 2), gpus=1))
    admin_core.create_namespaced_pod(namespace, pod_body("odd-1", gang_annotations("odd", 3), gpus=1))
    wait_for("gang ok bound", lambda: all(admin_core.read_namespaced_pod(f"ok-{i}", namespace).spec.node_name
                                          for i in range(2)) or None, timeout=60)

    def reconciler_view() -> dict[str, tuple[str, str]]:
        return {g["gang"]: (g["phase"], g["reason"]) for g in debug_gangs(troupe) if g["gang"].startswith(namespace + "/")}

    snapshot = tmp_path / "snapshot.yaml"
    last: tuple[Any, Any] = (None, None)

    def agree() -> bool:
        nonlocal last
        before = reconciler_view()
        snapshot.write_text(cluster.kubectl("get", "nodes,pods,jobs", "-A", "-o", "yaml").stdout)
        after = reconciler_view()
        out = subprocess.run([sys.executable, "-m", "reconciler", "simulate", "--config", str(troupe.config_path),
                              "--output", "json", str(snapshot)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        simulated = {f"{g['namespace']}/{g['name']}": (g["phase"], g["reason"]) for g in json.loads(out.stdout)["gangs"]
                     if g["namespace"] == namespace}
        waiting = {k: v for k, v in after.items() if k in simulated or v[0] != "Released"}
        last = (waiting, simulated)
        return before == after and len(simulated) == 3 and waiting == simulated

    try:
        wait_for("the simulator and the reconciler to agree", lambda: agree() or None, timeout=45, interval=1.0)
    except AssertionError:
        raise AssertionError(f"reconciler {last[0]} != simulator {last[1]}") from None
    _, simulated = last
    assert simulated[f"{namespace}/wait"][0] == "Waiting" and "3 of 4" in simulated[f"{namespace}/wait"][1]
    assert simulated[f"{namespace}/big"][0] == "Unschedulable"
    assert simulated[f"{namespace}/odd"][0] == "Held"
    assert reconciler_view()[f"{namespace}/ok"][0] == "Released", "a released gang is not the simulator's to decide"


def test_a_member_held_gated_on_a_node_that_is_cordoned_is_rolled_back_and_placed_elsewhere(
        troupe, cluster, admin_api, admin_core, namespace):
    """A release cut short leaves index 1 gated with its node reserved (the API server refuses
    the reconciler's first update of it); that node is cordoned: the release is rolled back at
    once (never left gated forever), and the recreated gang runs elsewhere."""
    core_as_reconciler = client.CoreV1Api(cluster.api_client("reconciler"))
    reg = client.AdmissionregistrationV1Api(admin_api)
    name = f"cordon-{namespace}"
    reg.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["UPDATE"], "resources": ["pods"]}]},
                 "matchConditions": [{"name": "reconciler",
                                      "expression": f"request.userInfo.username == '{RECONCILER}'"}],
                 "validations": [{"expression": "!(has(object.metadata.labels) && "
                                  "object.metadata.labels[?'batch.kubernetes.io/job-completion-index'].orValue('') == '1'"
                                  " && has(oldObject.spec.schedulingGates) && size(oldObject.spec.schedulingGates) > 0)",
                                  "message": "the release of index 1 is refused by policy (test)"}]},
    })
    reg.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}},
    })
    probe = pod_body("probe", labels={"batch.kubernetes.io/job-completion-index": "1"})
    probe["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    admin_core.create_namespaced_pod(namespace, probe)

    def enforced() -> bool:
        try:
            core_as_reconciler.patch_namespaced_pod("probe", namespace, {"metadata": {"labels": {"t": str(time.time_ns())}}})
        except ApiException as e:
            return "refused by policy" in (e.body or "")
        return False

    wait_for("the policy to be enforced", lambda: enforced() or None, timeout=30)
    job = indexed_job("cord", 2, {**gang_annotations("cord", 2, timeout=60), RELEASE_MODE: WHEN_COMPLETE},
                      gpus=8)
    job["spec"]["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    client.BatchV1Api(admin_api).create_namespaced_job(namespace, job)

    def held() -> tuple[Any, str] | None:
        pods = job_pods(admin_core, namespace, "cord")
        first = next((p for p in pods if (p.metadata.annotations or {}).get(contract.PLAN)), None)
        second = next((p for p in pods if p.metadata.labels.get("batch.kubernetes.io/job-completion-index") == "1"
                       and p.spec.scheduling_gates), None)
        if first is None or second is None:
            return None
        return second, json.loads(first.metadata.annotations[contract.PLAN])["nodes"][second.metadata.uid]

    member, reserved = wait_for("index 1 gated on its reserved node", held, timeout=60)
    admin_core.patch_node(reserved, {"spec": {"unschedulable": True}})
    try:
        def rolled_back() -> list[str]:
            return [e.message for e in admin_core.list_namespaced_event(namespace).items
                    if e.reason == "GangTimedOut" and f"the planned node {reserved} of member" in e.message
                    and "was cordoned" in e.message]

        wait_for("the release rolled back at once", rolled_back, timeout=30)
        reg.delete_validating_admission_policy_binding(name)
        reg.delete_validating_admission_policy(name)

        def replaced() -> list[Any] | None:
            pods = [p for p in job_pods(admin_core, namespace, "cord") if not p.metadata.deletion_timestamp]
            fresh = [p for p in pods if p.metadata.uid != member.metadata.uid and p.spec.node_name]
            return fresh if len(fresh) == 2 and member.metadata.uid not in {p.metadata.uid for p in pods} else None

        pods = wait_for("the recreated gang running elsewhere", replaced, timeout=90)
        assert reserved not in {p.spec.node_name for p in pods}, "never on the cordoned node"
    finally:
        admin_core.patch_node(reserved, {"spec": {"unschedulable": False}})
        with contextlib.suppress(ApiException):
            reg.delete_validating_admission_policy_binding(name)
            reg.delete_validating_admission_policy(name)
