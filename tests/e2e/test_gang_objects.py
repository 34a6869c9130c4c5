"""Gang objects on the real control plane (docs/decisions/043-gang-objects.md): ``kubectl get
gangs -A`` lists every gang with its phase, ``kubectl wait --for=condition=Bound`` returns
when the gang runs, a gang's object goes with its workload (owner references, the garbage
collector) or with its last pod (the reconciler)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support import e2e
from troupe import contract

GROUP, VERSION, PLURAL = contract.GANG_API
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"


def gang_object(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_kubectl_lists_every_gang_waits_for_bound_and_the_object_goes_with_its_job(
        cluster, troupe, admin_api, admin_core, namespace):
    client.BatchV1Api(admin_api).create_namespaced_job(
        namespace, e2e.indexed_job("train", 4, e2e.gang_annotations("train", 4, timeout=60), gpus=1))
    for i in range(2):  # a gang of 3 with 2 members: waits
        admin_core.create_namespaced_pod(namespace, e2e.pod_body(f"eval-{i}", e2e.gang_annotations("eval", 3), gpus=1))

    e2e.wait_for("the Job gang's object", lambda: gang_object(admin_api, namespace, "train"), timeout=60)
    waited = cluster.kubectl("wait", "--for=condition=Bound", "gang/train", "-n", namespace, "--timeout=90s", check=False,
                             timeout=100)
    assert waited.returncode == 0, waited.stderr
    assert "condition met" in waited.stdout
    assert all(p.status.phase == "Running" for p in e2e.job_pods(admin_core, namespace, "train"))

    def listed() -> dict[str, list[str]] | None:
        out = cluster.kubectl("get", "gangs", "-A", "--no-headers").stdout
        rows = {cols[1]: cols for line in out.splitlines() if (cols := line.split()) and cols[0] == namespace}
        # a gang's object is written at most once a second (decision 043): its first status
        # may count one member, the next, a second later, both
        return rows if {"train", "eval"} <= set(rows) and rows["eval"][2:4] == ["Waiting", "2/3"] else None

    rows = e2e.wait_for("both gangs in kubectl get gangs -A", listed, timeout=30)
    assert rows["train"][2:4] == ["Released", "4/4"], rows["train"]
    assert rows["eval"][2:4] == ["Waiting", "2/3"] and rows["eval"][-1] == "WaitingForMembers", rows["eval"]
    header = cluster.kubectl("get", "gangs", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "MEMBERS", "DOMAIN", "AGE", "REASON"]

    status_json = subprocess.run([str(PLUGIN), "status", "-n", namespace, "-o", "json", "--kubeconfig",
                                  str(cluster.kubeconfig("admin"))], capture_output=True, text=True, timeout=60,
                                 check=False)
    assert status_json.returncode == 0, status_json.stderr
    listed = json.loads(status_json.stdout)["items"]
    told = {g["spec"]["gangName"]: g["status"] for g in listed}
    assert told["train"]["object"]["name"] == "train"
    names = sorted(f"gang.troupe.io/{g['metadata']['name']}" for g in listed)
    # -o name prints what kubectl get takes: the Gang objects themselves.
    got = cluster.kubectl("get", *names, "-n", namespace, "-o", "name").stdout.split()
    assert sorted(got) == names
    assert told["train"]["object"]["conditions"]["Bound"] == "True", "kubectl troupe status reads the Gang object"
    assert told["eval"]["object"]["phase"] == "Waiting"

    train = gang_object(admin_api, namespace, "train")
    assert train is not None
    job = client.BatchV1Api(admin_api).read_namespaced_job("train", namespace)
    assert [(o["kind"], o["uid"]) for o in train["metadata"]["ownerReferences"]] == [("Job", job.metadata.uid)]
    status = train["status"]
    assert (status["bound"], status["running"], status["size"]) == (4, 4, 4)
    assert status["domain"].startswith("cloud.google.com/gce-topology-"), status
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Waiting": "False", "Released": "True", "Bound": "True", "Reconciling": "False", "Stalled": "False"}

    client.BatchV1Api(admin_api).delete_namespaced_job("train", namespace, propagation_policy="Background")
    e2e.wait_for("the Job gang's object gone with its Job",
                 lambda: gang_object(admin_api, namespace, "train") is None, timeout=60)
    for i in range(2):
        admin_core.delete_namespaced_pod(f"eval-{i}", namespace, grace_period_seconds=0)
    e2e.wait_for("the pod gang's object gone with its last pod",
                 lambda: gang_object(admin_api, namespace, "eval") is None, timeout=60)


def test_an_object_already_the_gangs_is_adopted_and_one_of_another_gang_is_left_alone(
        troupe, admin_api, admin_core, namespace):
    """A create refused because the name is taken reads that one object: the gang's own
    (left by an earlier leader) is adopted and its status written; another gang's is not
    touched, and that gang still runs (docs/decisions/049-hostile-tenants-third-round.md)."""
    custom = client.CustomObjectsApi(admin_api)

    def made(name: str, key: str) -> dict[str, Any]:
        return dict(custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Gang",
            "metadata": {"name": name, "annotations": {contract.GANG_KEY_ANNOTATION: key}},
            "spec": {"gangName": name}}))

    own = made("mine", f"{namespace}/mine")
    other = made("taken", f"{namespace}/somebody-else")
    for name in ("mine", "taken"):
        for i in range(2):
            admin_core.create_namespaced_pod(namespace, e2e.pod_body(f"{name}-{i}", e2e.gang_annotations(name, 2), gpus=1))

    adopted = e2e.wait_for("the gang's own object adopted and its status written",
                           lambda: (o := gang_object(admin_api, namespace, "mine")) and o.get("status") and o, timeout=60)
    assert adopted["metadata"]["uid"] == own["metadata"]["uid"], "adopted, not made again"
    e2e.wait_for("the other gang running", lambda: all(
        admin_core.read_namespaced_pod(f"taken-{i}", namespace).status.phase == "Running" for i in range(2)), timeout=90)
    left = gang_object(admin_api, namespace, "taken")
    assert left is not None and left["metadata"]["uid"] == other["metadata"]["uid"] and "status" not in left
