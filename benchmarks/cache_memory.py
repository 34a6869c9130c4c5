"""Memory benchmark: the reconciler's cache at the advertised scale, before and after the
retain policy (docs/decisions/017-cache-memory.md).

    .venv/bin/python benchmarks/cache_memory.py [--nodes 8192] [--pods 20000] [--changed 0.1]

8,192 nodes and 20,000 pods of realistic size (pods of indexed Jobs, about 7.4 KB of JSON
each as kube-apiserver returns them, ``managedFields`` included; GPU nodes with their
feature labels, images and managed fields, about 7.8 KB), their Jobs (one per 64 pods) and
namespaces (one per 2,000 pods) are served in pages of 500 by a
stand-in for the API server, as JSON bytes, to the reconciler's own informer
(:class:`reconciler.kube.Informer`, its ``_list``) and cache
(:class:`reconciler.daemon.cache.ClusterCache`), each mode in a fresh interpreter:

- **whole**: objects kept whole, as the cache did before the retain policy;
- **retained**: objects cut down as they arrive (the shipped behaviour).

Printed per mode: resident memory (RSS) after the imports, at steady state (both lists
in, the planning snapshot built), and at the peak of a re-list after ``410 Gone`` in
which a ``--changed`` share of the pods has a new resourceVersion; the seconds of the
first list and of the re-list (parsing, cutting, caching; the stand-in's time to make
the pages left out); then the ratios retained/whole. Targets (hardening issue, item 4): steady state under 400 MiB, re-list
peak under 1.3x steady state. The chart's memory request and limit are set from these
numbers (``charts/troupe/values.yaml``).

This is a benchmark, not a test: it prints numbers. About a minute on two cores.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAGE = 500
GANG = 64


def _uid(kind: str, i: int) -> str:
    h = f"{abs(hash((kind, i))) % (1 << 48):012x}"
    return f"{h[:8]}-{h[8:12]}-4{i % 1000:03d}-8{i % 999:03d}-{i:012d}"


def _managed(manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": "2026-11-23T09:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def realistic_pod(i: int, nodes: int, rv: int) -> dict[str, Any]:
    """Member ``i % 64`` of indexed Job ``train-<i // 64>``, released and Running on a node,
    as kube-apiserver returns it (about 6.9 KB of JSON)."""
    job, index = f"train-{i // GANG:04d}", i % GANG
    ns = f"team-{i // 2000:02d}"
    node = f"gpu-{i * 2 % nodes:05d}"
    job_uid = _uid("job", i // GANG)
    name = f"{job}-{index}-{i % 97:02d}x{i % 89:02d}"
    labels = {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-completion-index": str(index),
              "batch.kubernetes.io/job-name": job, "controller-uid": job_uid, "job-name": job,
              "app.kubernetes.io/name": "trainer", "app.kubernetes.io/part-of": "llm-pretraining", "team": ns}
    annotations = {"batch.kubernetes.io/job-completion-index": str(index), "troupe.io/gang-name": job,
                   "troupe.io/gang-size": str(GANG), "troupe.io/gang-schedule-timeout-seconds": "60",
                   "troupe.io/topology-preferred-level": "cloud.google.com/gce-topology-subblock",
                   "reconciler.troupe.io/node": node, "reconciler.troupe.io/rank": str(index),
                   "reconciler.troupe.io/planned-at": "2026-11-23T09:00:01.000+00:00",
                   "reconciler.troupe.io/released-at": "2026-11-23T09:00:02.000+00:00"}
    fields_kcm = {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in list(annotations)[:5]},
                                 "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}},
                                 "f:generateName": {}, "f:labels": {f"f:{k}": {} for k in labels},
                                 "f:ownerReferences": {".": {}, f"k:{{\"uid\":\"{job_uid}\"}}": {}}},
                  "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {
                      ".": {}, "f:args": {}, "f:command": {}, "f:env": {".": {}, **{f"k:{{\"name\":\"ENV_{k}\"}}": {
                          ".": {}, "f:name": {}, "f:value": {}} for k in range(2)}},
                      "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {}, "f:resources": {
                          ".": {}, "f:limits": {".": {}, "f:memory": {}, "f:nvidia.com/gpu": {}},
                          "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}, "f:nvidia.com/gpu": {}}},
                      "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                      "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/dev/shm\"}": {".": {}, "f:mountPath": {},
                                                                                    "f:name": {}}}}},
                      "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:hostname": {}, "f:restartPolicy": {},
                      "f:schedulerName": {}, "f:schedulingGates": {}, "f:securityContext": {}, "f:subdomain": {},
                      "f:terminationGracePeriodSeconds": {},
                      "f:volumes": {".": {}, "k:{\"name\":\"dshm\"}": {".": {}, "f:emptyDir": {".": {}, "f:medium": {},
                                                                                            "f:sizeLimit": {}},
                                                                      "f:name": {}}}}}
    fields_troupe = {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in list(annotations)[5:]}},
                     "f:spec": {"f:nodeSelector": {".": {}, "f:kubernetes.io/hostname": {}}}}
    fields_kubelet = {"f:status": {"f:conditions": {f"k:{{\"type\":\"{t}\"}}": {
        ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
        for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "PodScheduled", "Ready")},
        "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {".": {}, "k:{\"ip\":\"10.0.0.1\"}": {".": {}, "f:ip": {}}},
        "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.1.0.1\"}": {".": {}, "f:ip": {}}},
        "f:startTime": {}}}
    return {
        "metadata": {
            "name": name, "generateName": f"{job}-{index}-", "namespace": ns, "uid": _uid("pod", i),
            "resourceVersion": str(rv), "creationTimestamp": "2026-11-23T09:00:00Z", "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [_managed("kube-controller-manager", "Update", fields_kcm),
                              _managed("troupe-reconciler", "Update", fields_troupe),
                              _managed("kubelet", "Update", fields_kubelet, "status")],
        },
        "spec": {
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                {"name": f"kube-api-access-{i % 99991:05d}", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}},
            ],
            "containers": [{
                "name": "trainer", "image": "registry.example.com/ml/llm-trainer:2026.11.3-cuda12.8",
                "command": ["torchrun"], "args": ["--nnodes=64", "--nproc-per-node=8",
                                                  f"--rdzv-endpoint={job}-0.{job}:29500", "train.py",
                                                  ],
                "ports": [{"containerPort": 29500, "protocol": "TCP"}],
                "env": [{"name": f"ENV_{k}", "value": f"value-{k}-{i % 7}"} for k in range(2)],
                "resources": {"limits": {"memory": "200Gi", "nvidia.com/gpu": "4"},
                              "requests": {"cpu": "14", "memory": "200Gi", "nvidia.com/gpu": "4"}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                 {"name": f"kube-api-access-{i % 99991:05d}", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": node,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "securityContext": {}, "hostname": f"{job}-{index}", "subdomain": job,
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-11-23T09:00:05Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "hostIP": f"10.0.{i * 2 % nodes // 250}.{i * 2 % 250}", "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": f"10.1.{i // 250 % 250}.{i % 250}", "podIPs": [{"ip": "10.1.0.1"}],
            "startTime": "2026-11-23T09:00:03Z",
            "containerStatuses": [{
                "name": "trainer", "state": {"running": {"startedAt": "2026-11-23T09:00:05Z"}}, "lastState": {},
                "ready": True, "restartCount": 0, "image": "registry.example.com/ml/llm-trainer:2026.11.3-cuda12.8",
                "imageID": "registry.example.com/ml/llm-trainer@sha256:" + "3f" * 32,
                "containerID": "containerd://" + f"{i:064x}", "started": True,
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }],
            "qosClass": "Burstable",
        },
    }


def realistic_node(i: int) -> dict[str, Any]:
    """GPU node ``i`` of 8 (32 blocks x 4 subblocks x 64 hosts at 8,192), with GPU feature
    discovery labels, images and managed fields (about 11 KB of JSON)."""
    name = f"gpu-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": "a3-megagpu-8g", "topology.kubernetes.io/region": "us-central1",
              "topology.kubernetes.io/zone": "us-central1-a",
              "cloud.google.com/gce-topology-block": f"b{i // 256}",
              "cloud.google.com/gce-topology-subblock": f"b{i // 256}-s{i // 64 % 4}",
              "cloud.google.com/gce-topology-host": f"h{i}",
              **{f"nvidia.com/{k}": v for k, v in (
                  ("gpu.product", "NVIDIA-H100-80GB-HBM3"), ("gpu.count", "8"), ("gpu.memory", "81559"),
                  ("gpu.family", "hopper"), ("gpu.machine", "a3-megagpu-8g"), ("cuda.driver.major", "550"),
                  ("cuda.driver.minor", "90"), ("cuda.runtime.major", "12"), ("cuda.runtime.minor", "8"),
                  ("gfd.timestamp", "1763888400"), ("mig.capable", "false"), ("gpu.compute.major", "9"),
                  ("gpu.compute.minor", "0"), ("gpu.replicas", "1"), ("gpu.sharing-strategy", "none"))}}
    return {
        "metadata": {
            "name": name, "uid": _uid("node", i), "resourceVersion": str(10_000 + i),
            "creationTimestamp": "2026-11-01T00:00:00Z", "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "csi.volume.kubernetes.io/nodeid": json.dumps({"pd.csi.storage.gke.io": f"projects/p/zones/z/instances/{name}"}),
                            "container.googleapis.com/instance_id": str(7_000_000_000 + i)},
            "managedFields": [
                _managed("kubelet", "Update", {"f:metadata": {"f:labels": {f"f:{k}": {} for k in list(labels)[:8]}}}),
                _managed("gpu-feature-discovery", "Update", {"f:metadata": {"f:labels": {
                    f"f:{k}": {} for k in list(labels)[11:]}}}),
                _managed("kubelet", "Update", {"f:status": {"f:allocatable": {}, "f:capacity": {}, "f:conditions": {
                    f"k:{{\"type\":\"{t}\"}}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {},
                                                "f:reason": {}, "f:status": {}}
                    for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")},
                    "f:images": {}, "f:nodeInfo": {}}}, "status"),
            ],
        },
        "spec": {"podCIDR": f"10.1.{i // 256}.0/24", "podCIDRs": [f"10.1.{i // 256}.0/24"],
                 "providerID": f"gce://project/us-central1-a/{name}",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "208", "memory": "1872Gi", "pods": "110", "nvidia.com/gpu": "8",
                         "ephemeral-storage": "3000Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "207", "memory": "1830Gi", "pods": "110", "nvidia.com/gpu": "8",
                            "ephemeral-storage": "2800Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": "2026-11-23T09:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z",
                            "reason": f"Kubelet{t}", "message": f"kubelet reports {t} as expected"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": _uid("sys", i), "bootID": _uid("boot", i),
                         "kernelVersion": "6.6.56+", "osImage": "Container-Optimized OS from Google",
                         "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.5",
                         "kubeProxyVersion": "v1.33.5", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"registry.example.com/img-{k}@sha256:{k:064x}", f"registry.example.com/img-{k}:v{k}"],
                        "sizeBytes": 100_000_000 + k} for k in range(16)],
        },
    }


def realistic_job(j: int, nodes: int) -> dict[str, Any]:
    """Indexed Job ``train-<j>`` of :data:`GANG` completions whose pods :func:`realistic_pod`
    makes, as kube-apiserver returns it (its pod template is a member's spec and metadata)."""
    pod = realistic_pod(j * GANG, nodes, 1)
    meta, spec = pod["metadata"], pod["spec"]
    job, ns, job_uid = f"train-{j:04d}", meta["namespace"], _uid("job", j)
    template_spec = {k: v for k, v in spec.items() if k not in ("nodeName", "nodeSelector", "hostname", "subdomain",
                                                                "serviceAccount")}
    annotations = {k: v for k, v in meta["annotations"].items() if not k.startswith(("reconciler.", "batch."))}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job, "namespace": ns, "uid": job_uid, "resourceVersion": str(50_000 + j),
                     "generation": 1, "creationTimestamp": "2026-11-23T08:59:59Z",
                     "labels": {"app.kubernetes.io/name": "trainer", "team": ns}, "annotations": annotations,
                     "managedFields": [_managed("kubectl-client-side-apply", "Update", {"f:spec": {
                         "f:completionMode": {}, "f:completions": {}, "f:parallelism": {}, "f:template": {}}}),
                         _managed("kube-controller-manager", "Update", {"f:status": {
                             "f:active": {}, "f:ready": {}, "f:startTime": {}, "f:terminating": {},
                             "f:uncountedTerminatedPods": {}}}, "status")]},
        "spec": {"parallelism": GANG, "completions": GANG, "completionMode": "Indexed", "backoffLimit": 6,
                 "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed", "suspend": False,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": job_uid}},
                 "template": {"metadata": {"labels": {k: v for k, v in meta["labels"].items()
                                                      if "completion-index" not in k},
                                           "annotations": annotations},
                              "spec": template_spec}},
        "status": {"active": GANG, "ready": GANG, "startTime": "2026-11-23T09:00:00Z", "terminating": 0,
                   "uncountedTerminatedPods": {}},
    }


