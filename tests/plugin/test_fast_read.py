"""The plugin's fast reader (``snapshot_io.read_retained``): Pods, Nodes and Jobs cut down to
what the reconciler's cache keeps of them give the same decisions as the whole objects, and
anything it cannot read that way is read the ordinary way."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest

from reconciler.objects import retain
from reconciler.objects.snapshot_io import InputError, decode_retained, read_objects, read_retained
from reconciler.tools import views
from tests.support.snapshots import snapshot as golden_snapshot
from troupe.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from simulate_snapshot import build_snapshot

NOW = 1772359200.0
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "js", "namespace": "ml", "uid": "u"},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2}}}]}}


def snapshots():
    yield "golden", golden_snapshot()
    big = build_snapshot(96, 900, seed=3)
    big["items"].append(JOBSET)
    yield "generated", big


@pytest.mark.parametrize(("name", "snapshot"), list(snapshots()), ids=lambda x: x if isinstance(x, str) else "")
def test_decisions_on_retained_objects_are_those_on_whole_ones(name, snapshot):
    data = orjson.dumps(snapshot, option=orjson.OPT_INDENT_2)
    whole = views.read(read_objects(data, "s.json"), Config(), NOW)
    cut = views.read(read_retained(data, "s.json"), Config(), NOW)
    assert [g.to_json() for g in views.status(cut)] == [g.to_json() for g in views.status(whole)]
    assert views.topology(cut) == views.topology(whole)


def test_each_pod_node_and_job_keeps_at_least_what_the_cache_keeps_and_other_kinds_come_whole():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"parallelism": 3, "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}, "status": {"succeeded": 1}}
    snapshot = golden_snapshot()
    snapshot["items"] += [job, JOBSET]
    items, _ = decode_retained(orjson.dumps(snapshot))
    policies = {"Pod": retain.POD, "Node": retain.NODE, "Job": retain.JOB}
    for whole, cut in zip(snapshot["items"], items, strict=True):
        policy = policies.get(whole["kind"])
        if policy is None:
            assert cut == whole
        else:
            assert retain.retain(policy, cut) == retain.retain(policy, whole)
    assert "image" not in str(items[-2]["spec"]["template"])  # what no reader reads is not built


@pytest.mark.parametrize(("what", "data"), [
    ("YAML", b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}, status: {}}\n"),
    ("not a List", json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {}}).encode()),
    ("a field of another type", json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": "oops"}, "spec": {"containers": 3}}]}).encode()),
    ("several documents", b'{"kind": "Node", "metadata": {"name": "a"}}\n{"kind": "Node", "metadata": {"name": "b"}}'),
])
def test_what_it_cannot_cut_is_read_whole(what, data):
    assert read_retained(data, "s.json" if data.startswith(b"{") else "s.yaml") == read_objects(
        data, "s.json" if data.startswith(b"{") else "s.yaml")


def test_a_snapshot_with_a_configmap_appended_is_still_read_the_fast_way():
    objects = golden_snapshot()
    for obj in objects["items"]:
        obj.setdefault("spec", {})["notRead"] = "x"  # what the reconciler's cache drops
    listed = orjson.dumps(objects, option=orjson.OPT_INDENT_2)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "troupe-config",
                                                                        "namespace": "troupe-system"},
                  "data": {"config.yaml": "{}\n"}}
    appended = listed + b"\n" + orjson.dumps(config_map, option=orjson.OPT_INDENT_2) + b"\n"
    got = read_retained(appended, "s.json")
    assert got[:-1] == read_retained(listed, "s.json")  # the List's objects cut down, as without it
    assert not any("notRead" in obj.get("spec", {}) for _, kind, obj in got if kind in ("Pod", "Node", "Job"))
    assert got[-1] == ("s.json: document 2", "ConfigMap", config_map)
    broken = appended[:-3] + b"\n"  # the appended value cut short: its parser names the place
    with pytest.raises(InputError, match=r"^s\.json: not valid JSON"):
        read_retained(broken, "s.json")
