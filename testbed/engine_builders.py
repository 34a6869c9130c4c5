"""Chained builders for Node and Pod objects (plain dicts, the JSON shape) in engine tests.

    make_node("n1").topology("b1", "s1", "h1").allocatable(gpu=8).build()
    make_pod("w-0").requests(gpu=8).gang("train", 4).gated().info()
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reconciler.engine.ledger.builder import build_snapshot, snapshot_of_objects
from reconciler.engine.ledger.parts import located, read_parts
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.volumes import VolumeCatalog
from troupe.config import Config
from troupe.contract import GATE

GPU = "nvidia.com/gpu"
BLOCK = "cloud.google.com/gce-topology-block"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
HOST = "cloud.google.com/gce-topology-host"
HOSTNAME = "kubernetes.io/hostname"


def _resources(cpu: str | None, memory: str | None, gpu: int | str | None, extended: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cpu is not None:
        out["cpu"] = cpu
    if memory is not None:
        out["memory"] = memory
    if gpu is not None:
        out[GPU] = str(gpu)
    for k, v in extended.items():
        out[k.replace("__", "/").replace("_", "-")] = str(v)
    return out


class NodeBuilder:
    """A Ready node with 8 cpu, 32Gi, 110 pods and its hostname label."""

    def __init__(self, name: str) -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {HOSTNAME: name}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def label(self, key: str, value: str) -> NodeBuilder:
        self.obj["metadata"]["labels"][key] = value
        return self

    def topology(self, block: str, subblock: str, host: str) -> NodeBuilder:
        """GKE's block / subblock / host labels."""
        return self.label(BLOCK, block).label(SUBBLOCK, subblock).label(HOST, host)

    def allocatable(
        self, cpu: str | None = None, memory: str | None = None, gpu: int | str | None = None, **extended: Any
    ) -> NodeBuilder:
        """Set allocatable amounts; ``example__com_widget=2`` is ``example/com-widget``."""
        self.obj["status"]["allocatable"].update(_resources(cpu, memory, gpu, extended))
        return self

    def pods(self, count: int) -> NodeBuilder:
        self.obj["status"]["allocatable"]["pods"] = str(count)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        self.obj["spec"].setdefault("taints", []).append(taint)
        return self

    def not_ready(self) -> NodeBuilder:
        self.obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return self

    def unschedulable(self) -> NodeBuilder:
        self.obj["spec"]["unschedulable"] = True
        return self

    def shared(self, taint: bool = False) -> NodeBuilder:
        """Opted in to shared device groups (``deviceshare.io/mode: shared``), with the
        recommended taint when ``taint``."""
        self.label("deviceshare.io/mode", "shared")
        return self.taint("deviceshare.io/mode", "shared") if taint else self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)

    def info(self) -> NodeInfo:
        return NodeInfo.from_object(self.obj)


