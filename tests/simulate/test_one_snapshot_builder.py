"""The reconciler's cache, the simulator and ``kubectl troupe`` build equal snapshots of the
same objects (docs/decisions/047-one-snapshot-builder.md): every kind a snapshot reads,
the cache fed by its list calls (objects cut down as it keeps them), the simulator and
``kubectl troupe --snapshot`` reading one ``kubectl get ... -o json`` file of them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.gangs.gang import all_gangs
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.reservations import Record
from reconciler.objects.snapshot_io import InputError, read_file, read_objects, read_retained
from reconciler.tools import simulate, views
from testbed import dra_builders as dra
from testbed.as_created import RESERVATION_KEY, job_object, member_pod
from testbed.engine_builders import (
    budget,
    claim_object,
    csinode_object,
    make_group,
    make_node,
    make_pod,
    volume_object,
)
from troupe import contract
from troupe.config import Config, SpreadDefault

ZONE = "topology.kubernetes.io/zone"
CONFIG = Config(topology_spread_default_constraints=(SpreadDefault(ZONE, 1),))
PLANNED = "2027-01-15T08:00:00.000+00:00"


def typed(kind: str, api_version: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the ``kind`` and ``apiVersion`` kubectl prints."""
    return {"apiVersion": api_version, "kind": kind, **obj}


def jobset(name: str, record: Record) -> dict[str, Any]:
    """A JobSet of one replicated Job of 2 whole-node pods, released as created, carrying ``record``."""
    template = {"metadata": {"annotations": {"troupe.io/gang-size": "auto"}},
                "spec": {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "8"},
                                                                       "limits": {"nvidia.com/gpu": "8"}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "generation": 1,
                         "creationTimestamp": "2027-01-15T08:00:00Z",
                         "annotations": {contract.RESERVATION: record.signed(
                             ("JobSet", "ml", name), f"uid-{name}", RESERVATION_KEY).encode()}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "template": template}}}]}}


