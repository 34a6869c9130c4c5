"""DRA selectors are tenants' programs (docs/decisions/049-hostile-tenants-third-round.md):
one too costly to evaluate holds only its own gangs, the memo serves every device that
agrees on what a selector reads (not one entry per device and its uuid), each namespace's
evaluations per decision are bounded, and two tenants' request shapes never share a name."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.engine.ledger import draunits
from reconciler.engine.model import cel, dra
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from testbed.dra_builders import CLASS, DRIVER, claim_template, device_class, with_claim
from testbed.engine_builders import make_node, make_pod

LIST = "[" + ",".join(map(str, range(100))) + "]"
#: The issue's selector: nested comprehensions over 101 x 101 (what the API server accepts).
NESTED = f'{LIST}.all(x, {LIST}.all(y, x + y >= 0 && device.driver == "{DRIVER}"))'


def uuid_slice(node: str, count: int, model: str = "H100") -> dict[str, Any]:
    """A ResourceSlice whose devices each carry a uuid of their own, as real drivers publish."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                   "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": model},
                                                                      "uuid": {"string": f"{node}-{i}"}}}
                                 for i in range(count)]}}


def catalog(nodes: int, per_node: int, *templates: dict[str, Any]) -> dra.Catalog:
    objects = [("ResourceSlice", uuid_slice(f"n{i}", per_node)) for i in range(nodes)]
    objects += [("DeviceClass", device_class()), *(("ResourceClaimTemplate", t) for t in templates)]
    return dra.catalog(objects)


def pod(name: str, namespace: str, template: str) -> PodInfo:
    return PodInfo.from_object(with_claim(make_pod(name, namespace).gang(name, 1).gated().build(), template=template))


def node_infos(count: int) -> list[NodeInfo]:
    return [NodeInfo.from_object(make_node(f"n{i}").allocatable(cpu="8").build()) for i in range(count)]


def test_a_selector_costlier_than_troupe_evaluates_holds_only_its_own_gang_and_quickly() -> None:
    assert cel.cost(NESTED) > cel.MAX_COST
    c = catalog(2, 4, claim_template("costly", 1, "attacker", selectors=(NESTED,)),
                claim_template("plain", 1, "victim"))
    started = time.process_time()
    _, pods = draunits.apply(node_infos(2), [pod("a", "attacker", "costly"), pod("v", "victim", "plain")], c)
    assert time.process_time() - started < 0.5
    attacker, victim = pods
    assert "costs more than Troupe evaluates per device" in attacker.malformed
    assert victim.malformed == "" and victim.requests[f"devices/{CLASS}"] == 1


def test_the_memo_serves_every_device_of_one_model_however_many_uuids() -> None:
    selector = f'device.attributes["{DRIVER}"].model == "H100"'
    c = catalog(64, 8)
    kinds = {"devices/x": (selector,)}
    cel.forget()
    units, broken = draunits.node_units(c.devices, kinds, {}, {"devices/x": ["ml"]})
    assert broken == {} and sum(u["devices/x"] for u in units.values()) == 512
    assert cel.memoized() == 1, "one evaluation for 512 devices that agree on the model"


def test_a_namespace_past_its_budget_holds_only_its_own_shapes() -> None:
    reads_uuid = f'device.attributes["{DRIVER}"].uuid != "none"'
    cheap = f'device.attributes["{DRIVER}"].model == "H100"'
    c = catalog(16, 8)
    kinds = {"devices/a": (reads_uuid,), "devices/b": (cheap,)}
    cel.forget()
    budget = 40 * draunits.EVALUATION_FLOOR  # 40 evaluations: fewer than the 128 uuids
    units, broken = draunits.node_units(c.devices, kinds, {}, {"devices/a": ["attacker"], "devices/b": ["victim"]}, budget)
    assert "devices/a" in broken and "namespace attacker may spend" in broken["devices/a"]
    assert "devices/b" not in broken and sum(u.get("devices/b", 0) for u in units.values()) == 128
    # The evaluations made are kept: the next decisions go on where this one stopped.
    for _ in range(3):
        units, broken = draunits.node_units(c.devices, kinds, {}, {"devices/a": ["attacker"], "devices/b": ["victim"]},
                                       budget)
    assert broken == {} and sum(u.get("devices/a", 0) for u in units.values()) == 128


def test_a_shape_whose_short_name_another_shape_has_gets_the_whole_digest() -> None:
    mine = dra.Request("gpus", CLASS, 1, (f'device.attributes["{DRIVER}"].model == "H100"',))
    short = draunits.kind_of(mine)
    assert len(short.rpartition("~")[2]) == 16
    taken = {short: ("class", 'device.attributes["x"].model == "evil"')}
    full = draunits.kind_of(mine, taken)
    assert full != short and len(full.rpartition("~")[2]) == 64
    assert draunits.kind_of(mine, {short: ("class", *mine.selectors)}) == short


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=2, max_size=6, unique=True))
def test_two_different_shapes_of_one_snapshot_never_share_a_name(values: list[str]) -> None:
    templates = [claim_template(f"t{i}", 1, f"ns{i}", selectors=(f'device.attributes["{DRIVER}"].model == "{v}"',))
                 for i, v in enumerate(values)]
    c = catalog(1, 1, *templates)
    _, pods = draunits.apply(node_infos(1), [pod(f"p{i}", f"ns{i}", f"t{i}") for i in range(len(values))], c)
    names = [next(k for k in p.requests if k.startswith("devices/")) for p in pods]
    assert len(set(names)) == len(values)


@pytest.mark.parametrize("expression", [
    '[1,2].all(device, device > 0)', f'device.attributes["{DRIVER}"][device.driver] == 1',
    'device.allowMultipleAllocations == false'])
def test_a_selector_that_reads_the_device_another_way_is_memoized_on_the_whole_device(expression: str) -> None:
    assert cel.reads(expression) is None or ("attributes", DRIVER, "*") in (cel.reads(expression) or ())
