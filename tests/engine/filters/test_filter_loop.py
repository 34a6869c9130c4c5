"""The loop that runs the filter plugins' PreFilter states for one gang in profile order
(``filters/gang.py``), and each plugin's own state: made only when the gang needs it, a
member placed counts as the same pod using its node would (``AddPod``), taking it back
undoes it (``RemovePod``), and ``NodeResourcesFit`` runs at its place in the profile."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.filters import (
    interpodaffinity,
    nodename,
    nodeports,
    noderesources,
    nodevolumelimits,
    podtopologyspread,
    profile,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from reconciler.engine.filters.gang import GangFilters, needed
from reconciler.engine.filters.status import Status
from reconciler.engine.ledger.snapshot import Snapshot
from testbed.engine_builders import (
    claim_object,
    csinode_object,
    make_node,
    make_pod,
    snapshot_with,
    volume_object,
)
from troupe.config import Config, SpreadDefault

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KEYS = {"host": HOSTNAME, "zone": ZONE}
TRAIN = {"app": "train"}
JOBSET = "jobset.sigs.k8s.io/jobset-name"


def nodes(*zones: str) -> list[Any]:
    return [make_node(f"n{i}").label(ZONE, zone).allocatable(gpu=8) for i, zone in enumerate(zones)]


def gang(size: int, build: Any = lambda b: b) -> list[Any]:
    return [build(make_pod(f"w-{i}").requests(gpu=1).label("app", "train").index(i).gated()).info()
            for i in range(size)]


def state_types(snapshot: Snapshot, members: list[Any]) -> list[type] | None:
    """The states the loop makes for ``members``, in its order; None when the gang needs no loop."""
    if not needed(snapshot, members):
        return None
    return [type(state) for state in GangFilters(snapshot, members).states]


def volumes_snapshot() -> Snapshot:
    return snapshot_with(nodes("a", "b"), claims=[claim_object("data", "pv-data")],
                         volumes=[volume_object("pv-data", driver="csi.example.com", handle="h-data")],
                         csinodes=[csinode_object("n0", "csi.example.com", 4)])


CASES = [
    ("a gang that asks nothing needs no loop", lambda: snapshot_with(nodes("a")), lambda b: b, None),
    ("host ports: NodePorts only", lambda: snapshot_with(nodes("a")), lambda b: b.host_port(8080),
     [nodeports.PortsInUse]),
    ("host ports and hostname anti-affinity: NodePorts, then InterPodAffinity",
     lambda: snapshot_with(nodes("a")), lambda b: b.host_port(8080).pod_affinity(HOSTNAME, TRAIN, anti=True),
     [nodeports.PortsInUse, interpodaffinity.TermCounts]),
    ("a spread constraint: PodTopologySpread only", lambda: snapshot_with(nodes("a")),
     lambda b: b.spread(ZONE, 1, TRAIN), [podtopologyspread.SpreadCounts]),
    ("a claim on a bound CSI volume: the volume plugins that read it",
     volumes_snapshot, lambda b: b.claim("data"),
     [nodevolumelimits.AttachedVolumes, volumebinding.ClaimChecks, volumezone.ZoneChecks]),
    ("a ReadWriteOncePod claim: VolumeRestrictions too",
     lambda: snapshot_with(nodes("a"), claims=[claim_object("data", modes=("ReadWriteOncePod",))]),
     lambda b: b.claim("data"), [volumerestrictions.ClaimUsers, volumebinding.ClaimChecks, volumezone.ZoneChecks]),
    ("a running pod's anti-affinity against the gang: InterPodAffinity, though no member asks anything",
     lambda: snapshot_with(nodes("a"), [make_pod("db").label("app", "db").on("n0").pod_affinity(HOSTNAME, TRAIN,
                                                                                                anti=True)]),
     lambda b: b, [interpodaffinity.TermCounts]),
    ("a running pod's anti-affinity against others: no loop",
     lambda: snapshot_with(nodes("a"), [make_pod("db").label("app", "db").on("n0").pod_affinity(HOSTNAME, {"app": "x"},
                                                                                                anti=True)]),
     lambda b: b, None),
    ("the cluster's default spread constraints on a JobSet's member: PodTopologySpread",
     lambda: snapshot_with(nodes("a"), config=Config(topology_spread_default_constraints=(SpreadDefault(ZONE, 1),))),
     lambda b: b.label(JOBSET, "js"), [podtopologyspread.SpreadCounts]),
]


@pytest.mark.parametrize(("snapshot", "build", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_gang_gets_the_states_its_members_need_in_profile_order(snapshot, build, want) -> None:
    assert state_types(snapshot(), gang(2, build)) == want


def test_every_registered_state_runs_in_profile_order_with_node_resources_fit_at_its_place() -> None:
    """A gang that asks for every plugin gets every registered state, in the profile's order:
    those before NodeResourcesFit, then those after."""
    snapshot = snapshot_with(nodes("a", "b"), claims=[claim_object("data", "pv-data", modes=("ReadWriteOncePod",))],
                             volumes=[volume_object("pv-data", driver="csi.example.com", handle="h-data")],
                             csinodes=[csinode_object("n0", "csi.example.com", 4)])
    members = [make_pod("w-0").label("app", "train").node_name("n0").host_port(8080).claim("data")
               .spread(ZONE, 1, TRAIN).pod_affinity(HOSTNAME, TRAIN, anti=True).info()]
    loop = GangFilters(snapshot, members)
    registered = [r for r in profile.PROFILE if r.state is not None]
    assert [type(s) for s in loop.states] == [r.state for r in registered]
    fit = profile.position(noderesources.PLUGIN)
    assert [type(s) for s in loop.before] == [r.state for r in registered if profile.position(r.plugin) < fit]
    assert [type(s) for s in loop.after] == [r.state for r in registered if profile.position(r.plugin) > fit]
    assert loop.before + loop.after == loop.states


def test_the_first_refusal_follows_the_profile_with_the_callers_resources_at_their_place() -> None:
    """One member with host port 8080 and a hostname anti-affinity against ``app: train``: n0
    has the port taken, n1 a pod it avoids, n2 neither. Whatever the caller's
    NodeResourcesFit says, NodePorts comes before it and InterPodAffinity after it."""
    snapshot = snapshot_with(nodes("a", "a", "a"), [make_pod("p").host_port(8080).on("n0"),
                                                    make_pod("t").label("app", "train").on("n1")])
    loop = GangFilters(snapshot, gang(1, lambda b: b.host_port(8080).pod_affinity(HOSTNAME, TRAIN, anti=True)))
    full = "full"
    n0, n1, n2 = (snapshot.index[n] for n in ("n0", "n1", "n2"))
    assert loop.first(0, n0, lambda: full) is nodeports.IN_USE
    assert loop.first(0, n1, lambda: full) == full
    assert loop.first(0, n1, lambda: None) is interpodaffinity.ANTI_AFFINITY
    assert loop.first(0, n1) is interpodaffinity.ANTI_AFFINITY, "without the caller's check: the states only"
    assert loop.first(0, n2, lambda: None) is None and loop.admits(0, n2)
    assert not loop.admits(0, n0) and not loop.admits(0, n1)
    named = GangFilters(snapshot, [make_pod("w").node_name("n2").info()])
    assert named.first(0, n0, lambda: full) is nodename.MISMATCH, "NodeName runs before NodeResourcesFit"


RULES = ["none", "anti-host", "anti-zone", "affinity-zone", "affinity-host", "spread-zone", "spread-host", "port",
         "avoid-zone", "claim-shared", "claim-own"]
DRIVER = "csi.example.com"
GANG_SIZE = 5


def cluster(zones: list[str], pods: list[Any]) -> Snapshot:
    """``zones`` as nodes (each attaching one CSI volume at most) with ``pods``, and the
    claims members mount: ``shared`` (``ReadWriteOncePod``, a volume in zone ``a``) and one
    ``own-<i>`` per member."""
    claims = [claim_object("shared", "pv-shared", modes=("ReadWriteOncePod",))]
    claims += [claim_object(f"own-{i}", f"pv-own-{i}") for i in range(GANG_SIZE)]
    volumes = [volume_object("pv-shared", zone="a", driver=DRIVER)]
    volumes += [volume_object(f"pv-own-{i}", driver=DRIVER) for i in range(GANG_SIZE)]
    return snapshot_with(nodes(*zones), pods, claims=claims, volumes=volumes,
                         csinodes=[csinode_object(f"n{i}", DRIVER, 1) for i in range(len(zones))])


def member(i: int, rule: str, app: str) -> Any:
    """Member ``w-<i>`` labelled ``app`` with ``rule``, as a fresh builder."""
    pod = make_pod(f"w-{i}").requests(gpu=1).label("app", app).index(i)
    kind, _, level = rule.partition("-")
    if kind == "claim":
        pod.claim("shared" if level == "shared" else f"own-{i}")
    if kind == "anti":
        pod.pod_affinity(KEYS[level], TRAIN, anti=True)
    elif kind == "affinity":
        pod.pod_affinity(KEYS[level], TRAIN)
    elif kind == "spread":
        pod.spread(KEYS[level], 1, TRAIN)
    elif kind == "port":
        pod.host_port(8080)
    elif kind == "avoid":
        pod.pod_affinity(KEYS[level], {"app": "db"}, anti=True)
    return pod


def running(spec: list[tuple[int, str, str]], zones: list[str]) -> list[Any]:
    out = []
    for k, (at, app, anti) in enumerate(spec):
        pod = make_pod(f"r-{k}").requests(gpu=1).label("app", app).on(f"n{at % len(zones)}")
        if anti:
            pod.pod_affinity(KEYS[anti], TRAIN, anti=True)
        if app == "web":
            pod.host_port(8080)
        out.append(pod)
    return out


def answers(loop: GangFilters, members: list[int], count: int) -> list[Status | None]:
    """The loop's first refusal for each of ``members`` on each of ``count`` nodes."""
    return [loop.first(m, i) for m in members for i in range(count)]


