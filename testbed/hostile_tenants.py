"""Hypothesis strategies for what a hostile tenant with ``create`` on Jobs, JobSets,
PyTorchJobs, LeaderWorkerSets, pods, ResourceClaims and ResourceClaimTemplates in its own
namespace (``attacker``) may make (docs/decisions/049-hostile-tenants-third-round.md):
counts up to int32's, forged reservation records naming every node, far-future stamps,
DRA selectors the API server accepts that cost seconds, selectors that read each device's
uuid, and pods with thousands of pod-affinity terms; and pods created and deleted one
after another, each of a distinct large spec (:func:`churn_pod`, :func:`kept_after_churn`;
docs/decisions/063-memos-held-by-their-users.md).

The objects keep within what the API server admits (names, shapes, string maps); what the
chart's admission policies would refuse (a tenant's ``reconciler.troupe.io/*``) is made
anyway, as on a cluster that runs without them.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.decision.seen import Decision
from reconciler.engine.decision.step import step
from reconciler.engine.gangs.queueing import Policy, QueueState, queue_order
from reconciler.engine.model import cel
from reconciler.engine.model.reservations import Record
from testbed.dra_builders import CLASS, DRIVER, claim_template, with_claim
from testbed.reconciler_builders import make_pod
from troupe import contract
from troupe.config import Config

ATTACKER = "attacker"
INT32 = 2**31 - 1
#: What a workload's counts are drawn from: int32's largest, just past a gang's bound, 0.
COUNTS = (INT32, 10_001, 1_000_000, 0, 1)
#: A comprehension over 101 x 101 (what the API server's cost estimate admits).
_LIST = "[" + ",".join(map(str, range(101))) + "]"
NESTED = f'{_LIST}.all(x, {_LIST}.all(y, x + y >= 0 && device.driver == "{DRIVER}"))'
#: Selectors a tenant's request may carry: costly, reading each device's uuid, cheap, broken.
SELECTORS = (NESTED, f'device.attributes["{DRIVER}"].uuid != "none"',
             f'device.attributes["{DRIVER}"].model == "H100"', "device.nothing.that.exists", "((")


def _template(gpus: int, auto: bool) -> dict[str, Any]:
    annotations = {"troupe.io/gang-size": "auto"} if auto else {}
    return {"metadata": {"annotations": annotations}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                  "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def forged_record(nodes: list[str], planned_at: str) -> str:
    """A reservation record no reconciler wrote, naming ``nodes``."""
    return Record("job:w", planned_at, tuple(nodes), signature="0" * 64).encode()


@st.composite
def hostile_workload(draw: st.DrawFn, nodes: list[str]) -> tuple[str, dict[str, Any]]:
    """``(kind, object)``: a Job, JobSet, PyTorchJob or LeaderWorkerSet of the attacker,
    its counts from :data:`COUNTS`, asking for whole GPU nodes, perhaps carrying a forged
    record of ``nodes`` (planned now or in year 9999)."""
    kind = draw(st.sampled_from(["Job", "JobSet", "PyTorchJob", "LeaderWorkerSet"]))
    count, inner = draw(st.sampled_from(COUNTS)), draw(st.sampled_from(COUNTS))
    template = _template(8, draw(st.booleans()))
    spec: dict[str, Any]
    if kind == "Job":
        spec = {"parallelism": count, "completions": count, "completionMode": "Indexed", "template": template}
    elif kind == "JobSet":
        spec = {"replicatedJobs": [{"name": "w", "replicas": count, "template": {"spec": {
            "parallelism": inner, "completions": inner, "template": template}}}]}
    elif kind == "PyTorchJob":
        spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                        "Worker": {"replicas": count, "template": template}}}
    else:
        spec = {"replicas": count, "leaderWorkerTemplate": {"size": inner, "workerTemplate": template}}
    annotations = {}
    if draw(st.booleans()):
        annotations[contract.RESERVATION] = forged_record(
            nodes, draw(st.sampled_from(["2027-01-15T08:00:00.000+00:00", "9999-01-01T00:00:00.000+00:00"])))
    return kind, {"apiVersion": "x/v1", "kind": kind,
                  "metadata": {"name": "w", "namespace": ATTACKER, "uid": f"uid-{kind}", "resourceVersion": "1",
                               "generation": 1, "creationTimestamp": "2027-01-15T08:00:00Z",
                               "annotations": annotations},
                  "spec": spec}


@st.composite
def hostile_claims(draw: st.DrawFn, node: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(templates, pods)``: ResourceClaimTemplates of the attacker with up to 32 requests
    of hostile selectors, and a pending pod on ``node`` claiming each."""
    templates, pods = [], []
    for i in range(draw(st.integers(1, 3))):
        selectors = tuple(draw(st.lists(st.sampled_from(SELECTORS), min_size=1, max_size=2)))
        template = claim_template(f"t{i}", 1, ATTACKER, selectors=selectors)
        requests = template["spec"]["spec"]["devices"]["requests"]
        template["spec"]["spec"]["devices"]["requests"] = [
            {**requests[0], "name": f"r{k}"} for k in range(draw(st.sampled_from([1, 32])))]
        templates.append(template)
        pod = with_claim(make_pod(f"claimer-{i}", ATTACKER).build(), template=f"t{i}")
        pod["spec"]["nodeName"], pod["status"] = node, {"phase": "Pending"}
        pods.append(pod)
    return templates, pods


