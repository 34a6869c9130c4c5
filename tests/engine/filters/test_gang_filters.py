"""kube-scheduler's filters that look at other pods, ports and volumes: one case per filter
and direction, on the gang's own members and on the pods already running, with the
reasons kube-scheduler gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from reconciler.engine.filters import nodename
from reconciler.engine.filters.gang import GangFilters
from reconciler.engine.filters.unmodeled import unmodeled
from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import PlacementResult, place_gang
from testbed.engine_builders import (
    claim_object,
    counts,
    csinode_object,
    make_node,
    make_pod,
    snapshot_with,
    volume_object,
)
from troupe.config import Config, SpreadDefault

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
TRAIN = {"app": "train"}


def zoned(*zones: str, gpu: int = 8) -> list[Any]:
    """One node per entry, ``n<i>`` in zone ``zones[i]``."""
    return [make_node(f"n{i}").label(ZONE, zone).allocatable(gpu=gpu) for i, zone in enumerate(zones)]


def members(size: int, gpu: int = 4, build: Callable[[Any], Any] = lambda b: b, namespace: str = "default"
            ) -> list[PodInfo]:
    """A gang of ``size`` gated members labelled ``app: train`` with ``build`` applied."""
    return [build(make_pod(f"w-{i}", namespace).requests(gpu=gpu).label("app", "train").index(i)
                  .gang("train", size).gated()).info() for i in range(size)]


def running(name: str, node: str, labels: dict[str, str], build: Callable[[Any], Any] = lambda b: b,
            namespace: str = "default") -> Any:
    pod = make_pod(name, namespace).requests(gpu=1).on(node)
    for key, value in labels.items():
        pod.label(key, value)
    return build(pod)


def zones_of(snapshot: Snapshot, result: PlacementResult) -> list[str]:
    return [snapshot.nodes[snapshot.index[a.node]].labels[ZONE] for a in result.assignments]


def one_per_node(snapshot: Snapshot, result: PlacementResult) -> bool:
    return result.placed and set(counts(result).values()) == {1}


# (case, nodes, running pods, members, keyword arguments of the snapshot, what is wanted:
#  a reason the message must hold, or a predicate of (snapshot, result)).
CASES: list[tuple[str, list[Any], list[Any], list[PodInfo], dict[str, Any], Any]] = [
    # InterPodAffinity, the member's anti-affinity among the gang itself.
    ("hostname anti-affinity among the gang: one member per node",
     zoned("a", "a", "a", "a"), [], members(4, build=lambda b: b.pod_affinity(HOSTNAME, TRAIN, anti=True)), {},
     one_per_node),
    ("hostname anti-affinity among the gang, too few nodes",
     zoned("a", "a", "a"), [], members(4, build=lambda b: b.pod_affinity(HOSTNAME, TRAIN, anti=True)), {},
     "node(s) didn't match pod anti-affinity rules"),
    ("zone anti-affinity among the gang: one member per zone",
     zoned("a", "a", "b", "b", "c"), [], members(3, build=lambda b: b.pod_affinity(ZONE, TRAIN, anti=True)), {},
     lambda s, r: r.placed and sorted(zones_of(s, r)) == ["a", "b", "c"]),
    # InterPodAffinity, the member's anti-affinity against running pods.
    ("the member's anti-affinity keeps it off a running pod's node",
     zoned("a", "a"), [running("db", "n0", {"app": "db"})],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True)), {},
     lambda s, r: r.nodes() == {"default/w-0": "n1"}),
    ("the member's anti-affinity against a running pod, no other node",
     zoned("a"), [running("db", "n0", {"app": "db"})],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True)), {},
     "1 node excluded: node(s) didn't match pod anti-affinity rules: 1"),
    ("a term without namespaces selects only its own namespace",
     zoned("a"), [running("db", "n0", {"app": "db"}, namespace="other")],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True)), {},
     lambda s, r: r.placed),
    ("a term naming the other namespace selects there",
     zoned("a"), [running("db", "n0", {"app": "db"}, namespace="other")],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True, namespaces=["other"])), {},
     "node(s) didn't match pod anti-affinity rules"),
    ("a namespace selector selects by the namespace's labels",
     zoned("a"), [running("db", "n0", {"app": "db"}, namespace="other")],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True,
                                               namespaceSelector={"matchLabels": {"team": "x"}})),
     {"namespaces": {"other": {"team": "x"}}}, "node(s) didn't match pod anti-affinity rules"),
    ("a namespace selector that matches no namespace's labels selects nothing there",
     zoned("a"), [running("db", "n0", {"app": "db"}, namespace="other")],
     members(1, build=lambda b: b.pod_affinity(HOSTNAME, {"app": "db"}, anti=True,
                                               namespaceSelector={"matchLabels": {"team": "y"}})),
     {"namespaces": {"other": {"team": "x"}}}, lambda s, r: r.placed),
    ("matchLabelKeys narrows the selector to the member's own value",
     zoned("a"), [running("old", "n0", {"app": "train", "job": "old"})],
     members(1, build=lambda b: b.label("job", "new").pod_affinity(HOSTNAME, TRAIN, anti=True,
                                                                   matchLabelKeys=["job"])), {},
     lambda s, r: r.placed),
    ("mismatchLabelKeys selects the pods with another value",
     zoned("a"), [running("old", "n0", {"app": "train", "job": "old"})],
     members(1, build=lambda b: b.label("job", "new").pod_affinity(HOSTNAME, TRAIN, anti=True,
                                                                   mismatchLabelKeys=["job"])), {},
     "node(s) didn't match pod anti-affinity rules"),
    # InterPodAffinity, a running pod's anti-affinity against the member.
    ("a running pod's anti-affinity keeps the member off its node",
     zoned("a", "a"), [running("solo", "n0", {}, lambda b: b.pod_affinity(HOSTNAME, TRAIN, anti=True))],
     members(1), {}, lambda s, r: r.nodes() == {"default/w-0": "n1"}),
    ("a running pod's anti-affinity, no other node",
     zoned("a"), [running("solo", "n0", {}, lambda b: b.pod_affinity(HOSTNAME, TRAIN, anti=True))],
     members(1), {}, "node(s) didn't satisfy existing pods anti-affinity rules: 1"),
    ("a running pod's zone anti-affinity keeps the member out of its zone",
     zoned("a", "a", "b"), [running("solo", "n0", {}, lambda b: b.pod_affinity(ZONE, TRAIN, anti=True))],
     members(1), {}, lambda s, r: zones_of(s, r) == ["b"]),
    # InterPodAffinity, the member's affinity.
    ("affinity to a running parameter server: every member in its zone",
     zoned("a", "a", "b", "b"), [running("ps", "n2", {"role": "ps"})],
     members(4, gpu=2, build=lambda b: b.pod_affinity(ZONE, {"role": "ps"})), {},
     lambda s, r: r.placed and set(zones_of(s, r)) == {"b"}),
    ("affinity to a parameter server that does not run",
     zoned("a"), [], members(1, build=lambda b: b.pod_affinity(ZONE, {"role": "ps"})), {},
     "node(s) didn't match pod affinity rules"),
    ("affinity to the gang itself: all members in one zone",
     zoned("a", "b", "b", "b"), [], members(3, gpu=8, build=lambda b: b.pod_affinity(ZONE, TRAIN)), {},
     lambda s, r: r.placed and set(zones_of(s, r)) == {"b"}),
    ("affinity to the gang itself and to its parameter server member, ranked after it",
     zoned("a", "a", "b", "b"), [],
     [make_pod("ps-0").requests(gpu=8).label("role", "ps").index(0).gang("train", 3).gated().info(),
      *(make_pod(f"w-{i}").requests(gpu=4).label("role", "worker").index(i + 1).gang("train", 3)
        .pod_affinity(ZONE, {"role": "ps"}).gated().info() for i in range(2))], {},
     lambda s, r: r.placed and len(set(zones_of(s, r))) == 1),
    ("several affinity terms count only the pods matching them all",
     zoned("a"), [running("ps", "n0", {"role": "ps"}), running("team", "n0", {"team": "x"})],
     members(1, build=lambda b: b.pod_affinity(ZONE, {"role": "ps"}).pod_affinity(ZONE, {"team": "x"})), {},
     "node(s) didn't match pod affinity rules"),
    ("a matching pod on a node the spread does not count is not counted",
     [*zoned("a", "b"), make_node("n9").label(ZONE, "a").taint("x").allocatable(gpu=8)],
     [running("t0", "n9", TRAIN, lambda b: b.tolerate("x", "Exists")),
      running("t1", "n9", TRAIN, lambda b: b.tolerate("x", "Exists"))],
     members(2, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN, nodeTaintsPolicy="Honor")), {},
     lambda s, r: r.placed and sorted(zones_of(s, r)) == ["a", "b"]),
    ("affinity needs the topology key on the node",
     [make_node("n0").allocatable(gpu=8)], [], members(1, build=lambda b: b.pod_affinity(ZONE, TRAIN)), {},
     "node(s) didn't match pod affinity rules"),
    # PodTopologySpread.
    ("maxSkew 1 over zones spreads the gang",
     zoned("a", "a", "b", "b", "c", "c"), [], members(3, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN)), {},
     lambda s, r: r.placed and sorted(zones_of(s, r)) == ["a", "b", "c"]),
    ("maxSkew 1 counts the matching pods already running",
     zoned("a", "b"), [running("t0", "n0", TRAIN), running("t1", "n0", TRAIN)],
     members(2, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN)), {},
     lambda s, r: r.placed and zones_of(s, r) == ["b", "b"]),
    ("minDomains above the domains present makes the emptiest count 0",
     zoned("a", "b"), [], members(3, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN, minDomains=3)), {},
     "node(s) didn't match pod topology spread constraints"),
    ("a node without the key is refused",
     [make_node("n0").allocatable(gpu=8)], [], members(1, build=lambda b: b.spread(ZONE, 1, TRAIN)), {},
     "node(s) didn't match pod topology spread constraints (missing required label): 1"),
    ("nodeAffinityPolicy Honor: domains the member cannot use do not count",
     [*zoned("a", "a"), make_node("n9").label(ZONE, "b").label("pool", "other").allocatable(gpu=8)], [],
     members(2, gpu=2, build=lambda b: b.affinity({"matchExpressions": [
         {"key": "pool", "operator": "DoesNotExist"}]}).spread(ZONE, 1, TRAIN)), {},
     lambda s, r: r.placed and zones_of(s, r) == ["a", "a"]),
    ("nodeAffinityPolicy Ignore: they count, and the second member skews",
     [*zoned("a", "a"), make_node("n9").label(ZONE, "b").label("pool", "other").allocatable(gpu=8)], [],
     members(2, gpu=2, build=lambda b: b.affinity({"matchExpressions": [
         {"key": "pool", "operator": "DoesNotExist"}]}).spread(ZONE, 1, TRAIN, nodeAffinityPolicy="Ignore")), {},
     "node(s) didn't match pod topology spread constraints"),
    ("nodeTaintsPolicy Honor: tainted domains do not count",
     [*zoned("a", "a"), make_node("n9").label(ZONE, "b").taint("x").allocatable(gpu=8)], [],
     members(2, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN, nodeTaintsPolicy="Honor")), {},
     lambda s, r: r.placed and zones_of(s, r) == ["a", "a"]),
    ("nodeTaintsPolicy Ignore (the default): they count",
     [*zoned("a", "a"), make_node("n9").label(ZONE, "b").taint("x").allocatable(gpu=8)], [],
     members(2, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN)), {},
     "node(s) didn't match pod topology spread constraints"),
    ("matchLabelKeys: pods of another job do not count",
     zoned("a", "b"), [running("t0", "n0", {**TRAIN, "job": "old"}), running("t1", "n0", {**TRAIN, "job": "old"})],
     members(2, gpu=2, build=lambda b: b.label("job", "new").spread(ZONE, 1, TRAIN, matchLabelKeys=["job"])), {},
     lambda s, r: r.placed and sorted(zones_of(s, r)) == ["a", "b"]),
    ("ScheduleAnyway only scores",
     zoned("a", "b"), [], members(2, gpu=2, build=lambda b: b.spread(ZONE, 1, TRAIN, when="ScheduleAnyway")), {},
     lambda s, r: r.placed and zones_of(s, r) == ["a", "a"]),
    ("the cluster's default constraints apply to a JobSet's pods",
     zoned("a", "b"), [], members(2, gpu=2, build=lambda b: b.label("jobset.sigs.k8s.io/jobset-name", "js")),
     {"config": Config(topology_spread_default_constraints=(SpreadDefault(ZONE, 1),))},
     lambda s, r: r.placed and sorted(zones_of(s, r)) == ["a", "b"]),
    # NodePorts.
    ("a host port in use on half the nodes: the other half",
     zoned("a", "a", "a", "a"), [running("p0", "n0", {}, lambda b: b.host_port(8080)),
                                 running("p1", "n1", {}, lambda b: b.host_port(8080))],
     members(2, build=lambda b: b.host_port(8080)), {},
     lambda s, r: r.placed and set(counts(r)) == {"n2", "n3"}),
    ("members sharing a host port never share a node",
     zoned("a", "a"), [], members(3, gpu=1, build=lambda b: b.host_port(8080)), {},
     "node(s) didn't have free ports for the requested pod ports"),
    ("the port in use everywhere",
     zoned("a"), [running("p0", "n0", {}, lambda b: b.host_port(8080))],
     members(1, build=lambda b: b.host_port(8080)), {},
     "1 node excluded: node(s) didn't have free ports for the requested pod ports: 1"),
    ("another protocol does not conflict",
     zoned("a"), [running("p0", "n0", {}, lambda b: b.host_port(8080, protocol="UDP"))],
     members(1, build=lambda b: b.host_port(8080)), {}, lambda s, r: r.placed),
    ("different host addresses do not conflict",
     zoned("a"), [running("p0", "n0", {}, lambda b: b.host_port(8080, host_ip="10.0.0.1"))],
     members(1, build=lambda b: b.host_port(8080, host_ip="10.0.0.2")), {}, lambda s, r: r.placed),
    # VolumeBinding, VolumeZone, VolumeRestrictions, NodeVolumeLimits.
    ("a bound volume's node affinity picks its node",
     zoned("a", "a"), [], members(1, build=lambda b: b.claim("data")),
     {"claims": [claim_object("data", "pv-1")], "volumes": [volume_object("pv-1", hostname="n1")]},
     lambda s, r: r.nodes() == {"default/w-0": "n1"}),
    ("a bound volume's node affinity no node matches",
     zoned("a"), [], members(1, build=lambda b: b.claim("data")),
     {"claims": [claim_object("data", "pv-1")], "volumes": [volume_object("pv-1", hostname="elsewhere")]},
     "node(s) had volume node affinity conflict: 1"),
    ("a bound volume's zone",
     zoned("a"), [], members(1, build=lambda b: b.claim("data")),
     {"claims": [claim_object("data", "pv-1")], "volumes": [volume_object("pv-1", zone="b")]},
     "node(s) had no available volume zone: 1"),
    ("a claim that does not exist",
     zoned("a"), [], members(1, build=lambda b: b.claim("data")), {},
     'persistentvolumeclaim "data" not found'),
    ("a claim bound to a volume that does not exist",
     zoned("a"), [], members(1, build=lambda b: b.claim("data")), {"claims": [claim_object("data", "pv-gone")]},
     "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"),
    ("a ReadWriteOncePod claim a running pod uses",
     zoned("a", "a"), [running("user", "n0", {}, lambda b: b.claim("data"))],
     members(1, build=lambda b: b.claim("data")),
     {"claims": [claim_object("data", "pv-1", ["ReadWriteOncePod"])], "volumes": [volume_object("pv-1")]},
     "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode: 2"),
    ("a CSI driver's attach limit on a node",
     zoned("a", "a"), [running("user", "n0", {}, lambda b: b.claim("one"))],
     members(1, build=lambda b: b.claim("two")),
     {"claims": [claim_object("one", "pv-1"), claim_object("two", "pv-2")],
      "volumes": [volume_object("pv-1", driver="pd.csi"), volume_object("pv-2", driver="pd.csi")],
      "csinodes": [csinode_object("n0", "pd.csi", 1), csinode_object("n1", "pd.csi", 1)]},
     lambda s, r: r.nodes() == {"default/w-0": "n1"}),
    ("two members of the gang sharing a ReadWriteOncePod claim",
     zoned("a", "a"), [], members(2, gpu=1, build=lambda b: b.claim("data")),
     {"claims": [claim_object("data", "pv-1", ["ReadWriteOncePod"])], "volumes": [volume_object("pv-1")]},
     "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"),
    ("members' own volumes count against the attach limit as they are placed",
     zoned("a", "a"), [],
     [make_pod(f"w-{i}").requests(gpu=1).index(i).gang("train", 2).claim(f"d{i}").gated().info() for i in range(2)],
     {"claims": [claim_object("d0", "pv-0"), claim_object("d1", "pv-1")],
      "volumes": [volume_object("pv-0", driver="pd.csi"), volume_object("pv-1", driver="pd.csi")],
      "csinodes": [csinode_object("n0", "pd.csi", 1), csinode_object("n1", "pd.csi", 1)]},
     lambda s, r: r.placed and set(counts(r)) == {"n0", "n1"}),
    ("a CSI driver's attach limit everywhere",
     zoned("a"), [running("user", "n0", {}, lambda b: b.claim("one"))], members(1, build=lambda b: b.claim("two")),
     {"claims": [claim_object("one", "pv-1"), claim_object("two", "pv-2")],
      "volumes": [volume_object("pv-1", driver="pd.csi"), volume_object("pv-2", driver="pd.csi")],
      "csinodes": [csinode_object("n0", "pd.csi", 1)]},
     "node(s) exceed max volume count: 1"),
]


@pytest.mark.parametrize(("case", "nodes", "pods", "gang", "kwargs", "want"), CASES, ids=[c[0] for c in CASES])
def test_filter(case: str, nodes: list[Any], pods: list[Any], gang: list[PodInfo], kwargs: dict[str, Any],
                want: Any) -> None:
    snapshot = snapshot_with(nodes, pods, **kwargs)
    result = place_gang(snapshot, gang)
    if isinstance(want, str):
        assert not result.placed, result.nodes()
        assert want in result.reason, result.reason
    else:
        assert want(snapshot, result), (result.reason, result.nodes())


def test_the_issues_indexed_job_runs_one_member_per_node() -> None:
    """Four members of 4 GPUs with a required hostname anti-affinity, on nodes of 8 GPUs
    in one subblock (issue 23): never two on one node, though two would fit."""
    nodes = [make_node(f"gpu-b1-s1-h{i}").topology("b1", "s1", f"h{i}").allocatable(gpu=8) for i in range(6)]
    gang = members(4, build=lambda b: b.pod_affinity(HOSTNAME, TRAIN, anti=True))
    result = place_gang(snapshot_with(nodes), gang)
    assert result.placed and len(counts(result)) == 4


def test_node_name_is_the_only_node_a_pod_naming_one_fits() -> None:
    snapshot = snapshot_with(zoned("a", "a"))
    filters = GangFilters(snapshot, [make_pod("w-0").node_name("n1").info()])
    assert filters.first(0, snapshot.index["n0"]) is nodename.MISMATCH
    assert filters.first(0, snapshot.index["n1"]) is None


def test_what_is_not_modeled_is_named() -> None:
    pod = (make_pod("w-0").claim("scratch").spread(ZONE, 1, TRAIN, when="ScheduleAnyway").build())
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    pod["spec"]["volumes"].append({"name": "inline", "csi": {"driver": "x"}})
    info = PodInfo.from_object(pod)
    snapshot = snapshot_with(zoned("a"), claims=[claim_object("scratch")])
    assert unmodeled(info) == ("inline csi volume inline",), "DRA claims are counted (reconciler/engine/ledger/draunits.py)"
    assert unmodeled(info, snapshot.volumes)[-1] == "unbound PersistentVolumeClaim scratch (volume provisioning)"
    assert unmodeled(make_pod("plain").info()) == ()


def test_volumes_that_were_not_read_are_not_filtered() -> None:
    """A snapshot without the volume objects (the simulator's) skips the volume filters,
    rather than refusing every pod with a claim as if the claim did not exist."""
    snapshot = snapshot_of_objects([make_node("n0").allocatable(gpu=8).build()], [])
    assert snapshot.volumes is None
    assert place_gang(snapshot, members(1, build=lambda b: b.claim("data"))).placed
