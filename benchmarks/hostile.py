"""Hostile-tenant benchmark: the worst decision time and memory each kind of object a tenant
may make in its own namespace costs another tenant's gang, against an ordinary tenant's
gang in the same process (docs/decisions/049-hostile-tenants-third-round.md).

    .venv/bin/python benchmarks/hostile.py [--nodes N] [--pods P]

A cluster of N nodes with 4 GPUs each (4 blocks, subblocks of 32 hosts), P running pods of
other tenants, 16 DRA nodes publishing 64 devices each with a uuid of their own, and the
victim: a waiting gang of 4 members of 4 GPUs. Each row feeds a fresh reconciler cache
everything by the informers' path, plus one kind of hostile object (the first row: an
ordinary tenant's gang instead), then decides every gang in queue order as the worker does
(:func:`testbed.hostile_tenants.decide_beside`). Printed per kind: the CPU seconds of
it all, the victim's own decision in milliseconds, the peak memory allocated (tracemalloc),
their ratios to the ordinary row, and whether the victim's decision is the ordinary row's.

Then the churn rows (docs/decisions/063-memos-held-by-their-users.md): a tenant with room
for one pod creates and deletes ``--churn`` pods (default 5,000) one after another, each of
a distinct spec just under the spec memo's 8 KiB (about 420 short tolerations), fed to a
fresh cache by the informers' path; printed, the memory the process keeps once they are
gone, as resident memory after a garbage collection and as tracemalloc counts it (each in
a run of its own), against the stated bound
(:func:`testbed.hostile_tenants.churn_bound`). The second row is the baseline, in the
same process: every parse also held by a memo of the last 4,096 specs, as before.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model import pods as pods_module
from reconciler.engine.model import specs
from testbed.dra_builders import DRIVER, claim_template, with_claim
from testbed.hostile_tenants import (
    ATTACKER,
    INT32,
    NESTED,
    Outcome,
    churn,
    churn_bound,
    churn_pod,
    decide_beside,
    kept_after_churn,
    uuid_slice,
)
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
VICTIM = "victim"
Objects = tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]


def template(gpus: int, auto: bool = True) -> dict[str, Any]:
    return {"metadata": {"annotations": {"troupe.io/gang-size": "auto"} if auto else {}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def workload(kind: str, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": kind, "spec": spec,
            "metadata": {"name": name, "namespace": ATTACKER, "uid": f"uid-{name}", "resourceVersion": "1",
                         "generation": 1, "creationTimestamp": "2027-01-15T08:00:00Z",
                         "annotations": annotations or {}}}


def forged(nodes: list[str], planned_at: str) -> dict[str, str]:
    """A reservation annotation no reconciler signed, naming ``nodes``."""
    import json

    return {contract.RESERVATION: json.dumps({"gang": "job:w", "nodes": nodes, "plannedAt": planned_at,
                                              "sig": "0" * 64})}


def terms(kind: str, count: int, selector_namespace: str) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "namespaces": [selector_namespace],
         "labelSelector": {"matchLabels": {"hostile": f"value-{i}"}}} for i in range(count)]}}


def kinds(node_names: list[str], dra_node: str) -> dict[str, Objects]:
    """Each kind of hostile object: ``(workloads, claim templates, pods)``."""
    job = {"parallelism": 1, "completions": 1, "completionMode": "Indexed", "template": template(4, auto=False)}
    ordinary = [make_pod(f"ok-{i}", ATTACKER).gang("ok", 4).index(i).gpus(4).gated().build() for i in range(4)]
    costly = claim_template("costly", 1, ATTACKER, selectors=(NESTED,))
    uuids = claim_template("uuids", 1, ATTACKER, selectors=(f'device.attributes["{DRIVER}"].uuid != "none"',))
    requests = uuids["spec"]["spec"]["devices"]["requests"]
    uuids["spec"]["spec"]["devices"]["requests"] = [{**requests[0], "name": f"r{k}"} for k in range(32)]
    heavy = make_pod("terms", ATTACKER).running_on(dra_node).build()
    heavy["spec"]["affinity"] = terms("podAntiAffinity", 16_000, VICTIM)
    wide = []
    for i in range(4):
        pod = make_pod(f"wide-{i}", ATTACKER).gang("wide", 4).index(i).gpus(4).gated().build()
        pod["spec"]["affinity"] = terms("podAffinity", 1_000, ATTACKER)
        wide.append(pod)
    claimers = [with_claim(make_pod(f"{t}-0", ATTACKER).gang(t, 1).gated().build(), template=t)
                for t in ("costly", "uuids")]
    return {
        "ordinary tenant's gang (baseline)": ([("Job", workload("Job", "plain", job))], [], ordinary),
        f"forged record on a plain Job ({len(node_names)} nodes)":
            ([("Job", workload("Job", "w", job, forged(node_names, "2027-01-15T08:00:00.000+00:00")))], [], []),
        "forged record on its own gang, planned in 9999":
            ([("Job", workload("Job", "w", {**job, "template": template(4)},
                               forged(node_names, "9999-01-01T00:00:00.000+00:00")))], [], []),
        "PyTorchJob of 2^31-1 workers": ([("PyTorchJob", workload("PyTorchJob", "huge", {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template(8)},
            "Worker": {"replicas": INT32, "template": template(8)}}}))], [], []),
        "JobSet of 2^31-1 Jobs of 0 pods": ([("JobSet", workload("JobSet", "many", {"replicatedJobs": [
            {"name": "w", "replicas": INT32, "template": {"spec": {"parallelism": 0, "completions": 0,
                                                                    "template": template(8)}}}]}))], [], []),
        "CEL selector of 101 x 101 comprehensions": ([], [costly], [claimers[0]]),
        "32 requests reading every device's uuid": ([], [uuids], [claimers[1]]),
        "running pod with 16,000 anti-affinity terms": ([], [], [heavy]),
        "gang of 4 with 1,000 affinity terms each": ([], [], wide),
    }


def seen(outcome: Outcome) -> tuple[object, ...]:
    d = outcome.decision
    return d.phase, d.reason, tuple(sorted((m.pod, m.node) for m in d.release))


def rss() -> int:
    """This process's resident memory, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def former_spec_memo() -> Iterator[None]:
    """Meanwhile, every spec's parse is also held by a memo of the last 4,096 specs (of at
    most 8 KiB), as the spec memo held them before it kept a parse only for its pods."""
    held: OrderedDict[bytes, specs.SpecValues] = OrderedDict()
    fixed: Callable[[Mapping[str, object]], specs.SpecValues] = specs.spec_values

    def remembered(spec: Mapping[str, object]) -> specs.SpecValues:
        values = fixed(spec)
        key = msgspec.json.encode({k: v for k, v in spec.items() if k != "nodeName"})
        if len(key) <= specs.SPEC_MEMO_MAX_BYTES:
            held[key] = values
            held.move_to_end(key)
            if len(held) > 4096:
                held.popitem(last=False)
        return values

    vars(pods_module)["spec_values"] = remembered  # what PodInfo.from_object calls
    try:
        yield
    finally:
        vars(pods_module)["spec_values"] = fixed
        held.clear()


