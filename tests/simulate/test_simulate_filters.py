"""The simulator and ``kubectl troupe`` read what the reconciler's cache reads for the
filters of kube-scheduler's default profile (namespaces' labels, claims, volumes, CSINodes)
and the budgets ``atomic`` preemption counts, and decide as the controller does
(docs/decisions/031-kube-scheduler-filters.md)."""

from __future__ import annotations

import json

from reconciler.daemon.cache import ClusterCache
from reconciler.objects.snapshot_io import read_file, read_retained
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import compose
from reconciler.tools import plugin, simulate, views
from testbed.engine_builders import (
    HOSTNAME,
    SUBBLOCK,
    budget,
    claim_object,
    make_node,
    make_pod,
    volume_object,
)
from tests.support.snapshots import write_list
from troupe import contract
from troupe.config import Config

GUARD = {"app": "guard"}


def namespace(name, **labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def nodes():
    """a1 a2 in subblock s1, a3 a4 in s2, all in block b1: 8 GPUs each."""
    return [make_node(f"a{i}").topology("b1", "s1" if i <= 2 else "s2", f"a{i}").allocatable(gpu=8).build()
            for i in range(1, 5)]


def train(i, size=2):
    """Member ``i`` of ``ml/train``: 8 GPUs, anti-affine (per host) to ``app=guard`` pods in
    namespaces labelled ``team=other``; member 0 mounts claim ``data``."""
    pod = (make_pod(f"train-{i}", "ml").requests(gpu=8).gang("train", size).index(i).gated()
           .created("2024-05-01T10:00:00Z")
           .pod_affinity(HOSTNAME, GUARD, anti=True, namespaceSelector={"matchLabels": {"team": "other"}}))
    return (pod.claim("data") if i == 0 else pod).build()


def cluster():
    """The nodes, pods, and the claims, volumes and namespaces the filters read: the claim is
    bound to a volume only a3 reaches, the guard runs on a4 in a namespace labelled
    ``team=other``. With both read, train-0 goes to a3 and train-1 may not join it on a4."""
    guard = make_pod("guard", "batch").label("app", "guard").on("a4").build()
    pods = [guard, train(0), train(1)]
    extra = [namespace("ml"), namespace("batch", team="other"), claim_object("data", "pv-1", namespace="ml"),
             volume_object("pv-1", hostname="a3")]
    return nodes(), pods, extra


def controller_nodes(nodes_, pods, extra, config, key="ml/train", budgets=()):
    """Pod name -> the node the controller pins it to, and the pods' writer port, after one
    reconcile of ``key`` on a cache holding every object."""
    cluster, cache = FakeCluster(), ClusterCache(config)
    cache.replace_nodes(nodes_)
    cache.replace_pods([cluster.pods.add(p) for p in pods])
    cache.budgets.replace(budgets)
    kinds = {"PersistentVolumeClaim": "persistentvolumeclaims", "PersistentVolume": "persistentvolumes",
             "Namespace": "namespaces"}
    for kind, plural in kinds.items():
        cache.volumes.replace(plural, [o for o in extra if o["kind"] == kind])
    compose(cache, cluster, config, wall_clock=lambda: 1_800_000_000.0).gangs.reconcile(key)
    pinned = {ref.name: pod["spec"].get("nodeSelector", {}).get(contract.HOSTNAME_LABEL)
              for ref, pod in cluster.pods.objects.items()}
    return pinned, cluster.pods


def simulated(capsys, path, *argv):
    assert simulate.main([path, "--output", "json", "--now", "2027-01-15T08:00:00Z", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_simulator_reads_namespaces_claims_and_volumes_and_decides_as_the_controller(tmp_path, capsys):
    nodes_, pods, extra = cluster()
    out = simulated(capsys, write_list(tmp_path, nodes_ + pods + extra))
    [gang] = out["gangs"]
    assert gang["phase"] == "Placed", gang["reason"]
    planned = {p["pod"]: p["node"] for p in gang["placements"]}
    assert planned["train-0"] == "a3"  # the only node its volume reaches
    assert planned["train-1"] != "a4"  # the guard's namespace is labelled team=other
    pinned, _ = controller_nodes(nodes_, pods, extra, Config())
    assert {name: pinned[name] for name in planned} == planned


def test_kubectl_troupe_reads_them_from_a_snapshot_as_the_simulator(tmp_path, capsys):
    nodes_, pods, extra = cluster()
    path = tmp_path / "snapshot.json"  # JSON: read by the retained fast path, as kubectl prints it
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes_ + pods + extra}))
    assert plugin.main(["status", "--snapshot", str(path), "--output", "json", "--now", "2027-01-15T08:00:00Z"]) == 0
    [gang] = json.loads(capsys.readouterr().out)["items"]
    assert (gang["spec"]["gangName"], gang["status"]["phase"]) == ("train", "Placed")
    objects = read_retained(read_file(str(path)), str(path))
    read = views.read(objects, Config(), 1_800_000_000.0)
    [status] = views.status(read)
    assert status.outcome is not None
    planned = {p["pod"]: p["node"] for p in status.outcome.placements}
    assert planned["train-0"] == "a3"
    assert planned["train-1"] != "a4"
    [by_simulator] = simulated(capsys, str(path))["gangs"]
    assert planned == {p["pod"]: p["node"] for p in by_simulator["placements"]}
    assert read.snapshot.namespaces["batch"] == {"team": "other"}


