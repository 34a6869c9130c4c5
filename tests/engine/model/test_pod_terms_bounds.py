"""What one pod may ask of the pods around it is bounded (troupe.bounds,
docs/decisions/049-hostile-tenants-third-round.md): a gang with a member past the bound is
held with the reason, any other pod is read to the bound, and the terms that select a
member are found through an index, so a tenant's thousands of terms cost an unrelated gang
little."""

from __future__ import annotations

import time
from typing import Any

from reconciler.engine.decision.decide import decide
from reconciler.engine.gangs.gang import build_gang
from reconciler.engine.ledger.builder import snapshot_of_objects
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.placement.place import place_gang
from testbed.engine_builders import make_node, make_pod
from troupe.bounds import MAX_POD_TERMS, pod_terms_error
from troupe.config import Config

NOW = 1_800_000_000.0
ANTI = ("affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
AFFINITY = ("affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def with_terms(obj: dict[str, Any], path: tuple[str, ...], count: int, key: str = "team",
               namespaces: tuple[str, ...] = ()) -> dict[str, Any]:
    """``obj`` with ``count`` distinct required terms at ``path`` below its spec, each
    selecting pods of ``namespaces`` (default: its own) labelled ``key: value-<i>``."""
    place = obj["spec"]
    for step in path[:-1]:
        place = place.setdefault(step, {})
    place[path[-1]] = [{"topologyKey": "kubernetes.io/hostname", "namespaces": list(namespaces),
                        "labelSelector": {"matchLabels": {key: f"value-{i}"}}} for i in range(count)]
    return obj


def nodes(count: int) -> list[Any]:
    return [make_node(f"n{i}").topology(f"b{i // 256}", f"s{i // 16}", f"n{i}").allocatable(cpu="64", gpu=8)
            for i in range(count)]


def test_the_bound_names_each_list_past_it_and_nothing_within_it() -> None:
    within = with_terms({"spec": {}}, ANTI, MAX_POD_TERMS)
    assert pod_terms_error(within["spec"]) is None
    past = with_terms(with_terms({"spec": {}}, ANTI, 1000), AFFINITY, 13_000)
    assert pod_terms_error(past["spec"]) == (
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: 13000, "
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: 1000 entries: Troupe "
        "evaluates at most 64 required pod affinity terms, 64 required anti-affinity terms and 64 topology spread "
        "constraints of a pod")


def test_a_gang_with_a_member_past_the_bound_is_held_and_costs_no_placement() -> None:
    members = [PodInfo.from_object(with_terms(make_pod(f"w-{i}", "ml").gang("g", 2).requests(gpu=8).gated().build(),
                                              AFFINITY, 13_000)) for i in range(2)]
    assert all(len(m.terms.affinity) == MAX_POD_TERMS for m in members if m.terms is not None)
    gang = build_gang("ml/g", members, Config(), {})
    started = time.process_time()
    decision = decide(gang, snapshot_of_objects([n.build() for n in nodes(16)], []), NOW)
    assert time.process_time() - started < 0.5
    assert decision.phase.value == "Held"
    assert "13000" in decision.reason and "at most 64 required pod affinity terms" in decision.reason


def test_a_running_pod_with_thousands_of_anti_affinity_terms_costs_an_unrelated_gang_little() -> None:
    hostile = with_terms(make_pod("hostile", "attacker").requests(cpu="1").build(), ANTI, 16_000, key="victim-app",
                         namespaces=("ml",))
    hostile["spec"]["nodeName"], hostile["status"]["phase"] = "n0", "Running"
    busy = [make_pod(f"busy-{i}", "other").label("app", f"a{i % 50}").requests(cpu="1").build() for i in range(2000)]
    for i, pod in enumerate(busy):
        pod["spec"]["nodeName"], pod["status"]["phase"] = f"n{i % 1024}", "Running"
    snapshot = snapshot_of_objects([n.build() for n in nodes(1024)], [hostile, *busy])
    assert len(snapshot.pods["attacker/hostile"].terms.anti_affinity) == MAX_POD_TERMS
    gang = [PodInfo.from_object(make_pod(f"w-{i}", "ml").gang("g", 8).index(i).label("victim-app", "value-3")
                                .requests(gpu=8).gated().build()) for i in range(8)]
    started = time.process_time()
    result = place_gang(snapshot, gang)
    spent = time.process_time() - started
    assert result.placed and "n0" not in {a.node for a in result.assignments}, "value-3 is among the terms read"
    assert spent < 0.5, spent
