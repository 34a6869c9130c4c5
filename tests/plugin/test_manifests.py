"""``kubectl troupe plan``'s manifests: the pods Jobs, JobSets and Pods create, as their
controllers make them, admitted as Troupe's webhook admits them (checked against the
webhook's own ``mutate`` on the same pods)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from reconciler.tools.manifests import Context, ManifestError, admit, expand
from troupe.config import Config
from webhook.admission import mutate, patch_of

NOW = 1772359200.0  # 2026-03-01T10:00:00Z


def objects(text: str) -> list[tuple[str, str, dict]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    return [(f"manifest: document {i + 1}", d["kind"], d) for i, d in enumerate(docs)]


JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 4
  template:
    metadata:
      labels: {team: a}
      annotations: {troupe.io/gang-name: train, troupe.io/gang-size: "3"}
    spec:
      containers: [{name: w, image: x, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""

JOBSET = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml}
spec:
  replicatedJobs:
    - name: driver
      replicas: 1
      template:
        spec:
          parallelism: 1
          completions: 1
          completionMode: Indexed
          template:
            metadata: {annotations: {troupe.io/gang-size: auto}}
            spec: {containers: [{name: d, image: x}]}
    - name: workers
      replicas: 2
      template:
        spec:
          parallelism: 2
          completions: 2
          completionMode: Indexed
          template:
            metadata: {annotations: {troupe.io/gang-size: auto}}
            spec: {containers: [{name: w, image: x}]}
"""


def test_an_indexed_job_makes_parallelism_pods_capped_by_completions_ranked_by_index():
    out = expand(objects(JOB), Context(Config(), namespace="ml", now=NOW))
    pods = [PodInfo.from_object(p) for p in out.pods]
    assert len(pods) == 3
    assert [p.labels["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0", "1", "2"]
    assert all(p.name.startswith(f"train-{i}-") for i, p in enumerate(pods))
    assert {p.labels["job-name"] for p in pods} == {"train"}
    assert pods[0].owner is not None and (pods[0].owner.kind, pods[0].owner.name) == ("Job", "train")
    assert all(p.gated and p.namespace == "ml" and p.creation_timestamp == "2026-03-01T10:00:00Z" for p in pods)
    assert [k for k, _ in out.workloads] == ["Job"]
    assert out.managed == tuple(p.key for p in pods)
    # the default timeout is written back, as the webhook does
    assert {p.gang_annotations["troupe.io/gang-schedule-timeout-seconds"] for p in pods} == {"30"}


def test_the_same_manifest_gives_the_same_pod_names():
    a = expand(objects(JOB), Context(Config(), now=NOW))
    b = expand(objects(JOB), Context(Config(), now=NOW + 5))
    assert [p["metadata"]["name"] for p in a.pods] == [p["metadata"]["name"] for p in b.pods]


def test_a_jobset_makes_its_jobs_and_their_pods_one_gang_sized_by_the_jobset():
    out = expand(objects(JOBSET), Context(Config(), now=NOW))
    infos = [PodInfo.from_object(p) for p in out.pods]
    assert [k for k, _ in out.workloads] == ["JobSet", "Job", "Job", "Job"]
    assert [o["metadata"]["name"] for _, o in out.workloads[1:]] == ["js-driver-0", "js-workers-0", "js-workers-1"]
    assert [p.labels["jobset.sigs.k8s.io/job-global-index"] for p in infos] == ["0", "1", "1", "2", "2"]
    known = wl.Workloads(wl.workloads_of("JobSet", [o for k, o in out.workloads if k == "JobSet"]))
    (key, members), = group_by_gang(infos, Config()).items()
    gang = build_gang(key, members, Config(), {}, known)
    assert (gang.key, gang.size) == ("ml/jobset:js:0", 5)
    assert [p.name.rsplit("-", 1)[0] for p in gang.members] == [
        "js-driver-0-0", "js-workers-0-0", "js-workers-0-1", "js-workers-1-0", "js-workers-1-1"]


def test_an_opted_in_namespace_makes_a_workloads_pods_gang_members_of_size_auto():
    plain = JOB.replace("annotations: {troupe.io/gang-name: train, troupe.io/gang-size: \"3\"}", "annotations: {}")
    ctx = Context(Config(), namespace="ml", namespaces={"ml": {"troupe.io/gang-mode": "auto"}}, now=NOW)
    out = expand(objects(plain), ctx)
    assert {p["metadata"]["annotations"].get("troupe.io/gang-size") for p in out.pods} == {"auto"}
    assert len(out.managed) == 3
    elsewhere = expand(objects(plain), Context(Config(), namespace="other", now=NOW))
    assert elsewhere.managed == ()


def test_priority_comes_from_the_priority_class_or_the_global_default():
    spec = JOB.replace("      containers:", "      priorityClassName: high\n      containers:")
    out = expand(objects(spec), Context(Config(), priority_classes={"high": (1000, False)}, now=NOW))
    assert {p["spec"]["priority"] for p in out.pods} == {1000}
    default = expand(objects(JOB), Context(Config(), priority_classes={"base": (7, True)}, now=NOW))
    assert {p["spec"]["priority"] for p in default.pods} == {7}
    with pytest.raises(ManifestError, match="no PriorityClass with name high was found"):
        expand(objects(spec), Context(Config(), now=NOW))


@pytest.mark.parametrize(("manifest", "message"), [
    ("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d}\n",
     "manifest: document 1: kind 'DaemonSet' cannot be planned (supported: Pod, Job, JobSet, Deployment, ReplicaSet, "
     "StatefulSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster, RayJob, PodGroup, Workload, ConfigMap, "),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
     "manifest: document 1 (Deployment d, ReplicaSet d-"),
    ("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {generateName: s-}\nspec: {replicas: two}\n",
     "manifest: document 1 (StatefulSet s-"),
    ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: -1, template: {spec: {containers: [{name: a}]}}}\n",
     "manifest: document 1 (Job j): spec.parallelism: expected an integer >= 0, got -1"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: a}]}\n",
     "manifest: document 1 (Pod): metadata.name or metadata.generateName is required"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {reconciler.troupe.io/node: n1}}\nspec: {containers: [{name: a}]}\n",
     "pod default/p: denied by Troupe's webhook: annotation reconciler.troupe.io/node: only Troupe's reconciler"),
])
def test_what_cannot_be_planned_is_refused_naming_the_object_and_field(manifest, message):
    with pytest.raises(ManifestError) as e:
        expand(objects(manifest), Context(Config(), now=NOW))
    assert str(e.value).startswith(message)