def churn_rows(count: int) -> None:
    """The churn rows (module docstring)."""
    config, bound = Config(), churn_bound(count)
    print(f"\n# churn: {count} pods of distinct specs of about 8 KiB created and deleted one after another "
          f"(a tenant with room for one pod); bound {bound / 2**20:.1f} MiB", flush=True)
    print(f"{'memory kept once the pods are gone':50} {'RSS after gc (MiB)':>18} {'tracemalloc (MiB)':>17}  within the bound")
    runs: tuple[tuple[str, Callable[[], AbstractContextManager[None]]], ...] = (
        ("spec memo held by its pods", nullcontext), ("baseline: a memo of the last 4,096 specs", former_spec_memo))
    for label, memo in runs:
        with memo():
            pods = [churn_pod(n) for n in range(count)]
            gc.collect()
            before = rss()
            churn(ClusterCache(config), pods)
            gc.collect()
            resident = rss() - before
            pods = [churn_pod(n) for n in range(count, 2 * count)]  # specs the first run did not see
            traced = kept_after_churn(ClusterCache(config), pods)
        within = "yes" if max(resident, traced) < bound else "NO"
        print(f"{label:50} {resident / 2**20:18.1f} {traced / 2**20:17.1f}  {within}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1024, help="GPU nodes (default %(default)s)")
    p.add_argument("--pods", type=int, default=2000, help="running pods of other tenants (default %(default)s)")
    p.add_argument("--churn", type=int, default=5000, help="pods created and deleted in the churn rows "
                                                           "(default %(default)s; 0: no churn rows)")
    p.add_argument("--only-churn", action="store_true", help="print the churn rows alone")
    args = p.parse_args()
    if args.only_churn:
        churn_rows(args.churn)
        return 0
    config = Config(gang_schedule_timeout_jitter_seconds=0)
    names = [f"n{i:05d}" for i in range(args.nodes)]
    nodes = [make_node(n).topology(f"b{i // 256}", f"s{i // 32}", f"h{i}").gpus(4).build() for i, n in enumerate(names)]
    dra_names = [f"dra-{i:02d}" for i in range(16)]
    nodes += [make_node(n).topology("bd", "sd", n).build() for n in dra_names]
    slices = [uuid_slice(n, 64) for n in dra_names]
    background = [make_pod(f"bg-{i}", f"tenant-{i % 50}").running_on(names[i % len(names)]).build()
                  for i in range(args.pods)]
    victim = [make_pod(f"train-{i}", VICTIM).gang("train", 4).index(i).gpus(4).gated().build() for i in range(4)]
    print(f"# {args.nodes} nodes x 4 GPUs, {args.pods} running pods, 16 DRA nodes x 64 devices; "
          "the victim: a waiting gang of 4 x 4 GPUs", flush=True)
    print(f"{'hostile object':50} {'all (s)':>8} {'victim (ms)':>11} {'peak (MiB)':>10} "
          f"{'x all':>6} {'x victim':>8} {'x peak':>6}  same decision")
    base: Outcome | None = None
    worst = (0.0, 0.0, 0.0)
    for label, (workloads, templates, pods) in kinds(names, dra_names[0]).items():
        out = decide_beside(config, nodes, slices, workloads, templates, [*background, *victim, *pods],
                            f"{VICTIM}/train", NOW)
        base = base or out
        ratios = (out.seconds / base.seconds, out.decide_seconds / max(base.decide_seconds, 1e-6),
                  out.peak / base.peak)
        worst = tuple(max(a, b) for a, b in zip(worst, ratios, strict=True))  # type: ignore[assignment]
        print(f"{label:50} {out.seconds:8.2f} {out.decide_seconds * 1000:11.1f} {out.peak / 2**20:10.1f} "
              f"{ratios[0]:6.2f} {ratios[1]:8.2f} {ratios[2]:6.2f}  {'yes' if seen(out) == seen(base) else 'NO'}",
              flush=True)
    print(f"# worst ratio to the ordinary gang: all {worst[0]:.2f}x, the victim's decision {worst[1]:.2f}x, "
          f"peak memory {worst[2]:.2f}x")
    if args.churn:
        churn_rows(args.churn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
