"""The simulator says which gangs would ask for room with a ProvisioningRequest, how much
and of which shape, when ``provisioning`` is on (docs/decisions/080-provisioning-requests.md)."""

from __future__ import annotations

from reconciler.tools import simulate
from testbed.engine_builders import make_node, make_pod, snapshot_of
from troupe.config import Config
from troupe.provisioning import Provisioning

NOW = 1_800_000_000.0
NODES = [make_node(f"n{i}").topology("b0", "b0-s0", f"n{i}").allocatable(cpu="32", gpu=8) for i in range(4)]


def gang(name, size, gpus=8):
    return [make_pod(f"{name}-{i}").gang(name, size).index(i).requests(cpu="4", gpu=gpus).gated().owned_by(name=name)
            for i in range(size)]


def test_the_gang_that_does_not_fit_would_ask_for_its_whole_shape_and_the_one_that_fits_asks_nothing():
    snapshot = snapshot_of(NODES, gang("big", 8) + gang("small", 2, gpus=4))
    outcomes = {o.name: o for o in simulate.simulate(snapshot, Config(provisioning=Provisioning()), NOW)}
    asked = outcomes["big"].to_json()["provisioningRequest"]
    assert outcomes["big"].rule == "Provisioning"
    assert (asked["pods"], asked["attempt"], asked["class"]) == (8, 1, "best-effort-atomic-scale-up.autoscaling.x-k8s.io")
    (shape,) = asked["shapes"]
    assert (shape["count"], shape["model"], shape["requests"]["nvidia.com/gpu"]) == (8, "big-0", 8)
    assert "provisioningRequest" not in outcomes["small"].to_json()


def test_off_nothing_is_asked():
    snapshot = snapshot_of(NODES, gang("big", 8))
    (outcome,) = simulate.simulate(snapshot, Config(), NOW)
    assert outcome.rule == "Unplaced" and "provisioningRequest" not in outcome.to_json()