class PodBuilder:
    """A Pending pod with one container requesting nothing."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "main", "resources": {}}]},
            "status": {"phase": "Pending"},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.obj["spec"]
        return spec

    def requests(
        self, cpu: str | None = None, memory: str | None = None, gpu: int | str | None = None, **extended: Any
    ) -> PodBuilder:
        """Requests of the first container."""
        res = self.spec["containers"][0]["resources"]
        res.setdefault("requests", {}).update(_resources(cpu, memory, gpu, extended))
        return self

    def container(self, name: str, requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None) -> PodBuilder:
        res: dict[str, Any] = {}
        if requests is not None:
            res["requests"] = dict(requests)
        if limits is not None:
            res["limits"] = dict(limits)
        self.spec["containers"].append({"name": name, "resources": res})
        return self

    def init_container(self, name: str, requests: Mapping[str, str], sidecar: bool = False) -> PodBuilder:
        c: dict[str, Any] = {"name": name, "resources": {"requests": dict(requests)}}
        if sidecar:
            c["restartPolicy"] = "Always"
        self.spec.setdefault("initContainers", []).append(c)
        return self

    def overhead(self, **amounts: str) -> PodBuilder:
        self.spec["overhead"] = dict(amounts)
        return self

    def on(self, node: str, phase: str = "Running") -> PodBuilder:
        """Bound to ``node``."""
        self.spec["nodeName"] = node
        self.obj["status"]["phase"] = phase
        return self

    def phase(self, phase: str) -> PodBuilder:
        self.obj["status"]["phase"] = phase
        return self

    def gated(self, gate: str = GATE) -> PodBuilder:
        self.spec.setdefault("schedulingGates", []).append({"name": gate})
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"].setdefault("annotations", {})[key] = value
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"].setdefault("labels", {})[key] = value
        return self

    def gang(self, name: str, size: int, prefix: str = "troupe.io/gang") -> PodBuilder:
        return self.annotate(f"{prefix}-name", name).annotate(f"{prefix}-size", str(size))

    def index(self, i: int) -> PodBuilder:
        """``batch.kubernetes.io/job-completion-index``."""
        return self.label("batch.kubernetes.io/job-completion-index", str(i))

    def created(self, timestamp: str) -> PodBuilder:
        self.obj["metadata"]["creationTimestamp"] = timestamp
        return self

    def node_selector(self, key: str, value: str) -> PodBuilder:
        self.spec.setdefault("nodeSelector", {})[key] = value
        return self

    def affinity(self, *terms: Mapping[str, Any]) -> PodBuilder:
        """Required node affinity with these ``nodeSelectorTerms``."""
        self.spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        }
        return self

    def pod_affinity(self, topology_key: str, labels: Mapping[str, str] | None = None, anti: bool = False,
                     **term: Any) -> PodBuilder:
        """A required pod (anti-)affinity term on ``topology_key`` selecting ``labels``
        (``matchLabels``; None: no ``labelSelector``), with ``term``'s other fields
        (``namespaces``, ``namespaceSelector``, ``matchLabelKeys``...)."""
        kind = "podAntiAffinity" if anti else "podAffinity"
        entry: dict[str, Any] = {"topologyKey": topology_key, **term}
        if labels is not None:
            entry["labelSelector"] = {"matchLabels": dict(labels)}
        required = self.spec.setdefault("affinity", {}).setdefault(kind, {})
        required.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(entry)
        return self

    def spread(self, topology_key: str, max_skew: int = 1, labels: Mapping[str, str] | None = None,
               when: str = "DoNotSchedule", **constraint: Any) -> PodBuilder:
        """A topology spread constraint selecting ``labels`` (None: no ``labelSelector``)."""
        entry: dict[str, Any] = {"topologyKey": topology_key, "maxSkew": max_skew, "whenUnsatisfiable": when,
                                 **constraint}
        if labels is not None:
            entry["labelSelector"] = {"matchLabels": dict(labels)}
        self.spec.setdefault("topologySpreadConstraints", []).append(entry)
        return self

    def host_port(self, port: int, host_ip: str = "", protocol: str = "") -> PodBuilder:
        """A host port on the first container."""
        entry: dict[str, Any] = {"containerPort": port, "hostPort": port}
        if host_ip:
            entry["hostIP"] = host_ip
        if protocol:
            entry["protocol"] = protocol
        self.spec["containers"][0].setdefault("ports", []).append(entry)
        return self

    def claim(self, name: str, volume: str = "") -> PodBuilder:
        """Mounts PersistentVolumeClaim ``name`` (as volume ``volume``, default ``name``)."""
        self.spec.setdefault("volumes", []).append({"name": volume or name, "persistentVolumeClaim": {"claimName": name}})
        return self

    def node_name(self, name: str) -> PodBuilder:
        """``spec.nodeName`` set while still Pending (not bound by a scheduler yet)."""
        self.spec["nodeName"] = name
        return self

    def tolerate(self, key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> PodBuilder:
        t = {"operator": operator}
        if key:
            t["key"] = key
        if value:
            t["value"] = value
        if effect:
            t["effect"] = effect
        self.spec.setdefault("tolerations", []).append(t)
        return self

    def owned_by(self, kind: str = "Job", name: str = "train", api_version: str = "batch/v1") -> PodBuilder:
        """A controlling owner reference (what recreates the pod when it is deleted)."""
        self.obj["metadata"]["ownerReferences"] = [
            {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{kind}-{name}", "controller": True}]
        return self

    def deleting(self) -> PodBuilder:
        self.obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
        return self

    def priority(self, value: int) -> PodBuilder:
        self.spec["priority"] = value
        return self

    def group(self, name: str) -> PodBuilder:
        """Joins SharedDeviceGroup ``name`` (``deviceshare.io/group``)."""
        return self.annotate("deviceshare.io/group", name)

    def devices(self, **ids: str) -> PodBuilder:
        """``deviceshare.io/selected-devices``: ``devices(gpu="0,1")``."""
        import json

        return self.annotate("deviceshare.io/selected-devices",
                             json.dumps({GPU if k == "gpu" else k: v for k, v in ids.items()}))

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)

    def info(self) -> PodInfo:
        return PodInfo.from_object(self.obj)


class GroupBuilder:
    """A SharedDeviceGroup (cluster-scoped, ``deviceshare.io/v1alpha1``) asking for nothing yet."""

    def __init__(self, name: str) -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
            "metadata": {"name": name, "uid": f"uid-sdg-{name}"},
            "spec": {"resources": {}},
        }

    def resources(self, gpu: int | None = None, **extended: int) -> GroupBuilder:
        if gpu is not None:
            self.obj["spec"]["resources"][GPU] = gpu
        for k, v in extended.items():
            self.obj["spec"]["resources"][k.replace("__", "/").replace("_", "-")] = v
        return self

    def strategy(self, value: str) -> GroupBuilder:
        self.obj["spec"]["schedulingStrategy"] = value
        return self

    def node_selector(self, key: str, value: str) -> GroupBuilder:
        self.obj["spec"].setdefault("nodeSelector", {})[key] = value
        return self

    def bound(self, node: str, gpu: str) -> GroupBuilder:
        """``status``: Bound to ``node`` with these GPU IDs (``"0,1"``)."""
        self.obj["status"] = {"phase": "Bound", "nodeName": node, "selectedDevices": {GPU: gpu}}
        return self

    def deleting(self) -> GroupBuilder:
        self.obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def make_group(name: str) -> GroupBuilder:
    return GroupBuilder(name)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """One ``matchExpressions`` entry."""
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def snapshot_of(
    nodes: Iterable[NodeBuilder | Mapping[str, Any]],
    pods: Iterable[PodBuilder | Mapping[str, Any]] = (),
    levels: TopologyLevels | None = None,
    groups: Iterable[GroupBuilder | Mapping[str, Any]] = (),
    budgets: Iterable[Mapping[str, Any]] = (),
    objects: Iterable[Mapping[str, Any]] = (),
    config: Config | None = None,
) -> Snapshot:
    """The snapshot the reconciler would build of these objects (builders or plain
    objects; ``objects``: any other kind, read by its ``kind`` field), through the one
    parser and builder (:func:`~reconciler.engine.ledger.builder.snapshot_of_objects`)."""
    def obj(x: NodeBuilder | PodBuilder | GroupBuilder | Mapping[str, Any]) -> Mapping[str, Any]:
        return x.build() if isinstance(x, NodeBuilder | PodBuilder | GroupBuilder) else x

    return snapshot_of_objects([obj(n) for n in nodes], [obj(p) for p in pods], levels,
                               groups=[obj(g) for g in groups], budgets=list(budgets), objects=objects, config=config)


def budget(name: str, allowed: int | None, match_labels: Mapping[str, str] | None = None,
           namespace: str = "default", expressions: list[dict[str, Any]] | None = None,
           selector: bool = True) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget object: ``allowed`` is its
    ``status.disruptionsAllowed`` (None: no status yet); ``selector=False`` leaves the
    selector out."""
    spec: dict[str, Any] = {"minAvailable": 1}
    if selector:
        spec["selector"] = {"matchLabels": dict(match_labels or {}),
                            **({"matchExpressions": expressions} if expressions else {})}
    out: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    if allowed is not None:
        out["status"] = {"disruptionsAllowed": allowed}
    return out


