"""The pods a manifest would create, as they would reach the reconciler: ``kubectl troupe plan``.

A manifest (YAML or JSON: one object, a ``List``, or several documents) holds Pods, Jobs
(``batch/v1``) and JobSets (``jobset.x-k8s.io/v1alpha2``). :func:`expand` makes the pods
their controllers would create, as those controllers make them:

- a **Job** runs ``parallelism`` pods (default 1), capped by ``completions``; an
  ``Indexed`` Job's pod ``i`` is named ``<job>-<i>-<suffix>`` and carries
  ``batch.kubernetes.io/job-completion-index`` (label and annotation); every pod carries
  ``job-name``, ``batch.kubernetes.io/job-name``, ``controller-uid`` and
  ``batch.kubernetes.io/controller-uid``, and the Job as its controlling owner
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/);
- a **JobSet** makes ``replicas`` Jobs ``<jobset>-<replicatedJob>-<i>`` of each replicated
  Job, in order, labelled ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``,
  ``job-index``, ``job-global-index`` (replicated-job order, then index) and
  ``restart-attempt: "0"`` (sigs.k8s.io/jobset's ``pkg/controllers``), then each Job its pods;
- a **Pod** is itself (``generateName`` gets a suffix);
- a **PodGroup** (the upstream Workload API's, Volcano's, coscheduling's or KAI's) is
  itself, read with the pods that name it (docs/decisions/056-pod-groups.md).

Names made here end in a suffix derived from the owner and index (deterministic: the same
manifest gives the same plan). Then what the API server does at creation that the
decision reads: the namespace (the manifest's, else the one given), ``spec.priority``
from ``priorityClassName`` or the global default PriorityClass, ``creationTimestamp`` (now),
a ``uid``; and the webhook's admission, by the webhook's own function, its patch applied
(:func:`admit`: the pods are exactly those the webhook would let through, as it would
mutate them; docs/decisions/051-plan-admits-with-the-webhook.md).

Pure: objects and a clock value in, objects out; nothing is created anywhere.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model.kinds.jobset import child_jobs
from troupe import contract
from troupe.config import Config
from troupe.workloadkinds import JOBSET
from webhook.admission import admit as webhook_admit
from webhook.patches import apply_ops

#: The kinds a manifest may hold (``PodGroup``: of any source Troupe reads,
#: docs/decisions/056-pod-groups.md).
KINDS = ("Pod", "Job", "JobSet", "PodGroup")


class ManifestError(ValueError):
    """A manifest that cannot be planned, or a pod the webhook or the API server would
    refuse; the message names the object and the field (and the key and value)."""


@dataclass(frozen=True)
class Expanded:
    """What a manifest creates: ``pods`` (admitted: as the reconciler would see them),
    ``workloads`` (``(kind, object)`` of its Jobs and JobSets, which size gangs, and its
    PodGroups, which declare them), and
    ``managed``: the keys (``namespace/name``) of the pods that carry a Troupe gate once
    admitted (the reconciler manages them)."""

    pods: tuple[dict[str, Any], ...]
    workloads: tuple[tuple[str, dict[str, Any]], ...]
    managed: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Context:
    """What admission reads besides the object: the Troupe ``config``, the ``namespace``
    of objects that name none, namespace labels by name (a namespace's
    ``troupe.io/gang-mode: auto`` opts its workloads' pods in), PriorityClasses by name
    (``(value, globalDefault)``), ``now`` (seconds since the epoch: creation time) and
    the requesting ``user`` (the webhook refuses Troupe's reserved annotations from
    anyone but the reconciler)."""

    config: Config
    namespace: str = "default"
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority_classes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    now: float = 0.0
    user: str = ""


def _suffix(*parts: object) -> str:
    """Five characters of [a-z0-9], from a hash of ``parts`` (as generateName's five)."""
    digest = int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "big")
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
    out = ""
    for _ in range(5):
        digest, k = divmod(digest, len(alphabet))
        out += alphabet[k]
    return out


def _uid(*parts: object) -> str:
    return "plan-" + hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def _map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def _count(spec: Mapping[str, Any], key: str, where: str, default: int | None) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}.{key}: expected an integer >= 0, got {value!r}")
    return value


def expand(objects: Sequence[tuple[str, str, Mapping[str, Any]]], ctx: Context) -> Expanded:
    """The pods and workloads of a manifest's objects (``(where, kind, object)``, as
    :func:`reconciler.objects.snapshot_io.read_objects` gives them): :func:`created`, each
    pod then admitted (:func:`admit`). Raises :class:`ManifestError` naming the object: an
    unsupported kind, a malformed field, a pod admission refuses."""
    pods, workloads = created(objects, ctx)
    admitted, managed = [], []
    for pod in pods:
        done, gated = admit(pod, ctx)
        admitted.append(done)
        if gated:
            managed.append(f"{done['metadata']['namespace']}/{done['metadata']['name']}")
    return Expanded(tuple(admitted), tuple(workloads), tuple(managed))


