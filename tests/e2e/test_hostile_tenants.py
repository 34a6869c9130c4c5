"""What one tenant makes in its own namespace cannot stall another tenant's gang, nor restart
the reconciler (issue "Hardening, third round"; docs/decisions/049-hostile-tenants-third-round.md).

On the real control plane, the attacker makes, with the verbs a tenant has: a PyTorchJob of
2,147,483,647 workers and one member pod of it, a plain Job carrying a
forged reservation record that names every node, a gang member claiming devices through a
ResourceClaimTemplate whose CEL selector costs 10,201 evaluations a device, a running pod
with 5,000 required anti-affinity terms, and a gang member with 65 of them. The victim's
gang of four whole-GPU members is released and runs beside all of it; the reconciler
removes the forged record and tells the Job, holds the attacker's gangs with reasons that
name the bound, and never restarts (the autouse check fails the test if it died).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.devcluster import dra
from reconciler.engine.model import cel
from tests.support.dra_e2e import DRIVER, claim_spec, create, with_claim
from tests.support.e2e import (
    debug_gangs,
    delete_namespace,
    gang_annotations,
    new_namespace,
    pod_body,
    wait_for,
)
from troupe import contract
from troupe.bounds import MAX_POD_TERMS

INT32 = 2**31 - 1
LIST = "[" + ",".join(map(str, range(100))) + "]"
#: Nested comprehensions over 101 x 101: the API server accepts it (its estimate is far
#: under its limit); Troupe refuses to evaluate it per device.
COSTLY = f'{LIST}.all(x, {LIST}.all(y, x + y >= 0 && device.driver == "{DRIVER}"))'


def anti_affinity(terms: int) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": contract.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"nobody": f"v{i}"}}}
        for i in range(terms)]}}


def pytorch_job(name: str, workers: int) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"troupe.io/gang-size": "auto"}},
                "spec": pod_body("unused", gpus=8)["spec"]}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


def forged_job(name: str, nodes: list[str]) -> dict[str, Any]:
    """A suspended plain Job (no gang: Troupe does not plan it) carrying a reservation
    record no reconciler signed, naming ``nodes``."""
    record = json.dumps({"gang": f"job:{name}", "nodes": nodes, "plannedAt": "9999-01-01T00:00:00.000+00:00",
                         "sig": "0" * 64})
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": {contract.RESERVATION: record}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1,
                     "template": {"spec": {**pod_body("unused", gpus=8)["spec"], "restartPolicy": "Never"}}}}


def phase_and_reason(troupe: Any, key: str) -> tuple[str, str] | None:
    found = next((g for g in debug_gangs(troupe) if g["gang"] == key), None)
    return (found["phase"], found["reason"]) if found is not None else None


@pytest.fixture
def namespaces(admin_core: client.CoreV1Api) -> Any:
    """The attacker's and the victim's namespaces, deleted afterwards with all they hold."""
    made = [new_namespace(admin_core, "attacker"), new_namespace(admin_core, "victim")]
    yield made
    for name in made:
        delete_namespace(admin_core, name, timeout=90)


def test_another_tenants_gang_runs_beside_every_hostile_object_and_the_reconciler_never_restarts(
        troupe, workload_controllers, admin_api, admin_core, namespaces) -> None:
    attacker, victim = namespaces
    custom, batch = client.CustomObjectsApi(admin_api), client.BatchV1Api(admin_api)
    reconciler_pid = troupe.process("troupe-reconciler").record.pid
    nodes = sorted(n.metadata.name for n in admin_core.list_node().items)
    if not custom.list_cluster_custom_object(dra.GROUP, dra.VERSION, "deviceclasses",
                                             field_selector=f"metadata.name={DRIVER}")["items"]:
        custom.create_cluster_custom_object(dra.GROUP, dra.VERSION, "deviceclasses", dra.device_class(DRIVER))

    job = custom.create_namespaced_custom_object("kubeflow.org", "v1", attacker, "pytorchjobs", pytorch_job("huge", INT32))
    member = pod_body("huge-master-0", {"troupe.io/gang-size": "auto"}, gpus=8)  # as the operator would make it
    member["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "huge",
                                              "uid": job["metadata"]["uid"], "controller": True}]
    admin_core.create_namespaced_pod(attacker, member)
    batch.create_namespaced_job(attacker, forged_job("squat", nodes))
    assert cel.cost(COSTLY) > cel.MAX_COST
    create(admin_api, attacker, "resourceclaimtemplates", "costly", claim_spec(1, selector=COSTLY))
    admin_core.create_namespaced_pod(attacker, with_claim(pod_body("costly-0", gang_annotations("costly", 1)),
                                                          template="costly"))
    heavy = pod_body("heavy")
    heavy["spec"]["affinity"] = anti_affinity(5000)
    admin_core.create_namespaced_pod(attacker, heavy)
    too_many = pod_body("terms-0", gang_annotations("terms", 1))
    too_many["spec"]["affinity"] = anti_affinity(MAX_POD_TERMS + 1)
    with pytest.raises(ApiException) as refused:
        admin_core.create_namespaced_pod(attacker, too_many)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 400 and f"{MAX_POD_TERMS} required anti-affinity terms" in message
    assert f"podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: {MAX_POD_TERMS + 1} entries" in message

    for i in range(4):
        admin_core.create_namespaced_pod(victim, pod_body(f"train-{i}", gang_annotations("train", 4), gpus=8))
    wait_for("the victim's gang Running beside the attacker's objects", lambda: all(
        (p := admin_core.read_namespaced_pod(f"train-{i}", victim)).status.phase == "Running"
        and not p.spec.scheduling_gates for i in range(4)), timeout=90)
    wait_for("the heavy pod Running", lambda: admin_core.read_namespaced_pod("heavy", attacker).status.phase == "Running")

    def record_removed() -> bool:
        return contract.RESERVATION not in (batch.read_namespaced_job("squat", attacker).metadata.annotations or {})

    wait_for("the forged record removed from the plain Job", record_removed, timeout=60)
    told = admin_core.list_namespaced_event(attacker, field_selector="involvedObject.name=squat").items
    assert any(e.reason == "ReservationRemoved" and e.type == "Warning" for e in told)

    huge = wait_for("the PyTorchJob's gang held", lambda: phase_and_reason(troupe, f"{attacker}/pytorchjob:huge"))
    assert "more than the 10000 one gang may have" in huge[1], huge
    costly = wait_for("the costly claim's gang held", lambda: phase_and_reason(troupe, f"{attacker}/costly"))
    assert "costs more than Troupe evaluates per device" in costly[1], costly
    assert admin_core.read_namespaced_pod("costly-0", attacker).spec.scheduling_gates, "never released"

    assert troupe.process("troupe-reconciler").record.pid == reconciler_pid
    assert troupe.process("troupe-reconciler").popen.poll() is None, "the reconciler never restarted"