GANGS = st.lists(st.tuples(st.sampled_from(RULES), st.sampled_from(["train", "db"])), min_size=2,
                max_size=GANG_SIZE)
RUNNING = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["db", "web", "train"]),
                             st.sampled_from(["", "host", "zone"])), max_size=4)


@settings(max_examples=150, deadline=None)
@given(zones=st.lists(st.sampled_from("abc"), min_size=1, max_size=6), around=RUNNING, rules=GANGS,
       placed=st.lists(st.integers(0, 5), max_size=4))
def test_a_member_placed_counts_as_the_same_pod_using_its_node_would(
        zones: list[str], around: list[tuple[int, str, str]], rules: list[tuple[str, str]], placed: list[int]) -> None:
    """AddPod: members placed one by one through the loop leave every other member refused
    exactly as a loop made afresh on a snapshot where those members already use those nodes
    (every state counts a placed member as its PreFilter counts a pod using a node)."""
    placed = placed[:len(rules) - 1]
    snapshot = cluster(zones, running(around, zones))
    loop = GangFilters(snapshot, [member(i, rule, app).gated().info() for i, (rule, app) in enumerate(rules)])
    where = {m: at % len(zones) for m, at in enumerate(placed)}
    for m, i in where.items():
        loop.place(m, i)
    rest = [m for m in range(len(rules)) if m not in where]
    after = cluster(zones, running(around, zones) + [member(m, *rules[m]).on(f"n{i}") for m, i in where.items()])
    order = [member(m, *rules[m]).gated().info() for m in rest]
    if needed(after, order):
        fresh = answers(GangFilters(after, order), list(range(len(rest))), len(zones))
    else:
        fresh = [None] * (len(rest) * len(zones))
    assert answers(loop, rest, len(zones)) == fresh


@settings(max_examples=100, deadline=None)
@given(zones=st.lists(st.sampled_from("abc"), min_size=1, max_size=6), around=RUNNING, rules=GANGS,
       placed=st.lists(st.integers(0, 5), max_size=5))
def test_taking_members_back_leaves_every_state_as_it_was(
        zones: list[str], around: list[tuple[int, str, str]], rules: list[tuple[str, str]], placed: list[int]) -> None:
    """RemovePod undoes AddPod: after members are placed and taken back, every member is
    refused on every node as before any was placed."""
    snapshot = cluster(zones, running(around, zones))
    loop = GangFilters(snapshot, [member(i, rule, app).gated().info() for i, (rule, app) in enumerate(rules)])
    everyone = list(range(len(rules)))
    before = answers(loop, everyone, len(zones))
    for m, at in enumerate(placed[:len(rules)]):
        loop.place(m, at % len(zones))
    loop.rollback()
    assert answers(loop, everyone, len(zones)) == before
