"""The reconciler's in-memory view of the cluster: pods and nodes as plain dicts, and the
index of gangs.

Fed by the informers (:mod:`reconciler.kube`) and by the controller's own writes
(:meth:`ClusterCache.assume`, so that a gang released a moment ago already uses its nodes
when the next gang is planned, before the watch event arrives, the way kube-scheduler
assumes a pod it has bound). Each feeding method returns the gang keys whose state may
have changed, for the work queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.writer import PodRef
from troupe import contract
from troupe.config import Config

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def gang_key(pod: Obj, config: Config) -> str | None:
    """The gang a pod belongs to, as ``namespace/<id>``, or None when Troupe ignores it.

    - Troupe gang annotations: ``namespace/name`` (DESIGN.md "Gangs").
    - A ``gke.io/topology-aware-auto-*`` gate: ``namespace/gke:<group>``, grouped as the
      GKE daemon groups (``contract.auto_gang_key``).
    - Troupe's gate and nothing else (a topology or device-group request alone): a gang
      of one, ``namespace/pod:<name>``.

    A pod whose gang annotations are invalid (created while the webhook was not in the
    path) is ignored with a log line: it stays gated until fixed.
    """
    ns = str(contract.pod_meta(pod).get("namespace") or "default")
    try:
        spec = contract.parse_gang(pod, config)
    except contract.ContractError as e:
        log.warning("pod %s/%s ignored: %s", ns, contract.pod_meta(pod).get("name"), e)
        return None
    if spec is not None:
        return spec.key
    gates = contract.pod_gates(pod)
    if any(g.startswith(contract.GKE_GATE_PREFIX) for g in gates):
        group = contract.auto_gang_key(pod)
        return f"{ns}/gke:{group}" if group else f"{ns}/pod:{contract.pod_meta(pod).get('name')}"
    if contract.GATE in gates:
        return f"{ns}/pod:{contract.pod_meta(pod).get('name')}"
    return None


def is_active(pod: Obj) -> bool:
    """Not terminal and not being deleted: the pod counts as a gang member."""
    status = pod.get("status") or {}
    return status.get("phase") not in TERMINAL_PHASES and not contract.pod_meta(pod).get("deletionTimestamp")


def is_gated(pod: Obj) -> bool:
    """The pod still carries a gate Troupe removes on release."""
    return any(contract.is_troupe_gate(g) for g in contract.pod_gates(pod))


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = contract.pod_meta(obj)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _rv(obj: Obj) -> int | None:
    raw = contract.pod_meta(obj).get("resourceVersion")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


class ClusterCache:
    """Pods by :class:`PodRef`, nodes by name, and gang key -> member refs. Thread-safe.

    Objects are never mutated in place: an update replaces the dict, so a caller may keep
    the objects it was given.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._pods: dict[PodRef, Obj] = {}
        self._nodes: dict[str, Obj] = {}
        self._gang_of: dict[PodRef, str] = {}
        self._members: dict[str, set[PodRef]] = {}
        self._jobs: dict[tuple[str, str], Obj] = {}

    # --- pods ------------------------------------------------------------------------
    def _put_pod(self, pod: Obj) -> set[str]:
        ref = PodRef.of(pod)
        touched: set[str] = set()
        old_key = self._gang_of.pop(ref, None)
        if old_key is not None:
            self._members[old_key].discard(ref)
            if not self._members[old_key]:
                del self._members[old_key]
            touched.add(old_key)
        self._pods[ref] = pod
        key = gang_key(pod, self.config)
        if key is not None:
            self._gang_of[ref] = key
            self._members.setdefault(key, set()).add(ref)
            touched.add(key)
        return touched

    def _drop_pod(self, ref: PodRef) -> set[str]:
        self._pods.pop(ref, None)
        key = self._gang_of.pop(ref, None)
        if key is None:
            return set()
        self._members[key].discard(ref)
        if not self._members[key]:
            del self._members[key]
        return {key}

    def replace_pods(self, items: Iterable[Obj]) -> set[str]:
        """Replace every pod with a fresh list; returns every gang key before or after."""
        with self._lock:
            before = set(self._members)
            self._pods.clear()
            self._gang_of.clear()
            self._members.clear()
            for pod in items:
                self._put_pod(pod)
            return before | set(self._members)

    def pod_event(self, kind: str, pod: Obj) -> set[str]:
        """Apply a watch event (``ADDED``/``MODIFIED``/``DELETED``); returns touched gang keys.

        An event older than an object the controller assumed (lower resourceVersion) is
        ignored: the watch will deliver the newer one.
        """
        with self._lock:
            ref = PodRef.of(pod)
            if kind == "DELETED":
                return self._drop_pod(ref)
            current = self._pods.get(ref)
            new_rv, cur_rv = _rv(pod), _rv(current) if current is not None else None
            if new_rv is not None and cur_rv is not None and new_rv < cur_rv:
                return set()
            return self._put_pod(pod)

    def assume(self, pod: Obj) -> None:
        """Record the object a write of ours returned, ahead of its watch event."""
        self.pod_event("MODIFIED", pod)

    def pod(self, ref: PodRef) -> Obj | None:
        """The cached pod, or None."""
        with self._lock:
            return self._pods.get(ref)

    def members(self, key: str) -> list[Obj]:
        """Every cached pod of gang ``key`` (active or not), in no particular order."""
        with self._lock:
            return [self._pods[r] for r in self._members.get(key, ())]

    def gang_keys(self) -> list[str]:
        """Every known gang key, sorted."""
        with self._lock:
            return sorted(self._members)

    def pending_gangs(self) -> list[str]:
        """Gang keys with at least one gated active member, sorted."""
        with self._lock:
            return sorted(
                k for k, refs in self._members.items()
                if any(is_active(self._pods[r]) and is_gated(self._pods[r]) for r in refs)
            )

    # --- jobs ------------------------------------------------------------------------
    def replace_jobs(self, items: Iterable[Obj]) -> None:
        """Replace every Job with a fresh list."""
        with self._lock:
            self._jobs = {_ns_name(j): j for j in items}

    def job_event(self, kind: str, job: Obj) -> None:
        """Apply a Job watch event."""
        with self._lock:
            if kind == "DELETED":
                self._jobs.pop(_ns_name(job), None)
            else:
                self._jobs[_ns_name(job)] = job

    def job(self, namespace: str, name: str) -> Obj | None:
        """The cached Job, or None."""
        with self._lock:
            return self._jobs.get((namespace, name))

    # --- nodes -----------------------------------------------------------------------
    def replace_nodes(self, items: Iterable[Obj]) -> None:
        """Replace every node with a fresh list."""
        with self._lock:
            self._nodes = {str(contract.pod_meta(n).get("name")): n for n in items}

    def node_event(self, kind: str, node: Obj) -> None:
        """Apply a node watch event."""
        with self._lock:
            name = str(contract.pod_meta(node).get("name"))
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = node

    def node(self, name: str) -> Obj | None:
        """The cached node, or None."""
        with self._lock:
            return self._nodes.get(name)

    def objects(self) -> tuple[list[Obj], list[Obj]]:
        """``(nodes, pods)``: consistent lists of every cached object, for a snapshot."""
        with self._lock:
            return list(self._nodes.values()), list(self._pods.values())
