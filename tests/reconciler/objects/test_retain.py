"""The retain policy: what the cache keeps of an object is everything its readers read, and a
re-list shares what the cache holds already instead of copying it
(docs/decisions/017-cache-memory.md)."""

from __future__ import annotations

import copy
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model.budgets import Budget
from reconciler.engine.model.devicegroups import DeviceGroup
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.templates import slots
from reconciler.engine.model.workloads import job_parallelism, workload
from reconciler.objects.retain import BUDGET, DEVICE_GROUP, JOB, NODE, POD, Retained, retain
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config

MANAGED = [{"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:job-name": {}}}, "f:spec": {"f:containers": {}}}}]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def bulky(obj: dict) -> dict:
    """``obj`` as the API server returns it: managed fields, volumes, env, statuses..."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta["managedFields"] = MANAGED
    meta.setdefault("annotations", {})[LAST_APPLIED] = '{"apiVersion":"v1","kind":"Pod"}' * 20
    meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumes", []).append(
        {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}})
    for c in spec.get("containers", []):
        c.update(image="trainer:1", env=[{"name": "A", "value": "1"}], volumeMounts=[{"name": "v", "mountPath": "/v"}])
        c.setdefault("ports", []).append({"name": "metrics", "containerPort": 9090})
    status = obj.setdefault("status", {})
    status["containerStatuses"] = [{"name": "main", "ready": True, "imageID": "sha256:" + "0" * 64}]
    status["images"] = [{"names": ["trainer:1"], "sizeBytes": 1}]
    return obj


def same_info(kept: object, whole: object) -> bool:
    """Equal in every field: kubectl's copy of the object, the one thing dropped, is no
    annotation a parsed pod keeps."""
    names = [f.name for f in dataclasses.fields(kept)]  # type: ignore[arg-type]
    return [getattr(kept, n) for n in names] == [getattr(whole, n) for n in names]


pods = st.builds(
    lambda name, gang, index, gpus, gated, node, owned, deleting, extras: _pod(
        name, gang, index, gpus, gated, node, owned, deleting, extras),
    st.sampled_from(["w-0", "w-1", "train-7"]), st.sampled_from(["g", "train"]), st.integers(0, 63),
    st.integers(0, 8), st.booleans(), st.sampled_from([None, "n1", "n2"]), st.booleans(), st.booleans(),
    st.fixed_dictionaries({}, optional={
        "affinity": st.just({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "cloud.google.com/gce-topology-block", "operator": "In", "values": ["b1"]}]}]}}}),
        "tolerations": st.just([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        "initContainers": st.just([{"name": "sidecar", "restartPolicy": "Always", "image": "proxy:1",
                                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                                   {"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "4"}}}]),
        "overhead": st.just({"cpu": "250m", "memory": "120Mi"}),
        "resources": st.just({"requests": {"cpu": "8", "memory": "64Gi"}}),
        "priority": st.integers(-10, 1000),
        "nodeSelector": st.just({"pool": "gpu"}),
        "terminationGracePeriodSeconds": st.integers(0, 120),
        "activeDeadlineSeconds": st.integers(1, 3600),
        "topologySpreadConstraints": st.just([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2,
                                               "labelSelector": {"matchLabels": {"app": "train"}},
                                               "matchLabelKeys": ["batch.kubernetes.io/job-completion-index"]}]),
        "volumes": st.just([{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
                            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                            {"name": "inline", "csi": {"driver": "x", "volumeAttributes": {"a": "b"}}}]),
        "resourceClaims": st.just([{"name": "gpu", "resourceClaimName": "gpus"}]),
        "hostPorts": st.just([{"containerPort": 8080, "hostPort": 8080, "hostIP": "10.0.0.1", "protocol": "UDP"}]),
        "podAffinity": st.just({
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "train"}},
                 "namespaceSelector": {}, "mismatchLabelKeys": ["job-name"]}]},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "namespaces": ["ps"],
                 "labelSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["ps"]}]}}]}}),
    }),
)


def _pod(name, gang, index, gpus, gated, node, owned, deleting, extras):
    b = make_pod(name).gang(gang, 64).index(index).gpus(gpus)
    if gated:
        b = b.gated("troupe.io/placement", "example.com/quota")
    if node:
        b = b.running_on(node)
    pod = b.build()
    if node:
        pod["status"]["startTime"] = "2026-11-23T08:00:00Z"  # what a pod's own time limit runs from
    extras = copy.deepcopy(extras)
    if "hostPorts" in extras:
        pod["spec"]["containers"][0]["ports"] = extras.pop("hostPorts")
    if "podAffinity" in extras:
        pod["spec"].setdefault("affinity", {}).update(extras.pop("podAffinity"))
        extras.get("affinity", {}).update(pod["spec"]["affinity"])
    pod["spec"].update(extras)
    if owned:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": gang, "uid": "u1",
                                               "controller": True, "blockOwnerDeletion": True}]
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-23T09:00:00Z"
    return pod


@settings(max_examples=150, deadline=None)
@given(pods)
def test_a_retained_pod_parses_exactly_as_the_whole_one(pod):
    whole = bulky(pod)
    kept = retain(POD, whole)
    assert same_info(PodInfo.from_object(kept), PodInfo.from_object(whole))
    assert "managedFields" not in kept["metadata"]
    assert {"name": "kube-api-access"} in kept["spec"]["volumes"], "a volume's contents are not kept"
    assert LAST_APPLIED not in kept["metadata"]["annotations"]
    assert "containerStatuses" not in kept["status"] and "image" not in kept["spec"]["containers"][0]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 8), st.booleans(), st.booleans(), st.sampled_from(["True", "False", "Unknown"]))
def test_a_retained_node_parses_exactly_as_the_whole_one(gpus, tainted, cordoned, ready):
    node = make_node("n1").topology("b1", "s1", "h1").gpus(gpus).build()
    node["spec"]["unschedulable"] = cordoned
    if tainted:
        node["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    node["status"]["conditions"] = [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "ok",
                                     "lastHeartbeatTime": "2026-11-23T09:00:00Z"}]
    whole = bulky(node)
    kept = retain(NODE, whole)
    assert same_info(NodeInfo.from_object(kept), NodeInfo.from_object(whole))
    assert "images" not in kept["status"] and "managedFields" not in kept["metadata"]
    assert set(kept["metadata"].get("annotations", {})) <= {"reconciler.troupe.io/failures"}, \
        "of the annotations, only the member failures Troupe recorded are kept"


def test_a_retained_job_keeps_its_parallelism_and_what_its_slots_are_made_of():
    template = {"metadata": {"labels": {"app": "t"}, "annotations": {"troupe.io/gang-size": "auto"}},
                "spec": {"containers": [{"name": "c", "image": "trainer:1", "command": ["python"],
                                         "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
                         "tolerations": [{"key": "gpu", "operator": "Exists"}]}}
    job = bulky({"metadata": {"name": "train", "namespace": "team-a"},
                 "spec": {"parallelism": 64, "suspend": False, "template": template}})
    kept = retain(JOB, job)
    assert job_parallelism(kept) == 64
    assert [slot.requests for slot in slots("Job", kept)] == [slot.requests for slot in slots("Job", job)]
    assert slots("Job", kept)[0].node_filter == slots("Job", job)[0].node_filter
    container = kept["spec"]["template"]["spec"]["containers"][0]
    assert "image" not in container and "command" not in container


def test_a_retained_job_gives_the_same_workload_as_the_whole_one():
    job = bulky({"metadata": {"name": "train", "namespace": "team-a",
                              "annotations": {"troupe.io/topology-required-level": "cloud.google.com/gce-topology-block"}},
                 "spec": {"parallelism": 8, "completions": 8, "template": {}}, "status": {"succeeded": 3}})
    assert workload("Job", retain(JOB, job)) == workload("Job", job)
    assert workload("Job", job).size == 5


def test_a_retained_job_keeps_its_deadline_and_the_conditions_that_end_it():
    """What says a Job is finishing (docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md):
    ``activeDeadlineSeconds`` counted from ``status.startTime``, and its conditions."""
    job = bulky({"metadata": {"name": "train", "namespace": "team-a"},
                 "spec": {"parallelism": 2, "completions": 2, "activeDeadlineSeconds": 60, "template": {}},
                 "status": {"startTime": "2027-01-15T08:00:00Z", "active": 2, "conditions": [
                     {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "m",
                      "lastProbeTime": "2027-01-15T08:01:00Z", "lastTransitionTime": "2027-01-15T08:01:00Z"}]}})
    kept, whole = workload("Job", retain(JOB, job)), workload("Job", job)
    assert kept == whole
    assert kept is not None and kept.ends_at == 1_800_000_060.0 and kept.finished


def test_a_retained_device_group_parses_exactly_as_the_whole_one():
    group = bulky({"apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
                   "metadata": {"name": "g", "uid": "u", "resourceVersion": "7", "deletionTimestamp": "2026-11-23T09:00:00Z"},
                   "spec": {"resources": {"nvidia.com/gpu": 2}, "nodeSelector": {"pool": "a"}, "schedulingStrategy": "spread"},
                   "status": {"phase": "Bound", "nodeName": "n1", "selectedDevices": {"nvidia.com/gpu": "0,1"},
                              "conditions": [{"type": "Allocated", "status": "True"}]}})
    group["metadata"]["finalizers"] = ["deviceshare.io/release-devices"]
    kept = retain(DEVICE_GROUP, group)
    assert DeviceGroup.from_object(kept) == DeviceGroup.from_object(group)
    assert "managedFields" not in kept["metadata"]


def test_a_retained_budget_parses_exactly_as_the_whole_one():
    whole = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "keep", "namespace": "team", "uid": "u", "resourceVersion": "7",
                          "managedFields": [{"manager": "kubectl"}], "annotations": {"a": "b"}},
             "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "x"},
                                                      "matchExpressions": [{"key": "t", "operator": "Exists"}]}},
             "status": {"disruptionsAllowed": 1, "currentHealthy": 4, "desiredHealthy": 3, "expectedPods": 4,
                        "observedGeneration": 1, "disruptedPods": {"p": "2024-01-01T00:00:00Z"}}}
    kept = retain(BUDGET, whole)
    assert Budget.from_object(kept) == Budget.from_object(whole)
    assert "managedFields" not in kept["metadata"] and set(kept["status"]) == {"disruptionsAllowed"}


def test_retaining_is_done_once():
    kept = retain(POD, bulky(make_pod("w-0").build()))
    assert isinstance(kept, Retained) and retain(POD, kept) is kept


def versioned(pod: dict, uid: str, rv: int) -> dict:
    pod = bulky(pod)
    pod["metadata"].update(uid=uid, resourceVersion=str(rv))
    return pod


def test_a_relist_shares_what_the_cache_holds_and_parses_only_what_changed():
    cache = ClusterCache(Config())
    first = [versioned(make_pod(f"w-{i}").gang("g", 4).index(i).gpus(1).gated().build(), f"u{i}", 10 + i)
             for i in range(4)]
    cache.replace_pods([cache.retain_pod(p) for p in first])
    held = {i: cache.pod_info(PodKey("team-a", f"w-{i}")) for i in range(4)}
    infos = {i: cache.members("team-a/g") for i in range(1)}[0]

    # the same list again, w-1 changed, w-3 gone, w-4 new: as a re-list after 410 Gone delivers it
    second = [versioned(make_pod(f"w-{i}").gang("g", 4).index(i).gpus(1).gated().build(), f"u{i}", 10 + i)
              for i in (0, 2)]
    second.append(versioned(make_pod("w-1").gang("g", 4).index(1).gpus(1).build(), "u1", 99))
    second.append(versioned(make_pod("w-4").gang("g", 4).index(3).gpus(1).gated().build(), "u4", 100))
    transformed = [cache.retain_pod(p) for p in second]
    assert transformed[0] is second[0] and transformed[1] is second[1], "the same version: not cut, not kept"
    assert isinstance(transformed[2], Retained) and "managedFields" not in transformed[2]["metadata"]
    touched = cache.replace_pods(transformed)
    assert touched == {"team-a/g"}
    assert cache.pod_info(PodKey("team-a", "w-0")) is held[0]
    assert cache.pod_info(PodKey("team-a", "w-1")).resource_version == "99"
    assert cache.pod_info(PodKey("team-a", "w-3")) is None
    assert cache.pod_info(PodKey("team-a", "w-4")) is not None
    kept_infos = {i.name: i for i in cache.members("team-a/g")}
    old_infos = {i.name: i for i in infos}
    assert kept_infos["w-0"] is old_infos["w-0"], "not parsed again"
    assert kept_infos["w-1"] is not old_infos["w-1"] and not kept_infos["w-1"].gated


def test_a_write_response_is_parsed_when_assumed_and_only_its_parsed_form_kept():
    cache = ClusterCache(Config())
    cache.assume(versioned(make_pod("w-0").gang("g", 2).gpus(1).build(), "u0", 5))
    assert cache.pod_info(PodKey("team-a", "w-0")).resource_version == "5"
    assert cache._pods[PodKey("team-a", "w-0")].obj is None, "the object is not kept (docs/decisions/059)"


def test_a_node_relist_keeps_the_entries_of_unchanged_nodes():
    cache = ClusterCache(Config())
    nodes = [bulky(make_node(f"n{i}").gpus(8).build()) for i in range(3)]
    for i, n in enumerate(nodes):
        n["metadata"].update(uid=f"n{i}", resourceVersion=str(i + 1))
    cache.replace_nodes([cache.retain_node(n) for n in nodes])
    held = cache.node_info("n1")
    again = copy.deepcopy(nodes)
    cache.replace_nodes([cache.retain_node(n) for n in again])
    assert cache.node_info("n1") is held, "not parsed again"
    assert cache._nodes["n1"].obj is None, "the object is not kept (docs/decisions/059)"


def test_the_whole_objects_are_kept_when_asked_for_a_baseline():
    cache = ClusterCache(Config(), retained=False)
    pod = versioned(make_pod("w-0").gpus(1).build(), "u0", 5)
    cache.replace_pods([pod])
    assert cache._pods[PodKey("team-a", "w-0")].obj is pod


def test_a_relist_does_not_undo_a_newer_version_the_controller_assumed_meanwhile():
    cache = ClusterCache(Config())
    cache.replace_pods([versioned(make_pod("w-0").gang("g", 2).gpus(1).gated().build(), "u0", 10)])
    cache.assume(versioned(make_pod("w-0").gang("g", 2).gpus(1).build(), "u0", 12))  # released: rv 12
    cache.replace_pods([versioned(make_pod("w-0").gang("g", 2).gpus(1).gated().build(), "u0", 11)])
    assert cache.pod_info(PodKey("team-a", "w-0")).resource_version == "12"
