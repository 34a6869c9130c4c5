"""The pods Kubernetes' and the workload projects' controllers make of what users apply, for
``kubectl troupe plan`` (docs/decisions/077-plan-takes-what-users-apply.md).

One function per kind, each of an object (named, namespaced and given a uid by the caller)
to :class:`~reconciler.tools.expansion.Made`, registered once in :data:`EXPANDERS`:

- a **Job** runs ``parallelism`` pods (default 1), capped by ``completions``; an
  ``Indexed`` Job's pod ``i`` is named ``<job>-<i>-<suffix>`` and carries
  ``batch.kubernetes.io/job-completion-index`` (label and annotation); every pod carries
  ``job-name``, ``batch.kubernetes.io/job-name``, ``controller-uid`` and
  ``batch.kubernetes.io/controller-uid``
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/);
- a **JobSet** makes ``replicas`` Jobs ``<jobset>-<replicatedJob>-<i>`` of each replicated
  Job, in order, labelled as the engine's JobSet kind says its controller labels them
  (:func:`reconciler.engine.model.kinds.jobset.child_jobs`), then each Job its pods;
- a **Deployment** makes one ReplicaSet ``<deployment>-<pod-template-hash>`` of
  ``replicas`` (default 1), labelled ``pod-template-hash``; a **ReplicaSet** makes
  ``replicas`` pods ``<replicaset>-<suffix>``
  (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/);
- a **StatefulSet** makes ``replicas`` pods ``<statefulset>-<ordinal>`` from
  ``spec.ordinals.start`` (default 0), labelled ``statefulset.kubernetes.io/pod-name``,
  ``apps.kubernetes.io/pod-index`` and ``controller-revision-hash``, with ``hostname`` and
  ``subdomain`` (``serviceName``) set
  (https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/);
- a **LeaderWorkerSet** makes, as sigs.k8s.io/lws v0.7.0 does
  (``pkg/controllers/leaderworkerset_controller.go``, ``pod_controller.go``,
  ``pkg/webhooks/pod_webhook.go``): a leader StatefulSet ``<lws>`` of ``replicas`` pods
  (the leader template, else the worker template; ``worker-index: "0"``), and per leader
  ``<lws>-<g>`` a worker StatefulSet of that name, ``size - 1`` pods from ordinal 1
  (``<lws>-<g>-<w>``); every pod carries ``leaderworkerset.sigs.k8s.io/name``,
  ``group-index``, ``worker-index``, ``group-key`` (the SHA-1 of ``<namespace>/<leader>``)
  and the annotation ``leaderworkerset.sigs.k8s.io/size``; a worker
  ``leaderworkerset.sigs.k8s.io/leader-name`` (the ``template-revision-hash`` label, a hash
  of the LWS's template that no decision reads, is left out).

Several pod sets of one kind are one :class:`PodSet` each, made into pods by one function
(:func:`pods_of`), so a kind's function only says what its controller names and labels.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.engine.model.kinds.jobset import child_jobs
from reconciler.tools.expansion import (
    Made,
    ManifestError,
    child,
    count,
    mapping,
    pod_of,
    replicas,
    suffix,
    template_hash,
)
from troupe import contract
from troupe.workloadkinds import JOBSET, LEADER_WORKER_SET

#: Labels a StatefulSet's controller puts on its pods (the second since Kubernetes 1.28).
STS_POD_NAME = "statefulset.kubernetes.io/pod-name"
STS_POD_INDEX = "apps.kubernetes.io/pod-index"
REVISION_HASH = "controller-revision-hash"
#: What the LeaderWorkerSet controller and webhook add besides the contract's labels.
LWS = "leaderworkerset.sigs.k8s.io/"
LWS_GROUP_KEY = LWS + "group-key"
LWS_SIZE = LWS + "size"
LWS_LEADER_NAME = LWS + "leader-name"


@dataclass(frozen=True)
class PodSet:
    """Pods of one template that one object (``parent``) makes: ``count`` of them, pod ``i``
    named ``name(i)`` with ``labels(i)`` and ``annotations(i)`` over the template's and
    ``spec`` over its spec; ``where`` names the template in messages."""

    template: Mapping[str, Any]
    where: str
    count: int
    parent: Mapping[str, Any]
    name: Callable[[int], str]
    labels: Callable[[int], Mapping[str, str]] = lambda i: {}
    annotations: Callable[[int], Mapping[str, str]] = lambda i: {}
    spec: Callable[[int], Mapping[str, Any]] = lambda i: {}


def pods_of(sets: Iterable[PodSet]) -> list[dict[str, Any]]:
    """The pods of ``sets``, set by set in order (their ranks' order). Raises
    :class:`~reconciler.tools.expansion.ManifestError` as
    :func:`~reconciler.tools.expansion.pod_of`."""
    return [pod_of(s.template, s.where, s.name(i), s.parent, s.labels(i), s.annotations(i), s.spec(i))
            for s in sets for i in range(s.count)]


def constant(labels: Mapping[str, str]) -> Callable[[int], Mapping[str, str]]:
    """The same ``labels`` for every pod of a :class:`PodSet`."""
    return lambda i: labels


def numbered(prefix: str) -> Callable[[int], str]:
    """Pod ``i`` named ``<prefix>-<i>``."""
    return lambda i: f"{prefix}-{i}"


def indexed(labels: Mapping[str, str], key: str) -> Callable[[int], Mapping[str, str]]:
    """``labels`` and ``key: i`` for pod ``i``."""
    return lambda i: {**labels, key: str(i)}


def within(where: str, what: str) -> str:
    """``where`` (``manifest: document 1 (Deployment d)``) naming ``what`` inside it."""
    return f"{where[:-1]}, {what})" if where.endswith(")") else f"{where} ({what})"


def _template(spec: Mapping[str, Any], where: str, key: str = "template") -> dict[str, Any]:
    return mapping(spec.get(key), f"{where}.{key}")


# --- batch ---------------------------------------------------------------------------------
def job(obj: dict[str, Any], where: str) -> Made:
    """A Job's pods (see the module). Raises ManifestError naming the field."""
    meta = obj["metadata"]
    spec = mapping(obj.get("spec"), f"{where}: spec")
    name, namespace, job_uid = meta["name"], meta["namespace"], meta["uid"]
    parallelism = count(spec, "parallelism", f"{where}: spec", 1) or 0
    completions = count(spec, "completions", f"{where}: spec", None)
    indexed = spec.get("completionMode") == "Indexed"
    labels = {"job-name": name, "controller-uid": job_uid,
              "batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": job_uid}

    def index(i: int) -> dict[str, str]:
        return {contract.JOB_COMPLETION_INDEX: str(i)} if indexed else {}

    pods = PodSet(_template(spec, f"{where}: spec"), f"{where}: spec.template",
                  parallelism if completions is None else min(parallelism, completions), obj,
                  lambda i: f"{name}-{i}-{suffix(namespace, name, i)}" if indexed else f"{name}-{suffix(namespace, name, i)}",
                  lambda i: {**labels, **index(i)}, index)
    return Made(pods_of([pods]), [("Job", obj)])


def jobset(obj: dict[str, Any], where: str) -> Made:
    """A JobSet's Jobs (their names, order and labels are the engine's JobSet kind's,
    :func:`~reconciler.engine.model.kinds.jobset.child_jobs`) and their pods, after checking
    the fields it reads. Raises ManifestError naming the field."""
    meta = obj["metadata"]
    spec = mapping(obj.get("spec"), f"{where}: spec")
    name = meta["name"]
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise ManifestError(f"{where}: spec.replicatedJobs: expected a non-empty list")
    for r, rj in enumerate(replicated):
        at = f"{where}: spec.replicatedJobs[{r}]"
        rj = mapping(rj, at)
        if not isinstance(rj.get("name"), str) or not rj.get("name"):
            raise ManifestError(f"{at}.name: missing field")
        count(rj, "replicas", at, 1)
        template = mapping(rj.get("template"), f"{at}.template")
        tmeta = mapping(template.get("metadata"), f"{at}.template.metadata")
        pod_template = mapping(mapping(template.get("spec"), f"{at}.template.spec").get("template"),
                               f"{at}.template.spec.template")
        pod_meta = mapping(pod_template.get("metadata"), f"{at}.template.spec.template.metadata")
        for part in (tmeta.get("labels"), pod_meta.get("labels")):
            mapping(part, f"{at}: labels")
        mapping(pod_meta.get("annotations"), f"{at}: annotations")
    made = Made(workloads=[("JobSet", obj)])
    for c in child_jobs(obj, name):
        labels = c.labels(name)
        tmeta = dict(c.template.get("metadata") or {})
        job_spec = copy.deepcopy(dict(c.template.get("spec") or {}))
        pod_template = dict(job_spec.get("template") or {})
        pod_meta = dict(pod_template.get("metadata") or {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **labels}
        job_spec["template"] = {**pod_template, "metadata": pod_meta}
        one = child("batch/v1", "Job", c.name, {**obj, "apiVersion": JOBSET.api_version, "kind": JOBSET.kind},
                    {**(tmeta.get("labels") or {}), **labels}, job_spec)
        one["metadata"]["ownerReferences"][0].pop("blockOwnerDeletion")
        made.add(job(one, within(where, f"Job {c.name}")))
    return made


# --- apps ----------------------------------------------------------------------------------
def replicaset(obj: dict[str, Any], where: str) -> Made:
    """A ReplicaSet's ``replicas`` pods ``<name>-<suffix>``. Raises ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name, namespace = meta["name"], meta["namespace"]
    pods = PodSet(_template(spec, f"{where}: spec"), f"{where}: spec.template", replicas(spec, f"{where}: spec"),
                  obj, lambda i: f"{name}-{suffix(namespace, 'ReplicaSet', name, i)}")
    return Made(pods_of([pods]), [("ReplicaSet", obj)])


def deployment(obj: dict[str, Any], where: str) -> Made:
    """A Deployment's ReplicaSet ``<name>-<pod-template-hash>`` and its pods (the hash
    also labels both). Raises ManifestError naming the field."""
    spec = mapping(obj.get("spec"), f"{where}: spec")
    template = _template(spec, f"{where}: spec")
    hashed = template_hash(template)
    tmeta = mapping(template.get("metadata"), f"{where}: spec.template.metadata")
    labels = {**mapping(tmeta.get("labels"), f"{where}: spec.template.metadata.labels"), "pod-template-hash": hashed}
    rs_template = {**template, "metadata": {**tmeta, "labels": labels}}
    rs = child("apps/v1", "ReplicaSet", f"{obj['metadata']['name']}-{hashed}", obj, labels,
               {"replicas": replicas(spec, f"{where}: spec"), "template": rs_template})
    return replicaset(rs, within(where, f"ReplicaSet {rs['metadata']['name']}"))


def _ordinal_start(spec: Mapping[str, Any], where: str) -> int:
    return count(mapping(spec.get("ordinals"), f"{where}.ordinals"), "start", f"{where}.ordinals", 0) or 0


def statefulset(obj: dict[str, Any], where: str) -> Made:
    """A StatefulSet's pods ``<name>-<ordinal>``. Raises ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name = meta["name"]
    start = _ordinal_start(spec, f"{where}: spec")
    revision = f"{name}-{template_hash(_template(spec, f'{where}: spec'))}"
    hostnames: dict[str, Any] = {"subdomain": spec["serviceName"]} if spec.get("serviceName") else {}
    pods = PodSet(_template(spec, f"{where}: spec"), f"{where}: spec.template", replicas(spec, f"{where}: spec"),
                  obj, lambda i: f"{name}-{start + i}",
                  lambda i: {STS_POD_NAME: f"{name}-{start + i}", STS_POD_INDEX: str(start + i),
                             REVISION_HASH: revision},
                  spec=lambda i: {"hostname": f"{name}-{start + i}", **hostnames})
    return Made(pods_of([pods]), [("StatefulSet", obj)])


def leaderworkerset(obj: dict[str, Any], where: str) -> Made:
    """A LeaderWorkerSet's leader StatefulSet, its worker StatefulSets and their pods, as
    sigs.k8s.io/lws v0.7.0 makes them (see the module). Raises ManifestError naming the field."""
    meta, spec = obj["metadata"], mapping(obj.get("spec"), f"{where}: spec")
    name, namespace = meta["name"], meta["namespace"]
    lwt = mapping(spec.get("leaderWorkerTemplate"), f"{where}: spec.leaderWorkerTemplate")
    at = f"{where}: spec.leaderWorkerTemplate"
    size = count(lwt, "size", at, 1) or 0
    worker = _template(lwt, at, "workerTemplate")
    leader = _template(lwt, at, "leaderTemplate") if lwt.get("leaderTemplate") is not None else worker
    annotations = {LWS_SIZE: str(size)}
    owner_obj = {**obj, "apiVersion": LEADER_WORKER_SET.api_version, "kind": LEADER_WORKER_SET.kind}

    def stamped(template: Mapping[str, Any], labels: Mapping[str, str], more: Mapping[str, str]) -> dict[str, Any]:
        tmeta = dict(template.get("metadata") or {})
        return {**template, "metadata": {**tmeta, "labels": {**(tmeta.get("labels") or {}), **labels},
                                         "annotations": {**(tmeta.get("annotations") or {}), **more}}}

    leader_labels = {contract.LWS_WORKER_INDEX_LABEL: "0", contract.LWS_NAME_LABEL: name}
    leaders = child("apps/v1", "StatefulSet", name, owner_obj, {contract.LWS_NAME_LABEL: name},
                    {"replicas": replicas(spec, f"{where}: spec"), "serviceName": name,
                     "podManagementPolicy": "Parallel", "template": stamped(leader, leader_labels, annotations)})
    made = Made(workloads=[(LEADER_WORKER_SET.kind, obj)])
    leader_made = statefulset(leaders, within(where, f"StatefulSet {name}"))
    made.workloads += leader_made.workloads
    for g, pod in enumerate(leader_made.pods):
        key = hashlib.sha1(f"{namespace}/{pod['metadata']['name']}".encode()).hexdigest()
        pod["metadata"]["labels"].update({contract.LWS_GROUP_INDEX_LABEL: str(g), LWS_GROUP_KEY: key})
        made.pods.append(pod)
        if size <= 1:
            continue
        group = {contract.LWS_GROUP_INDEX_LABEL: str(g), contract.LWS_NAME_LABEL: name, LWS_GROUP_KEY: key}
        workers = child("apps/v1", "StatefulSet", pod["metadata"]["name"], leaders, group,
                        {"replicas": size - 1, "serviceName": name, "podManagementPolicy": "Parallel",
                         "ordinals": {"start": 1},
                         "template": stamped(worker, group, {**annotations, LWS_LEADER_NAME: pod["metadata"]["name"]})})
        worker_made = statefulset(workers, within(where, f"StatefulSet {workers['metadata']['name']}"))
        for w, one in enumerate(worker_made.pods, start=1):
            one["metadata"]["labels"][contract.LWS_WORKER_INDEX_LABEL] = str(w)
        made.add(worker_made)
    return made


#: Each kind's expansion, by ``kind``: what ``plan -f`` takes besides Pods and the gang APIs' objects.
EXPANDERS: dict[str, Callable[[dict[str, Any], str], Made]] = {
    "Job": job, "JobSet": jobset, "Deployment": deployment, "ReplicaSet": replicaset, "StatefulSet": statefulset,
    LEADER_WORKER_SET.kind: leaderworkerset,
}
