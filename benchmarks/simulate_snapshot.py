"""Simulator benchmark: a large snapshot read and planned end to end, from JSON and from YAML.

    .venv/bin/python benchmarks/simulate_snapshot.py [--nodes N] [--pods N] [--baseline-nodes N]
                                                     [--repeat N] [--seed N]

The snapshot is what ``kubectl get nodes,pods -A -o json`` (or ``-o yaml``) prints for a
GKE cluster, written to a temporary directory as ``snapshot.json`` (orjson, indented)
and ``snapshot.yaml`` (block style, as kubectl lays it out): one ``v1 List`` of

- Nodes in blocks of 32 subblocks of 16 nodes (512 a block), every node its own host
  (``cloud.google.com/gce-topology-block``/``-subblock``/``-host`` labels), 8
  ``nvidia.com/gpu`` each, with the fields kubectl shows (labels, addresses, capacity,
  allocatable, four conditions, node info, five images);
- Pods as kubectl shows them: a running daemon pod on every node, running Job pods bound
  to the nodes of the first blocks using 1, 2, 4 or 8 GPUs, and five waiting gangs of
  gated members (``troupe.io/placement`` gate, ``troupe.io/gang-name``/``-size``
  annotations, 8 GPUs a member) of 512, 64, 64, 16 and 8 members, for the free nodes
  of the last blocks. ``--pods`` counts every pod, gang members included.

Timed:

- **end to end**: ``python -m reconciler simulate FILE --output json`` as a subprocess
  (interpreter start, read, parse, every gang decided, JSON printed): wall time, best of
  ``--repeat`` on the JSON and one run on the YAML, with the CPU time (user + system)
  of that run, since wall time on a shared machine includes waiting for a CPU. Both
  must decide the same.
- **read**, in this process, file bytes to objects: :func:`reconciler.objects.snapshot_io.read_objects`
  on the JSON (orjson) and on the YAML (``yaml.CSafeLoader`` when PyYAML has libyaml),
  and the **baseline**, the simulator's former reader: the text decoded, then
  ``yaml.safe_load_all`` (pure Python). The baseline reads about 0.3 MiB a second, so by
  default it reads a slice, the first ``--baseline-nodes`` nodes and their pods as a List
  of its own, and its time for the whole snapshot is that time scaled by size in bytes;
  the C loader reads the same slice for a like-for-like ratio. ``--baseline-nodes 0``
  makes the baseline read the whole snapshot.

Target: 8,192 nodes and 20,000 pods end to end under 3 s from JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.decisions import Decisions
from reconciler.objects.snapshot_io import read_objects, yaml_loader

REPO = Path(__file__).resolve().parents[1]
#: The demo's snapshot and the time the README decides it at: its decisions are digested too.
EXAMPLE, EXAMPLE_NOW = REPO / "examples" / "snapshot.json", "2026-11-23T12:08:44Z"
GPU = "nvidia.com/gpu"
BLOCK = "cloud.google.com/gce-topology-block"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
HOST = "cloud.google.com/gce-topology-host"
SUBBLOCKS_PER_BLOCK = 32
NODES_PER_SUBBLOCK = 16
GANGS = [("train-a", 512), ("train-b", 64), ("eval-c", 64), ("tune-d", 16), ("probe-e", 8)]
CREATED = "2026-03-01T08:00:00Z"
TARGET_S = 3.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the synthetic snapshot ----------------------------------------------------------------
def node_object(k: int, rng: random.Random) -> dict[str, Any]:
    """Node ``k``: block ``k // 512``, subblock ``k // 16``, its own host."""
    b, rest = divmod(k, SUBBLOCKS_PER_BLOCK * NODES_PER_SUBBLOCK)
    s = rest // NODES_PER_SUBBLOCK
    name = f"gke-a3-pool-{b:02d}-{k:05d}"
    ip = f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"
    amounts = {"cpu": "208", "ephemeral-storage": "1225853836Ki", GPU: "8", "memory": "1878399044Ki", "pods": "110"}
    allocatable = dict(amounts, cpu="207500m", memory="1830168644Ki", **{"ephemeral-storage": "1129788212175"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {
                "container.googleapis.com/instance_id": str(rng.getrandbits(62)),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": CREATED,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/instance-type": "a3-highgpu-8g",
                "beta.kubernetes.io/os": "linux",
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "cloud.google.com/gke-boot-disk": "pd-balanced",
                "cloud.google.com/gke-nodepool": f"pool-{b:02d}",
                "cloud.google.com/gke-os-distribution": "cos",
                "cloud.google.com/machine-family": "a3",
                BLOCK: f"block-{b:02d}",
                SUBBLOCK: f"block-{b:02d}-sb-{s:02d}",
                HOST: f"host-{k:05d}-{rng.getrandbits(32):08x}",
                "failure-domain.beta.kubernetes.io/region": "us-central1",
                "failure-domain.beta.kubernetes.io/zone": "us-central1-a",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "topology.kubernetes.io/region": "us-central1",
                "topology.kubernetes.io/zone": "us-central1-a",
            },
            "name": name,
            "resourceVersion": str(1_000_000 + k),
            "uid": f"{rng.getrandbits(128):032x}",
        },
        "spec": {
            "podCIDR": f"10.128.{k & 255}.0/24",
            "podCIDRs": [f"10.128.{k & 255}.0/24"],
            "providerID": f"gce://project/us-central1-a/{name}",
            "taints": [{"effect": "NoSchedule", "key": GPU, "value": "present"}],
        },
        "status": {
            "addresses": [
                {"address": ip, "type": "InternalIP"},
                {"address": name, "type": "Hostname"},
            ],
            "allocatable": allocatable,
            "capacity": amounts,
            "conditions": [
                {"lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED, "message": message,
                 "reason": reason, "status": status, "type": kind}
                for kind, status, reason, message in [
                    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                ]
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {"names": [f"us-docker.pkg.dev/project/images/{image}@sha256:{rng.getrandbits(256):064x}",
                           f"us-docker.pkg.dev/project/images/{image}:v1"], "sizeBytes": rng.randrange(10**7, 10**10)}
                for image in ("trainer", "nccl-plugin", "gpu-device-plugin", "fluent-bit", "kube-proxy")
            ],
            "nodeInfo": {
                "architecture": "amd64", "bootID": f"{rng.getrandbits(128):032x}",
                "containerRuntimeVersion": "containerd://1.7.24", "kernelVersion": "6.1.112+",
                "kubeProxyVersion": "v1.31.4-gke.1256000", "kubeletVersion": "v1.31.4-gke.1256000",
                "machineID": f"{rng.getrandbits(128):032x}", "operatingSystem": "linux",
                "osImage": "Container-Optimized OS from Google", "systemUUID": f"{rng.getrandbits(128):032x}",
            },
        },
    }