@st.composite
def hostile_terms_pod(draw: st.DrawFn, node: str, victim_namespace: str) -> dict[str, Any]:
    """A running pod of the attacker on ``node`` with thousands of distinct required
    anti-affinity terms over ``victim_namespace`` that select none of its pods (they would
    keep the victim out where they hold, as kube-scheduler would)."""
    count = draw(st.sampled_from([65, 2_000, 16_000]))
    pod = make_pod("terms", ATTACKER).running_on(node).build()
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "namespaces": [victim_namespace],
         "labelSelector": {"matchLabels": {"hostile": f"value-{i}"}}} for i in range(count)]}}
    return pod


def device_class_object() -> dict[str, Any]:
    """The DeviceClass the claims ask for."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def uuid_slice(node: str, count: int) -> dict[str, Any]:
    """A ResourceSlice whose devices each carry a uuid of their own, as real drivers publish."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                   "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "H100"},
                                                                      "uuid": {"string": f"{node}-{i}"}}}
                                 for i in range(count)]}}


@dataclass(frozen=True)
class Outcome:
    """What feeding a cache and deciding every gang in queue order cost: the ``decision``
    of the gang watched, the CPU ``seconds`` of it all, the CPU ``decide_seconds`` of that
    gang's own ``step()``, and the ``peak`` bytes allocated meanwhile (tracemalloc)."""

    decision: Decision
    seconds: float
    decide_seconds: float
    peak: int


def decide_beside(config: Config, nodes: Sequence[dict[str, Any]], slices: Sequence[dict[str, Any]],
                  workloads: Sequence[tuple[str, dict[str, Any]]], templates: Sequence[dict[str, Any]],
                  pods: Sequence[dict[str, Any]], watched: str, now: float) -> Outcome:
    """Feed a fresh reconciler cache the objects by the informers' path (``nodes``, the DRA
    ``slices`` of a DeviceClass of :data:`~testbed.dra_builders.CLASS`, ``workloads``
    as ``(kind, object)``, claim ``templates``, ``pods``), then decide every gang with
    ``step()`` in queue order at ``now`` (seconds since the epoch), as the worker does;
    the :class:`Outcome` of gang ``watched``. The CEL memo starts cold: every evaluation
    the objects cause is paid for here."""
    cel.forget()
    tracemalloc.start()
    started = time.process_time()
    cache = ClusterCache(config)
    cache.replace_nodes(cache.retain_node(n) for n in nodes)
    cache.dra.replace("deviceclasses", [device_class_object()])
    cache.dra.replace("resourceslices", list(slices))
    cache.dra.replace("resourceclaims", [])
    cache.dra.replace("resourceclaimtemplates", list(templates))
    cache.replace_jobs([cache.retain_job(obj) for kind, obj in workloads if kind == "Job"])
    for kind in ("JobSet", "LeaderWorkerSet", "PyTorchJob"):
        cache.replace_workloads(kind, [obj for k, obj in workloads if k == kind])
    cache.replace_pods(cache.retain_pod(p) for p in pods)
    snapshot, queue, policy = cache.snapshot(), QueueState(config.queueing_strategy), Policy.from_config(config)
    gangs = sorted((g for key in cache.gang_keys() if (g := cache.gang(key)) is not None),
                   key=lambda g: queue_order(g.key, g.priority, g.created))
    decisions, own = {}, 0.0
    for g in gangs:
        began = time.process_time()
        decisions[g.key] = step(g, snapshot, now, policy, queue).decision
        if g.key == watched:
            own = time.process_time() - began
    spent = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Outcome(decisions[watched], spent, own, peak)


