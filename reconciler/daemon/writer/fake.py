"""An in-memory :class:`~reconciler.daemon.writer.PodWriter` for tests and benchmarks
without an API server (:class:`FakeWriter`), with the API server's rules that matter
here."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.daemon.writer import PodWriter
from reconciler.daemon.writer.base import Conflict, Gone, LostLeadership, Refused, WriteError
from reconciler.engine.model.keys import PodKey
from troupe import contract


@dataclass
class RecordedEvent:
    """An Event :class:`FakeWriter` recorded."""

    pod: PodKey
    kind: str
    reason: str
    message: str


@dataclass
class FakeWriter(PodWriter):
    """In-memory :class:`PodWriter` over a dict of pods, for tests without an API server.

    Applies strategic-merge patches the way kube-apiserver does for the fields Troupe
    writes: ``metadata.annotations`` (merge, ``None`` deletes), ``spec.nodeSelector``
    (merge; only additions, and only to a gated pod: the rule KEP-3838 gives, checked on
    the pod before the update, so a pin and the removal of the gate go in one update),
    ``spec.schedulingGates`` (``$patch: delete`` by name). A ``metadata.resourceVersion``
    in the patch that differs from the stored one raises :class:`Conflict`; a delete or
    an eviction whose UID precondition fails raises :class:`Gone`; an eviction of a pod
    named in ``protected`` raises :class:`Refused`. ``fail`` maps a pod name to an error
    its next writes raise (a refused write, for fault tests). Nodes take a JSON merge patch
