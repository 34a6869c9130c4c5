"""What every controller's expansion for ``kubectl troupe plan`` shares: names as the API
server and the controllers make them, owner references, checked fields, and one pod made
from a pod template (docs/decisions/077-plan-takes-what-users-apply.md).

A controller's expansion (:mod:`reconciler.tools.controllers`) reads an object and gives
:class:`Made`: the pods it would create, as its controller sends them to the API server
(named, labelled, owned; not yet admitted), and the objects it would create between (a
Deployment's ReplicaSet, a JobSet's Jobs, a LeaderWorkerSet's StatefulSets) that the
reconciler reads. Names made here are deterministic (a hash of the owner and index, in the
form the real name takes): the same manifest gives the same plan.

Pure: plain objects in, plain objects out; no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The characters of the API server's generated names and of a Deployment's
#: ``pod-template-hash`` (``k8s.io/apimachinery/pkg/util/rand``: no vowels, no 0, 1 or 3).
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ManifestError(ValueError):
    """A manifest that cannot be planned, or a pod the webhook or the API server would
    refuse; the message names the object and the field (and the key and value)."""


@dataclass
class Made:
    """What one manifest object creates: ``pods`` (as their controllers send them, not yet
    admitted) and ``workloads`` (``(kind, object)``: the object itself when the reconciler
    reads its kind, and the objects its controller makes that the reconciler reads)."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add(self, other: Made) -> None:
        """Append ``other``'s pods and workloads to these."""
        self.pods += other.pods
        self.workloads += other.workloads


def suffix(*parts: object, length: int = 5) -> str:
    """``length`` characters of :data:`ALPHABET` from a hash of ``parts``: the form of the
    five random characters the API server appends to ``metadata.generateName``
    (``k8s.io/apiserver/pkg/storage/names``), deterministic here."""
    digest = int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "big")
    out = ""
    for _ in range(length):
        digest, k = divmod(digest, len(ALPHABET))
        out += ALPHABET[k]
    return out


def uid(*parts: object) -> str:
    """A ``metadata.uid`` for an object made here: ``plan-`` and 24 hex digits of a hash of
    ``parts`` (the API server's are random UUIDs)."""
    return "plan-" + hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def template_hash(template: Mapping[str, Any]) -> str:
    """A Deployment's ``pod-template-hash`` of ``template``, in the form the Deployment
    controller gives it (``k8s.io/kubernetes/pkg/controller``: ``ComputeHash``, an FNV-32a
    hash written in decimal, each digit mapped onto :data:`ALPHABET` by
    ``rand.SafeEncodeString``). The hash here is of the template's JSON, so the value is not
    the controller's (which hashes Go's dump of the object)."""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, default=str).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(ALPHABET[ord(c) % len(ALPHABET)] for c in str(h))


def mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` as a dict (``{}`` for None). Raises :class:`ManifestError` naming
    ``where`` when it is not a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def count(spec: Mapping[str, Any], key: str, where: str, default: int | None) -> int | None:
    """``spec[key]``, an integer >= 0, or ``default`` when absent. Raises
    :class:`ManifestError` naming ``where.key`` and the value otherwise."""
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}.{key}: expected an integer >= 0, got {value!r}")
    return value


def replicas(spec: Mapping[str, Any], where: str, key: str = "replicas") -> int:
    """``spec.replicas`` (the API's default 1). Raises :class:`ManifestError` as :func:`count`."""
    return count(spec, key, where, 1) or 0


def owner(obj: Mapping[str, Any], block: bool = True) -> dict[str, Any]:
    """The controlling ``ownerReference`` to ``obj`` (its ``apiVersion``, ``kind``, name and
    uid), as every controller writes it on what it makes."""
    meta = obj["metadata"]
    ref = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""), "name": meta["name"],
           "uid": meta["uid"], "controller": True}
    return {**ref, "blockOwnerDeletion": True} if block else ref


def child(api_version: str, kind: str, name: str, parent: Mapping[str, Any], labels: Mapping[str, str],
          spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An object of ``kind`` named ``name`` that ``parent``'s controller makes in
    ``parent``'s namespace, owned by ``parent``, with ``labels``, ``annotations`` and ``spec``."""
    namespace = parent["metadata"]["namespace"]
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid(namespace, kind, name),
                            "labels": dict(labels), "ownerReferences": [owner(parent)]}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": copy.deepcopy(dict(spec))}


def pod_of(template: Mapping[str, Any], where: str, name: str, parent: Mapping[str, Any],
           labels: Mapping[str, str] = {}, annotations: Mapping[str, str] = {},
           spec: Mapping[str, Any] = {}) -> dict[str, Any]:
    """The pod named ``name`` a controller makes of pod template ``template`` (a
    ``PodTemplateSpec``), owned by ``parent``: the template's labels and annotations with
    ``labels`` and ``annotations`` over them, and its spec with ``spec``'s fields over it.
    Raises :class:`ManifestError` naming ``where`` and the field: a template that is not a
    mapping, labels or annotations that are not, no containers."""
    template = mapping(template, where)
    meta = mapping(template.get("metadata"), f"{where}.metadata")
    pod_spec = mapping(template.get("spec"), f"{where}.spec")
    if not pod_spec.get("containers"):
        raise ManifestError(f"{where}.spec.containers: missing field")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": parent["metadata"]["namespace"],
                         "labels": {**mapping(meta.get("labels"), f"{where}.metadata.labels"), **labels},
                         "annotations": {**mapping(meta.get("annotations"), f"{where}.metadata.annotations"),
                                         **annotations},
                         "ownerReferences": [owner(parent)]},
            "spec": {**copy.deepcopy(pod_spec), **spec}}
