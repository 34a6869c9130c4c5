"""The plan and nomination records the reconciler keeps in pod annotations: what they
encode to, and that a value which is not one reads as none."""

from reconciler.engine.model.devicegroups import Holding
from reconciler.engine.model.records import Nomination, Plan

GPU = "nvidia.com/gpu"


def test_a_plan_record_round_trips():
    plan = Plan("2026-11-22T10:00:00.000+00:00", {"u1": "n1", "u2": "n2"})
    assert Plan.decode(plan.encode()) == plan
    assert plan.encode() == '{"nodes":{"u1":"n1","u2":"n2"},"plannedAt":"2026-11-22T10:00:00.000+00:00"}'
    for bad in ("[]", '{"plannedAt": 1, "nodes": {}}', '{"plannedAt": "x", "nodes": {"u": 3}}', ""):
        assert Plan.decode(bad) is None


def test_a_plan_record_with_groups_round_trips_and_names_its_holdings_after_the_plan():
    at = "2026-11-22T10:00:00.000+00:00"
    plan = Plan(at, {"u1": "n1"}, {"g": Holding("g", "n1", {GPU: (0, 1)}, f"plan {at}")})
    assert plan.encode() == ('{"groups":{"g":{"devices":{"nvidia.com/gpu":"0,1"},"node":"n1"}},'
                             '"nodes":{"u1":"n1"},"plannedAt":"2026-11-22T10:00:00.000+00:00"}')
    assert Plan.decode(plan.encode()) == plan
    for bad in ('{"plannedAt": "x", "nodes": {}, "groups": [1]}', '{"plannedAt": "x", "nodes": {}, "groups": {"g": 1}}',
                '{"plannedAt": "x", "nodes": {}, "groups": {"g": {"node": "n1", "devices": {"r": "x"}}}}'):
        assert Plan.decode(bad) is None


def test_a_nomination_round_trips():
    nomination = Nomination("2026-11-22T10:00:00.000+00:00", {"u1": "n1"}, ("u-v0",), ("u-other",))
    assert Nomination.decode(nomination.encode()) == nomination
    assert nomination.encode() == ('{"at":"2026-11-22T10:00:00.000+00:00","nodes":{"u1":"n1"},'
                                   '"refused":["u-other"],"victims":["u-v0"]}')
    assert Nomination.decode('{"at": "x", "nodes": {}}') == Nomination("x", {})
    for bad in ("{not json", "[]", '{"at": 1, "nodes": {}}', '{"at": "x", "nodes": {}, "victims": "v"}',
                '{"at": "x", "nodes": {}, "refused": [1]}', '{"plannedAt": "x", "nodes": {}}'):
        assert Nomination.decode(bad) is None


def test_a_nomination_written_before_victims_were_kept_by_uid_keeps_its_nodes_and_drops_their_names():
    """A record of the former format named its victims ``namespace/name`` and its refused
    gangs by key: read, it still holds its nodes; the names are left out (docs/decisions/064)."""
    old = ('{"at":"2026-11-22T10:00:00.000+00:00","nodes":{"u1":"n1"},'
           '"refused":["team-a/train"],"victims":["team-a/train-0","team-a/train-1"]}')
    assert Nomination.decode(old) == Nomination("2026-11-22T10:00:00.000+00:00", {"u1": "n1"})
