"""The demo's scenarios: each shows one capability of Troupe on a live cluster, narrates it
step by step, shows the commands a user would run, and checks what it shows.

A scenario is a function ``(Stage) -> str``: it returns its one-line result for the
summary and raises :class:`~devtools.demo.stage.DemoFailure` when the cluster does not do
what the narration says. It creates its objects in namespaces made with
:meth:`Stage.namespace` (the runner deletes them afterwards) and removes the
cluster-scoped ones it makes (PriorityClasses, a SharedDeviceGroup) itself.
:data:`SCENARIOS` lists them in the story's order; :func:`needs_of` says why one cannot run
on a given cluster (``--kubeconfig``).

Sizes follow the cluster's :class:`~devtools.demo.stage.Layout` (``H`` hosts per subblock,
``G`` GPUs per node); the numbers in the comments are the demo's own cluster
(``examples/demo-nodes.yaml``: H = 8, G = 8), where every member asks a whole node.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from devtools.demo.dra import dra_layout, gang_claiming_dra_devices
from devtools.demo.recovery import node_lost_under_a_running_gang
from devtools.demo.slices import gang_in_slices
from devtools.demo.stage import (
    GPU,
    PAUSE_IMAGE,
    DemoFailure,
    Stage,
    gang_condition,
    indexed_job,
    pod,
    running,
)
from troupe import contract

#: ``kubectl get pods`` columns: each pod's gates and its troupe.io/Gang condition.
GANG_COLUMNS = ("custom-columns=POD:.metadata.name,GATES:.spec.schedulingGates[*].name,NODE:.spec.nodeName,"
                'GANG:.status.conditions[?(@.type=="troupe.io/Gang")].reason,'
                'MESSAGE:.status.conditions[?(@.type=="troupe.io/Gang")].message')
#: ``kubectl get pods`` columns: what Troupe's release wrote (pin, time) and whether bound.
RELEASE_COLUMNS = ("custom-columns=POD:.metadata.name,GATES:.spec.schedulingGates[*].name,"
                   "PINNED:.spec.nodeSelector.kubernetes\\.io/hostname,"
                   "RELEASED:.metadata.annotations.reconciler\\.troupe\\.io/released-at,NODE:.spec.nodeName")
#: ``kubectl get pods`` columns: rank and node once released.
PLACED_COLUMNS = ("custom-columns=POD:.metadata.name,RANK:.metadata.annotations.reconciler\\.troupe\\.io/rank,"
                  "NODE:.spec.nodeName,PHASE:.status.phase")
SDG_API = contract.DEVICE_GROUP_API
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
QUOTA_GATE = "example.com/quota"


def _planned_at(p: Any) -> str:
    return str((p.metadata.annotations or {}).get(contract.PLANNED_AT, ""))


def _ranked(pods: Sequence[Any]) -> list[Any]:
    return sorted(pods, key=lambda p: int((p.metadata.annotations or {}).get(contract.ASSIGNED_RANK, "-1")))


def _one_release(stage: Stage, pods: Sequence[Any], what: str, when_complete: bool = True) -> None:
    """Every pod of ``pods`` was released from one plan: one decision made after the last
    existed (``when_complete``), or the one reservation of a gang released as created."""
    planned = {_planned_at(p) for p in pods}
    stage.expect(len(planned) == 1 and "" not in planned, f"{what}: one plan (every member's planned-at equal)")
    if when_complete:
        newest = max(p.metadata.creation_timestamp for p in pods).replace(microsecond=0)
        stage.expect(dt.datetime.fromisoformat(planned.pop()) >= newest,
                     f"{what}: planned only once its last member existed")


def _subblocks(stage: Stage, pods: Sequence[Any]) -> set[str]:
    labels = stage.node_labels()
    return {labels[p.spec.node_name].get(stage.layout.subblock_label, "-") for p in pods}


# --------------------------------------------------------------------------- 1
def gang_waits_for_its_last_member(stage: Stage) -> str:
    """Three of four workers exist: every member waits behind Troupe's gate, and the pod
    says why (condition ``troupe.io/Gang``: ``3 of 4 members present``); ``kubectl troupe
    status`` says the same. The fourth arrives: all four are released at once, neighbouring
    ranks on neighbouring hosts of one subblock."""
    ns = stage.namespace("demo-gang")
    g = stage.layout.gpus
    keys = stage.gang("train", 4)
    stage.say(f"A training job of 4 workers, {g} GPUs each: pods train-0..3 annotated "
              f"{', '.join(f'{k}: {v!r}' for k, v in keys.items())}.")
    stage.say("Three are created; the fourth is late.")
    for i in range(3):
        stage.core.create_namespaced_pod(ns, pod(f"train-{i}", gpus=g, annotations=keys))

    def waiting() -> tuple[str, str, str] | None:
        c = gang_condition(stage.core.read_namespaced_pod("train-0", ns))
        return c if c and c[1] == "WaitingForMembers" else None

    _, _, message = stage.wait("the reason on train-0 (condition troupe.io/Gang, WaitingForMembers)", waiting)
    stage.say("Nothing is scheduled: each pod is held behind Troupe's gate and carries the reason:")
    stage.show("get", "pods", "-n", ns, "-o", GANG_COLUMNS)
    stage.expect(message == "3 of 4 members present", f"the pod's message '3 of 4 members present' (got {message!r})")
    stage.say("The user asks Troupe about the namespace's gangs:")
    out = stage.troupe("status", "-n", ns).stdout
    stage.expect("Waiting" in out and "3 of 4 members present" in out, "kubectl troupe status: Waiting, 3 of 4 present")

    stage.say("The fourth worker arrives.")
    stage.core.create_namespaced_pod(ns, pod("train-3", gpus=g, annotations=keys))
    pods = stage.wait("4 workers Running", lambda: running(stage.pods(ns), 4))
    stage.show("get", "pods", "-n", ns, "-o", PLACED_COLUMNS)
    _one_release(stage, pods, "gang train")
    ranked = _ranked(pods)
    stage.expect([p.metadata.name for p in ranked] == [f"train-{i}" for i in range(4)],
                 "rank i is train-i (the name's numeric suffix)")
    where = _subblocks(stage, pods)
    stage.expect(len(where) == 1, f"all four in one subblock (got {sorted(where)})")
    nodes = [p.spec.node_name for p in ranked]
    stage.expect(nodes == sorted(nodes), "ranks in topology order: neighbouring ranks on neighbouring hosts")
    sub = where.pop()
    stage.say(f"Released together: ranks 0-3 on {nodes[0]} .. {nodes[-1]}, one subblock ({sub}).")
    stage.say("Troupe keeps a Gang object per gang, so kubectl and GitOps tools can wait on it:")
    stage.show("wait", "--for=condition=Bound", "gang/train", "-n", ns, "--timeout=30s")
    listed = stage.show("get", "gangs", "-n", ns).stdout
    stage.expect("Released" in listed and "4/4" in listed, "kubectl get gangs: train Released, 4/4 members")
    return f"waited with '{message}' on its pods and in kubectl troupe status; ran whole in {sub}; gang/train Bound"


# --------------------------------------------------------------------------- 2
def gangs_packed_into_subblocks(stage: Stage) -> str:
    """Other teams' notebooks occupy some nodes (3, 1, 0 and 2 of the four subblocks' 8);
    two gangs that require one subblock each (7 and 5 whole nodes) go where they fit
    exactly (7 free, 5 free), so the idle subblock stays whole for the next large gang.
    ``kubectl troupe topology`` draws the map."""
    ns = stage.namespace("demo-topology")
    lay = stage.layout
    h, g = lay.hosts, lay.gpus
    s = lay.subblocks
    busy = {s[0]: 3, s[1]: 1, s[3]: 2}
    notebook_gpus = max(1, g // 2)
    for sub, count in busy.items():
        for node in sub.nodes[:count]:
            stage.core.create_namespaced_pod(ns, pod(
                f"notebook-{node}", gpus=notebook_gpus, labels={"app": "notebook"},
                node_selector={contract.HOSTNAME_LABEL: node}))
    stage.wait("the notebooks Running", lambda: running(stage.pods(ns, "app=notebook"), sum(busy.values())))
    free = {sub.name: h - busy.get(sub, 0) for sub in s}
    stage.say(f"Other teams' notebooks ({notebook_gpus} GPUs each, no Troupe) occupy {sum(busy.values())} nodes; "
              "whole nodes free per subblock: " + ", ".join(f"{n} {f}" for n, f in free.items()) + ".")
    alpha, beta = h - 1, h - 3
    level = lay.subblock_label
    stage.say(f"Two gangs, each required to stay inside one subblock ({contract.TOPOLOGY_REQUIRED_LEVEL}: {level}):"
              f" alpha, {alpha} x {g} GPUs, and beta, {beta} x {g} GPUs (Indexed Jobs).")
    for name, size in (("alpha", alpha), ("beta", beta)):
        template = pod("w", gpus=g, labels={"gang": name},
                       annotations=stage.gang(name, size, extra={contract.TOPOLOGY_REQUIRED_LEVEL: level}))
        stage.batch.create_namespaced_job(ns, indexed_job(name, size, template))
    a = stage.wait(f"alpha's {alpha} pods Running", lambda: running(stage.pods(ns, "gang=alpha"), alpha), timeout=90)
    b = stage.wait(f"beta's {beta} pods Running", lambda: running(stage.pods(ns, "gang=beta"), beta), timeout=90)
    stage.say("The topology map: who holds which node, free GPUs per domain.")
    stage.troupe("topology")
    stage.expect(_subblocks(stage, a) == {s[1].name}, f"alpha in {s[1].name}, the subblock with exactly {alpha} free")
    stage.expect(_subblocks(stage, b) == {s[0].name}, f"beta in {s[0].name}, the subblock with exactly {beta} free")
    stage.expect(not any(p.spec.node_name in s[2].nodes for p in [*a, *b]), f"{s[2].name} left whole")
    stage.say(f"Each gang took the subblock it fills best (least left over): {s[2].name} stays whole "
              f"for the next {h}-node gang, and {s[3].name} keeps {free[s[3].name]} nodes together.")
    return (f"alpha ({alpha}) in {s[1].name}, beta ({beta}) in {s[0].name}: exact fits around busy nodes; "
            f"{s[2].name} left whole")


# --------------------------------------------------------------------------- 3
def deadlock_resolved_all_or_nothing(stage: Stage) -> str:
    """Two jobs of 4 whole-node workers on a pool of 6 free nodes (one subblock, 2 busy):
    each fits alone. Pod by pod, their workers interleave and each job gets 3 nodes: both
    wait forever, 6 nodes held. With Troupe, one job runs whole; the other waits, holding
    nothing, says why (``kubectl troupe why``), and runs when the first finishes."""
    lay = stage.layout
    pool = lay.subblocks[3]
    g = lay.gpus
    half = (lay.hosts - 2) // 2 if lay.hosts >= 6 else lay.hosts // 2
    free, size = 2 * half, half + 1  # 6 free nodes, gangs of 4
    busy = pool.nodes[:lay.hosts - free]
    selector = {lay.subblock_label: pool.name}
    plain = stage.namespace("demo-deadlock-plain")
    for node in busy:
        stage.core.create_namespaced_pod(plain, pod(f"notebook-{node}", gpus=max(1, g // 2), labels={"app": "notebook"},
                                                    node_selector={contract.HOSTNAME_LABEL: node}))
    stage.wait("the notebooks Running", lambda: running(stage.pods(plain, "app=notebook"), len(busy)))
    stage.say(f"Pool {pool.name}: {free} free nodes ({len(busy)} busy). Jobs a and b each need {size} whole nodes "
              f"({size} x {g} GPUs, nodeSelector {lay.subblock_label}={pool.name}): each fits alone, not both.")
    stage.say("First without Troupe, pod by pod: their workers arrive interleaved (a-0, b-0, a-1, b-1, ...).")
    order = [f"{job}-{i}" for i in range(size) for job in ("a", "b")]

    def decided(name: str) -> bool:
        p = stage.core.read_namespaced_pod(name, plain)
        return bool(p.spec.node_name) or any(c.type == "PodScheduled" and c.status == "False"
                                             for c in p.status.conditions or [])

    for name in order:
        stage.core.create_namespaced_pod(plain, pod(name, gpus=g, labels={"job": name[0]}, node_selector=selector))
        stage.wait(f"kube-scheduler's decision on {name}", lambda n=name: decided(n), record=False)
    stage.show("get", "pods", "-n", plain, "-l", "job", "-o",
               "custom-columns=POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName")
    pods = stage.pods(plain, "job")
    per_job = {j: sum(1 for p in pods if p.metadata.name[0] == j and p.spec.node_name) for j in "ab"}
    pending = [p.metadata.name for p in pods if not p.spec.node_name]
    stage.expect(per_job == {"a": half, "b": half} and len(pending) == 2,
                 f"pod by pod: {half} + {half} workers bound, 2 pending (got {per_job}, pending {pending})")
    why = stage.kubectl("get", "pod", pending[0], "-n", plain, "-o",
                        'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}').stdout
    stage.say(f"kube-scheduler on {pending[0]}: {why.strip()}")
    stage.say(f"Deadlock: a and b hold {half} nodes each ({2 * half * g} GPUs) and each waits for a node "
              "the other holds; nothing in the cluster will ever break it.")
    stage.delete_namespace(plain)

    stage.say("Now the same two jobs as Troupe gangs, interleaved the same way.")
    ns = stage.namespace("demo-deadlock")
    for node in busy:
        stage.core.create_namespaced_pod(ns, pod(f"notebook-{node}", gpus=max(1, g // 2), labels={"app": "notebook"},
                                                 node_selector={contract.HOSTNAME_LABEL: node}))
    stage.wait("the notebooks Running", lambda: running(stage.pods(ns, "app=notebook"), len(busy)), record=False)
    for name in order:
        stage.core.create_namespaced_pod(ns, pod(name, gpus=g, labels={"job": name[0]}, node_selector=selector,
                                                 annotations=stage.gang(name[0], size)))
    a = stage.wait(f"gang a's {size} pods Running", lambda: running(stage.pods(ns, "job=a"), size))

    def b_waits() -> tuple[str, str, str] | None:
        members = stage.pods(ns, "job=b")
        c = gang_condition(members[0]) if members else None
        return c if c and c[1] == "Unschedulable" and all(p.spec.scheduling_gates for p in members) else None

    _, _, reason = stage.wait("gang b gated with reason Unschedulable", b_waits)
    stage.show("get", "pods", "-n", ns, "-l", "job", "-o", GANG_COLUMNS)
    stage.say("Gang a runs whole; b holds no node at all. The user asks why b waits:")
    out = stage.troupe("why", "b-0", "-n", ns).stdout
    stage.expect(f"fits {free - size} of {size} members" in out,
                 f"kubectl troupe why: b fits {free - size} of {size} members")
    stage.expect(all(not p.spec.node_name for p in stage.pods(ns, "job=b")), "gang b holds no node while it waits")
    stage.say("Job a finishes (its pods succeed): b is released whole onto the nodes a freed.")
    for p in a:
        stage.core.patch_namespaced_pod_status(p.metadata.name, ns, {"status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "main", "image": PAUSE_IMAGE, "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})
    b = stage.wait(f"gang b's {size} pods Running", lambda: running(stage.pods(ns, "job=b"), size))
    stage.show("get", "pods", "-n", ns, "-l", "job", "-o", PLACED_COLUMNS)
    _one_release(stage, b, "gang b")
    return (f"pod by pod {half}+{half} of {size} bound, deadlocked; Troupe: a ran whole, b waited "
            f"('{reason.split(';')[0]}'), holding nothing, then ran")


# --------------------------------------------------------------------------- 4
def shared_device_group(stage: Stage) -> str:
    """A SharedDeviceGroup of 2 GPUs and two pods that join it: Troupe binds the group to a
    shared node, picks the device IDs, and gives both pods the same IDs in
    ``NVIDIA_VISIBLE_DEVICES`` (a Downward API env var the webhook added, read from the
    annotation the reconciler wrote)."""
    ns = stage.namespace("demo-devices")
    name = "demo-infer"
    group = {"apiVersion": f"{SDG_API[0]}/{SDG_API[1]}", "kind": "SharedDeviceGroup",
             "metadata": {"name": name, "labels": {"troupe.dev/demo": "true"}},
             "spec": {"resources": {GPU: 2}, "schedulingStrategy": "binpack"}}
    _delete_group(stage, name)
    stage.custom.create_cluster_custom_object(*SDG_API, group)
    try:
        stage.say(f"SharedDeviceGroup {name}: {{resources: {{{GPU}: 2}}}}; nodes opted in: "
                  f"{', '.join(stage.layout.shared)} (label {contract.DEVICE_MODE_LABEL}={contract.DEVICE_MODE_SHARED}).")
        stage.say(f"Pods infer-a and infer-b join it ({contract.DEVICE_GROUP}: {name}); they request no GPU themselves.")
        for p in ("infer-a", "infer-b"):
            stage.core.create_namespaced_pod(ns, pod(p, cpu="500m", annotations={contract.DEVICE_GROUP: name}))
        pods = stage.wait("infer-a and infer-b Running", lambda: running(stage.pods(ns), 2))
        env_var = "NVIDIA_VISIBLE_DEVICES"
        stage.show("get", "pods", "-n", ns, "-o",
                   "custom-columns=POD:.metadata.name,NODE:.spec.nodeName,ENV:.spec.containers[0].env[*].name,"
                   "FROM:.spec.containers[0].env[*].valueFrom.fieldRef.fieldPath,"
                   f"VALUE:.metadata.annotations.deviceshare\\.io/env\\.{env_var}")
        stage.show("get", "sdg", name)
        nodes = {p.spec.node_name for p in pods}
        ids = {(p.metadata.annotations or {}).get(contract.DEVICE_ENV_PREFIX + env_var) for p in pods}
        stage.expect(len(nodes) == 1 and nodes <= set(stage.layout.shared), f"both pods on one shared node (got {nodes})")
        stage.expect(len(ids) == 1 and None not in ids and len(next(iter(ids)).split(",")) == 2,  # type: ignore[union-attr]
                     f"both pods given the same 2 GPU IDs (got {ids})")
        for p in pods:
            env = {e.name: e for e in p.spec.containers[0].env or []}
            ref = env[env_var].value_from.field_ref.field_path if env_var in env else ""
            stage.expect(ref == f"metadata.annotations['{contract.DEVICE_ENV_PREFIX}{env_var}']",
                         f"{p.metadata.name}: {env_var} read from the annotation (Downward API)")
        status = stage.custom.get_cluster_custom_object(*SDG_API, name).get("status", {})
        stage.expect(status.get("phase") == "Bound" and status.get("nodeName") in nodes,
                     f"the group Bound to that node (status {status.get('phase')}, {status.get('nodeName')})")
        node, devices = nodes.pop(), ids.pop()
        stage.say(f"Both containers start with {env_var}={devices} on {node}: the same two GPUs. (kwok runs no "
                  "containers; a kubelet fills the variable from the annotation at container start.)")
        return f"infer-a and infer-b on {node}, both {env_var}={devices}; group {name} Bound"
    finally:
        for p in stage.pods(ns):
            stage.core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
        stage.wait(f"the pods of {ns} gone", lambda: not stage.core.list_namespaced_pod(ns).items, record=False)
        _delete_group(stage, name)


def _delete_group(stage: Stage, name: str) -> None:
    """Delete a SharedDeviceGroup and wait until it is gone (the reconciler removes its
    finalizer once none of its pods runs)."""
    try:
        stage.custom.delete_cluster_custom_object(*SDG_API, name)
    except ApiException as e:
        if e.status == 404:
            return
        raise

    def gone() -> bool:
        try:
            stage.custom.get_cluster_custom_object(*SDG_API, name)
        except ApiException as e:
            return e.status == 404
        return False

    stage.wait(f"SharedDeviceGroup {name} deleted", gone, record=False)


# --------------------------------------------------------------------------- 5
def high_priority_gang_preempts_atomically(stage: Stage) -> str:
    """A low-priority gang of 8 single-pod Jobs fills a subblock; a high-priority gang of 4
    is restricted to it. With ``gangPreemptionMode: atomic`` Troupe evicts the whole
    low-priority gang (all 8 pods, not 4 scattered ones, and no other gang), releases the
    preemptor once they are gone, and the victims' Jobs recreate their pods: gated again,
    they wait for room as a gang."""
    ns = stage.namespace("demo-preempt")
    lay = stage.layout
    pool, h, g = lay.subblocks[2], lay.hosts, lay.gpus
    need = max(1, h // 2)
    selector = {lay.subblock_label: pool.name}
    with stage.priority_classes({"troupe-demo-low": 10, "troupe-demo-high": 1000}):
        stage.say(f"gangPreemptionMode: {stage.config.gang_preemption_mode}. Gang batch (priority 10): {h} Jobs of "
                  f"one whole-node pod each, in {pool.name} (nodeSelector), filling it.")
        for i in range(h):
            template = pod("w", gpus=g, labels={"gang": "batch"}, node_selector=selector,
                           priority_class="troupe-demo-low", annotations=stage.gang("batch", h))
            stage.batch.create_namespaced_job(ns, indexed_job(f"batch-{i}", 1, template))
        first = stage.wait(f"gang batch's {h} pods Running", lambda: running(stage.pods(ns, "gang=batch"), h),
                           timeout=90)
        stage.say(f"Gang train (priority 1000): an Indexed Job of {need} whole-node pods, in {pool.name} too.")
        template = pod("w", gpus=g, labels={"gang": "train"}, node_selector=selector,
                       priority_class="troupe-demo-high", annotations=stage.gang("train", need))
        stage.batch.create_namespaced_job(ns, indexed_job("train", need, template))
        trained = stage.wait(f"gang train's {need} pods Running", lambda: running(stage.pods(ns, "gang=train"), need),
                             timeout=120)
        events = stage.core.list_namespaced_event(ns).items
        victims = sorted({e.involved_object.name for e in events if e.reason == "Preempted"})
        stage.show("get", "events", "-n", ns, "--field-selector", "reason=GangPreempting",
                   "-o", "custom-columns=POD:.involvedObject.name,MESSAGE:.message")
        stage.say(f"Every victim ({len(victims)} pods) gets a Preempted Event saying who evicted it and why, e.g.:")
        stage.show("get", "events", "-n", ns, "--field-selector", f"reason=Preempted,involvedObject.name={victims[0]}",
                   "-o", "custom-columns=POD:.involvedObject.name,MESSAGE:.message")
        stage.expect(set(victims) == {p.metadata.name for p in first},
                     f"atomic: all {h} pods of gang batch evicted, though {need} nodes were needed (got {len(victims)})")
        stage.expect(_subblocks(stage, trained) == {pool.name}, f"train runs in {pool.name}")

        def recreated_and_gated() -> list[Any] | None:
            pods = [p for p in stage.pods(ns, "gang=batch") if p.metadata.name not in victims]
            return pods if len(pods) == h and all(p.spec.scheduling_gates for p in pods) else None

        stage.wait(f"the {h} Jobs of batch to recreate their pods, gated", recreated_and_gated, timeout=90)
        stage.say(f"The victims' Jobs recreated their {h} pods; Troupe gates them again and batch waits as a gang:")
        out = stage.troupe("status", "-n", ns).stdout
        stage.expect(f"fits {h - need} of {h} members" in out, f"kubectl troupe status: batch fits {h - need} of {h}")
        stage.expect(not any(p.spec.node_name for p in stage.pods(ns, "gang=batch")), "no pod of batch placed piecemeal")
    return (f"train (priority 1000) evicted all {h} pods of gang batch (priority 10) at once; "
            f"batch's Jobs recreated them, gated: waits with 'fits {h - need} of {h}'")


# --------------------------------------------------------------------------- 6
def bad_manifests_refused(stage: Stage) -> str:
    """Three pods the webhook refuses at creation, each with a message naming the key and
    the value: a size that is not a number, a key only Troupe's reconciler may write, and
    a device-group pod that asks for a GPU of its own."""
    ns = stage.namespace("demo-admission")
    prefix = stage.config.gang_annotation_prefix
    node = stage.layout.subblocks[0].nodes[0]
    cases = [
        ("a gang size that is not a number", pod("bad-size", gpus=1, annotations={
            f"{prefix}{contract.GANG_NAME_SUFFIX}": "train", f"{prefix}{contract.GANG_SIZE_SUFFIX}": "four"}),
         [f"{prefix}{contract.GANG_SIZE_SUFFIX}", "'four'"]),
        ("a placement written by hand (a key reserved for Troupe's reconciler)", pod("bad-pin", gpus=1, annotations={
            f"{prefix}{contract.GANG_NAME_SUFFIX}": "train", f"{prefix}{contract.GANG_SIZE_SUFFIX}": "1",
            contract.ASSIGNED_NODE: node}), [contract.ASSIGNED_NODE]),
        ("a device-group pod that requests a GPU itself", pod("bad-group", gpus=1, annotations={
            contract.DEVICE_GROUP: "demo-infer"}), [GPU, "main"]),
    ]
    for what, body, wanted in cases:
        stage.say(f"{what}:")
        keys = ", ".join(f"{k}: {v!r}" for k, v in body["metadata"]["annotations"].items())
        asks = body["spec"]["containers"][0]["resources"]["requests"].get(GPU)
        done = stage.show("apply", "-n", ns, "-f", "-", input=json.dumps(body), check=False, stderr=True,
                          input_note=f"# pod {body['metadata']['name']}: {keys}" + (f"; asks {asks} {GPU}" if asks else ""))
        message = done.stderr.strip()
        stage.expect(done.returncode != 0 and "denied the request" in message and all(w in message for w in wanted),
                     f"{body['metadata']['name']} refused naming {', '.join(wanted)} (got {message!r})")
    stage.expect(not stage.pods(ns), "no refused pod exists")
    return f"{len(cases)} bad pods refused at admission, each message naming the key and the value"


# --------------------------------------------------------------------------- 7
def gang_rolled_back_and_retried(stage: Stage) -> str:
    """A gang released by Troupe that cannot bind (another component's gate still holds
    its pods) is rolled back when its timeout runs out: its members are marked
    ``DisruptionTarget`` and deleted, the Job recreates them (its pod failure policy ignores
    disruptions), and Troupe releases them again after a backoff, once they can bind."""
    ns = stage.namespace("demo-timeout")
    g, timeout = stage.layout.gpus, 5
    jitter = stage.config.gang_schedule_timeout_jitter_seconds
    template = pod("w", gpus=g, labels={"gang": "stuck"}, annotations=stage.gang("stuck", 2, timeout=timeout))
    template["spec"]["schedulingGates"] = [{"name": QUOTA_GATE}]
    stage.say(f"Job stuck: 2 workers, gang timeout {timeout}s (+ up to {jitter}s jitter); its pods also carry "
              f"{QUOTA_GATE}, the gate of another component (a quota check, say) that Troupe leaves alone.")
    stage.batch.create_namespaced_job(ns, indexed_job("stuck", 2, template))

    def released() -> list[Any] | None:
        pods = stage.pods(ns)
        ok = len(pods) == 2 and all(contract.RELEASED_AT in (p.metadata.annotations or {})
                                    and [x.name for x in p.spec.scheduling_gates or []] == [QUOTA_GATE] for p in pods)
        return pods if ok else None

    first = stage.wait("both members released by Troupe, still gated by the other component", released)
    stage.say("Troupe removed its own gate and pinned each pod to a node; the other gate keeps them unbound:")
    stage.show("get", "pods", "-n", ns, "-o", RELEASE_COLUMNS)
    old = {p.metadata.uid for p in first}

    def recreated() -> list[Any] | None:
        pods = [p for p in stage.pods(ns) if p.metadata.uid not in old]
        return pods if len(pods) == 2 else None

    again = stage.wait("the rollback: both members deleted and recreated by the Job", recreated,
                       timeout=timeout + jitter + 60)
    for p in again:  # the quota check lets go of the new pods as soon as they exist
        stage.core.patch_namespaced_pod(p.metadata.name, ns, {"spec": {"schedulingGates": [
            {"name": QUOTA_GATE, "$patch": "delete"}]}}, _content_type="application/strategic-merge-patch+json")
    stage.say("The timeout ran out: Troupe marked both DisruptionTarget and deleted them (the Job owns them), "
              "with an Event on each:")
    stage.show("get", "events", "-n", ns, "--field-selector", "reason=GangTimedOut",
               "-o", "custom-columns=POD:.involvedObject.name,MESSAGE:.message")
    timed_out = [e for e in stage.core.list_namespaced_event(ns).items if e.reason == "GangTimedOut"]
    stage.expect(len(timed_out) >= 1, f"a GangTimedOut Event for the gang (got {len(timed_out)})")
    stage.say(f"The Job recreated both (its pod failure policy ignores disruptions), gated again; this time the quota "
              f"check lets go of them at once (the demo removes {QUOTA_GATE}).")
    final = stage.wait("the gang released again and Running", lambda: running(stage.pods(ns), 2), timeout=60)
    stage.show("get", "pods", "-n", ns, "-o", PLACED_COLUMNS)
    job = stage.batch.read_namespaced_job("stuck", ns)
    stage.expect(not [c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"],
                 "the rollback did not fail the Job")
    rolled_back = min(e.first_timestamp or e.event_time for e in timed_out)
    second = min(dt.datetime.fromisoformat(_planned_at(p)) for p in final)
    waited = (second - rolled_back).total_seconds()
    stage.expect(waited >= 9, f"the second release at least the backoff (10 s) after the rollback (got {waited:.1f}s)")
    released_first = dt.datetime.fromisoformat(_planned_at(first[0]))
    back = min(p.metadata.creation_timestamp for p in again)
    held = "Troupe held them until its backoff ran out" if (back - rolled_back).total_seconds() < 10 else \
        "Troupe's backoff had run out by then"
    stage.say(f"Released at {released_first:%H:%M:%S}; rolled back at {rolled_back:%H:%M:%S}; recreated by the Job at "
              f"{back:%H:%M:%S} (the Job controller's own backoff for lost pods).")
    stage.say(f"Released again at {second:%H:%M:%S}, {waited:.0f}s after the rollback ({held}: 10 s, doubling "
              "with each further rollback), and running.")
    return (f"not bound {timeout}s after release: rolled back (2 pods recreated by the Job), released again "
            f"{waited:.0f}s later, ran")


# --------------------------------------------------------------------------- 8
def jobset_ganged_by_namespace(stage: Stage) -> str:
    """A JobSet in a namespace labelled ``troupe.io/gang-mode: auto``, with no Troupe
    annotation at all: a driver and two replicated worker Jobs of 8 whole-node pods become
    one gang of 17, sized from the JobSet, its nodes reserved from the JobSet's pod templates
    as soon as it appears and each member released onto its rank's node as it is created
    (docs/decisions/034); each worker Job fills one subblock of one block."""
    ns = stage.namespace("demo-jobset", labels={contract.GANG_MODE_LABEL: contract.GANG_MODE_AUTO})
    h, g = stage.layout.hosts, stage.layout.gpus

    def template(gpus: int, cpu: str) -> dict[str, Any]:
        body = pod("w", gpus=gpus, cpu=cpu)
        return {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}

    jobset = {"apiVersion": f"{JOBSET_API[0]}/{JOBSET_API[1]}", "kind": "JobSet", "metadata": {"name": "train"},
              "spec": {"replicatedJobs": [
                  {"name": "driver", "replicas": 1, "template": {"spec": {
                      "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template(0, "1")}}},
                  {"name": "workers", "replicas": 2, "template": {"spec": {
                      "parallelism": h, "completions": h, "backoffLimit": 0, "template": template(g, "100m")}}}]}}
    size = 1 + 2 * h
    stage.say(f"Namespace {ns} is labelled {contract.GANG_MODE_LABEL}={contract.GANG_MODE_AUTO}. JobSet train: "
              f"driver 1 x 1 pod (1 cpu) and workers 2 x {h} pods ({g} GPUs each); no Troupe annotation anywhere.")
    stage.custom.create_namespaced_custom_object(JOBSET_API[0], JOBSET_API[1], ns, JOBSET_API[2], jobset)
    pods = stage.wait(f"the JobSet's {size} pods Running", lambda: running(stage.pods(ns), size), timeout=120)
    stage.show("get", "pods", "-n", ns, "-o", PLACED_COLUMNS)
    stage.troupe("status", "-n", ns)
    _one_release(stage, pods, "JobSet train", when_complete=False)
    reserved = [e for e in stage.core.list_namespaced_event(ns).items if e.reason == "GangReserved"]
    stage.expect(len(reserved) == 1 and reserved[0].involved_object.kind == "JobSet",
                 "the reservation told once, on the JobSet (GangReserved)")
    stage.say("Reserved from the JobSet's pod templates when it appeared, before any pod existed:")
    stage.show("get", "events", "-n", ns, "--field-selector", "reason=GangReserved",
               "-o", "custom-columns=OBJECT:.involvedObject.kind,MESSAGE:.message")
    size_key = stage.config.gang_annotation_prefix + contract.GANG_SIZE_SUFFIX
    stage.expect(all((p.metadata.annotations or {}).get(size_key) == contract.AUTO_SIZE for p in pods),
                 f"{size_key}: auto stamped by the webhook on every pod")
    driver = [p for p in pods if "-driver-" in p.metadata.name]
    stage.expect(len(driver) == 1 and driver[0].metadata.annotations.get(contract.ASSIGNED_RANK) == "0",
                 "the driver is rank 0")
    labels = stage.node_labels()
    sub = stage.layout.subblock_label
    per_job = {j: {labels[p.spec.node_name][sub] for p in pods if p.metadata.name.startswith(f"train-{j}-")}
               for j in ("workers-0", "workers-1")}
    stage.expect(all(len(v) == 1 for v in per_job.values()) and len(set.union(*per_job.values())) == 2,
                 f"each worker Job in a subblock of its own (got {per_job})")
    blocks = {labels[p.spec.node_name][stage.layout.block_label] for p in pods}
    stage.expect(len(blocks) == 1, f"the whole gang in one block (got {blocks})")
    where = ", ".join(f"{j} in {next(iter(v))}" for j, v in per_job.items())
    stage.say(f"One gang of {size}, sized from the JobSet ({contract.GANG_SIZE_SUFFIX[1:]}: auto), reserved whole and "
              f"each member released as it was created: {where}.")
    return f"JobSet of {size} ganged with no annotation, reserved whole, released as created; {where}"


# --------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Scenario:
    """One scenario: ``name`` (for ``--only``), ``title`` (its heading) and ``run``."""

    name: str
    title: str
    run: Callable[[Stage], str]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("gang", "A gang waits for its last member, then runs whole", gang_waits_for_its_last_member),
    Scenario("topology", "Two topology-constrained gangs packed into subblocks around busy nodes",
             gangs_packed_into_subblocks),
    Scenario("deadlock", "The deadlock of pod-by-pod scheduling, resolved all-or-nothing",
             deadlock_resolved_all_or_nothing),
    Scenario("devices", "A shared device group: two pods, the same GPU IDs", shared_device_group),
    Scenario("preemption", "A high-priority gang preempts a low-priority gang, atomically",
             high_priority_gang_preempts_atomically),
    Scenario("admission", "Bad manifests refused at admission, with the reason", bad_manifests_refused),
    Scenario("timeout", "A gang that cannot bind in time is rolled back and retried", gang_rolled_back_and_retried),
    Scenario("jobset", "A JobSet in an opted-in namespace, ganged with no annotation", jobset_ganged_by_namespace),
    Scenario("slices", "A gang in slices, each slice of consecutive ranks in one subblock", gang_in_slices),
    Scenario("recovery", "A node lost under a running gang: restarted once, whole (RestartGang)",
             node_lost_under_a_running_gang),
    Scenario("dra", "A gang whose members claim GPUs through Dynamic Resource Allocation", gang_claiming_dra_devices),
)


def _crd_served(stage: Stage, name: str) -> bool:
    from kubernetes import client

    try:
        client.ApiextensionsV1Api(stage.api).read_custom_resource_definition(name)
    except ApiException as e:
        if e.status in (403, 404):
            return False
        raise
    return True


def needs_of(scenario: Scenario, stage: Stage) -> str | None:
    """Why ``scenario`` cannot run on ``stage``'s cluster (what it needs), or None."""
    if scenario.name == "devices":
        if not stage.layout.shared:
            return (f"needs a Ready node labelled {contract.DEVICE_MODE_LABEL}={contract.DEVICE_MODE_SHARED} "
                    f"with {GPU}")
        if not _crd_served(stage, "shareddevicegroups.deviceshare.io"):
            return "needs the SharedDeviceGroup CRD (charts/troupe/files/crds/)"
    if scenario.name == "preemption" and stage.config.gang_preemption_mode != "atomic":
        return f"needs gangPreemptionMode: atomic (Troupe's configuration has {stage.config.gang_preemption_mode!r})"
    if scenario.name == "jobset" and not _crd_served(stage, "jobsets.jobset.x-k8s.io"):
        return "needs JobSet v0.10 (its CRD and controller) installed"
    if scenario.name == "dra" and isinstance(found := dra_layout(stage), str):
        return found
    return None


def by_name(names: Sequence[str]) -> list[Scenario]:
    """The scenarios named (story order kept); raises ``ValueError`` naming an unknown one."""
    known = {s.name for s in SCENARIOS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(s.name for s in SCENARIOS)}")
    return [s for s in SCENARIOS if s.name in names]


__all__ = ["SCENARIOS", "DemoFailure", "Scenario", "by_name", "needs_of"]
