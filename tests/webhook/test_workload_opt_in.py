"""The namespace opt-in: ``troupe.io/gang-mode: auto`` makes a workload's pods gang members.

The configuration's second entry selects opted-in namespaces and, by CEL, pods that a
supported workload creates and that name no gang themselves; the handler on
``/mutate-auto`` stamps ``<prefix>-size: auto`` and gates them. No API call anywhere.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.support.webhook_builders import ALICE, make_pod, make_review
from troupe import contract
from troupe.config import Config
from webhook.admission import mutate, patch_of
from webhook.registration import MUTATE_AUTO_PATH, auto_match_conditions, webhook_configuration

celpy = pytest.importorskip("celpy", reason="cel-python evaluates the matchConditions")

PFN = Config(gang_annotation_prefix="gang-scheduling.preferred.jp/gang")


def owned_by(builder: Any, api_version: str, kind: str, controller: bool = True) -> dict[str, Any]:
    pod: dict[str, Any] = builder.obj()
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "train", "uid": "u-1", "controller": controller}]
    return pod


JOB_POD = owned_by(make_pod().container(), "batch/v1", "Job")
PYTORCH_POD = owned_by(make_pod().container().label(contract.KUBEFLOW_JOB_NAME_LABEL, "train"),
                       "kubeflow.org/v1", "PyTorchJob")
LWS_POD = owned_by(make_pod().container().label(contract.LWS_NAME_LABEL, "serve"), "apps/v1", "StatefulSet")


def sent(config: Config, obj: dict[str, Any], operation: str = "CREATE") -> bool:
    """Whether the opt-in entry's matchConditions let the request through."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj),
                  "request": celpy.json_to_cel({"operation": operation, "userInfo": {"username": ALICE}})}
    results = [env.program(env.compile(c["expression"])).evaluate(activation) for c in auto_match_conditions(config)]
    return all(bool(r) for r in results)


@pytest.mark.parametrize(("pod", "want_sent"), [
    pytest.param(JOB_POD, True, id="a Job's pod"),
    pytest.param(PYTORCH_POD, True, id="a PyTorchJob's pod"),
    pytest.param(LWS_POD, True, id="a LeaderWorkerSet's pod (owned by a StatefulSet, named by its label)"),
    pytest.param(owned_by(make_pod().container().annotate("troupe.io/topology-required-level", "x"), "batch/v1", "Job"),
                 True, id="a Job's pod with only a topology request"),
    pytest.param(make_pod().container().obj(), False, id="a pod no workload made"),
    pytest.param(owned_by(make_pod().container(), "apps/v1", "ReplicaSet"), False, id="a ReplicaSet's pod"),
    pytest.param(owned_by(make_pod().container(), "batch/v1", "Job", controller=False), False,
                 id="a Job that owns but does not control the pod"),
    pytest.param(owned_by(make_pod().container().gang("mine", "3"), "batch/v1", "Job"), False,
                 id="a Job's pod naming its own gang"),
    pytest.param(owned_by(make_pod().container().annotate("troupe.io/gang-size", "auto"), "batch/v1", "Job"), False,
                 id="a Job's pod already saying gang-size auto (the first entry handles it)"),
])
def test_the_opt_in_entry_sees_only_workload_pods_that_name_no_gang(pod: dict[str, Any], want_sent: bool) -> None:
    assert sent(Config(), pod) is want_sent
    named = any(k in (pod["metadata"].get("annotations") or {}) for k in ("troupe.io/gang-name", "troupe.io/gang-size"))
    assert contract.created_by_workload(pod) is (want_sent or named), "the handler's check mirrors the CEL"


def test_the_opt_in_entry_never_sees_updates() -> None:
    assert sent(Config(), JOB_POD, "UPDATE") is False
    hook = webhook_configuration(Config(), url="https://127.0.0.1:8443/mutate")["webhooks"][1]
    assert hook["rules"][0]["operations"] == ["CREATE"]


