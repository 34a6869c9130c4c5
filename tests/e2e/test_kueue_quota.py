"""Kueue for quota, Troupe for placement, on the real Kueue (v0.19.2, built from its module:
devtools/devcluster/kueue.py; docs/decisions/058-kueue-for-quota.md, docs/guide/kueue.md).

A ClusterQueue holds exactly one Job's worth of quota; two Jobs, each a gang of 4 whole
8-GPU nodes, each need all of it. Kueue admits one; Troupe places it whole in the one
subblock with four free hosts, around five busy ones (kube-scheduler alone would spread it);
the other stays suspended in Kueue and holds nothing in Troupe; when the first is deleted the
second runs, whole. A gang larger than its queued Job is refused at creation by the chart's
policy, and held with the Job's reason where the policy is not installed::

    block      gpu-b0                               gpu-b1
    subblock   gpu-b0-s0          gpu-b0-s1         gpu-b1-s0          gpu-b1-s1
    host       h0 h1 h2 h3        h0 h1 h2 h3       h0 h1 h2 h3        h0 h1 h2 h3
    busy       XX XX  .  .         . XX  .  .        .  . XX XX         .  .  .  .
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.kueue import KUEUE_API
from devtools.devcluster.quota import MANAGED_NAMESPACE_LABEL, Kueue
from tests.support import e2e
from tests.support.helm import CHART
from troupe import contract

pytestmark = pytest.mark.e2e

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
BUSY = ("gpu-b0-s0-h0", "gpu-b0-s0-h1", "gpu-b0-s1-h1", "gpu-b1-s0-h2", "gpu-b1-s0-h3")
#: One Job's worth: 4 pods of 8 GPUs, 100m CPU and 64Mi each (tests.support.e2e.pod_body).
QUOTA = {"cpu": "400m", "memory": "256Mi", "nvidia.com/gpu": "32"}
GROUP, VERSION = KUEUE_API.split("/")


class Queues:
    """The module's namespace (managed by Kueue), its LocalQueue and the cluster-scoped
    ResourceFlavor and ClusterQueue behind it."""

    def __init__(self, namespace: str, local_queue: str, cluster_queue: str) -> None:
        self.namespace, self.local_queue, self.cluster_queue = namespace, local_queue, cluster_queue


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Iterator[Kueue]:
    with Kueue(cluster) as running:
        yield running


@pytest.fixture(scope="module")
def queues(kueue: Kueue, admin_api: Any, admin_core: client.CoreV1Api) -> Iterator[Queues]:
    suffix = uuid.uuid4().hex[:6]
    flavor, cq, lq = f"flavor-{suffix}", f"cq-{suffix}", "team-a"
    namespace = f"kueue-{suffix}"
    admin_core.create_namespace({"metadata": {"name": namespace, "labels": {MANAGED_NAMESPACE_LABEL: "true"}}})
    custom = client.CustomObjectsApi(admin_api)
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors",
                                        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": list(QUOTA),
            "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in QUOTA.items()]}]}]}})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", {
        "apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": lq, "namespace": namespace},
        "spec": {"clusterQueue": cq}})
    e2e.wait_for(f"ClusterQueue {cq} active", lambda: any(
        c["type"] == "Active" and c["status"] == "True"
        for c in custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cq).get("status", {}).get("conditions", [])))
    try:
        yield Queues(namespace, lq, cq)
    finally:
        e2e.delete_namespace(admin_core, namespace)  # its Jobs and Workloads go first: Kueue frees the queue
        for plural, name in (("clusterqueues", cq), ("resourceflavors", flavor)):
            custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        e2e.wait_for("the queues deleted", lambda: not [
            o for plural in ("clusterqueues", "resourceflavors")
            for o in custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
            if o["metadata"]["name"] in (cq, flavor)])


def queued_job(name: str, queue: str, size: int, pods: int = 4) -> dict[str, Any]:
    """An Indexed Job of ``pods`` whole-node pods, a Troupe gang of ``size``, queued in ``queue``."""
    job = e2e.indexed_job(name, pods, e2e.gang_annotations(name, size), gpus=8)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def workload_of(custom: client.CustomObjectsApi, namespace: str, job: str) -> dict[str, Any] | None:
    """The Kueue Workload of a Job (its controller owner), or None."""
    for w in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]:
        if any(o.get("kind") == "Job" and o.get("name") == job for o in w["metadata"].get("ownerReferences", [])):
            return dict(w)
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> bool:
    return obj is not None and any(c["type"] == kind and c["status"] == "True"
                                   for c in obj.get("status", {}).get("conditions", []))


def fill(core: client.CoreV1Api, namespace: str) -> None:
    """Take all 8 GPUs of each busy node with a pod bound there directly."""
    for node in BUSY:
        body = e2e.pod_body(f"busy-{node}", gpus=8)
        body["spec"]["nodeName"] = node
        core.create_namespaced_pod(namespace, body)
    e2e.wait_for("busy pods Running", lambda: all(
        core.read_namespaced_pod(f"busy-{n}", namespace).status.phase == "Running" for n in BUSY))


def subblocks(core: client.CoreV1Api, pods: list[Any]) -> set[str]:
    return {core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in pods}


def test_kueue_admits_one_of_two_jobs_troupe_places_it_whole_and_the_other_waits_holding_nothing(
        troupe, admin_api, admin_core, queues):
    ns, batch, custom = queues.namespace, client.BatchV1Api(admin_api), client.CustomObjectsApi(admin_api)
    fill(admin_core, ns)
    batch.create_namespaced_job(ns, queued_job("first", queues.local_queue, 4))
    e2e.wait_for("Kueue admits first", lambda: condition(workload_of(custom, ns, "first"), "Admitted"))
    batch.create_namespaced_job(ns, queued_job("second", queues.local_queue, 4))
    e2e.wait_for("Kueue queues second", lambda: workload_of(custom, ns, "second"))

    first = e2e.running_job_pods(admin_core, ns, "first", 4)
    assert subblocks(admin_core, first) == {"gpu-b1-s1"}, "whole, in the one subblock with four free hosts"
    for pod in first:
        assert pod.spec.node_selector[contract.HOSTNAME_LABEL] == pod.spec.node_name, "pinned by Troupe"
        assert pod.metadata.labels["kueue.x-k8s.io/podset"], "admitted by Kueue"

    # The second waits in Kueue: suspended, not admitted, and nothing of it is in Troupe.
    second = batch.read_namespaced_job("second", ns)
    assert second.spec.suspend is True
    assert not condition(workload_of(custom, ns, "second"), "QuotaReserved")
    assert e2e.job_pods(admin_core, ns, "second") == []
    assert e2e.reservation(batch, ns, "second") is None, "no reservation on a suspended Job"

    def gang_objects() -> list[str] | None:  # the reconciler writes them on its own, after the release
        names = [g["spec"]["gangName"] for g in
                 custom.list_namespaced_custom_object("troupe.io", "v1alpha1", ns, "gangs")["items"]]
        return names if "first" in names else None

    assert e2e.wait_for("first's Gang object", gang_objects) == ["first"], "no Gang object for the waiting Job"

    batch.delete_namespaced_job("first", ns, propagation_policy="Background")
    e2e.wait_for("Kueue admits second", lambda: condition(workload_of(custom, ns, "second"), "Admitted"), timeout=60)
    second_pods = e2e.running_job_pods(admin_core, ns, "second", 4)
    assert len(subblocks(admin_core, second_pods)) == 1, "whole, in one subblock"
    assert batch.read_namespaced_job("second", ns).spec.suspend is False
    batch.delete_namespaced_job("second", ns, propagation_policy="Background")
    e2e.wait_for("the Jobs' pods gone", lambda: not [
        p for p in admin_core.list_namespaced_pod(ns).items if not p.metadata.name.startswith("busy-")])


@pytest.fixture(params=[()], ids=["default"])
def gang_fits_workload(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """The chart's policy troupe-kueue-gang-fits-workload (and its binding) applied alone, as
    the chart renders it (with the ``helm --set`` values of the fixture's parameter); removed
    after the test."""
    rendered = subprocess.run(
        [str(cluster.binaries.helm), "template", "troupe-kueue", str(CHART), "--kube-version", "1.37.2",
         *request.param, "--show-only", "templates/admissionpolicy-gang-fits-workload.yaml"],
        capture_output=True, text=True, check=True).stdout
    cluster.kubectl("apply", "-f", "-", input=rendered)
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    try:
        yield "troupe-kueue-gang-fits-workload"
    finally:
        for doc in reversed(docs):
            cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")


def test_a_gang_larger_than_its_queued_job_is_refused_at_creation_before_it_holds_quota(
        troupe, admin_api, queues, gang_fits_workload):
    ns, batch, custom = queues.namespace, client.BatchV1Api(admin_api), client.CustomObjectsApi(admin_api)
    trap = queued_job("trap", queues.local_queue, size=5)

    def refused() -> str | None:  # the API server compiles a new policy on its own: until it refuses
        try:
            batch.create_namespaced_job(ns, trap, dry_run="All")
        except client.ApiException as e:
            return str(e.body) if e.status == 422 else None
        return None

    body = e2e.wait_for("the policy refuses the trap", refused, timeout=30)
    for text in (f"ValidatingAdmissionPolicy '{gang_fits_workload}'",
                 "annotation troupe.io/gang-size of the pod template: 5 members, but Job trap runs at most 4 pods "
                 "(min(spec.parallelism, spec.completions)); Kueue admits it alone (label kueue.x-k8s.io/queue-name)",
                 "give the gang at most 4 members, or troupe.io/gang-size: auto"):
        assert text in body, body
    with pytest.raises(client.ApiException) as really:
        batch.create_namespaced_job(ns, trap)
    assert really.value.status == 422
    assert workload_of(custom, ns, "trap") is None, "nothing queued, no quota held"
    # A gang the Job fills, and a Job not queued in Kueue, pass.
    batch.create_namespaced_job(ns, queued_job("fits", queues.local_queue, 4), dry_run="All")
    unqueued = queued_job("unqueued", queues.local_queue, 5)
    unqueued["metadata"]["labels"] = {}
    batch.create_namespaced_job(ns, unqueued, dry_run="All")


def _template(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def _queued(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "labels": {QUEUE_LABEL: "team-a"}},
            "spec": spec}


GANG_9 = e2e.gang_annotations("g", 9)
#: Each a queued workload of 8 pods whose template names a gang of 9 (or a minimum of 9), and
#: what the refusal says of its count.
OVERSIZED = [
    ("a JobSet: driver 1 + workers 2 x min(4, 3)", "jobsets", _queued("jobset.x-k8s.io/v1alpha2", "JobSet", {
        "replicatedJobs": [
            {"name": "driver", "template": {"spec": {"template": _template(GANG_9)}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 3,
                                                                     "template": _template(GANG_9)}}}]}),
     "7 pods (the sum over spec.replicatedJobs of replicas x min(parallelism, completions))"),
    ("a PyTorchJob: master 1 + workers 7", "pytorchjobs", _queued("kubeflow.org/v1", "PyTorchJob", {
        "pytorchReplicaSpecs": {"Master": {"template": _template(GANG_9)},
                                "Worker": {"replicas": 7, "template": _template(GANG_9)}}}),
     "8 pods (the sum of spec.pytorchReplicaSpecs[*].replicas)"),
    ("an MPIJob: launcher 1 + workers 7", "mpijobs", _queued("kubeflow.org/v2beta1", "MPIJob", {
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": _template(GANG_9)},
                            "Worker": {"replicas": 7, "template": _template(GANG_9)}}}),
     "8 pods (the sum of spec.mpiReplicaSpecs[*].replicas)"),
    ("a RayCluster: head 1 + workers at most 7", "rayclusters", _queued("ray.io/v1", "RayCluster", {
        "headGroupSpec": {"rayStartParams": {}, "template": _template(GANG_9)},
        "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "minReplicas": 1, "maxReplicas": 7, "rayStartParams": {},
                              "template": _template(GANG_9)}]}),
     "8 pods (1 head + the sum over spec.workerGroupSpecs of maxReplicas x numOfHosts (suspended groups: 0))"),
    ("a LeaderWorkerSet: 2 groups of 4", "leaderworkersets", _queued("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {
        "replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": _template(GANG_9)}}),
     "8 pods (spec.replicas x spec.leaderWorkerTemplate.size)"),
    ("a Job of 8 whose minimum is 9", "jobs", _queued("batch/v1", "Job", {
        "parallelism": 8, "completions": 8,
        "template": _template({**e2e.gang_annotations("g", 10), "troupe.io/gang-min-size": "9"})}),
     "8 pods (min(spec.parallelism, spec.completions)); Kueue admits it alone"),
]


@pytest.mark.parametrize(("case", "plural", "obj", "want"), OVERSIZED, ids=[c[0] for c in OVERSIZED])
def test_the_policy_counts_each_supported_workload_as_the_reconciler_does(
        troupe, admin_api, queues, gang_fits_workload, case, plural, obj, want):
    group, version = obj["apiVersion"].rpartition("/")[::2]

    def refused() -> str | None:
        try:
            if plural == "jobs":
                client.BatchV1Api(admin_api).create_namespaced_job(queues.namespace, obj, dry_run="All")
            else:
                client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
                    group, version, queues.namespace, plural, obj, dry_run="All")
        except client.ApiException as e:
            return str(e.body) if e.status == 422 else None
        return None

    body = e2e.wait_for(f"the policy refuses {case}", refused, timeout=30)
    key = "troupe.io/gang-min-size" if plural == "jobs" else "troupe.io/gang-size"
    assert f"annotation {key} of the pod template: 9 members, but {obj['kind']} w runs at most {want}" in body, body


VOLCANO_ADOPTED = ("--set", "config.adoptSchedulerNames={volcano}")


@pytest.mark.parametrize("gang_fits_workload", [VOLCANO_ADOPTED], ids=["volcano-adopted"], indirect=True)
def test_a_queued_jobs_volcano_minimum_above_its_pods_is_refused_at_creation_when_volcano_is_adopted(
        troupe, admin_api, queues, gang_fits_workload):
    """docs/decisions/066-queued-minimum-by-every-source.md: the group Volcano's controller
    would make for a Job's adopted pods takes its minimum from the Job's own annotation, which
    the policy sees; a pod template naming a gang or a group is judged by those instead."""
    ns, batch = queues.namespace, client.BatchV1Api(admin_api)
    trap = e2e.indexed_job("volcano-trap", 4, {}, gpus=8)
    trap["metadata"]["labels"] = {QUEUE_LABEL: queues.local_queue}
    trap["metadata"]["annotations"] = {"scheduling.volcano.sh/group-min-member": "5"}
    trap["spec"]["template"]["spec"]["schedulerName"] = "volcano"

    def refused() -> str | None:
        try:
            batch.create_namespaced_job(ns, trap, dry_run="All")
        except client.ApiException as e:
            return str(e.body) if e.status == 422 else None
        return None

    body = e2e.wait_for("the policy refuses the Volcano trap", refused, timeout=30)
    assert ("annotation scheduling.volcano.sh/group-min-member of Job volcano-trap: 5 members, but Job volcano-trap "
            "runs at most 4 pods (min(spec.parallelism, spec.completions)); Kueue admits it alone") in body, body
    assert "give the group a minimum of at most 4" in body
    fits = dict(trap, metadata=dict(trap["metadata"], annotations={"scheduling.volcano.sh/group-min-member": "4"}))
    batch.create_namespaced_job(ns, fits, dry_run="All")
    named = e2e.indexed_job("named", 4, e2e.gang_annotations("named", 4), gpus=8)
    named["metadata"] = dict(trap["metadata"], name="named")
    named["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    batch.create_namespaced_job(ns, named, dry_run="All")  # Troupe's keys name the gang: they are judged


def test_without_the_policy_the_admitted_trap_is_held_with_the_jobs_reason(troupe, admin_api, admin_core, queues):
    ns, batch = queues.namespace, client.BatchV1Api(admin_api)
    trap = queued_job("trap", queues.local_queue, size=5)

    def accepted() -> bool:  # the API server forgets a deleted policy on its own, too
        try:
            batch.create_namespaced_job(ns, trap, dry_run="All")
        except client.ApiException as e:
            if e.status != 422:
                raise
            return False
        return True

    e2e.wait_for("no policy refuses the trap", accepted, timeout=30)
    batch.create_namespaced_job(ns, trap)

    def held() -> list[str] | None:
        pods = e2e.job_pods(admin_core, ns, "trap")
        reasons = [c.message for p in pods for c in (p.status.conditions or [])
                   if c.type == contract.GANG_CONDITION and c.reason == "Held"]
        return reasons if len(pods) == 4 and len(reasons) == 4 else None

    reasons = e2e.wait_for("the trap's 4 members held", held, timeout=60)
    assert all(r == reasons[0] for r in reasons)
    assert reasons[0].startswith(
        f"annotation troupe.io/gang-size: 5 members, but Job {ns}/trap runs at most 4 pods (Job trap: "
        f"min(spec.parallelism, spec.completions)); Kueue admits it alone (label kueue.x-k8s.io/queue-name: "
        f"{queues.local_queue}), so the gang can never complete"), reasons[0]
    assert all(p.spec.scheduling_gates for p in e2e.job_pods(admin_core, ns, "trap")), "still gated"
    batch.delete_namespaced_job("trap", ns, propagation_policy="Background")
