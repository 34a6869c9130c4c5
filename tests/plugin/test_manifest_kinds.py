"""``kubectl troupe plan -f`` takes what users apply (docs/decisions/077-plan-takes-what-users-apply.md):
Deployments, ReplicaSets, StatefulSets and LeaderWorkerSets expand to the pods their
controllers make, named and labelled as those make them; ``generateName`` is named as the
API server names it; an upstream ``Workload`` is taken and said what is done with it; the
pods Troupe leaves alone are said to be left to kube-scheduler, per object."""

from __future__ import annotations

import hashlib
import re

import yaml

from reconciler.engine.model.kinds import MODULE_OF
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from reconciler.tools.expansion import ALPHABET
from reconciler.tools.manifests import Context, expand
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
