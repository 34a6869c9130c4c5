"""``kubectl troupe plan -f`` takes what users apply (docs/decisions/077-plan-takes-what-users-apply.md):
Deployments, ReplicaSets, StatefulSets and LeaderWorkerSets expand to the pods their
controllers make, named and labelled as those make them; ``generateName`` is named as the
API server names it; an upstream ``Workload`` is taken and said what is done with it; the
pods Troupe leaves alone are said to be left to kube-scheduler, per object."""

from __future__ import annotations

import hashlib
import re

import yaml

from reconciler.engine.model.kinds import MODULE_OF, REGISTRY
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from reconciler.tools.expansion import ALPHABET
from reconciler.tools.manifests import EXPANDERS, Context, expand
from troupe.config import Config

NOW = 1772359200.0  # 2026-03-01T10:00:00Z
CONTAINERS = "[{name: c, image: x, resources: {requests: {cpu: '1'}}}]"


def objects(text: str) -> list[tuple[str, str, dict]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    return [(f"manifest: document {i + 1}", d["kind"], d) for i, d in enumerate(docs)]


def names(out) -> list[str]:
    return [p["metadata"]["name"] for p in out.pods]


DEPLOYMENT = f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: ml}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: {CONTAINERS}}}
"""


def test_a_deployment_makes_one_replicaset_and_its_pods_left_to_kube_scheduler():
    out = expand(objects(DEPLOYMENT), Context(Config(), now=NOW))
    [(kind, rs)] = out.workloads
    hashed = rs["metadata"]["labels"]["pod-template-hash"]
    assert kind == "ReplicaSet" and rs["metadata"]["name"] == f"web-{hashed}"
    assert set(hashed) <= set(ALPHABET) and rs["spec"]["replicas"] == 3
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert all(re.fullmatch(rf"web-{hashed}-[{ALPHABET}]{{5}}", n) for n in names(out)), names(out)
    assert len(set(names(out))) == 3
    for pod in out.pods:
        assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": hashed}
        assert pod["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"]
    assert out.managed == ()
    [(origin, keys, why)] = out.left
    assert origin == "Deployment ml/web" and len(keys) == 3
    assert why.endswith("namespace ml is not opted in (troupe.io/gang-mode: auto)")
    opted = expand(objects(DEPLOYMENT), Context(Config(), namespaces={"ml": {"troupe.io/gang-mode": "auto"}}, now=NOW))
    assert opted.managed == () and "a Deployment's are not" in opted.left[0][2]


def test_a_statefulset_names_its_pods_by_ordinal_with_the_controllers_labels():
    sts = f"""\
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  replicas: 2
  serviceName: db-svc
  ordinals: {{start: 3}}
  template: {{metadata: {{labels: {{app: db}}}}, spec: {{containers: {CONTAINERS}}}}}
"""
    out = expand(objects(sts), Context(Config(), now=NOW))
    assert names(out) == ["db-3", "db-4"]
    labels = out.pods[1]["metadata"]["labels"]
    assert labels["statefulset.kubernetes.io/pod-name"] == "db-4" and labels["apps.kubernetes.io/pod-index"] == "4"
    assert labels["controller-revision-hash"].startswith("db-")
    assert (out.pods[1]["spec"]["hostname"], out.pods[1]["spec"]["subdomain"]) == ("db-4", "db-svc")
    assert [k for k, _ in out.workloads] == ["StatefulSet"]


LWS = f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: serve, namespace: ml}}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 3
    leaderTemplate: {{metadata: {{labels: {{role: leader}}}}, spec: {{containers: {CONTAINERS}}}}}
    workerTemplate: {{metadata: {{labels: {{role: worker}}}}, spec: {{containers: {CONTAINERS}}}}}
"""


