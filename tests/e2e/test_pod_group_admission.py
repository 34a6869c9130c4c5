"""Pod groups and adopted scheduler names in the real API server's admission chain
(docs/decisions/057-adopted-scheduler-names.md): kube-apiserver compiles the match
conditions (cel-go, not the unit tests' cel-python), sends exactly the pods they select,
and applies the webhook's patch, ``spec.schedulerName`` included.

The webhook runs on its own here (``python -m webhook serve`` with
``adoptSchedulerNames``), registered under a name of its own for one namespace only, so it
neither needs nor disturbs the session's Troupe stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.e2e import pod_body, temporary_namespace, wait_for
from tests.support.webhook_builders import Server, start_server
from troupe.config import Config
from troupe.contract import GATE
from troupe.podgroups import ORIGINAL_SCHEDULER_NAME
from webhook.registration import webhook_configuration

ADOPTED = ("volcano", "kai-scheduler", "scheduler-plugins-scheduler")
CONFIGURATION = "troupe-pod-groups-e2e"


@pytest.fixture(scope="module")
def adopting(cluster: Any, admin_core: client.CoreV1Api,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Server]]:
    """A namespace whose pods go through a webhook configured with ``adoptSchedulerNames``."""
    server = start_server(tmp_path_factory.mktemp("pod-groups-e2e"),
                          config_yaml=f"adoptSchedulerNames: [{', '.join(ADOPTED)}]\n")
    admission = client.AdmissionregistrationV1Api(cluster.api_client("admin"))
    try:
        with temporary_namespace(admin_core, "groups") as namespace:
            hook = webhook_configuration(Config(adopt_scheduler_names=ADOPTED),
                                         url=f"https://127.0.0.1:{server.port}/mutate",
                                         ca_bundle_pem=Path(server.tls.ca_file).read_bytes(), name=CONFIGURATION)
            main = hook["webhooks"][0]
            main["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            hook["webhooks"] = [main]
            admission.create_mutating_webhook_configuration(hook)
            try:
                wait_for("the configuration in effect (a pod of volcano's adopted)",
                         lambda: created(admin_core, namespace, pod("probe", scheduler="volcano"))["spec"][
                             "schedulerName"] == "default-scheduler" or None, timeout=30)
                yield namespace, server
            finally:
                admission.delete_mutating_webhook_configuration(CONFIGURATION)
    finally:
        server.stop()


def pod(name: str, scheduler: str | None = None, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = pod_body(name, annotations, labels=labels)
    if scheduler is not None:
        body["spec"]["schedulerName"] = scheduler
    return body


def created(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server would store it (a dry run: admission runs, nothing is kept),
    as raw JSON, so fields the client's models may not know survive."""
    response = core.create_namespaced_pod(namespace, body, dry_run="All", _preload_content=False)
    answer: dict[str, Any] = json.loads(response.data)
    return answer


def gates(obj: dict[str, Any]) -> list[str]:
    return [g["name"] for g in obj["spec"].get("schedulingGates", [])]


@pytest.mark.parametrize(("annotations", "labels", "scheduler"), [
    ({"scheduling.k8s.io/group-name": "train"}, None, "volcano"),
    (None, {"scheduling.x-k8s.io/pod-group": "train"}, "scheduler-plugins-scheduler"),
    ({"pod-group-name": "train"}, None, "kai-scheduler"),
], ids=["volcano", "coscheduling", "kai"])
def test_a_peers_group_pod_is_adopted_and_gated_with_its_reference_as_written(
    adopting: tuple[str, Server], admin_core: client.CoreV1Api, annotations: dict[str, str] | None,
    labels: dict[str, str] | None, scheduler: str,
) -> None:
    namespace, _ = adopting
    obj = created(admin_core, namespace, pod("w-0", scheduler, annotations, labels))
    assert obj["spec"]["schedulerName"] == "default-scheduler"
    assert obj["metadata"]["annotations"][ORIGINAL_SCHEDULER_NAME] == scheduler
    assert gates(obj) == [GATE]
    for key, value in (annotations or {}).items():
        assert obj["metadata"]["annotations"][key] == value
    for key, value in (labels or {}).items():
        assert obj["metadata"]["labels"][key] == value


def test_a_group_pod_on_kube_scheduler_is_gated_and_a_plain_adopted_pod_is_not(
    adopting: tuple[str, Server], admin_core: client.CoreV1Api
) -> None:
    namespace, _ = adopting
    group = created(admin_core, namespace, pod("w-1", annotations={"scheduling.k8s.io/group-name": "train"}))
    assert gates(group) == [GATE] and ORIGINAL_SCHEDULER_NAME not in group["metadata"]["annotations"]
    plain = created(admin_core, namespace, pod("solo", "kai-scheduler"))
    assert plain["spec"]["schedulerName"] == "default-scheduler" and gates(plain) == []


def test_a_pod_of_a_scheduler_not_listed_is_not_sent(adopting: tuple[str, Server],
                                                     admin_core: client.CoreV1Api) -> None:
    namespace, server = adopting
    obj = created(admin_core, namespace, pod("other", "my-scheduler", {"scheduling.k8s.io/group-name": "train"}))
    assert obj["spec"]["schedulerName"] == "my-scheduler" and gates(obj) == []
    assert not [line for line in server.log_lines() if line.get("name") == "other"], "never sent to the webhook"


def test_a_bad_group_name_is_refused_by_the_api_server_naming_the_field(
    adopting: tuple[str, Server], admin_core: client.CoreV1Api
) -> None:
    namespace, _ = adopting
    with pytest.raises(ApiException) as err:
        created(admin_core, namespace, pod("bad", "volcano", {"pod-group-name": "Train_1"}))
    assert err.value.status == 400, err.value.body
    message = json.loads(err.value.body)["message"]
    assert "annotation pod-group-name: must name a PodGroup" in message and "'Train_1'" in message


def test_a_created_adopted_pod_keeps_default_scheduler_and_updates_are_not_patched(
    adopting: tuple[str, Server], admin_core: client.CoreV1Api
) -> None:
    namespace, _ = adopting
    admin_core.create_namespaced_pod(namespace, pod("kept", "volcano"))
    admin_core.patch_namespaced_pod("kept", namespace, {"metadata": {"labels": {"team": "a"}}})
    stored = admin_core.read_namespaced_pod("kept", namespace)
    assert stored.spec.scheduler_name == "default-scheduler"
    assert stored.metadata.annotations[ORIGINAL_SCHEDULER_NAME] == "volcano"
    assert stored.metadata.labels == {"team": "a"}


def test_a_gated_pods_group_reference_is_fixed_and_its_other_labels_are_not(
    adopting: tuple[str, Server], admin_core: client.CoreV1Api
) -> None:
    namespace, _ = adopting
    admin_core.create_namespaced_pod(namespace, pod("held", "volcano", {"scheduling.k8s.io/group-name": "train"}))
    with pytest.raises(ApiException) as err:
        admin_core.patch_namespaced_pod("held", namespace,
                                        {"metadata": {"annotations": {"scheduling.k8s.io/group-name": "other"}}})
    assert err.value.status == 400, err.value.body
    assert "annotation scheduling.k8s.io/group-name: cannot change, from 'train' to 'other'" in json.loads(
        err.value.body)["message"]
    admin_core.patch_namespaced_pod("held", namespace, {"metadata": {"labels": {"team": "a"}}})
    stored = admin_core.read_namespaced_pod("held", namespace)
    assert stored.metadata.annotations["scheduling.k8s.io/group-name"] == "train"
    assert [g.name for g in stored.spec.scheduling_gates] == [GATE]