# --- the webhook's contract, applied the webhook's way ---------------------------------------
LEVEL = "cloud.google.com/gce-topology-subblock"
annotation_sets = st.fixed_dictionaries({}, optional={
    "troupe.io/gang-name": st.sampled_from(["train", "x"]),
    "troupe.io/gang-size": st.sampled_from(["1", "4", "auto"]),
    "troupe.io/gang-schedule-timeout-seconds": st.sampled_from(["10", "30", "500"]),
    "troupe.io/topology-required-level": st.just(LEVEL),
    "deviceshare.io/group": st.sampled_from(["g1", "group-a"]),
    "unrelated": st.just("v"),
})


@settings(max_examples=150, deadline=None)
@given(annotations=annotation_sets, owned=st.booleans(), opted_in=st.booleans(),
       gates=st.sampled_from([[], [{"name": "other.io/gate"}], [{"name": "troupe.io/placement"}]]),
       tolerations=st.sampled_from([[], [{"operator": "Exists"}]]))
def test_admission_gives_what_the_webhook_gives(annotations, owned, opted_in, gates, tolerations):
    meta = {"name": "p", "namespace": "ml", "annotations": dict(annotations)}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
           "spec": {"containers": [{"name": "c", "image": "x"}], "schedulingGates": list(gates),
                    "tolerations": list(tolerations)}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "operation": "CREATE", "namespace": "ml", "object": copy.deepcopy(pod),
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "userInfo": {"username": "alice"}}}
    answer = mutate(review, Config(), gang_mode_auto=opted_in)["response"]
    ctx = Context(Config(), namespaces={"ml": {"troupe.io/gang-mode": "auto"}} if opted_in else {}, now=NOW,
                  user="alice")
    if not answer["allowed"]:
        with pytest.raises(ManifestError):
            admit(pod, ctx)
        return
    want = jsonpatch.apply_patch(pod, patch_of({"response": answer}))
    got, gated = admit(pod, ctx)
    assert got["metadata"]["annotations"] == want["metadata"].get("annotations", {})
    assert got["spec"]["schedulingGates"] == want["spec"]["schedulingGates"]
    assert got["spec"]["tolerations"] == want["spec"]["tolerations"]
    assert gated == any(g["name"] == "troupe.io/placement" for g in want["spec"]["schedulingGates"])