def cluster() -> dict[str, list[dict[str, Any]]]:
    """Objects of every kind a snapshot reads, by the resource name their list has:

    - nodes b0-s0-h0..3 and b0-s1-h0..3 (8 GPUs, zones a and b), shared-0 opted in to
      shared devices, DRA nodes d0 and d1 (8 devices each, no extended GPUs);
    - gang ``run`` bound on b0-s0-h0/h1 (a budget covers it), gang ``wait`` 3 of 4 gated,
      ``vol`` gated with a claim bound to a volume only b0-s1-h3 reaches (a CSINode limits
      its driver), a group pod bound in SharedDeviceGroup ``grp``, ``infer`` gated asking
      for 8 devices each from a claim template, ``other`` holding 4 devices of d0 through
      an allocated claim;
    - Job ``train`` released as created, its reservation on b0-s1-h0..2, rank 0 released
      and running; JobSet ``js`` reserved on b0-s0-h2/h3, Job ``draw`` (a claim of 8
      devices) on d1, no pod yet;
    - namespaces ``ml`` (labelled) and ``team-a``.
    """
    nodes = [make_node(f"b0-s{s}-h{h}").topology("b0", f"b0-s{s}", f"b0-s{s}-h{h}").allocatable(cpu="32", gpu=8)
             .label(ZONE, "ab"[h % 2]).build() for s in range(2) for h in range(4)]
    nodes.append(make_node("shared-0").topology("b1", "b1-s0", "shared-0").allocatable(gpu=8).shared().build())
    nodes += [make_node(f"d{i}").topology("b2", "b2-s0", f"d{i}").label(ZONE, "a").build() for i in range(2)]
    record = Record("job:train", PLANNED, ("b0-s1-h0", "b0-s1-h1", "b0-s1-h2"))
    train = job_object("train", 3, record=record)
    js = jobset("js", Record("jobset:js:0", PLANNED, ("b0-s0-h2", "b0-s0-h3")))
    devices_job = job_object("draw", 1, gpus=0, record=Record("job:draw", PLANNED, ("d1",)))
    dra.with_claim(devices_job["spec"]["template"], template="eight")
    pods = [make_pod(f"run-{i}", "ml").requests(gpu=8).gang("run", 2).index(i).label("gang", "run")
            .on(f"b0-s0-h{i}").build() for i in range(2)]
    pods += [make_pod(f"wait-{i}", "ml").requests(gpu=8).gang("wait", 4).index(i).gated().build() for i in range(3)]
    pods.append(make_pod("vol-0", "ml").requests(gpu=8).gang("vol", 1).claim("data").gated().build())
    pods.append(make_pod("infer-a", "ml").group("grp").devices(gpu="0,1").on("shared-0").build())
    pods += [dra.with_claim(make_pod(f"infer-{i}", "team-a").gang("infer", 2).index(i).gated().build(), template="eight")
             for i in range(2)]
    pods.append(dra.with_claim(make_pod("other", "team-a").on("d0").build(), claim_name="other"))
    pods.append(member_pod(train, 0, gated=False, node="b0-s1-h0", planned_at=PLANNED, bound=True, phase="Running"))
    pods.append(member_pod(train, 1))
    return {
        "nodes": [typed("Node", "v1", n) for n in nodes],
        "pods": [typed("Pod", "v1", p) for p in pods],
        "jobs": [train, devices_job],
        "jobsets": [js],
        "shareddevicegroups": [make_group("grp").resources(gpu=2).bound("shared-0", "0,1").build()],
        "poddisruptionbudgets": [typed("PodDisruptionBudget", "policy/v1",
                                       budget("keep-run", 0, {"gang": "run"}, namespace="ml"))],
        "persistentvolumeclaims": [typed("PersistentVolumeClaim", "v1",
                                         claim_object("data", "pv-1", namespace="ml"))],
        "persistentvolumes": [typed("PersistentVolume", "v1",
                                    volume_object("pv-1", hostname="b0-s1-h3", driver="pd.csi"))],
        "csinodes": [typed("CSINode", "storage.k8s.io/v1", csinode_object("b0-s1-h3", "pd.csi", 1))],
        "namespaces": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "ml"}}},
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}],
        "resourceslices": [dra.resource_slice("d0"), dra.resource_slice("d1")],
        "deviceclasses": [dra.device_class()],
        "resourceclaims": [dra.claim("other", 4, allocated_on="d0", devices=("gpu-0", "gpu-1", "gpu-2", "gpu-3"))],
        "resourceclaimtemplates": [dra.claim_template("eight", 8), dra.claim_template("eight", 8, namespace="ml")],
    }


def cached(objects: dict[str, list[dict[str, Any]]], config: Config) -> Snapshot:
    """The reconciler's snapshot: a cache fed each kind by its list call."""
    cache = ClusterCache(config, reservation_key=RESERVATION_KEY)
    cache.replace_nodes(objects["nodes"])
    cache.replace_pods(objects["pods"])
    cache.replace_jobs(objects["jobs"])
    cache.replace_workloads("JobSet", objects["jobsets"])
    cache.replace_groups(objects["shareddevicegroups"])
    cache.budgets.replace(objects["poddisruptionbudgets"])
    for kind in ("persistentvolumeclaims", "persistentvolumes", "csinodes", "namespaces"):
        cache.volumes.replace(kind, [cache.volumes.retain(kind, o) for o in objects[kind]])
    for kind in ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"):
        cache.dra.replace(kind, [cache.dra.retain(o) for o in objects[kind]])
    return cache.snapshot()


def dumped(tmp_path: Path, objects: dict[str, list[dict[str, Any]]]) -> str:
    """The objects as the snapshot command writes them: one ``v1 List``, kinds in its order."""
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [o for kind in objects.values()
                                                                               for o in kind]}))
    return str(path)


