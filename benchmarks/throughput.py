"""Throughput benchmark: G gangs of M pods created at once, placed by kube-scheduler alone,
by Troupe, and by kube-scheduler's own gang plugin, one after the other on one cluster
(issue 45: many gangs at once at kube-scheduler's pace).

    .venv/bin/python benchmarks/throughput.py [--shape default|perf-750x4|perf-3x1000]
        [--gangs G] [--members M] [--topology BxSxH] [--modes plain,troupe,native]
        [--threads T] [--timeout S] [--component-qps QPS [--component-burst B]] [--run-dir DIR]

The scenario, as a new user would write it: G x M bare pods named ``g<i>-<j>``, all created
at once by this benchmark's client (``--threads`` threads, each with its own connection, so
that creation is not the bottleneck: its rate is printed), on kwok nodes in blocks x
subblocks x hosts, each gang required in one subblock. The modes, in this order, each on a
clean cluster (the previous mode's pods deleted and gone, its namespace deleted):

- **plain**: the pods without any gang key; kube-scheduler alone places them;
- **troupe**: each pod with ``troupe.io/gang-name: g<i>``, ``troupe.io/gang-size: M`` and
  ``troupe.io/topology-required-level: cloud.google.com/gce-topology-subblock``; Troupe's
  webhook and reconciler running as the chart starts them (``devtools/devcluster/stack.py``);
- **native**: kube-scheduler's own gang scheduling (KEP-4671 and KEP-5732): one
  ``scheduling.k8s.io/v1beta1`` PodGroup ``g<i>`` per gang, ``spec.schedulingPolicy.gang.minCount:
  M`` and ``spec.schedulingConstraints.topology[0].key`` the subblock label, created before
  the pods (untimed, as scheduler_perf creates its groups first), each pod naming it in
  ``spec.schedulingGroup.podGroupName``. Troupe is stopped first and its webhook
  registration removed (it would adopt pods naming a group, docs/decisions/056-pod-groups.md).

With ``native`` among the modes the cluster is started with ``--feature-gates
GenericWorkload=true,TopologyAwareWorkloadScheduling=true`` and ``--runtime-config
scheduling.k8s.io/v1beta1=true`` (Kubernetes 1.37.2, ``devtools/devcluster/cluster.py``) for
the three modes alike; the plain and troupe pods name no pod group, which the output says.

Printed per mode as soon as it is measured: the pods Running per second, from the first
create call sent to the watch seeing the last pod Running; each gang's seconds from its
first member's creation to its last member Running, median and p90; the creation rate; the
gangs spanning more than one subblock (0 for troupe and native: each is required in one);
the reconciler's peak resident memory. Then troupe/plain and native/plain of the pods per
second (Troupe's target: at least 0.9), whether Troupe is ahead of the native gang plugin,
and a markdown table for docs/guide/results.md (``benchmarks/throughput_report.py``).
Progress lines on stderr every 5 s.

**Shapes.** ``default``: 500 gangs of 4 pods asking ``nvidia.com/gpu: 2`` (requests =
limits) on 2,048 nodes of 8 GPUs (4x8x64). ``perf-750x4`` and ``perf-3x1000``: the shapes
of kube-scheduler's own benchmark of KEP-5732 (``test/integration/scheduler_perf/podgroup/
tas/performance-config.yaml``, ``5000Nodes_750Gangs_3000Pods`` and
``5000Nodes_3Gangs_3000Pods_1000PerGroup``): 5,000 nodes of 4 CPUs, 32 GiB and 110 pods in
racks of 100 (``topology.kubernetes.io/rack``, 50 racks), pods requesting 100m CPU and 100
MiB (no limits), one PodGroup per gang with ``minCount`` its size and a topology constraint
on the rack. Here a rack is Troupe's subblock: the nodes are 1 block x 50 subblocks x 100
hosts and every mode is constrained on ``cloud.google.com/gce-topology-subblock``.
``--gangs``, ``--members`` and ``--topology`` override a shape's.

This is a benchmark, not a test. ``--gangs 40 --members 4 --topology 1x4x16`` took 1.5
minutes with the control plane's start on two cores at a load of 15-20. The default is
estimated at about 10 minutes on two quiet cores (the 2,048 nodes start in 1-3 minutes;
each mode's 2,000 pods run at 25-50 a second, 50 being kube-scheduler's default client
rate for its bindings), the 5,000-node shapes longer (5,000 nodes to start and 3,000 pods a
mode). On a busy machine kwok renews the nodes' leases late and some go NotReady: a
warning line says so, and such numbers are not comparable.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane as plane
import throughput_report as report
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.devcluster.cluster import TOPOLOGY_AWARE_WORKLOADS, WORKLOAD_API, Cluster
from devtools.devcluster.stack import Stack
from devtools.devcluster.toolchain import control_plane_version

SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
TROUPE_GATE = "troupe.io/placement"
WORKLOAD_GROUP, WORKLOAD_VERSION = "scheduling.k8s.io", "v1beta1"


@dataclass(frozen=True)
class Shape:
    """A scenario: ``gangs`` gangs of ``members`` pods, each pod asking ``requests`` (and
    ``limits``), on nodes of ``node`` resources in ``topology`` (blocks, subblocks, hosts)."""

    gangs: int
    members: int
    topology: tuple[int, int, int]
    node: Mapping[str, str]
    requests: Mapping[str, str]
    limits: Mapping[str, str]


#: A scheduler_perf node of KEP-5732's benchmark (templates/node.yaml there).
PERF_NODE = {"cpu": "4", "memory": "32Gi", "pods": "110"}
PERF_POD = {"cpu": "100m", "memory": "100Mi"}
SHAPES = {
    "default": Shape(500, 4, (plane.BLOCKS, plane.SUBBLOCKS, plane.HOSTS), plane.GPU_NODE,
                     {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"}),
    "perf-750x4": Shape(750, 4, (1, 50, 100), PERF_NODE, PERF_POD, {}),
    "perf-3x1000": Shape(3, 1000, (1, 50, 100), PERF_NODE, PERF_POD, {}),
}


def pod_body(gang: int, member: int, shape: Shape, mode: str) -> dict[str, Any]:
    """Pod ``g<gang>-<member>`` of ``shape`` as ``mode`` writes it: no gang key (plain),
    Troupe's gang keys (troupe), or naming PodGroup ``g<gang>`` (native)."""
    name = f"g{gang}"
    annotations = {"troupe.io/gang-name": name, "troupe.io/gang-size": str(shape.members),
                   "troupe.io/topology-required-level": SUBBLOCK_LABEL} if mode == report.TROUPE else {}
    resources: dict[str, Any] = {"requests": dict(shape.requests)}
    if shape.limits:
        resources["limits"] = dict(shape.limits)
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "train", "image": "trainer:latest", "resources": resources}]}
    if mode == report.NATIVE:
        spec["schedulingGroup"] = {"podGroupName": name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-{member}", "annotations": annotations},
            "spec": spec}


