"""The simulator shows the reservation of a gang released as created whose members do not
all exist yet (docs/decisions/034-release-as-created.md), from the Job in the snapshot."""

from __future__ import annotations

import json

from reconciler.engine.model.reservations import Record
from reconciler.tools import simulate
from testbed.as_created import job_object, member_pod
from testbed.engine_builders import make_node
from tests.support.snapshots import write_list

NODES = [make_node(f"b0-s{s}-h{h}").topology("b0", f"b0-s{s}", f"b0-s{s}-h{h}").allocatable(cpu="32", gpu=8).build()
         for s in range(2) for h in range(4)]


def run_json(tmp_path, capsys, objects):
    path = write_list(tmp_path, objects)
    assert simulate.main([str(path), "--output", "json", "--now", "2027-01-15T08:00:05Z"]) == 0
    return {g["name"]: g for g in json.loads(capsys.readouterr().out)["gangs"]}


def test_a_job_with_no_pod_yet_is_shown_reserved_rank_by_rank(tmp_path, capsys):
    gangs = run_json(tmp_path, capsys, [*NODES, job_object("train", 4)])
    gang = gangs["job:train"]
    assert (gang["phase"], gang["rule"], gang["members"], gang["size"]) == ("Placed", "Reserved", 0, 4)
    reservation = gang["reservation"]
    assert reservation["members"] == reservation["released"] == reservation["bound"] == 0
    assert [p["rank"] for p in gang["placements"]] == [0, 1, 2, 3]
    assert [p["node"] for p in gang["placements"]] == reservation["nodes"]
    assert len({p["topology"].split("/")[1] for p in gang["placements"]}) == 1, "one subblock"


def test_a_held_reservation_is_counted_for_the_gangs_decided_after_it(tmp_path, capsys):
    held = Record("job:train", "2027-01-15T08:00:00.000+00:00", ("b0-s0-h0", "b0-s0-h1", "b0-s0-h2", "b0-s0-h3"))
    job = job_object("train", 4, record=held)
    member = member_pod(job, 0, gated=False, node="b0-s0-h0", planned_at=held.planned_at, bound=True, phase="Running")
    gangs = run_json(tmp_path, capsys, [*NODES, job, member, job_object("next", 6)])
    assert gangs["job:train"]["reservation"] == {"plannedAt": held.planned_at, "nodes": list(held.nodes),
                                                 "members": 1, "released": 1, "bound": 1}
    assert gangs["job:train"]["rule"] == "ReleaseAsCreated"
    assert gangs["job:next"]["rule"] == "Unplaced", "6 whole nodes do not fit in the 4 the reservation leaves"
