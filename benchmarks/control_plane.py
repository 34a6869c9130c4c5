"""What the benchmarks on the local control plane share (``scale.py``, ``stream.py``,
``throughput.py``, ``preemption_cluster.py``): the kwok nodes file (8 GPUs a node by
default, in a blocks x subblocks x hosts topology), the control plane started with
kube-controller-manager and kube-scheduler at their default client rates or raised ones
(and Troupe on it with a benchmark's configuration, or not), the command-line flags they
share and the checks of them, a list-then-watch that survives the API server dropping it,
deleting a run's objects until their pods are gone, a wait with progress lines, and the
readings of the reconciler's memory and of the nodes' readiness.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from devtools.devcluster.cluster import ClientRate, Cluster
from devtools.devcluster.stack import Stack

#: The default kwok cluster: 4 blocks x 8 subblocks x 64 hosts, 2,048 nodes.
BLOCKS, SUBBLOCKS, HOSTS = 4, 8, 64
#: A node of 8 GPUs (allocatable = capacity).
GPU_NODE = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
#: Seconds between two progress lines of :func:`wait_done`.
PROGRESS_SECONDS = 5.0


def nodes_file(directory: Path, topology: tuple[int, int, int] = (BLOCKS, SUBBLOCKS, HOSTS),
               resources: Mapping[str, str] = GPU_NODE) -> Path:
    """A FakeNodes file (``devtools/devcluster/nodes.py``) of ``topology`` (blocks x
    subblocks x hosts) nodes with ``resources`` each (name -> quantity; default 8 GPUs,
    :data:`GPU_NODE`), written as ``directory/nodes.yaml``."""
    blocks, subblocks, hosts = topology
    path = directory / "nodes.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "troupe.dev/devcluster/v1", "kind": "FakeNodes",
        "groups": [{"name": "gpu",
                    "topology": {"blocks": blocks, "subblocksPerBlock": subblocks, "hostsPerSubblock": hosts},
                    "resources": dict(resources)}],
    }))
    return path


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line from its module docstring ``doc``: the first paragraph
    as its description, everything after the second (the usage) as the epilog of
    ``--help``."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=(doc or "").split("\n\n", 2)[2])


def parse_topology(p: argparse.ArgumentParser, text: str) -> tuple[int, int, int]:
    """``--topology BxSxH`` as (blocks, subblocks, hosts); exits 2 through ``p`` when it is not
    three integers."""
    try:
        blocks, subblocks, hosts = (int(part) for part in text.split("x"))
    except ValueError:
        p.error(f"--topology: expected BxSxH (three integers, e.g. 4x8x64), got {text!r}")
    return blocks, subblocks, hosts


def parse_modes(p: argparse.ArgumentParser, text: str, choices: Sequence[str]) -> list[str]:
    """``--modes`` (comma-separated) as a list, in the order given; exits 2 through ``p``
    naming the modes not among ``choices``."""
    modes = text.split(",")
    unknown = [mode for mode in modes if mode not in choices]
    if unknown:
        p.error(f"--modes: unknown mode(s) {', '.join(unknown)}; choose among {', '.join(choices)}")
    return modes


def check_positive(p: argparse.ArgumentParser, args: argparse.Namespace, flags: Sequence[str]) -> None:
    """Exit 2 through ``p`` on the first of ``flags`` (attribute names of ``args``) below 1."""
    for flag in flags:
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: expected a positive count, got {getattr(args, flag)}")


def add_flags(p: argparse.ArgumentParser, topology: str, note: str = "") -> None:
    """``--topology`` (default ``topology``, blocks x subblocks x hosts; ``note`` ends its
    help) and the flags of :func:`add_rate_flags`: the control plane's flags of every
    benchmark on it (:func:`check_flags` reads them)."""
    blocks, subblocks, hosts = (int(part) for part in topology.split("x"))
    p.add_argument("--topology", default=topology, metavar="BxSxH",
                   help=f"kwok nodes of 8 GPUs as blocks x subblocks x hosts (default %(default)s: "
                        f"{blocks * subblocks * hosts:,} nodes){note}")
    add_rate_flags(p)


def add_rate_flags(p: argparse.ArgumentParser) -> None:
    """``--component-qps``, ``--component-burst`` and ``--run-dir`` (:func:`check_rate_flags`
    reads them): for a benchmark whose ``--topology`` is its own."""
    p.add_argument("--component-qps", type=float, default=None, metavar="QPS",
                   help="start kube-controller-manager and kube-scheduler with --kube-api-qps=QPS "
                        "(default: their own defaults, 20 and 50)")
    p.add_argument("--component-burst", type=int, default=None, metavar="B",
                   help="with --component-qps: their --kube-api-burst (default 2 x QPS)")
    p.add_argument("--run-dir", metavar="DIR", default=None,
                   help="keep the control plane's run directory (logs of every component) here")


def check_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.topology`` made (blocks, subblocks, hosts) (:func:`parse_topology`); exit 2
    (``p.error``) on a topology that is not three integers, and as :func:`check_rate_flags`."""
    args.topology = parse_topology(p, args.topology)
    check_rate_flags(p, args)