def churn_pod(n: int, spec_bytes: int = 8180, tenant: str = ATTACKER) -> dict[str, Any]:
    """Pod ``n`` of a tenant that creates and deletes pods one after another: a spec of
    about ``spec_bytes`` bytes of JSON (the spec memo's key, ``nodeName`` aside) made of
    short tolerations of keys no other pod has (~450 for 8 KiB), its own label value, gang
    name and controlling owner; everything the cache parses is distinct from pod to pod."""
    pod = make_pod(f"churn-{n}", tenant).gang(f"churn-{n}", 1).label("churn", f"value-{n}").build()
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"churn-{n}",
                                           "uid": f"uid-job-{n}", "controller": True}]
    pod["metadata"]["resourceVersion"] = str(2 * n + 10)
    tolerations = pod["spec"]["tolerations"]
    while len(msgspec.json.encode(pod["spec"])) + 18 <= spec_bytes:
        tolerations.append({"key": f"{n:05x}{len(tolerations):03x}"[-8:]})
    return pod


def churn(cache: ClusterCache, pods: Sequence[dict[str, Any]]) -> None:
    """Feed ``cache`` each of ``pods`` created, then deleted, by the informers' path (the
    ``transform``, then the watch event), one pod at a time: a tenant with room for one pod."""
    for pod in pods:
        cache.pod_event("ADDED", cache.retain_pod(pod))
        gone = {**pod, "metadata": {**pod["metadata"], "resourceVersion": str(int(pod["metadata"]["resourceVersion"]) + 1)}}
        cache.pod_event("DELETED", cache.retain_pod(gone))


#: Where an allocation the churn made comes from: a stack through this module's
#: :func:`churn`. Threads other tests of the process left running (a reconciler's, an
#: informer's, a subprocess's reader) run Troupe's code too, but never this function, and are
#: not counted.
CHURN_CODE = [tracemalloc.Filter(True, str(Path(__file__).resolve()), all_frames=True)]
#: Frames kept for each allocation. The churn runs on a thread of its own, whose stack starts
#: at it: the deepest allocation the cache makes from it is 16 frames down, and a stack under
#: a test runner's frames would cost each allocation a walk through all of them.
CHURN_FRAMES = 24


def kept_after_churn(cache: ClusterCache, pods: Sequence[dict[str, Any]]) -> int:
    """Bytes still allocated (tracemalloc, :data:`CHURN_FRAMES` frames a stack) after
    :func:`churn` of ``pods`` through ``cache`` (on a thread of its own) and a garbage
    collection, by allocations whose stack passes through :func:`churn`
    (:data:`CHURN_CODE`): what the pods left behind in the process, the cache's own tombstones
    of their deletions included. The objects themselves are made before it starts counting.

    Raises what :func:`churn` raised."""
    def traced() -> int:
        return sum(t.size for t in tracemalloc.take_snapshot().filter_traces(CHURN_CODE).traces)

    gc.collect()
    tracemalloc.start(CHURN_FRAMES)
    try:
        before = traced()
        with ThreadPoolExecutor(1, thread_name_prefix="churn") as worker:
            worker.submit(churn, cache, pods).result()
        gc.collect()
        return traced() - before
    finally:
        tracemalloc.stop()


#: What each deleted pod may leave (docs/decisions/063-memos-held-by-their-users.md): its
#: gang keys' memo entry (2 KiB and its annotations' text; the memo at most 8 MiB in all)
#: and the cache's tombstone of its deletion (its name and about 200 bytes; at most 50,000).
CHURN_PER_POD = 3 * 1024
#: What churn leaves once, whatever the count: the last 1,024 tolerations remembered (each
#: at most 1 KiB: a key of at most 317 characters, a value of at most 63).
CHURN_ONCE = 1024 * 1024


def churn_bound(count: int) -> int:
    """The most :func:`kept_after_churn` may find after ``count`` pods of a tenant were
    created and deleted, in bytes."""
    return CHURN_ONCE + count * CHURN_PER_POD
