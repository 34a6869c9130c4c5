"""A placed gang never breaks a required anti-affinity, affinity or DoNotSchedule spread,
among its own members or with the pods already running: checked on the final layout by a
plain pairwise oracle, independent of the engine's counters."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.cluster import PodInfo
from reconciler.engine.placement import place_gang
from reconciler.engine.podterms import PodAffinityTerm
from tests.support.engine_builders import make_node, make_pod, snapshot_with

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KEYS = {"host": HOSTNAME, "zone": ZONE}


def _selects(term: PodAffinityTerm, pod: PodInfo) -> bool:
    return term.selects(pod.namespace, pod.labels, {})


def _same(labels_a: dict[str, str], labels_b: dict[str, str], key: str) -> bool:
    return key in labels_a and key in labels_b and labels_a[key] == labels_b[key]


def check_layout(layout: list[tuple[PodInfo, dict[str, str]]], gang: set[str], nodes: list[dict[str, str]]) -> None:
    """Every rule on the final layout: ``(pod, its node's labels)`` for each pod; ``nodes``:
    every node's labels (a spread's domains are those of every node)."""
    for pod, labels in layout:
        terms = pod.terms
        if terms is None:
            continue
        for term in terms.anti_affinity:
            for other, other_labels in layout:
                if other is not pod and _selects(term, other) and (pod.key in gang or other.key in gang):
                    assert not _same(labels, other_labels, term.topology_key), (pod.key, other.key, term)
        if pod.key not in gang:
            continue
        for term in terms.affinity:
            assert any(_selects(term, other) and _same(labels, other_labels, term.topology_key)
                       for other, other_labels in layout), (pod.key, term)
        for constraint in terms.spread:
            domains = {node[constraint.topology_key] for node in nodes if constraint.topology_key in node}
            count = dict.fromkeys(domains, 0)
            for other, other_labels in layout:
                if constraint.selector is not None and constraint.selector.matches(other.labels):
                    count[other_labels[constraint.topology_key]] += 1
            assert max(count.values()) - min(count.values()) <= constraint.max_skew, count


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
        return
    by_name = {node.name: dict(node.labels) for node in snapshot.nodes}
    layout = [(p, by_name[p.node_name]) for p in snapshot.pods.values()]
    placed = result.nodes()
    layout += [(m, by_name[placed[m.key]]) for m in members]
    check_layout(layout, {m.key for m in members}, list(by_name.values()))