def created(objects: Sequence[tuple[str, str, Mapping[str, Any]]], ctx: Context) -> tuple[
        list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """The pods of a manifest's objects as their controllers send them to the API server
    (named and namespaced, not yet admitted), and its workloads (``(kind, object)``, the
    JobSets' Jobs included, and its PodGroups). Raises :class:`ManifestError` naming the object: an
    unsupported kind, a malformed field."""
    pods: list[dict[str, Any]] = []
    workloads: list[tuple[str, dict[str, Any]]] = []
    for where, kind, obj in objects:
        if kind not in KINDS:
            raise ManifestError(f"{where}: kind {kind!r} cannot be planned (supported: {', '.join(KINDS)})")
        meta = _map(obj.get("metadata"), f"{where}: metadata")
        namespace = str(meta.get("namespace") or ctx.namespace)
        name = meta.get("name")
        if kind == "Pod":
            if not name:
                prefix = meta.get("generateName")
                if not isinstance(prefix, str) or not prefix:
                    raise ManifestError(f"{where} (Pod): metadata.name or metadata.generateName is required")
                name = prefix + _suffix(namespace, prefix, len(pods))
            pod = copy.deepcopy(dict(obj))
            pod["metadata"] = {**meta, "name": name, "namespace": namespace}
            pod["metadata"].pop("generateName", None)
            pods.append(pod)
            continue
        if not isinstance(name, str) or not name:
            raise ManifestError(f"{where} ({kind}): metadata.name: missing field")
        whole = {**copy.deepcopy(dict(obj)), "metadata": {**meta, "namespace": namespace,
                                                          "uid": _uid(namespace, kind, name)}}
        if kind == "PodGroup":
            workloads.append(("PodGroup", whole))
        elif kind == "Job":
            workloads.append(("Job", whole))
            pods += _job_pods(whole, f"{where} (Job {name})")
        else:
            workloads.append(("JobSet", whole))
            for job in _jobset_jobs(whole, f"{where} (JobSet {name})"):
                workloads.append(("Job", job))
                pods += _job_pods(job, f"{where} (JobSet {name}, Job {job['metadata']['name']})")
    return pods, workloads


def _jobset_jobs(jobset: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The Jobs of ``jobset`` as its controller makes them (their names, order and labels are
    the engine's JobSet kind's, :func:`~reconciler.engine.model.kinds.jobset.child_jobs`),
    after checking the fields it reads. Raises :class:`ManifestError` naming the field."""
    meta = jobset["metadata"]
    spec = _map(jobset.get("spec"), f"{where}: spec")
    name, namespace = meta["name"], meta["namespace"]
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise ManifestError(f"{where}: spec.replicatedJobs: expected a non-empty list")
    for r, rj in enumerate(replicated):
        at = f"{where}: spec.replicatedJobs[{r}]"
        rj = _map(rj, at)
        if not isinstance(rj.get("name"), str) or not rj.get("name"):
            raise ManifestError(f"{at}.name: missing field")
        _count(rj, "replicas", at, 1)
        template = _map(rj.get("template"), f"{at}.template")
        tmeta = _map(template.get("metadata"), f"{at}.template.metadata")
        pod_template = _map(_map(template.get("spec"), f"{at}.template.spec").get("template"), f"{at}.template.spec.template")
        pod_meta = _map(pod_template.get("metadata"), f"{at}.template.spec.template.metadata")
        for part in (tmeta.get("labels"), pod_meta.get("labels")):
            _map(part, f"{at}: labels")
        _map(pod_meta.get("annotations"), f"{at}: annotations")
    jobs: list[dict[str, Any]] = []
    for child in child_jobs(jobset, name):
        labels = child.labels(name)
        tmeta = dict(child.template.get("metadata") or {})
        job_spec = copy.deepcopy(dict(child.template.get("spec") or {}))
        pod_template = dict(job_spec.get("template") or {})
        pod_meta = dict(pod_template.get("metadata") or {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **labels}
        job_spec["template"] = {**pod_template, "metadata": pod_meta}
        jobs.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {**tmeta, "name": child.name, "namespace": namespace,
                         "uid": _uid(namespace, "Job", child.name),
                         "labels": {**(tmeta.get("labels") or {}), **labels},
                         "ownerReferences": [{"apiVersion": JOBSET.api_version, "kind": JOBSET.kind, "name": name,
                                              "uid": meta["uid"], "controller": True}]},
            "spec": job_spec,
        })
    return jobs


def _job_pods(job: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    meta = job["metadata"]
    spec = _map(job.get("spec"), f"{where}: spec")
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    parallelism = _count(spec, "parallelism", f"{where}: spec", 1) or 0
    completions = _count(spec, "completions", f"{where}: spec", None)
    count = parallelism if completions is None else min(parallelism, completions)
    indexed = spec.get("completionMode") == "Indexed"
    template = _map(spec.get("template"), f"{where}: spec.template")
    tmeta = _map(template.get("metadata"), f"{where}: spec.template.metadata")
    pod_spec = _map(template.get("spec"), f"{where}: spec.template.spec")
    if not pod_spec.get("containers"):
        raise ManifestError(f"{where}: spec.template.spec.containers: missing field")
    out = []
    for i in range(count):
        labels = {**_map(tmeta.get("labels"), f"{where}: labels"), "job-name": name, "controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
        annotations = dict(_map(tmeta.get("annotations"), f"{where}: annotations"))
        if indexed:
            labels[contract.JOB_COMPLETION_INDEX] = annotations[contract.JOB_COMPLETION_INDEX] = str(i)
        pod_name = f"{name}-{i}-{_suffix(namespace, name, i)}" if indexed else f"{name}-{_suffix(namespace, name, i)}"
        out.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace, "labels": labels, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(pod_spec),
        })
    return out


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod))


def _request(pod: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """The ``request`` of the AdmissionReview v1 the API server sends the webhook for the
    creation of ``pod`` by ``ctx.user`` (a dry run: nothing is stored)."""
    meta = pod["metadata"]
    return {"uid": _uid(meta["namespace"], "AdmissionReview", meta["name"]),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta["name"], "namespace": meta["namespace"], "operation": "CREATE",
            "userInfo": {"username": ctx.user}, "object": pod, "dryRun": True}


def admit(pod: Mapping[str, Any], ctx: Context) -> tuple[dict[str, Any], bool]:
    """``pod`` as the API server would store it, and whether it carries a Troupe gate then
    (Troupe's own or a GKE auto gate: the reconciler manages it).

    The API server's part: ``spec.priority`` from ``priorityClassName`` (or the global
    default class; its Priority admission plugin runs before the webhooks),
    ``creationTimestamp`` (``ctx.now``), a ``uid``, ``status.phase: Pending``. The
    webhook's part is the webhook's own admission function
    (:func:`webhook.admission.admit`, which its HTTPS server calls; every key it reads:
    Troupe's, the configured gang prefix's, Kueue's) over the AdmissionReview request the
    API server would send, and its JSON Patch applied as the API server applies it
    (:func:`webhook.patches.apply_ops`): the pod gets exactly what the webhook adds (gate,
    tolerations, timeout, ``<prefix>-size: auto``, the gang keys of a Kueue plain-pod group,
    device env vars). In a namespace labelled ``troupe.io/gang-mode: auto`` the request goes
    through the opt-in entry (``gang_mode_auto``), which the API server calls for a
    workload's pods that name no gang; it applies the main entry's rules too, so the pod
    ends as after both entries (docs/decisions/051-plan-admits-with-the-webhook.md). Raises
    :class:`ManifestError` with the webhook's message for a pod it would deny, or the API
    server's for an unknown PriorityClass."""
    out = copy.deepcopy(dict(pod))
    meta = out["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    spec = out["spec"] = _map(out.get("spec"), f"pod {namespace}/{name}: spec")
    klass = spec.get("priorityClassName")
    if klass:
        if klass not in ctx.priority_classes and klass not in ("system-cluster-critical", "system-node-critical"):
            raise ManifestError(f"pod {namespace}/{name}: spec.priorityClassName: no PriorityClass with name "
                                f"{klass} was found")
        spec["priority"] = ctx.priority_classes.get(klass, (2000000000, False))[0]
    elif "priority" not in spec:
        default = [v for v, is_default in ctx.priority_classes.values() if is_default]
        spec["priority"] = default[0] if default else 0
    opted = ctx.namespaces.get(namespace, {}).get(contract.GANG_MODE_LABEL) == contract.GANG_MODE_AUTO
    answer = webhook_admit(_request(out, ctx), ctx.config, gang_mode_auto=opted)
    if not answer.allowed:
        raise ManifestError(f"pod {namespace}/{name}: denied by Troupe's webhook: {answer.message}")
    apply_ops(out, answer.ops)
    meta["creationTimestamp"] = _rfc3339(ctx.now)
    meta["uid"] = _uid(namespace, "Pod", name)
    out.setdefault("status", {"phase": "Pending"})
    return out, _gated(out)