def plain(value: Any) -> Any:
    """``value`` with every dataclass in it as its type and fields (parsed nodes and pods
    compare by identity; two parses of one object must compare by what they hold)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(plain(v) for v in value)
    return value


def state(snapshot: Snapshot) -> dict[str, Any]:
    """Everything a decision reads of a snapshot, as plain values (:func:`plain`): the nodes
    in order with their paths and free capacity, the pods and the node each uses, what each
    reservation rank and group holding uses, the groups, budgets, namespaces, volumes,
    spread defaults and device holdings."""
    holders = [*snapshot.pods, *(r.holding(rank) for r in snapshot.reservations.values()
                                 for rank in range(len(r.record.nodes))),
               *(f"group:{g}" for g in snapshot.groups)]
    volumes = snapshot.volumes
    return plain({
        "nodes": list(snapshot.nodes), "paths": list(snapshot.paths),
        "free": [snapshot.free(i) for i in range(len(snapshot.nodes))],
        "pods": dict(snapshot.pods), "using": {key: snapshot.using(key) for key in holders},
        "reservations": snapshot.reservations, "groups": snapshot.groups, "group_errors": snapshot.group_errors,
        "budgets": snapshot.budgets, "namespaces": dict(snapshot.namespaces),
        "volumes": None if volumes is None else (volumes.claims, volumes.volumes, volumes.csinodes),
        "spread_defaults": snapshot.spread_defaults, "holdings": snapshot.devices.holdings,
        "conflicts": snapshot.devices.conflicts, "levels": snapshot.levels,
    })


def test_the_cache_the_simulator_and_kubectl_troupe_build_one_snapshot_of_every_kind(tmp_path: Path) -> None:
    objects = cluster()
    path = dumped(tmp_path, objects)
    by_cache = state(cached(objects, CONFIG))
    levels = TopologyLevels.from_config(CONFIG)
    by_simulator = state(simulate.build(read_objects(read_file(path), path), levels, CONFIG).snapshot)
    by_kubectl_troupe = state(views.read(read_retained(read_file(path), path), CONFIG, 0.0).snapshot)
    for name, want in by_cache.items():
        assert by_simulator[name] == want, f"the simulator's {name} differ from the reconciler's"
        assert by_kubectl_troupe[name] == want, f"kubectl troupe's {name} differ from the reconciler's"
    # Each kind made its mark, so the equality above is not of empty snapshots.
    snapshot = cached(objects, CONFIG)
    assert snapshot.free("b0-s0-h3")["nvidia.com/gpu"] == 0, "the JobSet's reservation holds its rank 1's node"
    assert snapshot.free("b0-s1-h2")["nvidia.com/gpu"] == 0, "the Job's reservation holds its rank 2's node"
    assert snapshot.free("b0-s1-h3")["nvidia.com/gpu"] == 8, "nothing holds a node no reservation names"
    devices = f"devices/{dra.CLASS}"
    assert snapshot.free("d0")[devices] == 4, "DRA counted: the allocated claim holds 4 of d0's devices"
    assert snapshot.free("d1")[devices] == 0, "the reservation of Job draw holds d1's 8 devices"
    assert snapshot.pods[PodKey("team-a", "infer-0")].requests[devices] == 8
    assert set(snapshot.devices.holdings) == {"grp"} and [b.key for b in snapshot.budgets] == ["ml/keep-run"]
    assert snapshot.namespaces["ml"] == {"team": "ml"} and snapshot.volumes is not None
    assert [c.topology_key for c in snapshot.spread_defaults] == [ZONE]


@pytest.mark.parametrize("kinds", [("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")],
                         ids=["a cluster that serves no DRA objects"])
def test_without_dra_objects_neither_counts_claims(tmp_path: Path, kinds: tuple[str, ...]) -> None:
    """Pods claim devices, but no DRA object is listed (a cluster without ``resource.k8s.io/v1``,
    or a snapshot taken without those kinds): the cache counts no claim, and neither does the
    simulator (it used to hold the gang, 'ResourceClaimTemplate not found')."""
    objects = {kind: [] if kind in kinds else items for kind, items in cluster().items()}
    path = dumped(tmp_path, objects)
    snapshot = cached(objects, CONFIG)
    by_simulator = state(simulate.build(read_objects(read_file(path), path), TopologyLevels.from_config(CONFIG),
                                        CONFIG).snapshot)
    assert by_simulator == state(snapshot)
    infer = snapshot.pods[PodKey("team-a", "infer-0")]
    assert infer.malformed == "" and not any(r.startswith("devices/") for r in infer.requests)


def test_the_one_parser_names_the_object_it_cannot_read(tmp_path: Path) -> None:
    objects = cluster()
    objects["nodes"][1] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b0-s0-h1"}, "status": {}}
    path = dumped(tmp_path, objects)
    with pytest.raises(InputError, match=r"item 1 \(Node b0-s0-h1\): status.allocatable: missing field"):
        simulate.build(read_objects(read_file(path), path), TopologyLevels.from_config(CONFIG), CONFIG)



# --- pod groups (docs/decisions/056-pod-groups.md) ------------------------------------------
def pod_groups() -> dict[str, list[dict[str, Any]]]:
    """Nodes, a waiting gang of each pod group source (3 of 4 members gated; the Volcano
    one's group missing) and one group of each source, by their resource's name."""
    nodes = [typed("Node", "v1", make_node(f"n{i}").topology("b0", f"s{i // 2}", f"h{i}").allocatable(gpu=8).build())
             for i in range(4)]
    keys = {"workload": None, "volcano": ("annotate", "scheduling.k8s.io/group-name"),
            "coscheduling": ("label", "scheduling.x-k8s.io/pod-group"), "kai": ("annotate", "pod-group-name")}
    pods = []
    for source, key in keys.items():
        for i in range(3):
            b = make_pod(f"{source}-{i}", "ml").requests(gpu=2).index(i).gated()
            if key is None:
                b.spec["schedulingGroup"] = {"podGroupName": "g"}
            else:
                getattr(b, key[0])(key[1], "g")
            pods.append(typed("Pod", "v1", b.build()))
    meta = {"name": "g", "namespace": "ml"}
    return {"nodes": nodes, "pods": pods, "podgroups": [
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta,
         "spec": {"schedulingPolicy": {"gang": {"minCount": 4}},
                  "schedulingConstraints": {"topology": [{"key": "cloud.google.com/gce-topology-subblock"}]}}},
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
         "spec": {"minMember": 4, "scheduleTimeoutSeconds": 50}},
        {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta,
         "spec": {"minMember": 4, "topologyConstraint": {"preferredTopologyLevel": "cloud.google.com/gce-topology-host"}}},
    ]}


def test_the_cache_the_simulator_and_kubectl_troupe_read_pod_groups_alike(tmp_path: Path) -> None:
    objects = pod_groups()
    cache = ClusterCache(CONFIG)
    cache.replace_nodes(objects["nodes"])
    cache.replace_pods([cache.retain_pod(p) for p in objects["pods"]])  # as the informer keeps them
    for group in objects["podgroups"]:
        source = {"scheduling.k8s.io": "workload", "scheduling.x-k8s.io": "coscheduling",
                  "scheduling.run.ai": "kai"}[group["apiVersion"].split("/")[0]]
        cache.pod_groups.replace(source, group["apiVersion"].split("/")[1], [cache.pod_groups.retain(group)])
    by_cache = {key: cache.gang(key) for key in cache.gang_keys()}
    path = dumped(tmp_path, objects)
    built = simulate.build(read_objects(read_file(path), path), TopologyLevels.from_config(CONFIG), CONFIG)
    by_simulator = {g.key: g for g in simulate.waiting_gangs(built.snapshot, CONFIG, built.parallelism, built.workloads)}
    viewed = views.read(read_retained(read_file(path), path), CONFIG, 0.0)
    by_kubectl_troupe = {g.key: g for g in all_gangs(viewed.snapshot.pods.values(), CONFIG, viewed.built.parallelism,
                                                     viewed.built.workloads)}
    assert sorted(by_cache) == ["ml/coscheduling:g", "ml/kai:g", "ml/volcano:g", "ml/workload:g"]
    for key, gang in by_cache.items():
        assert plain(by_simulator[key]) == plain(gang), key
        assert plain(by_kubectl_troupe[key]) == plain(gang), key
    assert (by_cache["ml/workload:g"].min_size, by_cache["ml/workload:g"].topology.required_level) == (
        4, "cloud.google.com/gce-topology-subblock")
    assert by_cache["ml/coscheduling:g"].timeout_seconds == 50
    assert by_cache["ml/kai:g"].topology.preferred_level == "cloud.google.com/gce-topology-host"
    assert by_cache["ml/volcano:g"].workload_missing.startswith("PodGroup ml/g (scheduling.volcano.sh) not found")