def check_rate_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 (``p.error``) on ``--component-burst`` without ``--component-qps``."""
    if args.component_burst is not None and args.component_qps is None:
        p.error("--component-burst needs --component-qps")


def client_rate(args: argparse.Namespace) -> ClientRate | None:
    """The components' raised client rate of ``--component-qps``/``--component-burst`` (the
    burst 2 x QPS by default); None when not raised."""
    if args.component_qps is None:
        return None
    burst = args.component_burst if args.component_burst is not None else int(2 * args.component_qps)
    return ClientRate(args.component_qps, burst)


def rates_text(rate: ClientRate | None) -> str:
    """How kube-controller-manager and kube-scheduler were started, for the header."""
    if rate is None:
        return "kube-controller-manager and kube-scheduler at their default client rates (20/30, 50/100)"
    return f"kube-controller-manager and kube-scheduler at --kube-api-qps={rate.qps:g} --kube-api-burst={rate.burst}"


def not_ready_count(core: client.CoreV1Api) -> int:
    """How many nodes are not Ready now (their Ready condition is not True)."""
    return sum(1 for node in core.list_node().items
               if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ()))


def warn_not_ready(core: client.CoreV1Api, before: str) -> None:
    """A warning line on stdout when some nodes are not Ready ``before`` a measurement
    (kwok renews its nodes' leases late on a busy machine): its numbers are not comparable."""
    unready = not_ready_count(core)
    if unready:
        print(f"  warning: {unready} nodes not Ready before {before} (kwok renews its nodes' leases late on a "
              "busy machine); its numbers are not comparable", flush=True)


def follow(list_call: Any, namespace: str | None, on_list: Any, on_event: Any, stop: threading.Event,
           errors: list[str], raw: bool = False, **selectors: str) -> None:
    """List then watch ``list_call`` in ``namespace`` (a cluster-scoped kind, such as nodes,
    when None) until ``stop`` is set, calling ``on_list(items, received)`` on each (re-)list
    and ``on_event(type, object, received)`` on each event (``received``:
    ``time.monotonic()`` when the client got it). ``raw``: the objects are plain JSON dicts,
    not the client's models (4-5 events a pod: building models would lag a watch of
    thousands of pods). The watch is resumed from a fresh list when the API server drops
    it; errors are appended to ``errors``."""
    scope = () if namespace is None else (namespace,)
    while not stop.is_set():
        try:
            if raw:
                listing = json.loads(list_call(*scope, _preload_content=False, **selectors).data)
                items, version = listing.get("items") or [], listing["metadata"]["resourceVersion"]
            else:
                models = list_call(*scope, **selectors)
                items, version = models.items, models.metadata.resource_version
            on_list(items, time.monotonic())
            w = watch.Watch()
            for event in w.stream(list_call, *scope, resource_version=version, timeout_seconds=60,
                                  **({"deserialize": False} if raw else {}), **selectors):
                if raw and event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {event['object']}")
                on_event(event["type"], event["object"], time.monotonic())
                if stop.is_set():
                    w.stop()
        except Exception as e:  # noqa: BLE001  resumed from a fresh list
            errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.2)


