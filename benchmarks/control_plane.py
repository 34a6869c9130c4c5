"""The local control plane as the benchmarks on it start it (``scale.py``, ``stream.py``,
``preemption_cluster.py``): kwok nodes of 8 GPUs in a blocks x subblocks x hosts topology,
kube-controller-manager and kube-scheduler at their default client rates or raised ones,
and Troupe on it with a configuration of the benchmark's; the command-line flags they share
and the checks of them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml
from kubernetes import client

from devtools.devcluster.cluster import ClientRate, Cluster
from devtools.devcluster.stack import Stack


def nodes_file(directory: Path, topology: tuple[int, int, int]) -> Path:
    """A FakeNodes file of ``topology`` (blocks x subblocks x hosts) nodes with 8 GPUs each."""
    blocks, subblocks, hosts = topology
    path = directory / "nodes.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "troupe.dev/devcluster/v1", "kind": "FakeNodes",
        "groups": [{"name": "gpu",
                    "topology": {"blocks": blocks, "subblocksPerBlock": subblocks, "hostsPerSubblock": hosts},
                    "resources": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}}],
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
    help), ``--component-qps``, ``--component-burst`` and ``--run-dir``: the control plane's
    flags of every benchmark on it (:func:`check_flags` reads them)."""
    blocks, subblocks, hosts = (int(part) for part in topology.split("x"))
    p.add_argument("--topology", default=topology, metavar="BxSxH",
                   help=f"kwok nodes of 8 GPUs as blocks x subblocks x hosts (default %(default)s: "
                        f"{blocks * subblocks * hosts:,} nodes){note}")
    p.add_argument("--component-qps", type=float, default=None, metavar="QPS",
                   help="start kube-controller-manager and kube-scheduler with --kube-api-qps=QPS "
                        "(default: their own defaults, 20 and 50)")
    p.add_argument("--component-burst", type=int, default=None, metavar="B",
                   help="with --component-qps: their --kube-api-burst (default 2 x QPS)")
    p.add_argument("--run-dir", metavar="DIR", default=None,
                   help="keep the control plane's run directory (logs of every component) here")


def check_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.topology`` made (blocks, subblocks, hosts) (:func:`parse_topology`); exit 2
    (``p.error``) on a topology that is not three integers, or on ``--component-burst``
    without ``--component-qps``."""
    args.topology = parse_topology(p, args.topology)
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


@contextmanager
def started(args: argparse.Namespace, config: str, prefix: str) -> Iterator[tuple[Cluster, Stack]]:
    """The local control plane with ``args.topology`` kwok nodes (:func:`nodes_file`), its
    components at :func:`client_rate`'s rates, its run directory ``args.run_dir`` (a
    temporary one when None), and Troupe on it with the configuration ``config`` (YAML
    text); progress lines on stderr. ``prefix``: of the temporary directory the nodes and
    configuration files are written in. Raises what :class:`Cluster` and :class:`Stack`
    raise when a part does not start."""
    blocks, subblocks, hosts = args.topology
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        directory = Path(tmp)
        path = directory / "config.yaml"
        path.write_text(config)
        print(f"starting the control plane with {blocks * subblocks * hosts} kwok nodes...", file=sys.stderr)
        began = time.monotonic()
        with Cluster(args.run_dir, start_timeout=600.0, client_rate=client_rate(args)) as cluster:
            # 2,048 nodes take more than start's 60 s to be Ready on a busy machine
            cluster.apply_nodes(nodes_file(directory, args.topology), timeout=600.0)
            with Stack(cluster, path) as stack:
                print(f"  ready in {time.monotonic() - began:.0f}s", file=sys.stderr)
                yield cluster, stack