def test_a_leaderworkerset_makes_a_leader_statefulset_and_one_worker_statefulset_per_group():
    out = expand(objects(LWS), Context(Config(), now=NOW))
    assert names(out) == ["serve-0", "serve-0-1", "serve-0-2", "serve-1", "serve-1-1", "serve-1-2"]
    by_name = {p["metadata"]["name"]: p["metadata"] for p in out.pods}
    key = hashlib.sha1(b"ml/serve-1").hexdigest()  # sigs.k8s.io/lws v0.7.0 pkg/webhooks genGroupUniqueKey
    for name, group, worker, role in (("serve-1", "1", "0", "leader"), ("serve-1-2", "1", "2", "worker")):
        labels = by_name[name]["labels"]
        assert labels["leaderworkerset.sigs.k8s.io/name"] == "serve"
        assert labels["leaderworkerset.sigs.k8s.io/group-index"] == group
        assert labels["leaderworkerset.sigs.k8s.io/worker-index"] == worker
        assert labels["leaderworkerset.sigs.k8s.io/group-key"] == key
        assert labels["role"] == role
        assert by_name[name]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "3"
    assert by_name["serve-1-2"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == "serve-1"
    assert by_name["serve-1-2"]["ownerReferences"][0]["name"] == "serve-1"
    assert by_name["serve-1"]["ownerReferences"][0]["name"] == "serve"
    assert [(k, o["metadata"]["name"]) for k, o in out.workloads] == [
        ("LeaderWorkerSet", "serve"), ("StatefulSet", "serve"), ("StatefulSet", "serve-0"), ("StatefulSet", "serve-1")]
    lws = next(o for k, o in out.workloads if k == "LeaderWorkerSet")
    assert MODULE_OF["LeaderWorkerSet"].most_pods(lws)[0] == len(out.pods)


def test_an_opted_in_namespace_makes_each_leaderworkerset_group_one_gang():
    config = Config()
    out = expand(objects(LWS), Context(config, namespaces={"ml": {"troupe.io/gang-mode": "auto"}}, now=NOW))
    assert len(out.managed) == 6 and out.left == ()
    gangs = group_by_gang((PodInfo.from_object(p) for p in out.pods), config)
    assert {k: sorted(p.name for p in v) for k, v in gangs.items()} == {
        "ml/lws:serve:0": ["serve-0", "serve-0-1", "serve-0-2"], "ml/lws:serve:1": ["serve-1", "serve-1-1", "serve-1-2"]}


def test_generate_name_is_named_as_the_api_server_names_it_and_said_so():
    job = f"""\
apiVersion: batch/v1
kind: Job
metadata: {{generateName: tas-sample-}}
spec:
  parallelism: 2
  completions: 2
  completionMode: Indexed
  template: {{spec: {{restartPolicy: Never, containers: {CONTAINERS}}}}}
"""
    out = expand(objects(job), Context(Config(), now=NOW))
    [(_, made)] = out.workloads
    name = made["metadata"]["name"]
    assert re.fullmatch(rf"tas-sample-[{ALPHABET}]{{5}}", name) and "generateName" not in made["metadata"]
    assert [n.rsplit("-", 1)[0] for n in names(out)] == [f"{name}-0", f"{name}-1"]
    assert out.notes == (f"Job default/{name}: named from metadata.generateName 'tas-sample-' as the API server "
                         "names it (five random characters: each `kubectl create` makes another)",)
    assert expand(objects(job), Context(Config(), now=NOW)).pods == out.pods, "deterministic"


def test_an_upstream_workload_is_taken_and_said_what_is_done_with_it():
    manifest = """\
apiVersion: scheduling.k8s.io/v1alpha2
kind: Workload
metadata: {name: training-policy}
spec:
  podGroupTemplates:
  - name: worker
    schedulingPolicy: {gang: {minCount: 4}}
"""
    out = expand(objects(manifest), Context(Config(), now=NOW))
    assert out.pods == () and out.workloads == ()
    assert out.notes == ("Workload default/training-policy (scheduling.k8s.io/v1alpha2) (templates worker): a policy "
                         "template; Troupe, as kube-scheduler, reads the PodGroups made from it and the pods naming "
                         "them, not the Workload",)


def test_every_kind_of_the_registry_expands():
    assert {m.facts.kind for m in REGISTRY} <= set(EXPANDERS)


RAYCLUSTER = f"""\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: rc, namespace: ml}}
spec:
  headGroupSpec:
    rayStartParams: {{}}
    template: {{spec: {{containers: [{{name: ray-head, image: rayproject/ray:2.46.0}}]}}}}
  workerGroupSpecs:
  - groupName: gpu
    replicas: 2
    minReplicas: 1
    maxReplicas: 4
    template: {{spec: {{containers: {CONTAINERS}}}}}
  - groupName: cpu
    replicas: 5
    maxReplicas: 1
    numOfHosts: 2
    template: {{spec: {{containers: {CONTAINERS}}}}}
"""
OPTED = {"ml": {"troupe.io/gang-mode": "auto"}}


def gangs_of(out, config: Config) -> dict[str, list[str]]:
    return {k: [p.name for p in v] for k, v in group_by_gang((PodInfo.from_object(p) for p in out.pods), config).items()}


def test_a_raycluster_makes_its_head_and_workers_as_kuberay_names_and_labels_them():
    config = Config()
    out = expand(objects(RAYCLUSTER), Context(config, namespaces=OPTED, now=NOW))
    cluster = next(o for k, o in out.workloads if k == "RayCluster")
    assert len(out.pods) == MODULE_OF["RayCluster"].size(cluster)[0] == 1 + 2 + 2
    head, *workers = out.pods
    assert re.fullmatch(rf"rc-head-[{ALPHABET}]{{5}}", head["metadata"]["name"])
    assert [re.sub(r"-[^-]+$", "", p["metadata"]["name"]) for p in workers] == ["rc-gpu-worker"] * 2 + ["rc-cpu-worker"] * 2
    assert {k: v for k, v in head["metadata"]["labels"].items() if k.startswith("ray.io/")} == {
        "ray.io/is-ray-node": "yes", "ray.io/cluster": "rc", "ray.io/node-type": "head", "ray.io/group": "headgroup",
        "ray.io/identifier": "rc-head"}
    assert workers[3]["metadata"]["labels"]["ray.io/group"] == "cpu"
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in out.pods} == {"RayCluster"}
    assert gangs_of(out, config) == {"ml/raycluster:rc": [p["metadata"]["name"] for p in out.pods]}


