"""Shared device groups in the engine: IDs, the inventory rebuilt from the cluster, binding
a group to a node (binpack / spread), and gangs whose members share devices.

Nodes of the tables (8 GPUs each unless said)::

    block b0 / subblock s0:  d0 d1 d2 d3      shared (deviceshare.io/mode=shared)
    block b0 / subblock s1:  p0 p1            not shared
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.decision.actions import Release
from reconciler.engine.decision.decide import decide
from reconciler.engine.decision.seen import Decision
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.gangs.lifecycle import Phase
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.devicegroups import (
    DeviceGroup,
    DeviceInventory,
    Holding,
    parse_ids,
    pick_ids,
)
from reconciler.engine.model.fields import ObjectError
from reconciler.engine.model.membership import group_by_gang
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.devicegroups import group_candidates, group_view
from testbed.engine_builders import GPU, make_group, make_node, make_pod, snapshot_of
from troupe.config import Config

CONFIG = Config()
NOW = 1_800_000_000.0


def shared(name, gpu=8, sub="s0"):
    return make_node(name).topology("b0", f"b0-{sub}", name).allocatable(gpu=gpu).shared()


def plain(name, gpu=8):
    return make_node(name).topology("b0", "b0-s1", name).allocatable(gpu=gpu)


def decide_all(snapshot: Snapshot) -> dict[str, Decision]:
    """Every gang with a gated member, decided in key order on a snapshot that takes in
    each placement (what the simulator does)."""
    out = {}
    for key, pods in sorted(group_by_gang(snapshot.pods.values(), CONFIG).items()):
        if not any(p.gated for p in pods):
            continue
        d = decide(build_gang(key, pods, CONFIG, {}), snapshot, NOW)
        out[key] = d
        if d.phase is Phase.PLACED and d.placement is not None:
            snapshot = snapshot.with_assumed(d.placement, d.find(Release).bindings)
    return out


# --- device IDs ---------------------------------------------------------------------------
@pytest.mark.parametrize(("total", "taken", "count", "want"), [
    (8, [], 2, (0, 1)),
    (8, [0, 1], 2, (2, 3)),
    (8, [1, 3], 2, (4, 5)),           # the lowest contiguous run, not the lowest IDs
    (8, [1, 3, 5, 7], 2, (0, 2)),     # no run of two: the lowest free IDs
    (4, [0, 1, 2], 2, None),          # too few free
    (8, [], 0, ()),
])
def test_ids_are_the_lowest_free_run_when_there_is_one(total, taken, count, want):
    assert pick_ids(total, taken, count) == want


def _pick_by_brute_force(total, taken, count):
    free = [i for i in range(total) if i not in set(taken)]
    if len(free) < count:
        return None
    if count == 0:
        return ()
    runs = [tuple(free[s:s + count]) for s in range(len(free) - count + 1) if free[s + count - 1] - free[s] == count - 1]
    return runs[0] if runs else tuple(free[:count])


@given(st.integers(0, 40), st.lists(st.integers(0, 45), max_size=30), st.integers(0, 12))
def test_ids_are_what_enumerating_every_id_would_give(total, taken, count):
    assert pick_ids(total, taken, count) == _pick_by_brute_force(total, taken, count)


def test_picking_ids_never_scales_with_the_count_of_a_node():
    assert pick_ids(270_000_000_000, [0, 5], 3) == (1, 2, 3), "a 256Gi 'device' count answers at once"


@pytest.mark.parametrize("name", ["memory", "cpu", "ephemeral-storage", "hugepages-2Mi", "kubernetes.io/batteries",
                                  "storage.kubernetes.io/x", "nvidia.com/gpu\n"])
def test_a_group_of_a_measured_resource_is_refused_naming_the_field(name):
    with pytest.raises(ObjectError, match=r"must be a counted device, an extended resource such as nvidia.com/gpu"):
        DeviceGroup.from_object(make_group("g").resources(**{"gpu": 1}).build() | {"spec": {"resources": {name: 1}}})


def test_a_group_asking_for_more_devices_than_any_node_has_is_refused():
    with pytest.raises(ObjectError, match="must be an integer from 1 to 1024, got 100000"):
        DeviceGroup.from_object({"metadata": {"name": "g"}, "spec": {"resources": {"nvidia.com/gpu": 100000}}})


@pytest.mark.parametrize(("raw", "want"), [("0,1", (0, 1)), ("1, 0", (0, 1)), ("", ()), ("3,3", (3,))])
def test_id_lists_parse_sorted_without_repeats(raw, want):
    assert parse_ids(raw) == want


@pytest.mark.parametrize("raw", ["a", "-1", "0,,1", "1.5"])
def test_malformed_id_lists_are_refused(raw):
    with pytest.raises(ValueError):
        parse_ids(raw)


def test_a_group_object_with_a_bad_count_is_refused_naming_the_field():
    obj = make_group("g").build()
    obj["spec"]["resources"] = {GPU: 0}
    with pytest.raises(ValueError, match=r"spec.resources.nvidia.com/gpu: must be an integer from 1 to 1024, got 0"):
        DeviceGroup.from_object(obj)


# --- the inventory, rebuilt from the cluster ----------------------------------------------
def test_a_pods_annotation_wins_over_the_groups_status():
    snap = snapshot_of(
        [shared("d0"), shared("d1")],
        [make_pod("a").group("g").devices(gpu="2,3").on("d1")],
        groups=[make_group("g").resources(gpu=2).bound("d0", "0,1")],
    )
    held = snap.devices.holdings["g"]
    assert (held.node, held.devices, held.source) == ("d1", {GPU: (2, 3)}, "pod default/a")
    assert snap.devices.conflicts == ["group g: status says d0 nvidia.com/gpu [0,1], but pod default/a says d1 "
                                      "nvidia.com/gpu [2,3] (kept)"]
    # Both claims take their IDs: what the status names may still be in use somewhere.
    assert dict(snap.devices.taken("d0", GPU)) == {0: "g", 1: "g"}


def test_a_groups_status_is_enough_when_no_pod_holds_its_devices():
    snap = snapshot_of([shared("d0")], groups=[make_group("g").resources(gpu=2).bound("d0", "4,5")])
    assert snap.devices.holdings["g"] == Holding("g", "d0", {GPU: (4, 5)}, "status")
    assert snap.free("d0")[GPU] == 6  # the group's devices count as used: no ordinary gang gets them


def test_a_holding_on_a_node_that_is_gone_holds_nothing_and_is_reported_lost():
    snap = snapshot_of([shared("d0")], groups=[make_group("g").resources(gpu=2).bound("gone", "0,1")])
    assert "g" not in snap.devices.holdings
    assert snap.devices.lost == {"g": "gone"}
    view = group_view(snap, snap.groups["g"], [])
    assert (view.phase, view.reason) == ("Pending", "NodeLost")


def test_a_deleted_groups_running_pods_still_hold_their_ids():
    snap = snapshot_of([shared("d0")], [make_pod("a").group("old").devices(gpu="0,1").on("d0")])
    assert dict(snap.devices.taken("d0", GPU)) == {0: "old", 1: "old"}


def test_finished_pods_hold_nothing():
    snap = snapshot_of([shared("d0")], [make_pod("a").group("g").devices(gpu="0,1").on("d0", phase="Succeeded")],
                       groups=[make_group("g").resources(gpu=2)])
    assert snap.devices.holdings == {}


# --- binding a group: strategy and shortage -----------------------------------------------
def _busy(node, gpus):
    return make_pod(f"busy-{node}").requests(gpu=gpus).on(node)


@pytest.mark.parametrize(("strategy", "want"), [("binpack", "d1"), ("spread", "d2")])
def test_binpack_takes_the_fitting_node_with_fewest_free_devices_spread_the_most(strategy, want):
    # free GPUs: d0 1 (too few), d1 3, d2 8, d3 3
    snap = snapshot_of([shared("d0"), shared("d1"), shared("d2"), shared("d3"), plain("p0")],
                       [_busy("d0", 7), _busy("d1", 5), _busy("d3", 5)],
                       groups=[make_group("g").resources(gpu=2).strategy(strategy)])
    found, why = group_candidates(snap, snap.groups["g"], [make_pod("a").group("g").gated().info()])
    assert why == ""
    assert found[0].node == want
    assert [c.node for c in found] == (["d1", "d3", "d2"] if strategy == "binpack" else ["d2", "d1", "d3"])


def test_a_group_that_fits_nowhere_says_the_shortage_with_numbers():
    snap = snapshot_of([shared("d0"), shared("d1"), plain("p0")], [_busy("d0", 4), _busy("d1", 7)],
                       groups=[make_group("g").resources(gpu=6)])
    pod = make_pod("a").group("g").gated().info()
    found, why = group_candidates(snap, snap.groups["g"], [pod])
    assert found == []
    assert why == ("SharedDeviceGroup g (6 nvidia.com/gpu): no shared node has 6 free nvidia.com/gpu; largest free: 4 "
                   f"on node d0 (3 nodes excluded: not opted in (deviceshare.io/mode=shared): 1, too few free {GPU}: 2)")
    view = group_view(snap, snap.groups["g"], [pod])
    assert (view.phase, view.reason, view.message) == ("Pending", "InsufficientDevices", why)


def test_the_groups_node_selector_and_the_pods_own_filters_both_apply():
    snap = snapshot_of(
        [shared("d0").label("pool", "a"), shared("d1").label("pool", "b").taint("dedicated", "x"),
         shared("d2").label("pool", "b")],
        groups=[make_group("g").resources(gpu=1).node_selector("pool", "b")])
    found, _ = group_candidates(snap, snap.groups["g"], [make_pod("a").group("g").gated().info()])
    assert [c.node for c in found] == ["d2"]


def test_no_shared_node_at_all_is_said_plainly():
    snap = snapshot_of([plain("p0")], groups=[make_group("g").resources(gpu=1)])
    _, why = group_candidates(snap, snap.groups["g"], [make_pod("a").group("g").gated().info()])
    assert why == ("SharedDeviceGroup g (1 nvidia.com/gpu): no node is opted in to shared devices "
                   "(label deviceshare.io/mode=shared)")


# --- decisions ----------------------------------------------------------------------------
def test_the_first_pod_binds_the_group_and_a_later_pod_gets_the_same_node_and_ids():
    nodes = [shared("d0"), shared("d1")]
    group = make_group("g").resources(gpu=2)
    first = decide_all(snapshot_of(nodes, [_busy("d0", 2), make_pod("a").group("g").gated()], groups=[group]))
    d = first["default/pod:a"]
    assert d.phase is Phase.PLACED
    # binpack: d0 has 6 free. The ordinary pod's 2 GPUs lower the count; which IDs the device
    # plugin gave it is unknown, hence the recommended taint that keeps such pods off.
    assert [(m.node, dict(m.devices)) for m in d.release] == [("d0", {GPU: (0, 1)})]
    assert d.find(Release).bindings == (Holding("g", "d0", {GPU: (0, 1)}, f"plan {d.release[0].planned_at}"),)
    # The pod is released with its annotation; a second pod comes.
    released = make_pod("a").group("g").devices(gpu="0,1").on("d0")
    later = decide_all(snapshot_of(nodes, [_busy("d0", 2), released, make_pod("b").group("g").gated()],
                                   groups=[group]))
    m = later["default/pod:b"].release[0]
    assert (m.node, dict(m.devices)) == ("d0", {GPU: (0, 1)})
    assert later["default/pod:b"].find(Release).bindings == ()


def test_two_groups_on_one_node_get_disjoint_ids():
    snap = snapshot_of([shared("d0")], [make_pod("a").group("g1").gated(), make_pod("b").group("g2").gated()],
                       groups=[make_group("g1").resources(gpu=2), make_group("g2").resources(gpu=2)])
    out = decide_all(snap)
    assert dict(out["default/pod:a"].release[0].devices) == {GPU: (0, 1)}
    assert dict(out["default/pod:b"].release[0].devices) == {GPU: (2, 3)}


def test_a_gang_of_two_sharing_one_group_runs_on_one_node_with_the_same_ids():
    pods = [make_pod(f"w-{i}").gang("train", 2).index(i).group("g").requests(cpu="3").gated() for i in range(2)]
    snap = snapshot_of([shared("d0"), shared("d1")], pods, groups=[make_group("g").resources(gpu=4).strategy("spread")])
    d = decide_all(snap)["default/train"]
    assert d.phase is Phase.PLACED
    assert {(m.node, m.devices[GPU]) for m in d.release} == {("d0", (0, 1, 2, 3))}
    assert d.find(Release).plan is not None and d.find(Release).plan.groups["g"].devices == {GPU: (0, 1, 2, 3)}


def test_the_ids_of_a_pod_being_deleted_stay_held_even_when_its_groups_status_was_never_written():
    """A pod being deleted still runs with its devices until it is gone. Its group's status
    write was refused (status Pending): another group must still not get the same IDs."""
    tolerate = ("deviceshare.io/mode", "Equal", "shared", "NoSchedule")
    leaving = make_pod("old").group("g1").devices(gpu="0,1").on("d0").deleting()
    waiting = make_pod("new").gang("new", 1).group("g2").tolerate(*tolerate).gated()
    snap = snapshot_of([shared("d0", gpu=4)], [leaving, waiting],
                       groups=[make_group("g1").resources(gpu=2), make_group("g2").resources(gpu=2)])
    assert snap.devices.taken("d0", GPU) == {0: "g1", 1: "g1"}
    d = decide_all(snap)["default/new"]
    assert d.phase is Phase.PLACED
    assert dict(d.release[0].devices) == {GPU: (2, 3)}, "never the IDs the terminating pod still uses"


def test_two_new_groups_that_fit_a_node_only_one_at_a_time_leave_the_gang_unschedulable_with_both_named():
    """Two 3-GPU groups and one 4-GPU shared node: either group alone fits, both never do.
    The decision must not raise (it once hit an assert): the gang waits Unschedulable."""
    tolerate = ("deviceshare.io/mode", "Equal", "shared", "NoSchedule")
    pods = [make_pod("w-0").gang("pair", 2).index(0).group("a").tolerate(*tolerate).gated(),
            make_pod("w-1").gang("pair", 2).index(1).group("b").tolerate(*tolerate).gated()]
    snap = snapshot_of([shared("d0", gpu=4)], pods, groups=[make_group("a").resources(gpu=3),
                                                           make_group("b").resources(gpu=3)])
    d = decide_all(snap)["default/pair"]
    assert (d.phase, d.code) == (Phase.UNSCHEDULABLE, "Unschedulable")
    assert d.reason.startswith("SharedDeviceGroups a (3 nvidia.com/gpu), b (3 nvidia.com/gpu): each fits a shared "
                               "node alone, but no choice of nodes holds them all"), d.reason
    assert "largest free: 4 on node d0" in d.reason


def test_a_gang_spanning_two_groups_puts_each_member_on_its_groups_node():
    def tolerant(pod):  # what the webhook adds to group pods
        return pod.tolerate("deviceshare.io/mode", "Equal", "shared", "NoSchedule")

    pods = [tolerant(make_pod("w-0").gang("train", 3).index(0).group("g1").gated()),
            tolerant(make_pod("w-1").gang("train", 3).index(1).group("g2").gated()),
            make_pod("w-2").gang("train", 3).index(2).requests(gpu=8).gated()]
    # The shared nodes carry the recommended taint: the ordinary member stays off them.
    snap = snapshot_of([shared("d0").taint("deviceshare.io/mode", "shared"), shared("d1").taint("deviceshare.io/mode", "shared"),
                        plain("p0")], [*pods, make_pod("x").group("g2").devices(gpu="0").on("d1")],
                       groups=[make_group("g1").resources(gpu=2), make_group("g2").resources(gpu=1).bound("d1", "0")])
    d = decide_all(snap)["default/train"]
    assert d.phase is Phase.PLACED
    # g1 is new: binpack takes d1 (7 free: g2 holds ID 0) over d0 (8 free); it gets 1,2.
    assert {m.pod: (m.node, dict(m.devices)) for m in d.release} == {
        "default/w-0": ("d1", {GPU: (1, 2)}),
        "default/w-1": ("d1", {GPU: (0,)}),
        "default/w-2": ("p0", {}),
    }


def test_a_pod_of_a_missing_group_is_held_with_the_reason():
    d = decide_all(snapshot_of([shared("d0")], [make_pod("a").group("nope").gated()]))["default/pod:a"]
    assert (d.phase, d.rule.name) == (Phase.HELD, "DeviceGroup")
    assert d.reason == "member a: SharedDeviceGroup nope does not exist (create it, or fix deviceshare.io/group)"


def test_a_pod_of_a_group_being_deleted_is_held():
    d = decide_all(snapshot_of([shared("d0")], [make_pod("a").group("g").gated()],
                               groups=[make_group("g").resources(gpu=1).deleting()]))["default/pod:a"]
    assert d.phase is Phase.HELD and "is being deleted" in d.reason


def test_a_group_that_does_not_fit_leaves_its_gang_unschedulable_with_the_shortage():
    snap = snapshot_of([shared("d0", gpu=4)], [make_pod("a").group("g").gated()], groups=[make_group("g").resources(gpu=6)])
    d = decide_all(snap)["default/pod:a"]
    assert d.phase is Phase.UNSCHEDULABLE
    assert d.reason.startswith("SharedDeviceGroup g (6 nvidia.com/gpu): no shared node has 6 free nvidia.com/gpu")


def test_ordinary_gangs_do_not_get_the_devices_a_group_holds():
    snap = snapshot_of([shared("d0")], [make_pod("w-0").gang("t", 1).requests(gpu=8).gated()],
                       groups=[make_group("g").resources(gpu=2).bound("d0", "0,1")])
    assert decide_all(snap)["default/t"].phase is Phase.UNSCHEDULABLE


def test_devices_ordinary_pods_request_on_a_shared_node_are_not_free_for_groups():
    snap = snapshot_of([shared("d0")], [_busy("d0", 7), make_pod("a").group("g").gated()],
                       groups=[make_group("g").resources(gpu=2)])
    assert decide_all(snap)["default/pod:a"].phase is Phase.UNSCHEDULABLE


def test_a_release_cut_short_keeps_its_groups_ids_from_the_plan_record():
    pods = [make_pod(f"w-{i}").gang("train", 2).index(i).group("g").gated() for i in range(2)]
    snap = snapshot_of([shared("d0"), shared("d1")], pods, groups=[make_group("g").resources(gpu=2)])
    d = decide_all(snap)["default/train"]
    assert d.find(Release).plan is not None
    # Only the first member was written (with the plan record) before the reconciler died.
    first = next(p for p in pods if p.obj["metadata"]["name"] == d.release[0].pod.split("/")[1])
    first.annotate("reconciler.troupe.io/plan", d.find(Release).plan.encode())
    restarted = snapshot_of([shared("d0"), shared("d1")], pods, groups=[make_group("g").resources(gpu=2)])
    assert restarted.devices.holdings["g"].devices == {GPU: (0, 1)}
    again = decide_all(restarted)["default/train"]
    assert again.phase is Phase.RELEASING
    assert {dict(m.devices)[GPU] for m in again.release} == {(0, 1)}


# --- properties ---------------------------------------------------------------------------
@st.composite
def device_clusters(draw):
    """2-4 shared nodes of 2-8 GPUs (some used by ordinary pods), groups of 1-4 GPUs, and a
    stream of pods joining them (gangs of one), in random order."""
    n = draw(st.integers(2, 4))
    nodes = [shared(f"d{i}", gpu=draw(st.integers(2, 8))) for i in range(n)]
    busy = [make_pod(f"busy-{i}").requests(gpu=draw(st.integers(0, 2))).on(f"d{i}") for i in range(n)]
    groups = [make_group(f"g{k}").resources(gpu=draw(st.integers(1, 4))).strategy(draw(st.sampled_from(["binpack", "spread"])))
              for k in range(draw(st.integers(1, 5)))]
    arrivals = draw(st.lists(st.integers(0, len(groups) - 1), min_size=1, max_size=10))
    return nodes, busy, groups, arrivals


def _run(nodes, busy, groups, arrivals):
    """Pods arrive one by one; each decision is applied as the reconciler writes it (the pod
    released with its devices, on its node). Returns the snapshots after each step and
    what each pod got."""
    pods = list(busy)
    got = {}
    snaps = []
    for k, g in enumerate(arrivals):
        pod = make_pod(f"p{k}").group(f"g{g}").gated()
        snap = snapshot_of(nodes, [*pods, pod], groups=groups)
        d = decide(build_gang(f"default/pod:p{k}", [pod.info()], CONFIG, {}), snap, NOW)
        if d.phase is Phase.PLACED:
            m = d.release[0]
            got[f"p{k}"] = (f"g{g}", m.node, dict(m.devices))
            pod = make_pod(f"p{k}").group(f"g{g}").devices(gpu=",".join(map(str, m.devices[GPU]))).on(m.node)
            snaps.append((snap.with_assumed(d.placement, d.find(Release).bindings), snapshot_of(nodes, [*pods, pod], groups=groups)))
        pods.append(pod)
    return got, snaps


@settings(max_examples=150, deadline=None)
@given(device_clusters())
def test_no_two_groups_ever_hold_the_same_id_on_a_node(cluster):
    got, snaps = _run(*cluster)
    for _, rebuilt in snaps:
        assert not [c for c in rebuilt.devices.conflicts if "held by" in c]
    owners: dict[tuple[str, int], str] = {}
    for group, node, devices in got.values():
        for i in devices[GPU]:
            assert owners.setdefault((node, i), group) == group


@settings(max_examples=150, deadline=None)
@given(device_clusters())
def test_later_members_always_get_their_groups_node_and_ids(cluster):
    got, _ = _run(*cluster)
    first: dict[str, tuple[str, dict]] = {}
    for group, node, devices in got.values():
        assert first.setdefault(group, (node, devices)) == (node, devices)


@settings(max_examples=150, deadline=None)
@given(device_clusters())
def test_a_rebuilt_inventory_equals_the_one_before_a_restart(cluster):
    _, snaps = _run(*cluster)
    for in_memory, rebuilt in snaps:
        assert {g: (h.node, dict(h.devices)) for g, h in in_memory.devices.holdings.items()} == \
               {g: (h.node, dict(h.devices)) for g, h in rebuilt.devices.holdings.items()}
        for node in in_memory.index:
            assert in_memory.devices.taken(node, GPU) == rebuilt.devices.taken(node, GPU)
            assert in_memory.free(node) == rebuilt.free(node)


@settings(max_examples=100, deadline=None)
@given(device_clusters(), st.randoms(use_true_random=False))
def test_binpack_and_spread_choose_as_defined(cluster, rnd: random.Random):
    nodes, busy, groups, _ = cluster
    snap = snapshot_of(nodes, busy, groups=groups)
    group = snap.groups[rnd.choice(sorted(snap.groups))]
    pod = make_pod("x").group(group.name).gated().info()
    found, _ = group_candidates(snap, group, [pod])
    count = group.resources[GPU]
    fitting = {n: f[GPU] for n in snap.index if (f := snap.free(n))[GPU] >= count}
    assert {c.node for c in found} == set(fitting)
    if found:
        want = (min if group.strategy == "binpack" else max)(fitting.values())
        assert fitting[found[0].node] == want
        assert found[0].node == min((n for n, f in fitting.items() if f == want), key=snap.index.__getitem__)


def test_an_inventory_rebuild_is_independent_of_the_order_of_the_evidence():
    claims = [Holding("g1", "d0", {GPU: (0, 1)}, "pod a/x"), Holding("g2", "d0", {GPU: (1, 2)}, "pod a/y")]
    a = DeviceInventory.build(["d0"], {}, claims, [])
    b = DeviceInventory.build(["d0"], {}, list(reversed(claims)), [])
    assert a.holdings == b.holdings and a.conflicts == b.conflicts
    assert a.conflicts == ["node d0 nvidia.com/gpu 1: held by g1 and claimed by g2 (pod a/y)"]


def test_the_plan_record_carries_groups_and_reads_back():
    from reconciler.engine.model.records import Plan

    plan = Plan("2026-01-01T00:00:00.000+00:00", {"u1": "d0"}, {"g": Holding("g", "d0", {GPU: (0, 1)})})
    raw = plan.encode()
    assert json.loads(raw)["groups"] == {"g": {"node": "d0", "devices": {GPU: "0,1"}}}
    back = Plan.decode(raw)
    assert back is not None and back.groups["g"].devices == {GPU: (0, 1)}


def test_a_pod_info_reads_its_group_and_devices():
    info: PodInfo = make_pod("a").group("g").devices(gpu="1,0").info()
    assert (info.device_group, info.devices) == ("g", {GPU: (0, 1)})
    assert make_pod("b").annotate("deviceshare.io/selected-devices", "nonsense").info().devices is None