def pod_group_body(gang: int, shape: Shape) -> dict[str, Any]:
    """The ``v1beta1`` PodGroup ``g<gang>``: a gang of ``minCount`` the shape's members,
    required in one subblock (KEP-5732's ``schedulingConstraints.topology``)."""
    return {"apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}", "kind": "PodGroup", "metadata": {"name": f"g{gang}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": shape.members}},
                     "schedulingConstraints": {"topology": [{"key": SUBBLOCK_LABEL}]}}}


class Tracker:
    """When the watch first saw each pod Running (not being deleted), seconds from
    ``start``, and each pod's node. Pods arrive as plain JSON dicts."""

    def __init__(self) -> None:
        self.start = 0.0
        self.running: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.lock = threading.Lock()

    def listed(self, items: list[dict[str, Any]], now: float) -> None:
        """A fresh list of the namespace's pods at ``now`` (monotonic)."""
        for pod in items:
            self.event("ADDED", pod, now)

    def event(self, kind: str, pod: dict[str, Any], now: float) -> None:
        """One watch event (``kind``: ADDED, MODIFIED, DELETED) received at ``now``."""
        name, node = pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            if node:
                self.nodes[name] = node
            if (kind != "DELETED" and name not in self.running and not pod["metadata"].get("deletionTimestamp")
                    and (pod.get("status") or {}).get("phase") == "Running"):
                self.running[name] = now - self.start


def create_all(clients: list[Any], bodies: list[tuple[str, Any]], create: Callable[[Any, Any], object],
               start: float, sent: dict[str, float]) -> tuple[float, list[str]]:
    """Send every ``(name, body)`` of ``bodies`` through ``create(api, body)`` on as many
    threads as ``clients``, each thread with a client of its own (made beforehand: loading a
    kubeconfig is not creation); a call refused with 429 or 5xx is sent again (three tries).
    Fills ``sent`` as it goes (name -> seconds from ``start`` when its call was first sent,
    for the created). Returns the seconds from ``start`` when the last call was answered and
    one line per body refused for good."""
    local, spare = threading.local(), list(clients)
    refused: list[str] = []

    def one(item: tuple[str, Any]) -> None:
        name, body = item
        if not hasattr(local, "api"):
            local.api = spare.pop()  # atomic under the GIL; one a thread
        first = time.monotonic() - start
        for attempt in range(3):
            try:
                create(local.api, body)
                sent[name] = first
                return
            except ApiException as e:
                if attempt == 2 or not (e.status == 429 or (e.status or 0) >= 500):
                    refused.append(f"{name}: {e.status} {e.reason}")
                    return
                time.sleep(0.1)

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        list(pool.map(one, bodies))
    return time.monotonic() - start, refused


