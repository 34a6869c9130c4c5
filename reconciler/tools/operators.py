"""The pods the training and serving operators make of what users apply, for ``kubectl
troupe plan`` (docs/decisions/077-plan-takes-what-users-apply.md): the registry's RayCluster,
RayJob and MPIJob (docs/decisions/075-ray-and-mpi-workloads.md), and PyTorchJob. Their counts are the
registry's own (:mod:`reconciler.engine.model.kinds.ray`,
:mod:`reconciler.engine.model.kinds.mpijob`), so a plan runs exactly the pods the engine
counts; names and labels are the operators':

- a **RayCluster**, as KubeRay v1.5.0 makes it (``ray-operator/controllers/ray``:
  ``raycluster_controller.go`` ``buildHeadPod``/``buildWorkerPod``, ``common/pod.go``
  ``labelPod``, ``utils.PodName``): the head ``<cluster>-head-<suffix>`` and per worker
  group, in spec order, its workers (:func:`~reconciler.engine.model.kinds.ray.group_workers`:
  ``replicas`` clamped to ``[minReplicas, maxReplicas]``, times ``numOfHosts``)
  ``<cluster>-<group>-worker-<suffix>``, every pod labelled ``ray.io/is-ray-node: "yes"``,
  ``ray.io/cluster``, ``ray.io/node-type`` (``head``, ``worker``), ``ray.io/group``
  (``headgroup`` or the group's name), ``ray.io/identifier`` (``<cluster>-<node type>``),
  ``app.kubernetes.io/name: kuberay``, ``app.kubernetes.io/created-by: kuberay-operator``,
  and controlled by the RayCluster (the ``RayMultiHostIndexing`` labels are off by default
  in v1.5.0, so none);
- a **RayJob** makes a RayCluster ``<rayjob>-<suffix>`` of its ``spec.rayClusterSpec``
  (``rayjob_controller.go``, ``utils.GenerateRayClusterName``), labelled with the RayJob's
  labels and ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd: RayJob``, and
  in ``K8sJobMode`` (the default) a submitter batch Job ``<rayjob>`` of one pod (its
  ``submitterPodTemplate``, else a ``ray-job-submitter`` container of the head's image),
  both controlled by the RayJob: the cluster's pods are the cluster's gang, the submitter's
  pod is outside it;
- an **MPIJob**, as github.com/kubeflow/mpi-operator v0.8.2 makes it
  (``pkg/controller/mpi_job_controller.go``: ``newWorker``, ``newLauncherJob``): workers
  ``<job>-worker-<i>`` controlled by the MPIJob, and the launcher as a batch Job
  ``<job>-launcher`` controlled by the MPIJob, labelled ``app: <job>``, whose one pod is the
  launcher; every pod labelled ``training.kubeflow.org/operator-name: mpi-operator``,
  ``job-name``, ``job-role`` (``launcher``, ``worker``) and a worker's ``replica-index``
  (``i+1`` with ``runLauncherAsWorker``, when the launcher is ``0``), with ``hostname`` and
  ``subdomain`` (the job's name);
- a **PyTorchJob**, as github.com/kubeflow/training-operator v1.9.3 makes it
  (``pkg/core/utils.go`` ``GenGeneralName``, ``pkg/controller.v1/common``): per replica
  type of ``spec.pytorchReplicaSpecs`` (``Master`` first, then the others by name) its
  ``replicas`` (default 1) pods ``<job>-<type lowercased>-<i>``, controlled by the job and
  labelled ``training.kubeflow.org/operator-name: pytorchjob-controller``, ``job-name``,
  ``replica-type`` (lowercased), ``replica-index`` and, for the master, ``job-role: master``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconciler.engine.model.kinds.mpijob import LAUNCHER, LAUNCHER_SUFFIX, WORKER, replica_counts
from reconciler.engine.model.kinds.ray import HEAD_GROUP, group_workers, worker_groups
from reconciler.tools.controllers import PodSet, constant, indexed, job, numbered, pods_of, within
from reconciler.tools.expansion import Made, ManifestError, child, mapping, replicas, suffix
from troupe import contract
from troupe.workloadkinds import MPI_JOB, PYTORCH_JOB, RAY_CLUSTER, RAY_JOB

#: What KubeRay adds besides the contract's labels (``ray-operator/controllers/ray/utils/constant.go``).
RAY_NODE = "ray.io/is-ray-node"
RAY_IDENTIFIER = "ray.io/identifier"
RAY_FROM_NAME, RAY_FROM_CRD = "ray.io/originated-from-cr-name", "ray.io/originated-from-crd"
KUBERAY = {"app.kubernetes.io/name": "kuberay", "app.kubernetes.io/created-by": "kuberay-operator"}
#: The MPI operator's operator label (``pkg/apis/kubeflow/v2beta1/constants.go``).
MPI_OPERATOR = {"training.kubeflow.org/operator-name": "mpi-operator"}


def _ray_labels(cluster: str, node_type: str, group: str) -> dict[str, str]:
    """``labelPod``'s labels of a pod of ``cluster`` (KubeRay clips the identifier to 63)."""
    return {RAY_NODE: "yes", contract.RAY_CLUSTER_LABEL: cluster, contract.RAY_NODE_TYPE_LABEL: node_type,
            contract.RAY_GROUP_LABEL: group, RAY_IDENTIFIER: f"{cluster}-{node_type}"[-63:], **KUBERAY}


