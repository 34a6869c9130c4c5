"""``kubectl troupe why`` on a member kube-scheduler refused on its node, and on a member whose
condition carries its release's note (docs/decisions/032-scheduler-refusals.md)."""

from __future__ import annotations

import json

from reconciler.tools import plugin
from testbed.reconciler_builders import make_pod
from tests.support.controller_harness import four_nodes, own
from troupe import contract

NOW = "2027-01-15T08:00:10Z"
RELEASED = "2027-01-15T08:00:00.000+00:00"
MESSAGE = "0/4 nodes are available: 1 node(s) had no available disk, 3 node(s) didn't match Pod's node affinity/selector."
NOTE = "released onto node n3 as rank 1 of 2; avoiding node n2 (kube-scheduler refused member train-1 on node n2: ...)"


def member(i: int, node: str, condition: dict) -> dict:
    pod = (make_pod(f"train-{i}").gang("train", 2).index(i).gpus(4).annotate(contract.ASSIGNED_NODE, node)
           .annotate(contract.PLANNED_AT, RELEASED).annotate(contract.RELEASED_AT, RELEASED).build())
    pod["spec"]["nodeSelector"] = {contract.HOSTNAME_LABEL: node}
    pod["status"]["conditions"] = [condition]
    return own([pod])[0]


def why(tmp_path, capsys, pods: list[dict], pod: str) -> str:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*four_nodes(), *pods]}))
    code = plugin.main(["why", pod, "--snapshot", str(path), "--now", NOW])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_why_shows_kube_schedulers_refusal_and_the_rollback_it_leads_to(tmp_path, capsys):
    refused = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE}
    bound = member(0, "n1", {"type": "PodScheduled", "status": "True"})
    bound["spec"]["nodeName"], bound["status"]["phase"] = "n1", "Running"
    out = why(tmp_path, capsys, [bound, member(1, "n2", refused)], "team-a/train-1")
    assert "Phase:    RolledBack (rule Refused)" in out, out
    assert f"Reason:   kube-scheduler refused member train-1 on node n2: {MESSAGE}; rolling the release back" in out
    assert f"Refused:  by kube-scheduler on its node: {MESSAGE}\n" in out


def test_why_shows_what_the_members_condition_told_it(tmp_path, capsys):
    told = {"type": contract.GANG_CONDITION, "status": "True", "reason": "Released", "message": NOTE}
    pods = [member(0, "n1", told), member(1, "n3", told)]
    for pod in pods:
        pod["spec"]["nodeName"], pod["status"]["phase"] = pod["spec"]["nodeSelector"][contract.HOSTNAME_LABEL], "Running"
    out = why(tmp_path, capsys, pods, "team-a/train-1")
    assert f"Told:     Released: {NOTE}\n" in out, out
    assert "Refused:" not in out