of ``spec.taints`` (the whole list) under a ``metadata.resourceVersion`` precondition.
Thread-safe.
    """

    pods: dict[PodKey, dict[str, Any]] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    patches: list[tuple[PodKey, dict[str, Any]]] = field(default_factory=list)
    deleted: list[PodKey] = field(default_factory=list)
    evicted: list[PodKey] = field(default_factory=list)
    #: Pods asked about by a dry-run eviction (nothing changed).
    dry_runs: list[PodKey] = field(default_factory=list)
    conditions: list[tuple[PodKey, dict[str, Any]]] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)
    fail: dict[str, WriteError] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    #: Nodes by name (:meth:`add_node`), and every node patch applied, in order.
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Workload objects by ``(kind, namespace, name)`` (:meth:`add_workload`), and every patch applied.
    workloads: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    workload_patches: list[tuple[tuple[str, str, str], Any]] = field(default_factory=list)
    #: Gang objects by ``(namespace, name)``, and every write to them, in order:
    #: ``("create" | "status" | "delete", namespace, name)``.
    gang_objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    gang_object_writes: list[tuple[str, str, str]] = field(default_factory=list)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def add(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of ``pod`` (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(pod))
            stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
            self.pods[PodKey.of(stored)] = stored
            return copy.deepcopy(stored)

    def read_pod(self, ref: PodKey) -> dict[str, Any]:
        """A copy of the stored pod. Raises :class:`Gone`."""
        return self._get(ref)

    def touch(self, ref: PodKey, **labels: str) -> dict[str, Any]:
        """Someone else's update (labels merged, a new resourceVersion): what makes the
        reconciler's cached version stale."""
        with self._lock:
            pod = self.pods[ref]
            pod["metadata"].setdefault("labels", {}).update(labels)
            pod["metadata"]["resourceVersion"] = str(next(self._rv))
            return copy.deepcopy(pod)

    def _check_fail(self, ref: PodKey) -> None:
        error = self.fail.get(ref.name)
        if error is not None:
            raise error

    def _get(self, ref: PodKey) -> dict[str, Any]:
        with self._lock:
            if ref not in self.pods:
                raise Gone(f"pod {ref}: not found")
            return copy.deepcopy(self.pods[ref])

    def _patch(self, ref: PodKey, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._check_fail(ref)
            if ref not in self.pods:
                raise Gone(f"pod {ref}: not found")
            pod = copy.deepcopy(self.pods[ref])
            meta, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
            pmeta, pspec = patch.get("metadata") or {}, patch.get("spec") or {}
            want_rv = pmeta.get("resourceVersion")
            if want_rv is not None and want_rv != meta.get("resourceVersion"):
                raise Conflict(f"patch pod {ref}: resourceVersion {want_rv} is stale")
            for k, v in (pmeta.get("annotations") or {}).items():
                ann = meta.setdefault("annotations", {})
                if v is None:
                    ann.pop(k, None)
                else:
                    ann[k] = v
            gated = bool(spec.get("schedulingGates"))
            for k, v in (pspec.get("nodeSelector") or {}).items():
                sel = spec.setdefault("nodeSelector", {})
                if sel.get(k) == v:
                    continue
                if not gated or k in sel:
                    raise WriteError(f"patch pod {ref}: spec.nodeSelector: only additions are allowed on a gated pod")
                sel[k] = v
            for gate in pspec.get("schedulingGates") or []:
                if gate.get("$patch") == "delete":
                    spec["schedulingGates"] = [g for g in spec.get("schedulingGates", []) if g["name"] != gate["name"]]
            meta["resourceVersion"] = str(next(self._rv))
            self.pods[ref] = pod
            self.patches.append((ref, copy.deepcopy(dict(patch))))
            return copy.deepcopy(pod)

    def _patch_status(self, ref: PodKey, patch: Mapping[str, Any]) -> None:
        with self._lock:
            self._check_fail(ref)
            if ref not in self.pods:
                raise Gone(f"pod {ref}: not found")
            status = self.pods[ref].setdefault("status", {})
            for condition in patch["status"]["conditions"]:
                old: dict[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == condition["type"]), {})
                others = [c for c in status.get("conditions", []) if c.get("type") != condition["type"]]
                status["conditions"] = [*others, {**old, **condition}]  # merged by type, as the API server does
                self.conditions.append((ref, dict(condition)))
            self.pods[ref]["metadata"]["resourceVersion"] = str(next(self._rv))

    def _delete(self, ref: PodKey, uid: str) -> None:
        with self._lock:
            self._check_fail(ref)
            pod = self.pods.get(ref)
            if pod is None or pod["metadata"].get("uid") != uid:
                raise Gone(f"pod {ref} with uid {uid}: not found")
            del self.pods[ref]
            self.deleted.append(ref)

    def _evict(self, ref: PodKey, uid: str) -> None:
        with self._lock:
            if ref.name in self.protected:
                raise Refused(f"evict pod {ref}: Cannot evict pod as it would violate the pod's disruption budget")
            self._delete(ref, uid)
            self.deleted.remove(ref)
            self.evicted.append(ref)

    def _evict_dry_run(self, ref: PodKey, uid: str) -> None:
        with self._lock:
            self.dry_runs.append(ref)
            if ref.name in self.protected:
                raise Refused(f"evict pod {ref}: Cannot evict pod as it would violate the pod's disruption budget")
            current = self.pods.get(ref)
            if current is None or (uid and current["metadata"].get("uid") != uid):
                raise Gone(f"pod {ref} not found")

    def add_group(self, group: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a SharedDeviceGroup (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(group))
            stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
            self.groups[stored["metadata"]["name"]] = stored
            return copy.deepcopy(stored)

    def _patch_group(self, name: str, patch: Any) -> dict[str, Any]:
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            group = self.groups.get(name)
            if group is None:
                raise Gone(f"shareddevicegroup {name}: not found")
            group = copy.deepcopy(group)
            if isinstance(patch, list):
                for op in patch:
                    if op["op"] != "add" or op["path"] != "/status":
                        raise WriteError(f"patch shareddevicegroup {name}: unsupported operation {op}")
                    group["status"] = copy.deepcopy(op["value"])
            else:
                meta = patch.get("metadata") or {}
                want_rv = meta.get("resourceVersion")
                if want_rv is not None and want_rv != group["metadata"].get("resourceVersion"):
                    raise Conflict(f"patch shareddevicegroup {name}: resourceVersion {want_rv} is stale")
                if "finalizers" in meta:
                    group["metadata"]["finalizers"] = list(meta["finalizers"])
            if group["metadata"].get("deletionTimestamp") and not group["metadata"].get("finalizers"):
                del self.groups[name]
                return group
            group["metadata"]["resourceVersion"] = str(next(self._rv))
            self.groups[name] = group
            return copy.deepcopy(group)

    def add_node(self, node: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a Node (given a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(node))
            stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
            self.nodes[stored["metadata"]["name"]] = stored
            return copy.deepcopy(stored)

    def _get_node(self, name: str) -> dict[str, Any]:
        with self._lock:
            if name not in self.nodes:
                raise Gone(f"node {name} not found")
            return copy.deepcopy(self.nodes[name])

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            node = self.nodes.get(name)
            if node is None:
                raise Gone(f"node {name} not found")
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != node["metadata"].get("resourceVersion"):
                raise Conflict(f"patch node {name}: resourceVersion {want_rv} is stale")
            node = copy.deepcopy(node)
            if "spec" in patch:
                node.setdefault("spec", {})["taints"] = copy.deepcopy(list((patch.get("spec") or {}).get("taints") or []))
            for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
                node["metadata"].setdefault("annotations", {})[key] = value
            node["metadata"]["resourceVersion"] = str(next(self._rv))
            self.nodes[name] = node
            self.node_patches.append((name, copy.deepcopy(dict(patch))))
            return copy.deepcopy(node)

    def _patch_group_status(self, name: str, patch: Any) -> dict[str, Any]:
        return self._patch_group(name, patch)  # the fake keeps one copy of a group, status included

    def _list_gang_objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self.gang_objects.items())]

    def _create_gang_object(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            name = body["metadata"]["name"]
            if name in self.fail:
                raise self.fail[name]
            if (namespace, name) in self.gang_objects:
                raise Conflict(f"create gang {namespace}/{name}: already exists")
            stored = copy.deepcopy(dict(body))
            meta = stored["metadata"]
            meta.update(namespace=namespace, uid=f"uid-gang-{next(self._rv)}", resourceVersion=str(next(self._rv)))
            self.gang_objects[(namespace, name)] = stored
            self.gang_object_writes.append(("create", namespace, name))
            return copy.deepcopy(stored)

    def _patch_gang_object_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            if name in self.fail:
                raise self.fail[name]
            stored = self.gang_objects.get((namespace, name))
            if stored is None:
                raise Gone(f"patch gang {namespace}/{name}/status: not found")
            stored["status"] = copy.deepcopy(dict(status))
            stored["metadata"]["resourceVersion"] = str(next(self._rv))
            self.gang_object_writes.append(("status", namespace, name))
            return copy.deepcopy(stored)

    def _delete_gang_object(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            stored = self.gang_objects.get((namespace, name))
            if stored is None or (uid and stored["metadata"].get("uid") != uid):
                raise Gone(f"delete gang {namespace}/{name}: not found")
            del self.gang_objects[(namespace, name)]
            self.gang_object_writes.append(("delete", namespace, name))

    def add_workload(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store a copy of a workload object of ``kind`` (a fresh resourceVersion) and return it."""
        with self._lock:
            stored = copy.deepcopy(dict(obj))
            meta = stored.setdefault("metadata", {})
            meta["resourceVersion"] = str(next(self._rv))
            self.workloads[(kind, meta.get("namespace", "default"), meta["name"])] = stored
            return copy.deepcopy(stored)

    def _patch_workload(self, workload: tuple[str, str, str],
                        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        with self._lock:
            if workload[2] in self.fail:
                raise self.fail[workload[2]]
            obj = self.workloads.get(workload)
            if obj is None:
                raise Gone(f"{workload[0]} {workload[1]}/{workload[2]} not found")
            obj = copy.deepcopy(obj)
            annotations = obj["metadata"].setdefault("annotations", {})
            if isinstance(patch, Mapping):
                for key, value in patch["metadata"]["annotations"].items():
                    if value is None:
                        annotations.pop(key, None)
                    else:
                        annotations[key] = value
            else:  # a test of one annotation, then its removal
                key = contract.RESERVATION
                if annotations.get(key) != patch[0]["value"]:
                    raise Conflict(f"patch {workload}: test of {key} failed")
                annotations.pop(key, None)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self.workloads[workload] = obj
            self.workload_patches.append((workload, copy.deepcopy(patch)))
            return copy.deepcopy(obj)

    def emit_workload_event(self, workload: tuple[str, str, str], kind: str, reason: str, message: str) -> None:
        self.emit_event(PodKey(workload[1], workload[2]), None, kind, reason, message)

    def emit_node_event(self, name: str, kind: str, reason: str, message: str) -> None:
        self.emit_event(PodKey("", name), None, kind, reason, message)

    def emit_event(self, ref: PodKey, uid: str | None, kind: str, reason: str, message: str) -> None:
        try:
            self.fence.check()
        except LostLeadership:
            return  # not the leader: an Event is a write too
        with self._lock:
            self.events.append(RecordedEvent(ref, kind, reason, message))

    def _read_state(self) -> dict[str, str]:
        with self._lock:
            return dict(self.state)

    def _write_state(self, changes: Mapping[str, str | None]) -> None:
        with self._lock:
            for k, v in changes.items():
                if v is None:
                    self.state.pop(k, None)
                else:
                    self.state[k] = v