def gang_of(size: int, gpu: int | None = None, name: str = "train", cpu: str | None = None) -> list[PodInfo]:
    """``size`` gated members ``w-0``..``w-<size-1>`` ranked by completion index."""
    return [make_pod(f"w-{i}").requests(cpu=cpu, gpu=gpu).gang(name, size).index(i).gated().info() for i in range(size)]


def placed(result: Any) -> list[tuple[str, str]]:
    """``(pod name, node)`` of a result's assignments, in rank order."""
    return [(a.pod_key.split("/", 1)[1], a.node) for a in result.assignments]


def counts(result: Any) -> dict[str, int]:
    """Members per node."""
    out: dict[str, int] = {}
    for a in result.assignments:
        out[a.node] = out.get(a.node, 0) + 1
    return out


def names(seq: Sequence[Any]) -> list[str]:
    return [x.name for x in seq]


def snapshot_with(
    nodes: Iterable[NodeBuilder | Mapping[str, Any]],
    pods: Iterable[PodBuilder | Mapping[str, Any]] = (),
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    claims: Iterable[Mapping[str, Any]] = (),
    volumes: Iterable[Mapping[str, Any]] = (),
    csinodes: Iterable[Mapping[str, Any]] = (),
    config: Config | None = None,
) -> Snapshot:
    """A snapshot (GKE levels) that also knows namespaces' labels, PersistentVolumeClaims,
    PersistentVolumes and CSINodes (a volume catalog, empty when none is given: the
    reconciler's, which reads them all) and ``config``'s default spread constraints,
    through the one builder (:func:`~reconciler.engine.ledger.builder.build_snapshot`)."""
    def obj(x: NodeBuilder | PodBuilder | Mapping[str, Any]) -> Mapping[str, Any]:
        return x.build() if isinstance(x, NodeBuilder | PodBuilder) else x

    listed = [*located("nodes", "Node", map(obj, nodes)), *located("pods", "Pod", map(obj, pods)),
              *located("claims", "PersistentVolumeClaim", claims), *located("volumes", "PersistentVolume", volumes),
              *located("csinodes", "CSINode", csinodes)]
    parts = read_parts(listed, config).parts
    return build_snapshot(dataclasses.replace(parts, volumes=parts.volumes or VolumeCatalog(), namespaces=namespaces or {}))


def claim_object(name: str, volume: str = "", modes: Sequence[str] = ("ReadWriteOnce",),
                 namespace: str = "default") -> dict[str, Any]:
    """A PersistentVolumeClaim, bound to ``volume`` when given."""
    spec: dict[str, Any] = {"accessModes": list(modes)}
    if volume:
        spec["volumeName"] = volume
    return {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def volume_object(name: str, hostname: str = "", zone: str = "", driver: str = "", handle: str = "") -> dict[str, Any]:
    """A PersistentVolume: with node affinity to ``hostname``, a zone label, a CSI source."""
    obj: dict[str, Any] = {"kind": "PersistentVolume", "metadata": {"name": name, "labels": {}}, "spec": {}}
    if hostname:
        obj["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [expr(HOSTNAME, "In", hostname)]}]}}
    if zone:
        obj["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
    if driver:
        obj["spec"]["csi"] = {"driver": driver, "volumeHandle": handle or name}
    return obj


def csinode_object(name: str, driver: str, count: int) -> dict[str, Any]:
    """A CSINode allowing ``count`` volumes of ``driver``."""
    return {"kind": "CSINode", "metadata": {"name": name},
            "spec": {"drivers": [{"name": driver, "nodeID": name, "allocatable": {"count": count}}]}}
