"""The reconciler's cache of DRA objects (reconciler.daemon.cache.dra): what its snapshots and
gangs count once ResourceSlices, a DeviceClass and claim templates are listed, and after a
claim is allocated (docs/decisions/044-dra.md)."""

from __future__ import annotations

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.lifecycle import Phase
from testbed import dra_builders as b
from testbed.reconciler_builders import make_node, make_pod
from troupe.config import Config

KIND = f"devices/{b.CLASS}"


def cache_with_devices() -> ClusterCache:
    cache = ClusterCache(Config())
    cache.replace_nodes([make_node(f"n{i}").topology("b1", "s1", f"h{i}").build() for i in range(1, 3)])
    cache.dra.replace("resourceslices", [b.resource_slice("n1"), b.resource_slice("n2")])
    cache.dra.replace("deviceclasses", [b.device_class()])
    cache.dra.replace("resourceclaimtemplates", [b.claim_template("eight", 8)])
    cache.replace_pods([b.with_claim(make_pod(f"train-{i}").gang("train", 2).index(i).gated().build(), template="eight")
                        for i in range(2)])
    return cache


def test_listed_dra_objects_make_nodes_offer_devices_and_members_ask_for_them():
    cache = cache_with_devices()
    snapshot = cache.snapshot()
    assert [n.allocatable[KIND] for n in snapshot.nodes] == [8, 8]
    gang = cache.gang("team-a/train")
    assert gang is not None and [m.requests[KIND] for m in gang.members] == [8, 8]
    assert decide(gang, snapshot, 1_800_000_000.0).phase is Phase.PLACED


def test_a_claim_allocated_to_another_pod_takes_its_devices_and_the_gang_waits():
    cache = cache_with_devices()
    cache.dra.event("resourceclaims", "ADDED", b.claim("other", 4, allocated_on="n1",
                                                        devices=tuple(f"gpu-{i}" for i in range(4))))
    snapshot = cache.snapshot()
    assert [n.allocatable[KIND] for n in snapshot.nodes] == [4, 8]
    gang = cache.gang("team-a/train")
    assert gang is not None
    decision = decide(gang, snapshot, 1_800_000_000.0)
    assert decision.phase is Phase.UNSCHEDULABLE and f"insufficient {KIND}: 1" in decision.reason, decision.reason
    cache.dra.event("resourceclaims", "DELETED", b.claim("other", 4))
    assert [n.allocatable[KIND] for n in cache.snapshot().nodes] == [8, 8]


def test_an_unreadable_dra_object_is_left_out_and_counted():
    cache = cache_with_devices()
    bad = b.resource_slice("n2")
    bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    cache.dra.event("resourceslices", "MODIFIED", bad)
    assert [n.allocatable.get(KIND, 0) for n in cache.snapshot().nodes] == [8, 0]
    assert "lots" in cache.unreadable.why("ResourceSlice", "n2-gpu.troupe.dev")


def test_dra_events_and_snapshots_on_two_threads_never_deadlock():
    # A DRA change bumps the workload index; the workload index's view reads the DRA index:
    # neither may hold its own lock while taking the other's.
    import threading

    cache = cache_with_devices()
    stop = threading.Event()

    def events() -> None:
        while not stop.is_set():
            cache.dra.event("resourceclaims", "ADDED", b.claim("other", 1, allocated_on="n1", devices=("gpu-0",)))

    def views() -> None:
        while not stop.is_set():
            cache.workloads.view()
            cache.snapshot()

    threads = [threading.Thread(target=events, daemon=True), threading.Thread(target=views, daemon=True)]
    for t in threads:
        t.start()
    stop.wait(1.5)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "deadlocked"


def test_the_counted_node_table_is_kept_while_only_pods_without_claims_change():
    cache = cache_with_devices()
    first = cache.snapshot()
    cache.pod_event("ADDED", make_pod("web-0").build())  # no claim: the demand for devices is the same
    second = cache.snapshot()
    assert second is not first and second.table is first.table, "counted once (issue 37)"
    assert [n.allocatable[KIND] for n in second.nodes] == [8, 8]
    cache.pod_event("ADDED", b.with_claim(make_pod("solo").build(), template="eight"))  # one more asks
    third = cache.snapshot()
    assert [n.allocatable[KIND] for n in third.nodes] == [8, 8]
    cache.dra.event("resourceclaims", "ADDED", b.claim("other", 4, allocated_on="n1",
                                                        devices=tuple(f"gpu-{i}" for i in range(4))))
    fourth = cache.snapshot()
    assert fourth.table is not third.table and [n.allocatable[KIND] for n in fourth.nodes] == [4, 8]
    cache.node_event("ADDED", make_node("n3").topology("b1", "s1", "h3").build())
    assert [n.name for n in cache.snapshot().nodes] == ["n1", "n2", "n3"], "a new node: counted again"
