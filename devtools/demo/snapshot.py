"""``python -m devtools.demo.snapshot [-o FILE]``: make ``examples/snapshot.json``, the
instant look at Troupe that needs no cluster.

It starts the demo's local cluster (``examples/demo-nodes.yaml``) with Troupe (the default
configuration: ``gangPreemptionMode: "off"``), sets up the scene below, waits until
Troupe has decided every gang, and writes what ``kubectl get
nodes,pods,jobs,shareddevicegroups,poddisruptionbudgets,persistentvolumeclaims,
persistentvolumes,csinodes,namespaces -A -o json`` prints (:data:`KINDS`). Then it prints the ``--now`` to
decide at (the snapshot's newest timestamp plus 5 s, :func:`decision_time`) and the
commands that read it.

The scene (priority classes ``standard`` 100, the cluster's default; ``batch-low`` 10;
``urgent`` 1000)::

    ml/train       8 x 8 GPUs, required subblock     Released (one subblock)
    research/      notebooks of 4 GPUs on 3 nodes    (not Troupe's)
    research/sweep 12 x 8 GPUs, priority 10          Released (a block: 8 + 4 nodes)
    team-b/job:finetune  2 x 8 GPUs, no annotation   Released (namespace opted in: gang-mode auto)
    ml/urgent      8 x 8 GPUs, required subblock,    Unschedulable: fits 5 of 8; with
                   priority 1000                     --gang-preemption-mode it would evict sweep
    ml/wide        9 x 8 GPUs, required subblock     Unschedulable: no subblock has 9 nodes
    ml/eval        3 of 4 members present            Waiting
    ml/misc        sizes 2 and 3 disagree            Held
    infer/         SharedDeviceGroup llm-a (2 GPUs): 2 pods on shared-0, the same IDs;
                   llm-big (12 GPUs): Pending, no shared node has 12
    monitoring/    DaemonSet node-agent: a pod on every node (100m CPU, 128 Mi), as a
                   real cluster's nodes carry; the map draws an idle node with it as free
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from devtools.demo.scenarios import SDG_API
from devtools.demo.stage import (
    GPU,
    DemoFailure,
    Narrator,
    Stage,
    gang_condition,
    indexed_job,
    pod,
    settled_layout,
)
from troupe import contract

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = REPO / "examples" / "snapshot.json"
#: What the reconciler's cache reads, so the offline tools decide as it does (the claims,
#: volumes, CSINodes and namespaces the filters read: docs/decisions/031-kube-scheduler-filters.md).
KINDS = "nodes,pods,jobs,shareddevicegroups,poddisruptionbudgets,persistentvolumeclaims,persistentvolumes,csinodes,namespaces"
#: How long after the snapshot's newest timestamp it is decided (seconds).
SLACK_SECONDS = 5


def _timestamps(obj: Any) -> Iterator[str]:
    """Every creation timestamp and Troupe time annotation in a kubectl List."""
    for item in obj.get("items", []):
        meta = item.get("metadata") or {}
        if meta.get("creationTimestamp"):
            yield meta["creationTimestamp"]
        for key in (contract.PLANNED_AT, contract.RELEASED_AT):
            if (meta.get("annotations") or {}).get(key):
                yield meta["annotations"][key]


def decision_time(snapshot: Mapping[str, Any]) -> str:
    """The moment to decide a snapshot at (RFC 3339, UTC, seconds): its newest creation
    timestamp or release time plus :data:`SLACK_SECONDS`, so that clocks (timeouts, how
    long a gang waited, head-of-line holds) read as they did when it was taken."""
    newest = max(dt.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in _timestamps(snapshot))
    return (newest + dt.timedelta(seconds=SLACK_SECONDS)).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scene(stage: Stage) -> None:
    """Create the scene of the module docstring and wait until Troupe has decided it."""
    lay, g = stage.layout, stage.layout.gpus
    sub = lay.subblock_label
    required = {contract.TOPOLOGY_REQUIRED_LEVEL: sub}
    for name, value, default in (("standard", 100, True), ("batch-low", 10, False), ("urgent", 1000, False)):
        stage.scheduling.create_priority_class({"metadata": {"name": name}, "value": value, "globalDefault": default})
    for ns in ("ml", "research", "infer", "monitoring"):
        stage.namespace(ns)
    agent = pod("agent", cpu="100m", labels={"app": "node-agent"})
    agent["spec"].update(restartPolicy="Always", tolerations=[{"operator": "Exists"}])
    agent["spec"]["containers"][0]["resources"]["requests"]["memory"] = "128Mi"
    client.AppsV1Api(stage.api).create_namespaced_daemon_set("monitoring", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent"},
        "spec": {"selector": {"matchLabels": {"app": "node-agent"}},
                 "template": {"metadata": {"labels": agent["metadata"]["labels"]}, "spec": agent["spec"]}}})
    stage.wait("monitoring/node-agent Running on every node", lambda: len(
        [p for p in stage.pods("monitoring") if p.status.phase == "Running"]) == lay.node_count or None, timeout=120)
    stage.namespace("team-b", labels={contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO})

    def job(ns: str, name: str, size: int, gpus: int, annotations: Mapping[str, str], **spec: Any) -> None:
        template = pod("worker", gpus=gpus, labels={"gang": name}, annotations=annotations, **spec)
        stage.batch.create_namespaced_job(ns, indexed_job(name, size, template))

    def running(ns: str, name: str, size: int) -> None:
        stage.wait(f"{ns}/{name} Running", lambda: [p for p in stage.pods(ns, f"gang={name}")
                                                    if p.status.phase == "Running"][size - 1:], timeout=120)

    job("ml", "train", 8, g, stage.gang("train", 8, extra=required))
    running("ml", "train", 8)
    s1 = lay.subblocks[1]
    for node in s1.nodes[:3]:
        stage.core.create_namespaced_pod("research", pod(f"notebook-{node[-5:]}", gpus=g // 2, labels={"app": "notebook"},
                                                        node_selector={contract.HOSTNAME_LABEL: node}))
    job("research", "sweep", 12, g, stage.gang("sweep", 12), priority_class="batch-low")
    running("research", "sweep", 12)
    job("team-b", "finetune", 2, g, {})
    running("team-b", "finetune", 2)
    job("ml", "urgent", 8, g, stage.gang("urgent", 8, extra=required), priority_class="urgent")
    job("ml", "wide", 9, g, stage.gang("wide", 9, extra=required))
    for i in range(3):
        stage.core.create_namespaced_pod("ml", pod(f"eval-{i}", gpus=2, annotations=stage.gang("eval", 4)))
    for i, size in enumerate((2, 3)):
        stage.core.create_namespaced_pod("ml", pod(f"misc-{i}", gpus=1, annotations=stage.gang("misc", size)))
    for name, gpus in (("llm-a", 2), ("llm-big", 12)):
        stage.custom.create_cluster_custom_object(*SDG_API, {
            "apiVersion": f"{SDG_API[0]}/{SDG_API[1]}", "kind": "SharedDeviceGroup", "metadata": {"name": name},
            "spec": {"resources": {GPU: gpus}}})
    for p, group in (("llm-a-0", "llm-a"), ("llm-a-1", "llm-a"), ("llm-big-0", "llm-big")):
        stage.core.create_namespaced_pod("infer", pod(p, cpu="1", annotations={contract.DEVICE_GROUP: group}))
    stage.wait("infer/llm-a-0 and -1 Running", lambda: [p for p in stage.pods("infer", "")
                                                      if p.status.phase == "Running"][1:])
    want = {("ml", "urgent-0"): "Unschedulable", ("ml", "wide-0"): "Unschedulable", ("ml", "eval-0"): "WaitingForMembers",
            ("ml", "misc-0"): "Held"}

    def decided() -> bool:
        for (ns, prefix), reason in want.items():
            pods = [p for p in stage.pods(ns) if p.metadata.name.startswith(prefix)]
            if not pods or (gang_condition(pods[0]) or ("", "", ""))[1] != reason:
                return False
        group = stage.custom.get_cluster_custom_object(*SDG_API, "llm-big").get("status", {})
        return group.get("phase") == "Pending" and any(c.get("reason") == "InsufficientDevices"
                                                        for c in group.get("conditions", []))

    stage.wait("every waiting gang's reason on its pods, and llm-big Pending", decided)


def main(argv: list[str] | None = None) -> int:
    """Make the snapshot; returns the exit code (1 when the scene did not come about)."""
    from devtools.devcluster import Cluster
    from devtools.devcluster.stack import Stack

    p = argparse.ArgumentParser(prog="python -m devtools.demo.snapshot",
                                description=(__doc__ or "").split("\n\n")[1].replace("\n", " "))
    p.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT), help="where to write it (default %(default)s)")
    args = p.parse_args(argv)
    began = time.monotonic()
    try:
        with Cluster(nodes=REPO / "examples" / "demo-nodes.yaml") as cluster, Stack(cluster) as stack:
            stage = Stage(cluster.kubeconfig("admin"), str(cluster.binaries.kubectl), stack.config,
                          settled_layout(cluster.api_client("admin"), stack.config.topology_levels),
                          str(cluster.logs_dir), local=True, narrator=Narrator(sys.stderr))
            scene(stage)
            raw = stage.kubectl("get", KINDS, "-A", "-o", "json").stdout
    except DemoFailure as err:
        print(f"[snapshot] the scene did not come about: {err}", file=sys.stderr)
        return 1
    snapshot = json.loads(raw)
    text = json.dumps(snapshot, indent=1) + "\n"  # kubectl's JSON, indented by one space instead of four
    Path(args.output).write_text(text)
    now = decision_time(snapshot)
    print(f"wrote {args.output}: {len(snapshot['items'])} objects, {len(text) // 1024} KiB, in "
          f"{time.monotonic() - began:.0f}s; decide it as of --now {now}:")
    print(f"  python -m reconciler simulate {args.output} --now {now}")
    print(f"  kubectl troupe status -A --snapshot {args.output} --now {now}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