def rss_peak_mib(pid: int) -> float:
    """Peak resident memory of process ``pid`` (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _until_done(delete: Any, end: float) -> None:
    """``delete()`` (a DeleteCollection), again while the API server answers 504: a
    collection of thousands (a stream's 2,000 Jobs) outlasts its 60 s request timeout,
    and each call deletes what it reached before it timed out. Raises the last error at
    ``end`` (monotonic seconds)."""
    while True:
        try:
            delete()
            return
        except ApiException as e:
            if e.status != 504 or time.monotonic() > end:
                raise


def clear(api: Any, namespace: str, name: str | None = None, timeout: float = 300.0) -> None:
    """Delete Job ``name`` and its pods (every Job and pod of ``namespace`` when ``name`` is
    None; grace 0: kwok runs no containers), take the Job controller's
    ``batch.kubernetes.io/job-tracking`` finalizer off them (else they linger until
    kube-controller-manager, at its client rate, removes it: N/20 s), wait until no pod of
    them is left (their nodes are free again), then delete ``namespace`` without waiting for
    it. Raises ``RuntimeError`` after ``timeout`` s."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    selector = {"label_selector": f"job-name={name}"} if name else {}
    end = time.monotonic() + timeout
    if name:
        batch.delete_namespaced_job(name, namespace, propagation_policy="Background", grace_period_seconds=0)
    else:
        _until_done(lambda: batch.delete_collection_namespaced_job(namespace, propagation_policy="Background",
                                                                   grace_period_seconds=0), end)
    _until_done(lambda: core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, **selector), end)
    unfinalize = {"metadata": {"$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER]}}

    def release(pod: str) -> None:
        try:
            core.patch_namespaced_pod(pod, namespace, unfinalize, _content_type="application/strategic-merge-patch+json")
        except ApiException as e:
            if e.status != 404:
                raise

    while pods := json.loads(core.list_namespaced_pod(namespace, _preload_content=False, **selector).data).get("items"):
        held = [p["metadata"]["name"] for p in pods if JOB_TRACKING_FINALIZER in (p["metadata"].get("finalizers") or ())]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(release, held))
        if time.monotonic() > end:
            raise RuntimeError(f"{len(pods)} pods of {f'Job {namespace}/{name}' if name else f'namespace {namespace}'} "
                               f"not gone after {timeout:.0f}s")
        time.sleep(0.5)
    core.delete_namespace(namespace, grace_period_seconds=0)


def wait_done(state: Callable[[], tuple[int, int, str]], creator: threading.Thread, start: float, mode: str,
              timeout: float, errors: list[str], poll: float = 0.5) -> None:
    """Return once ``state()`` says every object is done and ``creator`` (the thread that
    creates them) has ended, or ``timeout`` s after it ended; every ``poll`` s ``state()``
    gives (done, of how many, a progress text), the text printed on stderr every
    :data:`PROGRESS_SECONDS` as ``<mode> <seconds since start>s: <text>``, and at the
    timeout how many are not done with the last watch errors."""
    last_progress, deadline = time.monotonic(), None
    while True:
        time.sleep(poll)
        done, total, text = state()
        now = time.monotonic()
        if not creator.is_alive() and deadline is None:
            deadline = now + timeout
        if now - last_progress >= PROGRESS_SECONDS:
            last_progress = now
            print(f"  {mode} {now - start:6.1f}s: {text}", file=sys.stderr, flush=True)
        if done >= total and not creator.is_alive():
            return
        if deadline is not None and now > deadline:
            print(f"  {mode}: {total - done} of {total} not done {timeout:.0f}s after the last was created; "
                  f"watch errors: {errors[-3:]}", file=sys.stderr, flush=True)
            return


def open_namespace(core: client.CoreV1Api, namespace: str, what: str) -> None:
    """Create ``namespace`` for the run named ``what`` (``the plain stream``), after
    :func:`warn_not_ready`, and say on stderr that it starts."""
    warn_not_ready(core, what)
    core.create_namespace({"metadata": {"name": namespace}})
    print(f"{what}...", file=sys.stderr, flush=True)


def clear_namespace(api: Any, namespace: str, timeout: float = 900.0) -> None:
    """:func:`clear` every Job and pod of ``namespace``, then the namespace, saying on stderr
    how long its pods took to go."""
    cleared = time.monotonic()
    clear(api, namespace, timeout=timeout)
    print(f"  its pods deleted in {time.monotonic() - cleared:.1f}s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def cluster_started(run_dir: str | None, topology: tuple[int, int, int], resources: Mapping[str, str] = GPU_NODE,
                    prefix: str = "troupe-bench-", **options: Any) -> Iterator[tuple[Cluster, Path]]:
    """A local control plane (``Cluster(run_dir, **options)``: ``client_rate``,
    ``feature_gates``... as :class:`devtools.devcluster.cluster.Cluster` takes them) with
    :func:`nodes_file`'s kwok nodes of ``resources`` Ready, and the temporary directory
    (named from ``prefix``) a benchmark writes its files in; the start and its seconds said
    on stderr. Thousands of nodes take more than the default minute to start and be Ready
    on a busy machine: both wait up to 10 minutes. Raises what :class:`Cluster` raises when
    a part does not start."""
    nodes = topology[0] * topology[1] * topology[2]
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        directory = Path(tmp)
        print(f"starting the control plane with {nodes} kwok nodes...", file=sys.stderr)
        began = time.monotonic()
        with Cluster(run_dir, start_timeout=600.0, **options) as cluster:
            cluster.apply_nodes(nodes_file(directory, topology, resources), timeout=600.0)
            print(f"  ready in {time.monotonic() - began:.0f}s", file=sys.stderr)
            yield cluster, directory


@contextlib.contextmanager
def started(args: argparse.Namespace, config: str, prefix: str) -> Iterator[tuple[Cluster, Stack]]:
    """:func:`cluster_started` with ``args.topology`` kwok nodes of 8 GPUs, its components at
    :func:`client_rate`'s rates and its run directory ``args.run_dir`` (a temporary one
    when None), and Troupe on it with the configuration ``config`` (YAML text). Raises what
    :class:`Cluster` and :class:`Stack` raise when a part does not start."""
    with cluster_started(args.run_dir, args.topology, prefix=prefix, client_rate=client_rate(args)) as (cluster, tmp):
        path = tmp / "config.yaml"
        path.write_text(config)
        with Stack(cluster, path) as stack:
            yield cluster, stack