def _worker_name(namespace: str, cluster: str, group: str) -> Callable[[int], str]:
    """``utils.PodName``'s name of worker ``i`` of ``group``: ``<cluster>-<group>`` (50
    characters at most), ``-worker-`` and the API server's five characters."""
    return lambda i: f"{f'{cluster}-{group}'[:50]}-worker-{suffix(namespace, cluster, group, i)}"


def _with_container(template: dict[str, Any], where: str, key: str, container: dict[str, Any]) -> dict[str, Any]:
    """``template`` with ``container`` appended to its spec's ``key`` (``containers``,
    ``initContainers``); ``container`` takes the image of the template's first container
    when it names none."""
    spec = mapping(template.get("spec"), f"{where}.spec")
    first = (spec.get("containers") or [{}])[0]
    image = mapping(first, f"{where}.spec.containers[0]").get("image", "")
    return {**template, "spec": {**spec, key: [*(spec.get(key) or []), {"image": image, **container}]}}


def _requests(cpu: str, memory: str) -> dict[str, Any]:
    return {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}}


def raycluster(obj: dict[str, Any], where: str) -> Made:
    """A RayCluster's head and workers (see the module). What KubeRay adds that takes room is
    added too (``common/pod.go``): with ``enableInTreeAutoscaling`` the head's ``autoscaler``
    container (500m CPU, 512Mi, or ``autoscalerOptions.resources``), and each worker's
    ``wait-gcs-ready`` init container (200m CPU, 256Mi; on by default). Raises ManifestError
    naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name, namespace = meta["name"], meta["namespace"]
    head = mapping(spec.get("headGroupSpec"), f"{where}: spec.headGroupSpec")
    owner_obj = {**obj, "apiVersion": obj.get("apiVersion") or RAY_CLUSTER.api_version, "kind": RAY_CLUSTER.kind}
    prefix = name[:50]  # utils.PodName and CheckName keep 50 characters
    at = f"{where}: spec.headGroupSpec.template"
    head_template = mapping(head.get("template"), at)
    if spec.get("enableInTreeAutoscaling") is True:
        options = mapping(spec.get("autoscalerOptions"), f"{where}: spec.autoscalerOptions")
        resources = mapping(options.get("resources"), f"{where}: spec.autoscalerOptions.resources") or _requests(
            "500m", "512Mi")
        head_template = _with_container(head_template, at, "containers", {"name": "autoscaler", "resources": resources,
                                        **({"image": options["image"]} if options.get("image") else {})})
    sets = [PodSet(head_template, at, 1, owner_obj,
                   lambda i: f"{prefix}-head-{suffix(namespace, name, 'head', i)}",
                   lambda i: _ray_labels(name, "head", HEAD_GROUP))]
    for g, (group, gspec) in enumerate(worker_groups(spec)):
        at = f"{where}: spec.workerGroupSpecs[{g}]"
        if not group:
            raise ManifestError(f"{at}.groupName: missing field")
        template = _with_container(mapping(gspec.get("template"), f"{at}.template"), f"{at}.template",
                                   "initContainers", {"name": "wait-gcs-ready", "resources": _requests("200m", "256Mi")})
        sets.append(PodSet(template, f"{at}.template", group_workers(gspec),
                           owner_obj, _worker_name(namespace, name, group),
                           constant(_ray_labels(name, "worker", group))))
    return Made(pods_of(sets), [(RAY_CLUSTER.kind, owner_obj)])


def rayjob(obj: dict[str, Any], where: str) -> Made:
    """A RayJob's RayCluster and submitter Job, and their pods (see the module). Raises
    ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name, namespace = meta["name"], meta["namespace"]
    owner_obj = {**obj, "apiVersion": obj.get("apiVersion") or RAY_JOB.api_version, "kind": RAY_JOB.kind}
    made = Made(workloads=[(RAY_JOB.kind, owner_obj)])
    cluster_spec = spec.get("rayClusterSpec")
    if cluster_spec is not None:
        labels = {**mapping(meta.get("labels"), f"{where}: metadata.labels"), RAY_FROM_NAME: name,
                  RAY_FROM_CRD: RAY_JOB.kind}
        cluster = child(RAY_CLUSTER.api_version, RAY_CLUSTER.kind, f"{name}-{suffix(namespace, 'RayJob', name)}",
                        owner_obj, labels, mapping(cluster_spec, f"{where}: spec.rayClusterSpec"))
        made.add(raycluster(cluster, within(where, f"RayCluster {cluster['metadata']['name']}")))
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        template = spec.get("submitterPodTemplate")
        if template is None:
            head = mapping(mapping(mapping(cluster_spec, f"{where}: spec.rayClusterSpec").get("headGroupSpec"),
                                   f"{where}: spec.rayClusterSpec.headGroupSpec").get("template"),
                           f"{where}: spec.rayClusterSpec.headGroupSpec.template")
            containers = mapping(head.get("spec"), f"{where}: head template spec").get("containers") or [{}]
            image = mapping(containers[0], f"{where}: head container").get("image", "")
            template = {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "ray-job-submitter", "image": image,
                 "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}}
        submitter = child("batch/v1", "Job", name, owner_obj, {}, {"backoffLimit": 2, "template": template})
        made.add(job(submitter, within(where, f"Job {name}")))
    return made


def mpijob(obj: dict[str, Any], where: str) -> Made:
    """An MPIJob's launcher Job and workers, and their pods (see the module). Raises
    ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name = meta["name"]
    owner_obj = {**obj, "apiVersion": obj.get("apiVersion") or MPI_JOB.api_version, "kind": MPI_JOB.kind}
    specs = mapping(spec.get("mpiReplicaSpecs"), f"{where}: spec.mpiReplicaSpecs")
    launchers, workers = replica_counts(spec)
    shift = 1 if spec.get("runLauncherAsWorker") is True else 0
    role = contract.KUBEFLOW_JOB_ROLE

    def template(rtype: str) -> dict[str, Any]:
        return mapping(mapping(specs.get(rtype), f"{where}: spec.mpiReplicaSpecs.{rtype}").get("template"),
                       f"{where}: spec.mpiReplicaSpecs.{rtype}.template")

    common = {**MPI_OPERATOR, contract.KUBEFLOW_JOB_NAME_LABEL: name}
    made = Made(workloads=[(MPI_JOB.kind, owner_obj)])
    if launchers:
        launcher = template(LAUNCHER)
        lmeta = mapping(launcher.get("metadata"), f"{where}: spec.mpiReplicaSpecs.{LAUNCHER}.template.metadata")
        labels = {**mapping(lmeta.get("labels"), f"{where}: launcher labels"), **common, role: "launcher",
                  **({contract.KUBEFLOW_REPLICA_INDEX: "0"} if shift else {})}
        pod_spec = {**mapping(launcher.get("spec"), f"{where}: launcher spec"),
                    "hostname": name + LAUNCHER_SUFFIX, "subdomain": name}
        one = child("batch/v1", "Job", name + LAUNCHER_SUFFIX, owner_obj, {"app": name},
                    {"template": {**launcher, "metadata": {**lmeta, "labels": labels}, "spec": pod_spec}})
        made.add(job(one, within(where, f"Job {name}{LAUNCHER_SUFFIX}")))
    made.pods += pods_of([PodSet(template(WORKER), f"{where}: spec.mpiReplicaSpecs.{WORKER}.template", workers,
                                 owner_obj, lambda i: f"{name}-worker-{i}",
                                 lambda i: {**common, role: "worker", contract.KUBEFLOW_REPLICA_INDEX: str(i + shift)},
                                 spec=lambda i: {"hostname": f"{name}-worker-{i}", "subdomain": name})]
                         if workers else [])
    return made


def pytorchjob(obj: dict[str, Any], where: str) -> Made:
    """A PyTorchJob's pods (see the module). Raises ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name = meta["name"]
    owner_obj = {**obj, "apiVersion": obj.get("apiVersion") or PYTORCH_JOB.api_version, "kind": PYTORCH_JOB.kind}
    specs = mapping(spec.get("pytorchReplicaSpecs"), f"{where}: spec.pytorchReplicaSpecs")
    sets = []
    for rtype in sorted(specs, key=lambda t: (t != "Master", t)):
        at = f"{where}: spec.pytorchReplicaSpecs.{rtype}"
        rspec = mapping(specs[rtype], at)
        labels = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
                  contract.KUBEFLOW_JOB_NAME_LABEL: name, contract.KUBEFLOW_REPLICA_TYPE: rtype.lower(),
                  **({contract.KUBEFLOW_JOB_ROLE: "master"} if rtype == "Master" else {})}
        sets.append(PodSet(mapping(rspec.get("template"), f"{at}.template"), f"{at}.template",
                           replicas(rspec, at), owner_obj, numbered(f"{name}-{rtype.lower()}"),
                           indexed(labels, contract.KUBEFLOW_REPLICA_INDEX)))
    return Made(pods_of(sets), [(PYTORCH_JOB.kind, owner_obj)])


#: Each operator kind's expansion, by ``kind``.
EXPANDERS = {PYTORCH_JOB.kind: pytorchjob, MPI_JOB.kind: mpijob, RAY_CLUSTER.kind: raycluster, RAY_JOB.kind: rayjob}
