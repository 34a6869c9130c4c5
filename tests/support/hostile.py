"""Hypothesis strategies for hostile cluster objects: pods, nodes, SharedDeviceGroups and
workloads whose labels, annotations and fields hold what a tenant (or a bug) may put
there: 5,000-digit numbers, non-ASCII digits, empty and 1 MiB values, JSON of the wrong
type or nested past Python's recursion limit, unknown kinds, missing fields.

Each object keeps what the API server itself guarantees (``metadata.name`` and
``namespace`` are strings, labels and annotations map strings to strings, a pod has a
``spec``), except where a strategy says otherwise: the cache must survive both.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from troupe import contract

PREFIX = "troupe.io/gang"
GANG_NAME, GANG_SIZE, GANG_TIMEOUT = PREFIX + "-name", PREFIX + "-size", PREFIX + "-schedule-timeout-seconds"
MIB = 1 << 20
HUGE_NUMBER = "9" * 5000
#: JSON nested deeper than ``json.loads`` can follow (it raises ``RecursionError``).
DEEP_JSON = "[" * 100_000 + "]" * 100_000

#: Values that break naive parsing; the 1 MiB ones are made once and shared.
HOSTILE_TEXT = (
    "", " ", "\n", "1\n", "-1", "+1", "0", "1e3", "0x10", "1.5", "NaN", "auto",
    HUGE_NUMBER, "-" + HUGE_NUMBER, "1" * 10, "\u0663", "\u0660\u0661\u0662", "\uff13", "\uff11\uff12", "\u00b2", "\u09e9", "\u07c3",
    "x" * MIB, "7" * MIB, "\u0000", "é" * 70, "a/b", "../..", "${jndi}", "g\n",
    "[]", "{}", "null", "true", "\"s\"", "5", DEEP_JSON,
)
#: JSON documents of the wrong shape for the records Troupe reads from annotations.
HOSTILE_JSON = (
    json.dumps({"plannedAt": 5, "nodes": {}}), json.dumps({"plannedAt": "x", "nodes": []}),
    json.dumps({"plannedAt": "x", "nodes": {"u": 1}}), json.dumps({"at": "x", "nodes": {}, "victims": "v"}),
    json.dumps({"at": "x", "nodes": {}, "victims": [1], "refused": None}),
    json.dumps({"plannedAt": "x", "nodes": {}, "groups": {"g": {"node": "n", "devices": {"r": 5}}}}),
    json.dumps({"plannedAt": "x", "nodes": {}, "groups": {"g": {"node": "n", "devices": {"r": HUGE_NUMBER}}}}),
    json.dumps({"plannedAt": "x", "nodes": {}, "groups": {"g": []}}),
    json.dumps({"nvidia.com/gpu": 5}), json.dumps({"nvidia.com/gpu": "\u0663"}), json.dumps({"nvidia.com/gpu": HUGE_NUMBER}),
    json.dumps(["nvidia.com/gpu"]), json.dumps({"nvidia.com/gpu": "0,1,0"}), json.dumps({"x": {"y": "z"}}),
)
#: Numbers where JSON holds a number: past int64, negative, floats, booleans, strings.
HOSTILE_NUMBERS: tuple[Any, ...] = (
    10 ** 5000, -(10 ** 5000), 2 ** 63, 2 ** 31, -1, 0, 1, 3, 1.5, float("inf"), True, None, "3", HUGE_NUMBER, [], {},
)

hostile_text = st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=12))
hostile_value = st.one_of(hostile_text, st.sampled_from(HOSTILE_JSON))
hostile_number = st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(-5, 10))
#: A value of any JSON type (for fields whose type is wrong).
any_json = st.one_of(hostile_number, hostile_text, st.lists(hostile_number, max_size=2),
                     st.dictionaries(st.sampled_from(["a", "name", "key"]), hostile_number, max_size=2))

#: The labels and annotations Troupe reads from a pod.
POD_KEYS = (
    GANG_NAME, GANG_SIZE, GANG_TIMEOUT, contract.TOPOLOGY_REQUIRED_LEVEL, contract.TOPOLOGY_PREFERRED_LEVEL,
    contract.JOB_COMPLETION_INDEX, contract.KUBEFLOW_REPLICA_INDEX, contract.KUBEFLOW_REPLICA_TYPE,
    contract.LWS_WORKER_INDEX_LABEL, contract.LWS_NAME_LABEL, contract.LWS_GROUP_INDEX_LABEL,
    contract.JOBSET_GLOBAL_INDEX_LABEL, contract.JOBSET_NAME_LABEL, contract.JOBSET_RESTART_LABEL,
    contract.JOB_NAME_LABEL, contract.KUBEFLOW_JOB_NAME_LABEL, contract.PLAN, contract.NOMINATION,
    contract.SELECTED_DEVICES, contract.DEVICE_GROUP, contract.ASSIGNED_NODE, contract.PLANNED_AT,
    contract.RELEASED_AT, contract.ASSIGNED_RANK,
)
#: Node labels Troupe reads.
NODE_KEYS = (contract.HOSTNAME_LABEL, contract.DEVICE_MODE_LABEL, "cloud.google.com/gce-topology-block",
             "cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-host")
#: Node names hostile objects refer to (never the good gang's nodes).
HOSTILE_NODES = ("h1", "h2", "missing", "")
HOSTILE_GANGS = ("a", "b", "")
QUANTITY_KEYS = ("cpu", "memory", "pods", "nvidia.com/gpu", "example.com/dev")

pairs = st.dictionaries(st.sampled_from(POD_KEYS), hostile_value, max_size=6)


@st.composite
def hostile_pod(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """A pod of namespace ``hostile`` (name ``p<index>``) that Troupe may manage: gang
    annotations most of the time, random gates, hostile labels and annotations, and
    sometimes a spec, status or owner of the wrong shape."""
    annotations = {GANG_NAME: draw(st.sampled_from(HOSTILE_GANGS)), GANG_SIZE: draw(st.sampled_from(["1", "2", "auto"]))}
    if draw(st.booleans()):
        annotations = {}
    annotations.update(draw(pairs))
    labels = draw(pairs)
    requests = draw(st.dictionaries(st.sampled_from(QUANTITY_KEYS), st.one_of(hostile_text, hostile_number), max_size=2))
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": requests}}],
        "schedulingGates": draw(st.sampled_from([[{"name": contract.GATE}], [{"name": "gke.io/topology-aware-auto-x"}],
                                                 [], [{"name": 5}], "gate", [{}]])),
    }
    for field, values in (("priority", hostile_number), ("terminationGracePeriodSeconds", hostile_number),
                          ("nodeName", st.sampled_from(HOSTILE_NODES)), ("nodeSelector", any_json),
                          ("tolerations", any_json), ("affinity", any_json)):
        if draw(st.integers(0, 4)) == 0:
            spec[field] = draw(values)
    meta: dict[str, Any] = {"name": f"p{index}", "namespace": "hostile", "uid": f"u{index}",
                            "resourceVersion": draw(st.sampled_from(["1", "2", HUGE_NUMBER, "\u0663", ""])),
                            "creationTimestamp": draw(st.sampled_from(["2026-11-21T00:00:00Z", "", "x", HUGE_NUMBER])),
                            "labels": labels, "annotations": annotations}
    if draw(st.integers(0, 3)) == 0:
        meta["ownerReferences"] = [{"apiVersion": draw(st.sampled_from(["batch/v1", "kubeflow.org/v1", 5])),
                                    "kind": draw(st.sampled_from(["Job", "PyTorchJob", "Frobnicator"])),
                                    "name": draw(st.sampled_from(["w", "", HUGE_NUMBER])), "uid": "o", "controller": True}]
    if draw(st.integers(0, 6)) == 0:
        meta["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                           "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "", "Odd"]))}}
    shape = draw(st.integers(0, 9))
    if shape == 0:
        pod["spec"] = draw(any_json)  # wrong type, or missing
    elif shape == 1:
        pod["status"] = draw(any_json)
    elif shape == 2:
        del pod["spec"]
    return pod


@st.composite
def hostile_node(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A node ``name`` with hostile labels, allocatable quantities, taints and conditions
    (sometimes missing ``status``)."""
    allocatable = draw(st.dictionaries(st.sampled_from(QUANTITY_KEYS), st.one_of(hostile_text, hostile_number), max_size=4))
    node: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1",
                     "labels": draw(st.dictionaries(st.sampled_from(NODE_KEYS), hostile_text, max_size=3))},
        "spec": {"taints": draw(st.one_of(any_json, st.just([{"key": "k", "effect": "NoSchedule"}]))),
                 "unschedulable": draw(st.sampled_from([False, True, "yes"]))},
        "status": {"allocatable": allocatable,
                   "conditions": draw(st.one_of(any_json, st.just([{"type": "Ready", "status": "True"}])))},
    }
    if draw(st.integers(0, 5)) == 0:
        del node["status"]
    return node


