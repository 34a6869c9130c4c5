"""The what-if simulator: gangs planned in creation order on a snapshot, JSON and table
output, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.tools import simulate
from testbed.engine_builders import budget, make_node, make_pod
from tests.support.snapshots import write_list

REPO = Path(__file__).resolve().parents[2]


def gpu_node(name, block, subblock):
    return make_node(name).topology(block, subblock, name).allocatable(gpu=8).build()


def member(gang, i, size, created="2024-05-01T10:00:00Z", gpus=8, namespace="ml"):
    return (make_pod(f"{gang}-{i}", namespace).requests(gpu=gpus).gang(gang, size).index(i).gated()
            .created(created).build())


# Two blocks of 8-GPU nodes, every node its own host.
#
#   cluster
#   ├── b1
#   │   └── s1: a1 a2 a3
#   └── b2
#       └── s2: c1 c2
NODES = [gpu_node(n, "b1", "s1") for n in ("a1", "a2", "a3")] + [gpu_node(n, "b2", "s2") for n in ("c1", "c2")]


def run(capsys, *argv):
    code = simulate.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--output", "json")
    assert code == 0, err
    return json.loads(out), err


# --- good snapshots ------------------------------------------------------------------------
def test_gangs_are_planned_in_creation_order_and_earlier_gangs_use_capacity_first(tmp_path, capsys):
    late = [member("late", i, 3, created="2024-05-01T10:05:00Z") for i in range(3)]
    early = [member("early", i, 3, created="2024-05-01T10:00:00Z") for i in range(3)]
    out, _ = run_json(capsys, write_list(tmp_path, NODES + late + early))
    gangs = out["gangs"]
    assert [(g["name"], g["phase"]) for g in gangs] == [("early", "Placed"), ("late", "Unschedulable")]
    assert gangs[0]["placements"] == [
        {"pod": "early-0", "node": "a1", "rank": 0, "topology": "b1/s1/a1"},
        {"pod": "early-1", "node": "a2", "rank": 1, "topology": "b1/s1/a2"},
        {"pod": "early-2", "node": "a3", "rank": 2, "topology": "b1/s1/a3"},
    ]
    assert gangs[1]["reason"] == "fits 2 of 3 members; 3 nodes excluded: insufficient nvidia.com/gpu: 3"
    assert gangs[1]["code"] == "Unschedulable"
    assert gangs[1]["placements"] == []


def test_the_json_keeps_its_stable_keys(tmp_path, capsys):
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, member("g", 0, 1)]))
    gang = out["gangs"][0]
    assert {"namespace", "name", "phase", "reason", "placements"} <= set(gang)
    assert (gang["namespace"], gang["name"], gang["phase"]) == ("ml", "g", "Placed")
    assert {"pod", "node", "rank"} <= set(gang["placements"][0])


def test_a_gang_with_fewer_members_than_its_size_is_waiting(tmp_path, capsys):
    out, _ = run_json(capsys, write_list(tmp_path, NODES + [member("g", i, 4) for i in range(3)]))
    assert out["gangs"][0]["phase"] == "Waiting"
    assert out["gangs"][0]["reason"] == "3 of 4 members present"


def test_running_pods_and_released_pods_hold_their_nodes(tmp_path, capsys):
    running = make_pod("busy", "other").requests(gpu=8).on("c1").build()
    released = make_pod("pinned", "other").requests(gpu=8).annotate("reconciler.troupe.io/node", "c2").build()
    out, _ = run_json(capsys, write_list(tmp_path, NODES + [running, released] + [member("g", i, 2) for i in range(2)]))
    assert {p["node"] for p in out["gangs"][0]["placements"]} <= {"a1", "a2", "a3"}


def test_a_required_level_annotation_is_honoured(tmp_path, capsys):
    members = [member("g", i, 4) for i in range(4)]
    for m in members:
        m["metadata"]["annotations"]["troupe.io/topology-required-level"] = "cloud.google.com/gce-topology-block"
    out, _ = run_json(capsys, write_list(tmp_path, NODES + members))
    assert out["gangs"][0]["phase"] == "Unschedulable"
    assert out["gangs"][0]["code"] == "UnschedulableAndUnresolvable"
    assert out["gangs"][0]["reason"].startswith("fits 3 of 4 members in one cloud.google.com/gce-topology-block")


def test_members_that_disagree_on_the_size_are_held(tmp_path, capsys):
    members = [member("g", 0, 2), member("g", 1, 3)]
    out, _ = run_json(capsys, write_list(tmp_path, NODES + members))
    assert (out["gangs"][0]["phase"], out["gangs"][0]["rule"]) == ("Held", "MembersDisagree")
    assert out["gangs"][0]["reason"] == "members disagree on troupe.io/gang-size: 2, 3 (held until they agree)"


def shared_node(name, gpus=8):
    return (make_node(name).topology("b3", "s3", name).allocatable(gpu=gpus).label("deviceshare.io/mode", "shared")
            .build())


def group_obj(name, gpus, strategy="binpack"):
    return {"apiVersion": "deviceshare.io/v1alpha1", "kind": "SharedDeviceGroup", "metadata": {"name": name},
            "spec": {"resources": {"nvidia.com/gpu": gpus}, "schedulingStrategy": strategy}}


def group_pod(name, group, created="2024-05-01T10:00:00Z"):
    return make_pod(name, "ml").annotate("deviceshare.io/group", group).gated().created(created).build()


def test_device_groups_are_allocated_as_the_reconciler_allocates_them(tmp_path, capsys):
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump_all([
        *NODES, shared_node("d1"), shared_node("d2", gpus=4),
        group_obj("infer", 2), group_obj("huge", 9), group_obj("idle", 1),
        group_pod("infer-a", "infer"), group_pod("infer-b", "infer", created="2024-05-01T10:01:00Z"),
        group_pod("big", "huge"), member("g", 0, 1), None]))
    out, err = run_json(capsys, str(path))
    assert err == ""
    gangs = {g["name"]: g for g in out["gangs"]}
    # A group pod in no gang is a gang of one; binpack puts the group on d2 (4 free, fewer than d1's 8).
    assert [(p["pod"], p["node"], p["devices"]) for p in gangs["pod:infer-a"]["placements"]] == [
        ("infer-a", "d2", {"nvidia.com/gpu": [0, 1]})]
    assert [(p["node"], p["devices"]) for p in gangs["pod:infer-b"]["placements"]] == [("d2", {"nvidia.com/gpu": [0, 1]})]
    assert gangs["pod:big"]["phase"] == "Unschedulable"
    assert "devices" not in gangs["g"]["placements"][0]
    groups = {g["name"]: g for g in out["deviceGroups"]}
    assert groups["infer"] == {"name": "infer", "phase": "Bound", "node": "d2", "devices": {"nvidia.com/gpu": [0, 1]},
                               "pods": ["ml/infer-a", "ml/infer-b"], "reason": "nvidia.com/gpu 0,1 on node d2"}
    assert (groups["huge"]["phase"], groups["huge"]["node"], groups["huge"]["devices"]) == ("Pending", None, {})
    assert groups["huge"]["reason"].startswith("SharedDeviceGroup huge (9 nvidia.com/gpu): no shared node has 9 free "
                                               "nvidia.com/gpu; largest free: 8 on node d1")
    assert groups["idle"]["reason"] == "no pod waits to join the group"
    code, table, _ = run(capsys, str(path))
    assert code == 0
    assert re.search(r"\n +0 +infer-a +d2 +b3/s3/d2 +nvidia.com/gpu=0,1\n", table)
    assert re.search(r"\ninfer +Bound +d2 +nvidia.com/gpu=0,1 +2 +nvidia.com/gpu 0,1 on node d2\n", table)


def test_gke_gated_pods_with_gang_annotations_are_gangs_too(tmp_path, capsys):
    pod = make_pod("w-0", "ml").requests(gpu=8).gang("g", 1).gated("gke.io/topology-aware-auto-train").build()
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, pod]))
    assert out["gangs"][0]["phase"] == "Placed"


def gke_member(i, created="2024-05-01T10:00:00Z", job=None):
    pod = (make_pod(f"w-{i}", "ml").requests(gpu=8).label("job-name", "train").index(i).created(created)
           .gated("gke.io/topology-aware-auto-train"))
    if job:
        pod.owned_by("Job", job)
    return pod.build()


def test_a_gke_auto_gang_is_sized_once_it_settles_as_in_the_reconciler(tmp_path, capsys):
    path = write_list(tmp_path, [*NODES, gke_member(0), gke_member(1, created="2024-05-01T10:00:03Z")])
    out, _ = run_json(capsys, path, "--now", "2024-05-01T10:00:05Z")
    assert (out["gangs"][0]["name"], out["gangs"][0]["phase"]) == ("gke:job-name=train", "Waiting")
    assert out["gangs"][0]["reason"] == "2 members present, settling for 3s more"
    out, _ = run_json(capsys, path, "--now", "2024-05-01T10:00:08Z")
    assert (out["gangs"][0]["phase"], out["gangs"][0]["size"]) == ("Placed", 2)


def test_a_gke_auto_gang_owned_by_a_job_in_the_snapshot_takes_its_parallelism(tmp_path, capsys):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"parallelism": 3}}
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, job, gke_member(0, job="train"), gke_member(1, job="train")]))
    assert out["gangs"][0]["phase"] == "Waiting"
    assert out["gangs"][0]["reason"] == "2 of 3 members present (Job train parallelism)"


def test_a_pod_with_invalid_gang_annotations_is_held_with_the_error(tmp_path, capsys):
    pod = make_pod("w-0", "ml").gang("g", 1).annotate("troupe.io/gang-size", "two").gated().build()
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, pod]))
    assert (out["gangs"][0]["name"], out["gangs"][0]["phase"]) == ("g", "Held")
    assert out["gangs"][0]["reason"] == (
        "member w-0: annotation troupe.io/gang-size: must be an integer >= 1, got 'two' (held until it is fixed)")


def test_a_bad_now_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run(capsys, write_list(tmp_path, NODES), "--now", "yesterday")
    assert code == 2
    assert err == "simulate: --now: expected an RFC 3339 time such as 2026-11-22T10:00:00Z, got 'yesterday'\n"


def test_the_gang_prefix_comes_from_the_configuration(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("gangAnnotationPrefix: gang-scheduling.preferred.jp/gang\n")
    pod = make_pod("w-0", "ml").requests(gpu=8).gang("g", 1, prefix="gang-scheduling.preferred.jp/gang").gated()
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, pod.build()]), "--config", str(config))
    assert [g["name"] for g in out["gangs"]] == ["g"]


def test_the_table_shows_each_member_with_its_topology_path(tmp_path, capsys):
    members = [member("g", i, 2) for i in range(2)] + [member("w", i, 3) for i in range(2)]
    code, out, _ = run(capsys, write_list(tmp_path, NODES + members))
    assert code == 0
    assert out == (
        "GANG  PHASE    MEMBERS  COST  DOMAIN / REASON\n"
        "ml/g  Placed   2/2      100   cloud.google.com/gce-topology-subblock=b2/s2\n"
        "    RANK  POD  NODE  BLOCK/SUBBLOCK/HOST\n"
        "    0     g-0  c1    b2/s2/c1\n"
        "    1     g-1  c2    b2/s2/c2\n"
        "ml/w  Waiting  2/3      -     2 of 3 members present\n"
    )


def test_an_empty_snapshot_has_no_gangs(tmp_path, capsys):
    code, out, _ = run(capsys, write_list(tmp_path, NODES))
    assert code == 0 and out == "no gated gangs in the snapshot\n"


# --- bad input -----------------------------------------------------------------------------------
BAD_INPUTS = [
    ("text that is not YAML", "kind: List\nitems: [\n  - {\n", "not valid YAML at line"),
    ("a document that is not an object", "- just\n- a list\n", "document 1: expected a Kubernetes object, got a list"),
    ("a document without a kind", "metadata: {name: x}\n", "document 1: kind: missing field"),
    ("an unknown kind", "kind: Service\nmetadata: {name: web, namespace: default}\n",
     "document 1 (Service web): unknown kind 'Service' (expected Node, Pod, Job, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster, RayJob, SharedDeviceGroup, PodDisruptionBudget, PersistentVolumeClaim, PersistentVolume, CSINode, Namespace, ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate, PodGroup, ReplicaSet, StatefulSet, DaemonSet)"),
    ("a node without allocatable", "kind: Node\nmetadata: {name: n1}\nstatus: {}\n",
     "document 1 (Node n1): status.allocatable: missing field"),
    ("a pod without containers in a list",
     "kind: List\nitems:\n- kind: Pod\n  metadata: {name: p, namespace: ml}\n  spec: {}\n",
     "document 1 item 0 (Pod ml/p): spec.containers: missing field"),
    ("a bad quantity in the second document",
     "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '8'}}\n---\n"
     "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
     "document 2 (Pod p): spec.containers[0].resources.requests.cpu: invalid quantity 'lots'"),
    ("a duplicate node",
     "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {}}\n---\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {}}\n",
     "document 2 (Node n1): duplicate of "),
]


@pytest.mark.parametrize(("case", "text", "want"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_line_naming_the_document_and_exit_code_2(tmp_path, capsys, case, text, want):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = run(capsys, str(path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"simulate: {path}: ")
    assert want in err


def test_a_missing_snapshot_file_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run(capsys, str(tmp_path / "absent.yaml"))
    assert code == 2
    assert err == f"simulate: {tmp_path / 'absent.yaml'}: cannot read snapshot: No such file or directory\n"


def test_a_bad_configuration_is_a_one_line_error(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("topologyLevels: []\n")
    code, _, err = run(capsys, write_list(tmp_path, NODES), "--config", str(config))
    assert code == 2
    assert err.startswith(f"simulate: {config}: topologyLevels") and err.count("\n") == 1


@pytest.mark.parametrize("module", [["reconciler.tools.simulate"], ["reconciler", "simulate"]])
def test_both_entry_points_run_as_modules(tmp_path, module):
    snapshot = write_list(tmp_path, [*NODES, member("g", 0, 1)])
    ok = subprocess.run([sys.executable, "-m", *module, snapshot, "--output", "json"],
                        cwd=REPO, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gangs"][0]["phase"] == "Placed"
    (tmp_path / "bad.yaml").write_text("kind: Widget\n")
    bad = subprocess.run([sys.executable, "-m", *module, str(tmp_path / "bad.yaml")],
                         cwd=REPO, capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr == f"simulate: {tmp_path / 'bad.yaml'}: document 1 (Widget): unknown kind 'Widget' (expected Node, Pod, Job, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster, RayJob, SharedDeviceGroup, PodDisruptionBudget, PersistentVolumeClaim, PersistentVolume, CSINode, Namespace, ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate, PodGroup, ReplicaSet, StatefulSet, DaemonSet)\n"


def test_the_snapshot_can_come_from_stdin(tmp_path):
    text = yaml.safe_dump({"kind": "List", "items": [*NODES, member("g", 0, 1)]})
    ok = subprocess.run([sys.executable, "-m", "reconciler.tools.simulate", "-", "--output", "json"],
                        cwd=REPO, input=text, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gangs"][0]["placements"][0]["node"] == "a1"


def running_pod(name, node, priority, namespace="batch"):
    return make_pod(name, namespace).requests(gpu=8).priority(priority).on(node).build()


def test_a_gang_that_needs_victims_is_preempting_with_its_placements_and_victims(tmp_path, capsys):
    busy = [running_pod(f"low-{n}", n, 0) for n in ("a1", "a2", "a3")] + [running_pod(f"mid-{n}", n, 50)
                                                                          for n in ("c1", "c2")]
    high = [make_pod(f"train-{i}", "ml").requests(gpu=8).gang("train", 2).index(i).priority(100).gated().build()
            for i in range(2)]
    path = write_list(tmp_path, NODES + busy + high)
    out, _ = run_json(capsys, path, "--gang-preemption-mode", "minimal")
    [gang] = out["gangs"]
    assert (gang["phase"], gang["rule"]) == ("Preempting", "Preempting")
    assert [(p["pod"], p["rank"]) for p in gang["placements"]] == [("train-0", 0), ("train-1", 1)]
    assert {p["node"] for p in gang["placements"]} <= {"a1", "a2", "a3"}, "lowest priority first"
    assert sorted((v["namespace"], v["pod"], v["node"]) for v in gang["victims"]) == sorted(
        ("batch", f"low-{p['node']}", p["node"]) for p in gang["placements"])
    off, _ = run_json(capsys, path)
    assert off["gangs"][0]["phase"] == "Unschedulable" and "victims" not in off["gangs"][0]
    code, table, _ = run(capsys, path, "--gang-preemption-mode", "atomic")
    assert code == 0 and "VICTIM" in table and "batch/low-a" in table


def test_atomic_counts_the_budgets_of_the_snapshot_as_the_reconciler_does(tmp_path, capsys):
    """A budget allowing one disruption over the two pods of gang ``low`` (priority 0):
    ``atomic`` leaves it whole and evicts ``mid`` (priority 50), saying so
    (docs/decisions/030-preemption-budgets-and-fences.md); the reason is the one the
    reconciler writes on the ``ml`` preemptor, so it counts the ``batch`` gang without
    naming it, while the victims come from the snapshot's own pods
    (docs/decisions/064-preemption-names-no-other-tenant.md)."""
    low = [make_pod(f"low-{n}", "batch").requests(gpu=8).gang("low", 2).label("app", "low").on(n).build()
           for n in ("a1", "a2")]
    mid = [make_pod(f"mid-{n}", "batch").requests(gpu=8).gang("mid", 2).priority(50).on(n).build()
           for n in ("c1", "c2")]
    high = [make_pod(f"train-{i}", "ml").requests(gpu=8).gang("train", 3).index(i).priority(100).gated().build()
            for i in range(3)]
    keep = budget("keep-low", 1, {"app": "low"}, namespace="batch")
    out, _ = run_json(capsys, write_list(tmp_path, NODES + low + mid + high + [keep]), "--gang-preemption-mode",
                      "atomic")
    [gang] = out["gangs"]
    assert gang["phase"] == "Preempting", gang["reason"]
    assert sorted(v["pod"] for v in gang["victims"]) == ["mid-c1", "mid-c2"]
    assert gang["reason"].endswith("; left whole by their budgets: 1 gang of another namespace"), gang["reason"]


def test_bad_preemption_mode_is_refused_by_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        simulate.main([write_list(tmp_path, NODES), "--gang-preemption-mode", "sometimes"])
    assert exit_info.value.code == 2
    assert "--gang-preemption-mode" in capsys.readouterr().err


def test_gangs_are_decided_in_priority_order_before_creation_order(tmp_path, capsys):
    early = [member("early", i, 3, created="2024-05-01T10:00:00Z") for i in range(3)]
    vip = [make_pod(f"vip-{i}", "ml").requests(gpu=8).gang("vip", 3).index(i).priority(10).gated()
           .created("2024-05-01T11:00:00Z").build() for i in range(3)]
    out, _ = run_json(capsys, write_list(tmp_path, NODES + early + vip))
    # Only b1 holds 3 members: the later but higher-priority gang gets it.
    assert [(g["name"], g["phase"]) for g in out["gangs"]] == [("vip", "Placed"), ("early", "Unschedulable")]
    assert {p["node"] for p in out["gangs"][0]["placements"]} == {"a1", "a2", "a3"}


def test_the_json_gives_each_members_slice_and_each_slices_domain(tmp_path, capsys):
    # Two subblocks of two nodes in b1 and one in b2 hold slices of 2; a plain gang of 4
    # would take a1 a2 a3 and one more, splitting slice 1 over two subblocks.
    nodes = [gpu_node(n, "b1", s) for n, s in (("a1", "s1"), ("a2", "s1"), ("a3", "s1b"), ("b1", "s2"), ("b2", "s2"))]
    members = [member("g", i, 4) for i in range(4)]
    for m in members:
        m["metadata"]["annotations"].update({"troupe.io/topology-slice-size": "2",
                                             "troupe.io/topology-slice-required-level":
                                             "cloud.google.com/gce-topology-subblock"})
    out, _ = run_json(capsys, write_list(tmp_path, nodes + members))
    gang = out["gangs"][0]
    assert gang["phase"] == "Placed", gang["reason"]
    assert [p["slices"] for p in gang["placements"]] == [[0], [0], [1], [1]]
    assert [(s["layer"], s["size"], s["index"]) for s in gang["slices"]] == [(0, 2, 0), (0, 2, 1)]
    by_rank = {p["rank"]: p["topology"].rsplit("/", 1)[0] for p in gang["placements"]}
    for s in gang["slices"]:
        assert s["domain"] == "cloud.google.com/gce-topology-subblock=" + by_rank[2 * s["index"]]
        assert by_rank[2 * s["index"]] == by_rank[2 * s["index"] + 1]
    assert gang["balance"] == {"level": "cloud.google.com/gce-topology-subblock", "domains": 2, "largest": 2,
                               "smallest": 2}


def test_a_group_missing_from_the_snapshot_is_said_to_be_not_in_it(tmp_path, capsys):
    """A snapshot taken without shareddevicegroups lacks the group: the gang's reason says so,
    not the live cluster's "does not exist (create it ...)"."""
    pod = (make_pod("infer-0", "ml").requests(gpu=2).gang("infer", 1).index(0).gated().group("llm")
           .created("2024-05-01T10:00:00Z").build())
    out, _ = run_json(capsys, write_list(tmp_path, [*NODES, pod]))
    reason = out["gangs"][0]["reason"]
    assert "SharedDeviceGroup llm" in reason and "not in the snapshot" in reason
    assert "does not exist" not in reason and "create it" not in reason