def test_atomic_with_a_budget_and_the_filters_matches_the_controller(tmp_path, capsys):
    """Gang ``low`` (a1 a2) is left whole by its budget; ``mid`` (a3 a4) is evicted: the
    controller's fake writer evicts the pods the simulator lists as victims."""
    low = [make_pod(f"low-{n}", "batch").requests(gpu=8).gang("low", 2).label("app", "low").on(n).build()
           for n in ("a1", "a2")]
    mid = [make_pod(f"mid-{n}", "batch").requests(gpu=8).gang("mid", 2).priority(50).on(n).build()
           for n in ("a3", "a4")]
    high = [make_pod(f"train-{i}", "ml").requests(gpu=8).gang("train", 2).index(i).priority(100).gated()
            .claim("data").build() for i in range(2)]
    extra = [namespace("ml"), namespace("batch"), claim_object("data", "pv-1", namespace="ml", modes=["ReadWriteMany"]),
             volume_object("pv-1", zone="z")]
    keep = budget("keep-low", 1, {"app": "low"}, namespace="batch")
    path = write_list(tmp_path, nodes() + low + mid + high + extra + [keep])
    [gang] = simulated(capsys, path, "--gang-preemption-mode", "atomic")["gangs"]
    assert gang["phase"] == "Preempting", gang["reason"]
    victims = sorted(v["pod"] for v in gang["victims"])
    assert victims == ["mid-a3", "mid-a4"]
    config = Config(gang_preemption_mode="atomic")
    _, writer = controller_nodes(nodes(), low + mid + high, extra, config, budgets=[keep])
    assert sorted(ref.name for ref in writer.evicted) == victims


def why_json(tmp_path, capsys, members):
    path = write_list(tmp_path, nodes() + members)
    assert plugin.main(["why", "train-0", "-n", "ml", "--snapshot", path, "--output", "json",
                        "--now", "2027-01-15T08:00:00Z"]) == 0
    return json.loads(capsys.readouterr().out)


def test_why_counts_what_placement_fits_with_the_pod_filters_its_members_carry(tmp_path, capsys):
    """Four 4-GPU members that require one subblock, per host anti-affine to each other:
    each subblock (two free 8-GPU nodes) fits 2 of 4, both nodes refusing the third by
    anti-affinity, as placement says (without the term the gang is placed). In JSON and
    in text; no caveat is left."""
    def member(i):
        return (make_pod(f"train-{i}", "ml").requests(gpu=4).gang("train", 4).index(i).gated().label("app", "train")
                .annotate(contract.TOPOLOGY_REQUIRED_LEVEL, SUBBLOCK))

    assert why_json(tmp_path, capsys, [member(i).build() for i in range(4)])["gang"]["phase"] == "Placed"
    anti = [member(i).pod_affinity(HOSTNAME, {"app": "train"}, anti=True).build() for i in range(4)]
    found = why_json(tmp_path, capsys, anti)["shortfall"]
    assert "caveat" not in found
    for domain in found["domains"]:
        assert (domain["fits"], domain["need"]) == (2, 4)
        assert domain["excluded"] == {"didn't match pod anti-affinity rules": 2}
    assert found["domains"][0]["text"] == (
        "subblock s1: 2 of 4 fit (2 nodes didn't match pod anti-affinity rules); at most 2 even when empty")
    assert plugin.main(["why", "train-0", "-n", "ml", "--snapshot", write_list(tmp_path, nodes() + anti),
                        "--now", "2027-01-15T08:00:00Z"]) == 0
    text = capsys.readouterr().out
    assert "fits 2 of 4 members" in text
    assert "subblock s1: 2 of 4 fit (2 nodes didn't match pod anti-affinity rules)" in text
    assert "counts use the node filters" not in text