def pod_object(name: str, namespace: str, rng: random.Random, *, node: str = "", gpus: int = 0,
               cpu: str = "100m", memory: str = "128Mi", owner: tuple[str, str] = ("DaemonSet", "agent"),
               labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               gated: bool = False, created: str = CREATED) -> dict[str, Any]:
    """A pod as kubectl prints it: bound and Running when ``node`` is set, else Pending."""
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [{
            "name": "main",
            "image": "us-docker.pkg.dev/project/images/trainer:v1",
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/run", "--config=/etc/job/config.yaml"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "NCCL_DEBUG", "value": "WARN"}],
            "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
            "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access",
                              "readOnly": True}],
        }],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Never" if owner[0] == "Job" else "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
            {"effect": "NoSchedule", "key": GPU, "operator": "Exists"},
        ],
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}}]}}],
    }
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node:
        spec["nodeName"] = node
        status = {
            "conditions": [{"lastProbeTime": None, "lastTransitionTime": created, "status": "True", "type": kind}
                           for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "containerID": f"containerd://{rng.getrandbits(256):064x}",
                "image": "us-docker.pkg.dev/project/images/trainer:v1",
                "imageID": f"us-docker.pkg.dev/project/images/trainer@sha256:{rng.getrandbits(256):064x}",
                "lastState": {}, "name": "main", "ready": True, "restartCount": 0, "started": True,
                "state": {"running": {"startedAt": created}},
            }],
            "hostIP": "10.0.0.1", "phase": "Running", "podIP": f"10.128.{rng.randrange(256)}.{rng.randrange(256)}",
            "qosClass": "Burstable", "startTime": created,
        }
    if gated:
        spec["schedulingGates"] = [{"name": "troupe.io/placement"}]
        status = {"conditions": [{"lastProbeTime": None, "lastTransitionTime": created, "message": "Scheduling is blocked due to non-empty scheduling gates",
                                  "reason": "SchedulingGated", "status": "False", "type": "PodScheduled"}],
                  "phase": "Pending", "qosClass": "Burstable"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **({"annotations": annotations} if annotations else {}),
            "creationTimestamp": created,
            "generateName": f"{owner[1]}-",
            "labels": labels or {"app": owner[1]},
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{"apiVersion": "apps/v1" if owner[0] != "Job" else "batch/v1", "blockOwnerDeletion": True,
                                 "controller": True, "kind": owner[0], "name": owner[1],
                                 "uid": f"uid-{owner[0]}-{owner[1]}"}],
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "uid": f"{rng.getrandbits(128):032x}",
        },
        "spec": spec,
        "status": status,
    }