def run_mode(cluster: Cluster, namespace: str, mode: str, shape: Shape, threads: int, timeout: float) -> report.ModeRun:
    """Create ``shape``'s pods as ``mode`` writes them in ``namespace`` (the native mode's
    PodGroups first), all at once on ``threads`` client threads, and watch until every one
    is Running or ``timeout`` s after the last was created. The reconciler's memory is not
    read here (``reconciler_peak_mib`` None). Raises ``RuntimeError`` when
    a PodGroup is refused."""
    core = client.CoreV1Api(cluster.api_client("admin"))
    clients = [cluster.api_client("admin") for _ in range(threads)]

    def create_group(api: Any, body: Any) -> object:
        return client.CustomObjectsApi(api).create_namespaced_custom_object(
            WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, "podgroups", body)

    def create_pod(api: Any, body: Any) -> object:
        return client.CoreV1Api(api).create_namespaced_pod(namespace, body, _preload_content=False)

    if mode == report.NATIVE:
        groups = [(f"g{i}", pod_group_body(i, shape)) for i in range(shape.gangs)]
        _, refused = create_all(clients, groups, create_group, time.monotonic(), {})
        if refused:
            raise RuntimeError(f"{len(refused)} PodGroups refused, e.g. {refused[:3]}")
        time.sleep(1.0)  # kube-scheduler's informer sees the groups before their pods (scheduler_perf waits too)
    bodies = [(f"g{i}-{j}", pod_body(i, j, shape, mode)) for i in range(shape.gangs) for j in range(shape.members)]
    tracker, stop, errors = Tracker(), threading.Event(), []
    watcher = threading.Thread(target=plane.follow, daemon=True, args=(
        core.list_namespaced_pod, namespace, tracker.listed, tracker.event, stop, errors, True))
    watcher.start()
    time.sleep(1.0)
    sent: dict[str, float] = {}
    answered: list[tuple[float, list[str]]] = []
    tracker.start = time.monotonic()
    creating = threading.Thread(daemon=True, target=lambda: answered.append(
        create_all(clients, bodies, create_pod, tracker.start, sent)))
    creating.start()

    def state() -> tuple[int, int, str]:
        with tracker.lock:
            running = len(tracker.running)
        return running, len(bodies), f"{len(sent)}/{len(bodies)} pods created, {running} Running"

    plane.wait_done(state, creating, tracker.start, mode, timeout, errors, poll=0.25)
    creating.join()
    stop.set()
    created_by, refused = answered[0]
    for api in clients:
        api.close()
    if refused:
        print(f"  {len(refused)} creates refused, e.g. {refused[:3]}", file=sys.stderr, flush=True)
    with tracker.lock:
        return report.ModeRun(mode, dict(sent), created_by, dict(tracker.running), dict(tracker.nodes), threads,
                       failed_creates=len(refused))


