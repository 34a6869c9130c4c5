"""A watch on every pod of a namespace that checks, on every event, that no pod is pinned to
two nodes and no node is over-committed (the all-or-nothing tests under SIGKILL and SIGSTOP)."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

from kubernetes import client, watch

from troupe import contract

GPUS_PER_NODE = 8


class Ledger:
    """What the watch saw: every pin per pod UID, and the GPUs committed per node."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, Any] = {}
        self.pins: dict[str, set[str]] = defaultdict(set)
        self.violations: list[str] = []
        self.events = 0

    def committed(self) -> dict[str, int]:
        """GPUs committed per node: pinned active pods, and gated pods a plan reserves."""
        reserved: dict[str, str] = {}
        for pod in self.pods.values():
            record = (pod.metadata.annotations or {}).get(contract.PLAN)
            if record:
                reserved.update(json.loads(record).get("nodes", {}))
        per_node: dict[str, int] = defaultdict(int)
        for uid, pod in self.pods.items():
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            node = pod.spec.node_name or (pod.spec.node_selector or {}).get(contract.HOSTNAME_LABEL)
            if not node and pod.spec.scheduling_gates:
                node = reserved.get(uid)
            if node:
                gpus = sum(int((c.resources.requests or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
                per_node[node] += gpus
        return per_node

    def replace(self, pods: list[Any]) -> None:
        """A fresh list: pods deleted while no watch was open are gone."""
        with self.lock:
            self.pods = {}
            for pod in pods:
                self._see("ADDED", pod)

    def see(self, kind: str, pod: Any) -> None:
        with self.lock:
            self._see(kind, pod)

    def _see(self, kind: str, pod: Any) -> None:
        self.events += 1
        uid = pod.metadata.uid
        if kind == "DELETED":
            self.pods.pop(uid, None)
            return
        self.pods[uid] = pod
        pin = (pod.spec.node_selector or {}).get(contract.HOSTNAME_LABEL)
        if pin:
            self.pins[uid].add(pin)
            if len(self.pins[uid]) > 1:
                self.violations.append(f"pod {pod.metadata.name} ({uid}) pinned to {sorted(self.pins[uid])}")
        for node, gpus in self.committed().items():
            if gpus > GPUS_PER_NODE:
                self.violations.append(f"node {node} committed {gpus} GPUs > {GPUS_PER_NODE}")


def members(ledger: Ledger, jobs: list[str]) -> list[Any]:
    """The pods of ``jobs`` the watch has seen (and not seen deleted)."""
    with ledger.lock:
        return [p for p in ledger.pods.values() if (p.metadata.labels or {}).get("job-name") in jobs]


def runs_whole(ledger: Ledger, jobs: list[str], total: int) -> bool:
    """All ``total`` members of ``jobs`` exist, Running, none gated."""
    pods = members(ledger, jobs)
    return len(pods) == total and all(p.status.phase == "Running" and not p.spec.scheduling_gates for p in pods)


def follow(core: client.CoreV1Api, namespace: str, ledger: Ledger, stop: threading.Event) -> None:
    while not stop.is_set():
        w = watch.Watch()
        try:
            listing = core.list_namespaced_pod(namespace)
            ledger.replace(listing.items)
            for event in w.stream(core.list_namespaced_pod, namespace,
                                  resource_version=listing.metadata.resource_version, timeout_seconds=30):
                ledger.see(event["type"], event["object"])
                if stop.is_set():
                    break
        except Exception:  # noqa: BLE001  a dropped watch is resumed; the ledger keeps its state
            time.sleep(0.2)