@st.composite
def hostile_group(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A SharedDeviceGroup ``name`` with hostile resources, selector, strategy and status."""
    resources = draw(st.dictionaries(st.sampled_from(["nvidia.com/gpu", "memory", "cpu", "", "x" * 300]),
                                     hostile_number, max_size=2))
    return {
        "apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup",
        "metadata": {"name": name, "resourceVersion": "1", "finalizers": draw(st.sampled_from([[], "f", [5]]))},
        "spec": {"resources": resources, "nodeSelector": draw(st.one_of(any_json, st.just({"a": "b"}))),
                 "schedulingStrategy": draw(st.sampled_from(["binpack", "spread", "", "x" * MIB, 5]))},
        "status": draw(st.one_of(any_json, st.fixed_dictionaries({
            "phase": st.sampled_from(["Allocated", "Pending", ""]), "nodeName": st.sampled_from(HOSTILE_NODES),
            "selectedDevices": st.dictionaries(st.sampled_from(["nvidia.com/gpu"]), hostile_value, max_size=1)}))),
    }


@st.composite
def hostile_workload(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """``(kind, object)``: a Job, JobSet, LeaderWorkerSet, PyTorchJob or an unknown kind
    named ``w``, its counts hostile."""
    kind = draw(st.sampled_from(["Job", "JobSet", "LeaderWorkerSet", "PyTorchJob", "Frobnicator"]))
    spec = draw(st.sampled_from([
        {"parallelism": 0}, {"replicatedJobs": 5}, {"replicatedJobs": ["x", {"replicas": 10 ** 5000}]},
        {"leaderWorkerTemplate": {"size": HUGE_NUMBER}}, {"pytorchReplicaSpecs": {"Master": {"replicas": 2 ** 63}}},
        {"pytorchReplicaSpecs": []}, {}]))
    spec = dict(spec, parallelism=draw(hostile_number), completions=draw(hostile_number))
    obj = {"apiVersion": "x/v1", "kind": kind,
           "metadata": {"name": "w", "namespace": "hostile", "resourceVersion": "1",
                        "annotations": draw(st.dictionaries(st.sampled_from([contract.TOPOLOGY_REQUIRED_LEVEL]),
                                                            hostile_text, max_size=1))},
           "spec": draw(st.one_of(st.just(spec), any_json)), "status": {"succeeded": draw(hostile_number)}}
    return kind, obj