def test_the_opt_in_entry_selects_labelled_namespaces_and_still_leaves_out_excluded_ones() -> None:
    cfg = webhook_configuration(Config(excluded_namespaces=("kube-system", "infra")), url="https://127.0.0.1:8443/mutate")
    hook = cfg["webhooks"][1]
    assert hook["name"] == "auto.pods.troupe.io"
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:8443" + MUTATE_AUTO_PATH}
    assert hook["namespaceSelector"] == {
        "matchLabels": {"troupe.io/gang-mode": "auto"},
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "infra"]}],
    }
    nothing_excluded = webhook_configuration(Config(excluded_namespaces=()), url="https://h/mutate")["webhooks"][1]
    assert nothing_excluded["namespaceSelector"] == {"matchLabels": {"troupe.io/gang-mode": "auto"}}


def test_the_opt_in_expression_names_the_configured_prefix() -> None:
    [condition] = auto_match_conditions(PFN)
    assert "'gang-scheduling.preferred.jp/gang-size'" in condition["expression"]
    assert "troupe.io/gang-size" not in condition["expression"]


def admit_auto(pod: dict[str, Any], config: Config | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    out = mutate(make_review(pod), config or Config(), gang_mode_auto=True)["response"]
    ops = patch_of({"response": out})
    return out, jsonpatch.apply_patch(copy.deepcopy(pod), ops) if ops else pod


def test_a_workload_pod_without_annotations_becomes_a_gated_auto_member_with_the_default_timeout() -> None:
    out, pod = admit_auto(JOB_POD)
    assert out["allowed"] is True
    assert pod["metadata"]["annotations"] == {"troupe.io/gang-size": "auto",
                                              "troupe.io/gang-schedule-timeout-seconds": "30"}
    assert pod["spec"]["schedulingGates"] == [{"name": contract.GATE}]
    again, _ = admit_auto(pod)
    assert "patch" not in again, "reinvoked, it adds nothing"


def test_a_topology_request_on_the_pod_is_kept_and_validated() -> None:
    good = owned_by(make_pod().container().annotate("troupe.io/topology-required-level",
                                                    "cloud.google.com/gce-topology-subblock"), "batch/v1", "Job")
    _, pod = admit_auto(good)
    assert pod["metadata"]["annotations"]["troupe.io/gang-size"] == "auto"
    bad = owned_by(make_pod().container().annotate("troupe.io/topology-required-level", "rack"), "batch/v1", "Job")
    out, _ = admit_auto(bad)
    assert out["allowed"] is False and "troupe.io/topology-required-level" in out["status"]["message"]


@pytest.mark.parametrize("pod", [
    pytest.param(owned_by(make_pod().container().gang("mine", "3"), "batch/v1", "Job"), id="its own gang"),
    pytest.param(make_pod().container().obj(), id="no workload made it"),
])
def test_a_pods_own_gang_keys_win_and_other_pods_are_left_alone(pod: dict[str, Any]) -> None:
    out, patched = admit_auto(pod)
    assert out["allowed"] is True
    assert (patched["metadata"].get("annotations") or {}).get("troupe.io/gang-size") != "auto"


def test_a_user_may_say_gang_size_auto_but_not_with_a_name() -> None:
    alone = make_pod().container().annotate("troupe.io/gang-size", "auto").obj()
    out = mutate(make_review(alone), Config())["response"]
    assert out["allowed"] is True
    named = make_pod().container().gang("g", "auto").obj()
    out = mutate(make_review(named), Config())["response"]
    assert out["allowed"] is False
    assert out["status"]["message"] == ("annotation troupe.io/gang-name: cannot be set together with "
                                        "troupe.io/gang-size: auto (the workload names the gang), got 'g'")


def test_the_app_serves_the_opt_in_entry_on_its_own_path() -> None:
    from webhook.app import create_app

    client = create_app(Config()).test_client()
    auto = client.post(MUTATE_AUTO_PATH, json=make_review(JOB_POD)).get_json()["response"]
    plain = client.post("/mutate", json=make_review(JOB_POD)).get_json()["response"]
    assert {op["path"] for op in patch_of({"response": auto})} >= {"/metadata/annotations", "/spec/schedulingGates"}
    assert "patch" not in plain, "the first entry leaves a pod without Troupe keys alone"