def test_a_preemptor_whose_nominated_nodes_are_free_is_planned_without_a_crash(tmp_path, capsys):
    # Its victims are gone: the nomination still holds the nodes for it, and its release
    # replaces that hold (reconciler.engine.ledger.snapshot.Snapshot.with_assumed).
    from reconciler.engine.model.records import Nomination
    from tests.support.snapshots import member, snapshot
    from troupe import contract

    pre = [member("ml", "pre", i, 2, "2026-03-01T09:59:00Z", priority=100).gated() for i in range(2)]
    nomination = Nomination("2026-03-01T09:59:30.000+00:00", {f"uid-ml-pre-{i}": f"gpu-b1-s0-h{i}" for i in range(2)})
    pre[0] = pre[0].annotate(contract.NOMINATION, nomination.encode())
    path = write_list(tmp_path, snapshot()["items"] + [p.build() for p in pre], "nominated.yaml")
    assert simulate.main([str(path), "--output", "json", "--now", "2026-03-01T10:00:00Z"]) == 0, "no crash"
    gangs = {f"{g['namespace']}/{g['name']}": g for g in json.loads(capsys.readouterr().out)["gangs"]}
    assert gangs["ml/pre"]["phase"] == "Placed"
    placed = [n for g in gangs.values() for n in (a["node"] for a in g.get("placements", []))]
    assert len(placed) == len(set(placed)), "no node planned twice"
