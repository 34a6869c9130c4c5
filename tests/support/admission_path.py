"""The cluster's own path from a manifest to gangs, for the tests of ``kubectl troupe plan``:
the pods the controllers create (``reconciler.tools.manifests.created``) go through the
webhook's ``mutate`` as AdmissionReview JSON, entry by entry as the API server calls them
(the main entry, the namespace opt-in entry, the main entry again on reinvocation), their
patches applied with ``jsonpatch``; the reconciler's grouping then makes the gangs
(docs/decisions/051-plan-admits-with-the-webhook.md, 077-plan-takes-what-users-apply.md)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.model import workloads as wl
from reconciler.engine.model.membership import group_by_gang, planned_gangs
from reconciler.engine.model.pods import PodInfo
from reconciler.tools.manifests import Context, created
from troupe import contract
from troupe.config import Config, from_mapping
from troupe.podgroups import parse_pod_group, source_of
from webhook.admission import mutate, patch_of

NOW = "2026-03-01T10:00:00Z"


@dataclass(frozen=True)
class Case:
    """A manifest (``objects``), what the cluster holds besides the nodes (``cluster``: the
    workload objects of pods given in the manifest, Namespaces), the configuration and the
    gangs wanted (``want``: ``namespace/name`` -> size)."""

    objects: list[dict[str, Any]]
    want: dict[str, int]
    cluster: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)


def _config(case: Case) -> Config:
    return from_mapping(case.config)


def _review(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview JSON the API server sends for the creation of ``pod``, decoded."""
    meta = pod["metadata"]
    return json.loads(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": meta["name"], "namespace": meta["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}))


def _call(pod: dict[str, Any], config: Config, auto: bool) -> tuple[dict[str, Any], bool]:
    """One webhook entry called on ``pod``: the pod patched, and whether the patch changed it."""
    answer = mutate(_review(pod, f"uid-{pod['metadata']['name']}"), config, gang_mode_auto=auto)
    assert answer["response"]["allowed"], answer["response"].get("status")
    ops = patch_of(answer)
    return (jsonpatch.apply_patch(pod, ops) if ops else pod), bool(ops)


def admitted_by_the_webhook(pod: dict[str, Any], config: Config, opted_in: bool) -> dict[str, Any]:
    """``pod`` as the API server stores it: the main entry, then (in a namespace opted in,
    for a workload's pod naming no gang) the opt-in entry, then the main entry again when
    that one changed the pod (``reinvocationPolicy: IfNeeded``), then what the API server
    sets itself."""
    pod, _ = _call(pod, config, auto=False)
    keys = contract.GangKeys.for_prefix(config.gang_annotation_prefix)
    ann = pod["metadata"].get("annotations") or {}
    if opted_in and contract.created_by_workload(pod) and keys.name not in ann and keys.size not in ann:
        pod, changed = _call(pod, config, auto=True)
        if changed:
            pod, _ = _call(pod, config, auto=False)
    pod = copy.deepcopy(pod)
    pod["metadata"].update(uid=f"uid-{pod['metadata']['name']}", creationTimestamp=NOW)
    pod["spec"].setdefault("priority", 0)
    pod["status"] = {"phase": "Pending"}
    return pod


def webhook_gangs(case: Case, namespace: str = "ml") -> dict[str, tuple[int | None, list[str]]]:
    """The gangs the reconciler makes of the pods the webhook admitted: key -> (size, members);
    objects that name no namespace are created in ``namespace``."""
    config = _config(case)
    namespaces = {o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in case.cluster
                  if o["kind"] == "Namespace"}
    pods, workloads = created([("manifest", o["kind"], o) for o in case.objects], Context(config, namespace))
    admitted = [admitted_by_the_webhook(
        p, config, namespaces.get(p["metadata"]["namespace"], {}).get(contract.GANG_MODE_LABEL) == "auto")
        for p in pods]
    known: dict[Any, Any] = {}
    for kind, obj in [*workloads, *((o["kind"], o) for o in case.cluster)]:
        known.update(wl.workloads_of(kind, [obj]))
    parallelism = {(j["metadata"]["namespace"], j["metadata"]["name"]): wl.job_parallelism(j)
                   for kind, j in workloads if kind == "Job"}
    groups = {}
    for kind, obj in workloads:
        if kind == "PodGroup" and (source := source_of(obj["apiVersion"])) is not None:
            groups[(source, obj["metadata"]["namespace"], obj["metadata"]["name"])] = parse_pod_group(source, obj, config)
    known_workloads = wl.Workloads(known, groups=groups)
    planned = planned_gangs(known_workloads, config, frozenset(n for n, labels in namespaces.items()
                                                               if labels.get(contract.GANG_MODE_LABEL) == "auto"))
    members = group_by_gang((PodInfo.from_object(p) for p in admitted), config)
    gangs = {key: build_gang(key, members.get(key, []), config, parallelism, known_workloads, planned.get(key))
             for key in sorted({*members, *planned})}
    return {key: (g.size, sorted(f"{p.namespace}/{p.name}" for p in g.members)) for key, g in gangs.items()}
