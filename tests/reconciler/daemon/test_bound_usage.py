"""The cache counts what bound pods use as they come and go (docs/decisions/061-bound-usage.md):
after any sequence of pod and node events, its snapshot holds exactly the capacity a
snapshot counted from scratch holds, and a change of one pod costs a snapshot a copy, not a
count of every pod."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.usage import BoundUsage
from reconciler.engine.model.keys import PodKey
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

NODES = [f"n{i}" for i in range(4)]


def _nodes(count: int) -> list[dict]:
    return [make_node(name).topology("b0", f"s{i // 2}", f"h{i}").gpus(8).build() for i, name in enumerate(NODES[:count])]


def _pod(name: str, version: int, state: str, node: str, gpus: int, extra: bool) -> dict:
    b = make_pod(name, "ml").gpus(gpus)
    if state in ("Running", "Succeeded", "deleting", "grouped"):
        b = b.running_on(node)
    elif state == "pinned":  # gated, committed by the reconciler's pin
        b = b.gated().annotate(contract.ASSIGNED_NODE, node)
    elif state == "gated":
        b = b.gated()
    pod = b.build()
    pod["metadata"]["resourceVersion"] = str(version)
    if state == "Succeeded":
        pod["status"]["phase"] = "Succeeded"
    if state == "deleting":
        pod["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    if state == "grouped":  # a SharedDeviceGroup member holding its devices: the snapshot counts it
        pod["metadata"]["annotations"].update({"deviceshare.io/group": "g1",
                                               "deviceshare.io/selected-devices": '{"nvidia.com/gpu":["0"]}'})
    if extra:  # a resource no node offers
        pod["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "2"
    return pod


events = st.lists(st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(["a", "b", "c", "d", "e"]),
              st.sampled_from(["Running", "Succeeded", "deleting", "grouped", "pinned", "gated", "Pending", "DELETED"]),
              st.sampled_from([*NODES, "gone-node"]), st.integers(0, 8), st.booleans()),
    st.tuples(st.just("nodes"), st.integers(2, 4)),
    st.tuples(st.just("snapshot")),
), min_size=1, max_size=40)


def _capacity(snapshot: Snapshot) -> tuple[dict, dict, list]:
    return dict(snapshot._free), dict(snapshot._using), sorted(snapshot.pods)


@settings(max_examples=150, deadline=None)
@given(events)
def test_the_kept_count_is_the_count_from_scratch_after_any_events(sequence):
    cache = ClusterCache(Config())
    cache.replace_nodes(_nodes(4))
    cache.snapshot()
    version, alive = 10, {}
    for event in sequence:
        version += 1
        if event[0] == "nodes":
            cache.replace_nodes(_nodes(event[1]))
        elif event[0] == "snapshot":
            cache.snapshot()
        else:
            _, name, state, node, gpus, extra = event
            if state == "DELETED":
                if name in alive:
                    cache.pod_event("DELETED", alive.pop(name))
                continue
            alive[name] = _pod(name, version, state, node, gpus, extra)
            cache.pod_event("MODIFIED" if name in alive else "ADDED", alive[name])
    kept = cache.snapshot()
    fresh = ClusterCache(Config())
    fresh.replace_nodes(_nodes(len(cache.snapshot().nodes)))
    fresh.replace_pods(list(alive.values()))
    counted = fresh.snapshot()
    assert _capacity(kept) == _capacity(counted)
    assert kept.reservations == counted.reservations and kept.terms_keys == counted.terms_keys


def test_a_snapshot_after_one_pod_changed_takes_the_others_from_the_kept_count():
    cache = ClusterCache(Config())
    cache.replace_nodes(_nodes(4))
    pods = [_pod(f"p{k}", 2, "Running", NODES[k % 4], 1, False) for k in range(40)]
    cache.replace_pods(pods)
    first = cache.snapshot()
    assert first.free("n0")["nvidia.com/gpu"] == 8 - 10
    cache.pod_event("MODIFIED", _pod("p0", 3, "Succeeded", "n0", 1, False))
    second = cache.snapshot()
    assert second.free("n0")["nvidia.com/gpu"] == 8 - 9 and first.free("n0")["nvidia.com/gpu"] == 8 - 10
    assert second.using(str(PodKey("ml", "p0"))) is None and second.using(str(PodKey("ml", "p1"))) == "n1"


def test_a_resource_no_node_offers_leaves_no_column_once_no_pod_asks_for_it():
    cache = ClusterCache(Config())
    cache.replace_nodes(_nodes(2))
    usage = BoundUsage(cache.snapshot().table)
    from reconciler.engine.model.pods import PodInfo

    pod = PodInfo.from_object(_pod("a", 2, "Running", "n0", 0, True))
    usage.add(pod)
    assert usage.free["example.com/foo"] == [-2, 0]
    usage.remove(pod.key)
    assert "example.com/foo" not in usage.free and not usage.using
