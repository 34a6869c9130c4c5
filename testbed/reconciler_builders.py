"""Chained builders of Node and Pod dicts for reconciler tests."""

from __future__ import annotations

import copy
from typing import Any

from troupe import contract

BLOCK, SUBBLOCK, HOST = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }

    def topology(self, block: str, subblock: str, host: str) -> NodeBuilder:
        self.obj["metadata"]["labels"].update({BLOCK: block, SUBBLOCK: subblock, HOST: host})
        return self

    def gpus(self, n: int) -> NodeBuilder:
        self.obj["status"]["allocatable"]["nvidia.com/gpu"] = str(n)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


class PodBuilder:
    def __init__(self, name: str, namespace: str = "team-a") -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": {}, "labels": {},
                         "resourceVersion": "1", "creationTimestamp": "2026-11-21T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"},
        }

    def gang(self, name: str, size: int, timeout: int = 30) -> PodBuilder:
        self.obj["metadata"]["annotations"].update({
            "troupe.io/gang-name": name, "troupe.io/gang-size": str(size),
            "troupe.io/gang-schedule-timeout-seconds": str(timeout)})
        # as the webhook admits a gang member: it tolerates Troupe's nominated-node taint
        self.obj["spec"].setdefault("tolerations", []).append(contract.nominated_toleration())
        return self

    def index(self, i: int) -> PodBuilder:
        self.obj["metadata"]["labels"][contract.JOB_COMPLETION_INDEX] = str(i)
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"]["labels"][key] = value
        return self

    def gpus(self, n: int) -> PodBuilder:
        self.obj["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(n)
        return self

    def gated(self, *gates: str) -> PodBuilder:
        self.obj["spec"]["schedulingGates"] = [{"name": g} for g in (gates or (contract.GATE,))]
        return self

    def priority(self, value: int) -> PodBuilder:
        self.obj["spec"]["priority"] = value
        return self

    def running_on(self, node: str) -> PodBuilder:
        self.obj["spec"]["nodeName"] = node
        self.obj["status"]["phase"] = "Running"
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self.obj["metadata"]["annotations"][key] = value
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(name: str, namespace: str = "team-a") -> PodBuilder:
    return PodBuilder(name, namespace)