def namespace_object(i: int) -> dict[str, Any]:
    """Namespace ``team-<i>`` with the labels a cluster's tenants carry."""
    name = f"team-{i:02d}"
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": _uid("ns", i), "resourceVersion": str(100 + i),
                         "labels": {"kubernetes.io/metadata.name": name, "team": name,
                                    "pod-security.kubernetes.io/enforce": "baseline"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


class Page:
    """What ``list_*(..., _preload_content=False)`` returns: the page's JSON as ``data``."""

    def __init__(self, data: bytes) -> None:
        self.data = data


class Server:
    """The API server's paged list of one collection, made on request (nothing kept):
    ``make(i, rv)`` builds object ``i``; ``bumped`` indices carry a newer resourceVersion."""

    def __init__(self, make: Any, count: int, bumped: frozenset[int] = frozenset()) -> None:
        self.make, self.count, self.bumped = make, count, bumped
        #: Seconds spent making pages (the API server's share, left out of the timings).
        self.seconds = 0.0

    def __call__(self, limit: int, _continue: str | None = None, **_: Any) -> Page:
        t0 = time.perf_counter()
        try:
            return self._page(limit, _continue)
        finally:
            self.seconds += time.perf_counter() - t0

    def _page(self, limit: int, _continue: str | None) -> Page:
        start = int(_continue or 0)
        items = [self.make(i, 2 if i in self.bumped else 1) for i in range(start, min(start + limit, self.count))]
        end = start + limit
        meta = {"resourceVersion": "5000"}
        if end < self.count:
            meta["continue"] = str(end)
        return Page(json.dumps({"kind": "List", "metadata": meta, "items": items}).encode())


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory of this process, MiB (``VmRSS``, ``VmHWM``)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak() -> None:
    """Start a new peak (``VmHWM``) from the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def child(mode: str, nodes: int, pods: int, changed: float) -> dict[str, Any]:
    """One mode in this (fresh) interpreter; returns the measurements."""
    from reconciler.daemon.cache import ClusterCache
    from reconciler.kube import Informer, Resource, StreamingInformer
    from troupe.config import Config

    gc.collect()
    imports = rss_mib()[0]
    cache = ClusterCache(Config(), retained=mode == "retained")
    node_server = Server(lambda i, rv: realistic_node(i), nodes)
    pod_server = Server(lambda i, rv: realistic_pod(i, nodes, rv * 100_000 + i), pods)
    retained = mode == "retained"
    informer = StreamingInformer if retained else Informer
    node_inf = informer(Resource("nodes", node_server), cache.replace_nodes, lambda k, o: None,
                        transform=cache.retain_node if retained else None)
    pod_inf = informer(Resource("pods", pod_server), cache.replace_pods, lambda k, o: None,
                       transform=cache.retain_pod if retained else None)
    # Jobs (one per gang of 64) and namespaces, as the reconciler's other informers hold them
    jobs = (pods + GANG - 1) // GANG
    job_inf = Informer(Resource("jobs", Server(lambda j, rv: realistic_job(j, nodes), jobs)), cache.replace_jobs,
                       lambda k, o: None, transform=cache.retain_job)
    ns_inf = Informer(Resource("namespaces", Server(lambda i, rv: namespace_object(i), pods // 2000 + 1)),
                      lambda items: cache.volumes.replace("namespaces", items), lambda k, o: None,
                      transform=(lambda o: cache.volumes.retain("namespaces", o)) if retained else None)
    t0 = time.perf_counter()
    node_inf._list()
    pod_inf._list()
    job_inf._list()
    ns_inf._list()
    cache.snapshot()
    list_seconds = time.perf_counter() - t0 - node_server.seconds - pod_server.seconds
    node_server.seconds = pod_server.seconds = 0.0
    gc.collect()
    steady = rss_mib()[0]
    reset_peak()
    pod_server.bumped = frozenset(range(0, pods, max(1, round(1 / changed)))) if changed > 0 else frozenset()
    t0 = time.perf_counter()
    node_inf._list()  # after 410 Gone: both informers list again
    pod_inf._list()
    cache.snapshot()
    relist_seconds = time.perf_counter() - t0 - node_server.seconds - pod_server.seconds
    peak = rss_mib()[1]
    gc.collect()
    after = rss_mib()[0]
    sample = json.loads(pod_server(1, None).data)["items"][0]
    return {"mode": mode, "imports": imports, "steady": steady, "relist_peak": peak, "after_relist": after,
            "list_seconds": list_seconds, "relist_seconds": relist_seconds,
            "pod_json_bytes": len(json.dumps(sample, separators=(",", ":"))),
            "node_json_bytes": len(json.dumps(realistic_node(0), separators=(",", ":"))),
            "bumped": len(pod_server.bumped)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=8192)
    p.add_argument("--pods", type=int, default=20_000)
    p.add_argument("--changed", type=float, default=0.1, help="share of pods changed when listed again (default 0.1)")
    p.add_argument("--child", choices=("whole", "retained"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.nodes, args.pods, args.changed)))
        return 0
    results = {}
    for mode in ("whole", "retained"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--nodes", str(args.nodes),
                              "--pods", str(args.pods), "--changed", str(args.changed)],
                             capture_output=True, text=True, check=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    w, r = results["whole"], results["retained"]
    print(f"cache memory: {args.nodes} nodes (~{w['node_json_bytes'] / 1024:.1f} KB each) and {args.pods} pods "
          f"(~{w['pod_json_bytes'] / 1024:.1f} KB each, managedFields included); re-list after 410 with "
          f"{w['bumped']} pods changed")
    print(f"{'mode':<10}{'imports':>10}{'steady':>10}{'relist peak':>13}{'peak/steady':>13}{'list s':>9}{'relist s':>10}")
    for m in (w, r):
        print(f"{m['mode']:<10}{m['imports']:>9.0f}M{m['steady']:>9.0f}M{m['relist_peak']:>12.0f}M"
              f"{m['relist_peak'] / m['steady']:>13.2f}{m['list_seconds']:>9.1f}{m['relist_seconds']:>10.1f}")
    print(f"retained/whole: steady {r['steady'] / w['steady']:.2f}x, relist peak {r['relist_peak'] / w['relist_peak']:.2f}x, "
          f"list time {r['list_seconds'] / w['list_seconds']:.2f}x")
    ok = r["steady"] < 400 and r["relist_peak"] < 1.3 * r["steady"]
    print(f"targets (steady < 400 MiB, relist peak < 1.3x steady): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
