"""A placed gang never breaks a required anti-affinity, affinity or DoNotSchedule spread,
among its own members or with the pods already running: checked on the final layout by a
plain pairwise oracle, independent of the engine's counters."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.podterms import PodAffinityTerm
from reconciler.engine.placement.place import place_gang
from testbed.engine_builders import make_node, make_pod, snapshot_with

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KEYS = {"host": HOSTNAME, "zone": ZONE}


def _selects(term: PodAffinityTerm, pod: PodInfo) -> bool:
    return term.selects(pod.namespace, pod.labels, {})


def _same(labels_a: dict[str, str], labels_b: dict[str, str], key: str) -> bool:
    return key in labels_a and key in labels_b and labels_a[key] == labels_b[key]


def violations(layout: list[tuple[PodInfo, dict[str, str]]], gang: set[str], nodes: list[dict[str, str]]) -> list[str]:
    """Every rule broken on the final layout, one line each (``[]``: none): ``layout`` is
    ``(pod, its node's labels)`` for each pod; ``nodes``: every node's labels (a spread's
    domains are those of every node)."""
    broken: list[str] = []
    for pod, labels in layout:
        terms = pod.terms
        if terms is None:
            continue
        for term in terms.anti_affinity:
            for other, other_labels in layout:
                if (other is not pod and _selects(term, other) and (pod.key in gang or other.key in gang)
                        and _same(labels, other_labels, term.topology_key)):
                    broken.append(f"anti-affinity: {pod.key} and {other.key} share {term.topology_key}")
        if pod.key not in gang:
            continue
        for term in terms.affinity:
            # Another matching pod in its domain; a pod that is the only one its term
            # matches may go anywhere (the first of a group with affinity to itself).
            matching = [(other, other_labels) for other, other_labels in layout if other is not pod
                        and _selects(term, other)]
            if matching and not any(_same(labels, other_labels, term.topology_key) for _, other_labels in matching):
                broken.append(f"affinity: {pod.key} has no match in its {term.topology_key}")
        for constraint in terms.spread:
            domains = {node[constraint.topology_key] for node in nodes if constraint.topology_key in node}
            count = dict.fromkeys(domains, 0)
            for other, other_labels in layout:
                if constraint.selector is not None and constraint.selector.matches(other.labels):
                    count[other_labels[constraint.topology_key]] += 1
            if max(count.values()) - min(count.values()) > constraint.max_skew:
                broken.append(f"spread: {pod.key} over {constraint.topology_key}: {count}")
    return broken


def gang_pod(i: int, size: int, gpu: int, rule: str) -> Any:
    pod = make_pod(f"w-{i}").requests(gpu=gpu).label("app", "train").index(i).gang("train", size).gated()
    kind, _, level = rule.partition("-")
    if kind == "anti":
        pod.pod_affinity(KEYS[level], {"app": "train"}, anti=True)
    elif kind == "affinity":
        pod.pod_affinity(KEYS[level], {"app": "train"})
    elif kind == "spread":
        pod.spread(KEYS[level], 1, {"app": "train"})
    elif kind == "avoid":
        pod.pod_affinity(KEYS[level], {"app": "db"}, anti=True)
    return pod


RULES = ["none", "anti-host", "anti-zone", "affinity-zone", "affinity-host", "spread-zone", "spread-host",
         "avoid-host", "avoid-zone"]


@settings(max_examples=150, deadline=None)
@given(
    zones=st.lists(st.sampled_from("abc"), min_size=1, max_size=8),
    running=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["db", "web"]),
                               st.sampled_from(["", "host", "zone"])), max_size=5),
    size=st.integers(1, 5),
    gpu=st.sampled_from([2, 4, 8]),
    rule=st.sampled_from(RULES),
)
def test_a_placed_gang_breaks_no_rule(zones: list[str], running: list[tuple[int, str, str]], size: int, gpu: int,
                                      rule: str) -> None:
    nodes = [make_node(f"n{i}").label(ZONE, zone).allocatable(gpu=8) for i, zone in enumerate(zones)]
    pods = []
    for k, (at, app, anti) in enumerate(running):
        pod = make_pod(f"r-{k}").requests(gpu=1).label("app", app).on(f"n{at % len(zones)}")
        if anti:
            pod.pod_affinity(KEYS[anti], {"app": "train"}, anti=True)
        pods.append(pod)
    snapshot = snapshot_with(nodes, pods)
    members = [gang_pod(i, size, gpu, rule).info() for i in range(size)]
    result = place_gang(snapshot, members)
    if not result.placed:
        assert result.reason, "a gang that is not placed says why"
        return
    by_name = {node.name: dict(node.labels) for node in snapshot.nodes}
    layout = [(p, by_name[p.node_name]) for p in snapshot.pods.values()]
    placed = result.nodes()
    layout += [(m, by_name[placed[m.key]]) for m in members]
    assert violations(layout, {m.key for m in members}, list(by_name.values())) == []


def test_the_oracle_sees_each_kind_of_broken_rule():
    host = {HOSTNAME: "n0", ZONE: "a"}
    other_host = {HOSTNAME: "n1", ZONE: "b"}
    gang = {"default/w-0", "default/w-1"}
    anti = [gang_pod(i, 2, 4, "anti-host").info() for i in range(2)]
    assert violations([(anti[0], host), (anti[1], host)], gang, [host, other_host])
    assert violations([(anti[0], host), (anti[1], other_host)], gang, [host, other_host]) == []
    near = [gang_pod(i, 2, 4, "affinity-zone").info() for i in range(2)]
    assert violations([(near[0], host), (near[1], other_host)], gang, [host, other_host])
    spread = [gang_pod(i, 2, 4, "spread-zone").info() for i in range(2)]
    assert violations([(spread[0], host), (spread[1], host)], gang, [host, other_host])
    assert violations([(spread[0], host), (spread[1], other_host)], gang, [host, other_host]) == []