def troupe_off(cluster: Cluster, shape: Shape, timeout: float = 30.0) -> None:
    """Wait until a pod naming a PodGroup is admitted without Troupe's gate (dry run): the
    API server drops a removed webhook registration asynchronously. Raises ``RuntimeError``
    after ``timeout`` s."""
    core = client.CoreV1Api(cluster.api_client("admin"))
    probe = pod_body(0, 0, shape, report.NATIVE)
    probe["metadata"] = {"generateName": "troupe-off-probe-"}
    end = time.monotonic() + timeout
    while True:
        try:
            pod = core.create_namespaced_pod("default", probe, dry_run="All")
            if not any(g.name == TROUPE_GATE for g in pod.spec.scheduling_gates or ()):
                return
        except ApiException:
            pass  # the webhook's registration still in force, its server gone
        if time.monotonic() > end:
            raise RuntimeError(f"Troupe's webhook still admits pods naming a PodGroup {timeout:.0f}s after its "
                               "registration was removed")
        time.sleep(0.3)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring); exits 2 on a bad value. ``args.shape``
    becomes the :class:`Shape` measured (the preset with ``--gangs``, ``--members`` and
    ``--topology`` applied)."""
    p = plane.parser(__doc__)
    p.add_argument("--shape", choices=list(SHAPES), default="default",
                   help="the scenario (default %(default)s: 500 gangs of 4 two-GPU pods on 2,048 nodes); perf-750x4 "
                        "and perf-3x1000: scheduler_perf's shapes of KEP-5732 on 5,000 nodes in 50 racks")
    p.add_argument("--gangs", type=int, default=None, metavar="G", help="gangs (default: the shape's)")
    p.add_argument("--members", type=int, default=None, metavar="M", help="pods per gang (default: the shape's)")
    p.add_argument("--topology", default=None, metavar="BxSxH",
                   help="kwok nodes as blocks x subblocks x hosts (default: the shape's, 4x8x64 or 1x50x100)")
    p.add_argument("--modes", default=",".join(report.MODES),
                   help="which modes to run, in this order: plain, troupe, native (default %(default)s)")
    p.add_argument("--threads", type=int, default=16, metavar="T",
                   help="client threads creating the pods (default %(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="give up on a mode S seconds after its last pod was created (default %(default)s)")
    plane.add_rate_flags(p)
    args = p.parse_args(argv)
    modes = plane.parse_modes(p, args.modes, report.MODES)
    args.modes = [mode for mode in report.MODES if mode in modes]
    plane.check_positive(p, args, [f for f in ("gangs", "members", "threads") if getattr(args, f) is not None])
    shape = SHAPES[args.shape]
    args.shape = replace(shape, gangs=args.gangs or shape.gangs, members=args.members or shape.members,
                         topology=shape.topology if args.topology is None else plane.parse_topology(p, args.topology))
    plane.check_rate_flags(p, args)
    if report.NATIVE in args.modes and control_plane_version().startswith("v1.36."):
        p.error("--modes native: kube-scheduler's gang plugin with the v1beta1 PodGroup needs Kubernetes 1.37 "
                f"(TROUPE_KUBERNETES_VERSION is {control_plane_version()})")
    return args


def main() -> int:
    args = parse_args()
    shape: Shape = args.shape
    blocks, subblocks, hosts = shape.topology
    nodes = blocks * subblocks * hosts
    rate = plane.client_rate(args)
    native = report.NATIVE in args.modes
    title = (f"{report.shape_text(shape.gangs, shape.members, shape.requests, nodes, shape.topology)}; "
             f"{plane.rates_text(rate)}; per mode: {', '.join(args.modes)}")
    gates = ("kube-scheduler and kube-apiserver with GenericWorkload and TopologyAwareWorkloadScheduling on and "
             "scheduling.k8s.io/v1beta1 served, for every mode; the plain and troupe pods name no pod group"
             if native else "the stock components (no feature gates)")
    runs: dict[str, report.ModeRun] = {}
    began = time.monotonic()
    with plane.cluster_started(args.run_dir, shape.topology, shape.node, client_rate=rate,
                               feature_gates=TOPOLOGY_AWARE_WORKLOADS if native else None,
                               runtime_config=WORKLOAD_API if native else ()) as (cluster, tmp):
        config = tmp / "config.yaml"
        config.write_text("")
        print(f"{title}\n{gates}", flush=True)
        if [mode for mode in args.modes if mode != report.NATIVE]:
            with Stack(cluster, config) as stack:
                pid = stack.process("troupe-reconciler").popen.pid
                for mode in (m for m in args.modes if m != report.NATIVE):
                    run = measure(cluster, mode, shape, args)
                    runs[mode] = replace(run, reconciler_peak_mib=plane.rss_peak_mib(pid))
                    print("\n".join(report.mode_lines(runs[mode])), flush=True)
                    stack.check()
        if native:
            troupe_off(cluster, shape)
            runs[report.NATIVE] = measure(cluster, report.NATIVE, shape, args)
            print("\n".join(report.mode_lines(runs[report.NATIVE])), flush=True)
    print(f"\n{title}; {time.monotonic() - began:.0f} s in all\n{gates}\n")
    for run in runs.values():
        print("\n".join(report.mode_lines(run)))
    print("\n".join(report.verdict_lines(runs)) + "\n")
    print(report.summary_table(runs, report.shape_text(shape.gangs, shape.members, shape.requests, nodes, shape.topology)))
    return 0


def measure(cluster: Cluster, mode: str, shape: Shape, args: argparse.Namespace) -> report.ModeRun:
    """One mode in a namespace of its own (``throughput-<mode>``), then its pods deleted and
    gone and the namespace deleted; a warning line first when nodes are not Ready."""
    api = cluster.api_client("admin")
    core = client.CoreV1Api(api)
    namespace = f"throughput-{mode}"
    plane.open_namespace(core, namespace, f"the {mode} mode")
    run = run_mode(cluster, namespace, mode, shape, args.threads, args.timeout)
    plane.clear_namespace(api, namespace)
    return run


if __name__ == "__main__":
    sys.exit(main())