def build_snapshot(n_nodes: int, n_pods: int, seed: int) -> dict[str, Any]:
    """A ``v1 List``: ``n_nodes`` nodes, then ``n_pods`` pods (daemon pods first, one a
    node, then workload pods, then the gangs' gated members). The gangs' members are
    ``n_pods`` too; the last blocks' nodes are left free for them."""
    rng = random.Random(seed)
    nodes = [node_object(k, rng) for k in range(n_nodes)]
    gang_members = sum(size for _, size in GANGS)
    daemons = min(n_nodes, max(0, n_pods - gang_members))
    workload = max(0, n_pods - gang_members - daemons)
    pods = [pod_object(f"agent-{k:05d}", "kube-system", rng, node=nodes[k]["metadata"]["name"])
            for k in range(daemons)]
    busy = max(1, n_nodes - gang_members - gang_members // 4)  # nodes the workload runs on
    free = [8] * busy
    k = 0
    for i in range(workload):
        gpus = rng.choice((1, 2, 4, 8))
        for _ in range(busy):  # the next node with room, round robin
            k = (k + 1) % busy
            if free[k] >= gpus:
                break
        else:
            gpus = 0
        free[k] -= gpus
        job = f"job-{i // 8:05d}"
        pods.append(pod_object(f"{job}-{i % 8}", "research", rng, node=nodes[k]["metadata"]["name"], gpus=gpus,
                               cpu="20", memory="200Gi", owner=("Job", job), labels={"job-name": job}))
    for g, (gang, size) in enumerate(GANGS[: gang_members and len(GANGS)]):
        for i in range(size):
            pods.append(pod_object(
                f"{gang}-{i}", "ml", rng, gpus=8, cpu="100", memory="1000Gi", owner=("Job", gang), gated=True,
                created=f"2026-03-01T09:{g:02d}:00Z",
                labels={"job-name": gang, "batch.kubernetes.io/job-completion-index": str(i)},
                annotations={"troupe.io/gang-name": gang, "troupe.io/gang-size": str(size)},
            ))
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": nodes + pods}


def nodes_slice(snapshot: dict[str, Any], n_nodes: int) -> dict[str, Any]:
    """The first ``n_nodes`` nodes and the pods bound to them or waiting, as a List."""
    items = snapshot["items"]
    nodes = [o for o in items if o["kind"] == "Node"][:n_nodes]
    names = {n["metadata"]["name"] for n in nodes}
    pods = [o for o in items if o["kind"] == "Pod" and o["spec"].get("nodeName", "") in names]
    return {**snapshot, "items": nodes + pods}


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*\Z")
_RESOLVER = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"


@lru_cache(maxsize=1 << 16)
def _scalar(value: str) -> str:
    """A string as kubectl's YAML shows it: plain when it reads back as that string,
    else double quoted (a JSON string is a YAML double-quoted scalar)."""
    if _PLAIN.match(value) and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG:
        return value
    return json.dumps(value, ensure_ascii=False)


def _yaml_lines(value: Any, pad: str, out: list[str]) -> None:
    """Block-style YAML of a mapping or a list at indentation ``pad`` (kubectl's layout:
    list items at their key's indentation)."""
    if isinstance(value, dict):
        for k, v in value.items():
            key = _scalar(str(k))
            if isinstance(v, dict) and v:
                out.append(f"{pad}{key}:\n")
                _yaml_lines(v, pad + "  ", out)
            elif isinstance(v, list) and v:
                out.append(f"{pad}{key}:\n")
                _yaml_lines(v, pad, out)
            else:
                out.append(f"{pad}{key}: {_plain_value(v)}\n")
        return
    for v in value:
        if isinstance(v, (dict, list)) and v:
            start = len(out)
            _yaml_lines(v, pad + "  ", out)
            out[start] = f"{pad}- {out[start][len(pad) + 2:]}"
        else:
            out.append(f"{pad}- {_plain_value(v)}\n")


def _plain_value(v: Any) -> str:
    if isinstance(v, str):
        return _scalar(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return "{}" if isinstance(v, dict) else "[]"


def dump_yaml(snapshot: dict[str, Any]) -> bytes:
    """``snapshot`` as block-style YAML, as ``kubectl get -o yaml`` prints it. (PyYAML's
    dumper, C emitter or not, represents in Python: minutes for this size.)"""
    out: list[str] = []
    _yaml_lines(snapshot, "", out)
    return "".join(out).encode("utf-8")


# --- timing --------------------------------------------------------------------------------
def best_of(n: int, run: Callable[[], Any]) -> tuple[float, float]:
    """The least of ``n`` wall timings of ``run()`` and the CPU time of that run,
    seconds, each after a full collection; freeing the result is not timed."""
    best, best_cpu = float("inf"), 0.0
    for _ in range(n):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        out = run()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        del out
        if wall < best:
            best, best_cpu = wall, cpu
    return best, best_cpu


def timed(argv: list[str], repeat: int) -> tuple[float, float, str]:
    """``python -m reconciler ARGV`` ``repeat`` times: the best wall time (seconds), the
    CPU time (user + system, seconds) of that run, and what it printed. Raises
    ``SystemExit`` naming the command when a run fails."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    best, best_cpu, out = float("inf"), 0.0, ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "reconciler", *argv], cwd=REPO, env=env, capture_output=True,
                              text=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")
        if wall < best:
            best = wall
            best_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            out = done.stdout
    return best, best_cpu, out


def simulate_end_to_end(path: Path, repeat: int, now: str = "2026-03-01T10:00:00Z",
                        ) -> tuple[float, float, list[dict[str, Any]]]:
    """``python -m reconciler simulate PATH --output json --now NOW`` ``repeat`` times: the
    best wall time, the CPU time (user + system) of that run, and the gangs it printed."""
    best, best_cpu, out = timed(["simulate", str(path), "--output", "json", "--now", now], repeat)
    gangs: list[dict[str, Any]] = json.loads(out)["gangs"]
    return best, best_cpu, gangs


def former_reader(data: bytes) -> list[Any]:
    """The simulator's reader before this benchmark: text, then ``yaml.safe_load_all``."""
    return list(yaml.safe_load_all(data.decode("utf-8")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8192, help="nodes (default %(default)s)")
    parser.add_argument("--pods", type=int, default=20000, help="pods, gang members included (default %(default)s)")
    parser.add_argument("--baseline-nodes", type=int, default=512,
                        help="nodes of the slice the pure-Python baseline reads; 0: all (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="end-to-end runs on the JSON, best kept; one on the YAML (default %(default)s)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default %(default)s)")
    parser.add_argument("--record-decisions", action="store_true",
                        help="record this run's decisions as the ones later runs must match (benchmarks/decisions.py)")
    args = parser.parse_args(argv)
    decisions = Decisions(f"simulate ({args.nodes} nodes, {args.pods} pods, seed {args.seed}; examples/snapshot.json)")

    progress(f"building {args.nodes} nodes and {args.pods} pods")
    snapshot = build_snapshot(args.nodes, args.pods, args.seed)
    n_pods = sum(1 for o in snapshot["items"] if o["kind"] == "Pod")
    with tempfile.TemporaryDirectory(prefix="troupe-snapshot-") as tmp:
        json_path, yaml_path = Path(tmp) / "snapshot.json", Path(tmp) / "snapshot.yaml"
        progress("writing the JSON and the YAML")
        json_path.write_bytes(orjson.dumps(snapshot, option=orjson.OPT_INDENT_2))
        yaml_path.write_bytes(dump_yaml(snapshot))
        json_bytes, yaml_bytes = json_path.read_bytes(), yaml_path.read_bytes()
        if args.baseline_nodes and args.baseline_nodes < args.nodes:
            part = nodes_slice(snapshot, args.baseline_nodes)
            slice_bytes = dump_yaml(part)
            slice_text = f"{args.baseline_nodes} nodes + {sum(1 for o in part['items'] if o['kind'] == 'Pod')} pods"
            del part
        else:
            slice_bytes, slice_text = yaml_bytes, "the whole snapshot"
        del snapshot

        progress(f"end to end: python -m reconciler simulate on the JSON (best of {args.repeat})")
        e2e_json, cpu_json, gangs_json = simulate_end_to_end(json_path, args.repeat)
        progress("end to end: python -m reconciler simulate on the YAML")
        e2e_yaml, cpu_yaml, gangs_yaml = simulate_end_to_end(yaml_path, 1)
        if gangs_json != gangs_yaml:
            raise SystemExit("the JSON and the YAML snapshot gave different decisions")
        decisions.add("synthetic snapshot", gangs_json)
        progress("the demo's snapshot: examples/snapshot.json")
        decisions.add("examples/snapshot.json", simulate_end_to_end(EXAMPLE, 1, EXAMPLE_NOW)[2])

        progress("read in this process: JSON (orjson), YAML (C loader)")
        read_json, read_json_cpu = best_of(3, lambda: read_objects(json_bytes, "snapshot.json"))
        read_yaml, read_yaml_cpu = best_of(1, lambda: read_objects(yaml_bytes, "snapshot.yaml"))
        progress(f"read in this process: the baseline and the C loader on {slice_text}")
        base_slice, base_slice_cpu = best_of(1, lambda: former_reader(slice_bytes))
        c_slice, c_slice_cpu = best_of(1, lambda: read_objects(slice_bytes, "slice.yaml"))
        scale = len(yaml_bytes) / len(slice_bytes)
        base, base_cpu = base_slice * scale, base_slice_cpu * scale

    mib = 1024 * 1024
    loader = yaml_loader().__name__
    print(f"snapshot: {args.nodes} nodes + {n_pods} pods; JSON {len(json_bytes) / mib:.0f} MiB, "
          f"YAML {len(yaml_bytes) / mib:.0f} MiB")
    print("gangs: " + ", ".join(f"{g['name']} {g['size']} {g['phase']}" for g in gangs_json))
    print(f"end to end  JSON      {e2e_json:7.2f} s  (CPU {cpu_json:.2f} s)  python -m reconciler simulate, best of {args.repeat}")
    print(f"            YAML      {e2e_yaml:7.2f} s  (CPU {cpu_yaml:.2f} s)  {loader}")
    print(f"read        JSON      {read_json:7.2f} s  (CPU {read_json_cpu:.2f} s)  orjson (read_objects)")
    print(f"            YAML      {read_yaml:7.2f} s  (CPU {read_yaml_cpu:.2f} s)  {loader} (read_objects)")
    if slice_bytes is yaml_bytes:
        print(f"            baseline  {base:7.2f} s  (CPU {base_cpu:.2f} s)  yaml.safe_load_all, pure Python")
    else:
        print(f"            baseline  {base:7.2f} s  (CPU {base_cpu:.2f} s)  yaml.safe_load_all, pure Python: "
              f"{base_slice:.2f} s on {slice_text} ({len(slice_bytes) / mib:.1f} MiB of YAML), scaled by size")
        print(f"on {slice_text}: baseline {base_slice:.2f} s, {loader} {c_slice:.2f} s "
              f"= {base_slice / c_slice:.1f}x (CPU {base_slice_cpu / c_slice_cpu:.1f}x)")
    print(f"baseline / JSON read = {base / read_json:.0f}x (CPU {base_cpu / read_json_cpu:.0f}x); "
          f"baseline / YAML read = {base / read_yaml:.1f}x (CPU {base_cpu / read_yaml_cpu:.1f}x)")
    ok = e2e_json < TARGET_S
    print(f"target: under {TARGET_S:.0f} s end to end from JSON: {'met' if ok else 'NOT met'}")
    ok = decisions.report(args.record_decisions) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