def test_a_rayjob_makes_its_cluster_a_gang_and_its_submitter_a_pod_outside_it():
    config = Config()
    spec = yaml.safe_load(RAYCLUSTER)["spec"]
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "namespace": "ml"},
              "spec": {"entrypoint": "python x.py", "rayClusterSpec": spec}}
    out = expand([("manifest: document 1", "RayJob", rayjob)], Context(config, namespaces=OPTED, now=NOW))
    cluster = next(o for k, o in out.workloads if k == "RayCluster")
    assert cluster["metadata"]["labels"] == {"ray.io/originated-from-cr-name": "rj", "ray.io/originated-from-crd": "RayJob"}
    assert cluster["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    submitter = out.pods[-1]
    assert submitter["metadata"]["labels"]["job-name"] == "rj"
    assert submitter["spec"]["containers"][0]["image"] == "rayproject/ray:2.46.0"
    gangs = gangs_of(out, config)
    assert gangs[f"ml/raycluster:{cluster['metadata']['name']}"] == names(out)[:5]
    # The opt-in makes the submitter's pod, a Job's, a gang of its Job: not the cluster's.
    assert gangs["ml/job:rj"] == [submitter["metadata"]["name"]]
    elsewhere = expand([("manifest: document 1", "RayJob", {**rayjob, "metadata": {"name": "rj"}})],
                       Context(config, now=NOW))
    assert [(o, len(keys)) for o, keys, _ in elsewhere.left] == [("RayJob default/rj", 6)]


MPIJOB = f"""\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: pi, namespace: ml}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template: {{spec: {{containers: {CONTAINERS}}}}}
    Worker:
      replicas: 2
      template: {{spec: {{containers: {CONTAINERS}}}}}
"""


def test_an_mpijob_makes_its_launcher_job_and_its_workers_one_gang_launcher_first():
    config = Config()
    out = expand(objects(MPIJOB), Context(config, namespaces=OPTED, now=NOW))
    launcher_job = next(o for k, o in out.workloads if k == "Job")
    assert launcher_job["metadata"]["name"] == "pi-launcher" and launcher_job["metadata"]["labels"] == {"app": "pi"}
    assert launcher_job["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    assert [n.rsplit("-", 1)[0] if n.startswith("pi-launcher") else n for n in names(out)] == [
        "pi-launcher", "pi-worker-0", "pi-worker-1"]
    assert out.pods[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher"
    assert out.pods[2]["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    mpijob = next(o for k, o in out.workloads if k == "MPIJob")
    assert MODULE_OF["MPIJob"].size(mpijob)[0] == len(out.pods)
    assert gangs_of(out, config) == {"ml/mpijob:pi": names(out)}


def test_a_pytorchjob_makes_its_master_then_its_workers():
    manifest = f"""\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: pt, namespace: ml}}
spec:
  pytorchReplicaSpecs:
    Worker: {{replicas: 2, template: {{spec: {{containers: {CONTAINERS}}}}}}}
    Master: {{replicas: 1, template: {{spec: {{containers: {CONTAINERS}}}}}}}
"""
    config = Config()
    out = expand(objects(manifest), Context(config, namespaces=OPTED, now=NOW))
    assert names(out) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    assert out.pods[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert gangs_of(out, config) == {"ml/pytorchjob:pt": names(out)}


def test_what_kuberay_adds_that_takes_room_is_added():
    """The autoscaler sidecar of an autoscaling cluster's head and each worker's init
    container (KubeRay v1.5.0 ``common/pod.go``) count where the pods go."""
    cluster = yaml.safe_load(RAYCLUSTER)
    cluster["spec"]["enableInTreeAutoscaling"] = True
    out = expand([("manifest: document 1", "RayCluster", cluster)], Context(Config(), now=NOW))
    head, worker = out.pods[0]["spec"], out.pods[1]["spec"]
    assert [c["name"] for c in head["containers"]] == ["ray-head", "autoscaler"]
    assert head["containers"][1]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert head["containers"][1]["image"] == "rayproject/ray:2.46.0"
    assert [(c["name"], c["resources"]["requests"]["cpu"]) for c in worker["initContainers"]] == [
        ("wait-gcs-ready", "200m")]
