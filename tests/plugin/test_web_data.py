"""The topology map's data and server, without a browser: the page data of the golden
snapshot (tests/support/snapshots.py) with a nominated and a reserved gang added, the paths
the server answers, its few seconds of caching, and ``kubectl troupe topology --web`` on a
snapshot file, stopped with Ctrl-C."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import pytest

from reconciler.engine.gangs.queueing import Hold
from reconciler.engine.ledger.nodetable import NodeTable
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.records import Nomination
from reconciler.objects.snapshot_io import read_objects
from reconciler.tools import simulate as sim
from reconciler.tools import views
from reconciler.tools.web import data, local, server
from testbed.engine_builders import make_node, make_pod
from tests.support import held
from tests.support.signals import started
from tests.support.snapshots import member, snapshot, write_list
from troupe import contract
from troupe.config import Config

NOW = "2026-03-01T10:00:00Z"
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"


def cluster_objects() -> list[dict]:
    """The golden snapshot, with ml/pre (2 members, a preemptor's nomination holding
    gpu-b1-s1-h0 and -h1, whose ml/batch members it evicts) and ml/pinned (2 members, the
    first committed to gpu-b1-s0-h2)."""
    objects = snapshot()["items"]
    pre = [member("ml", "pre", i, 2, "2026-03-01T09:59:00Z", priority=100).gated() for i in range(2)]
    nomination = Nomination("2026-03-01T09:59:30.000+00:00",
                            {f"uid-ml-pre-{i}": f"gpu-b1-s1-h{i}" for i in range(2)}, ("ml/batch-0", "ml/batch-1"), ())
    pre[0] = pre[0].annotate(contract.NOMINATION, nomination.encode())
    pinned = [member("ml", "pinned", i, 2, "2026-03-01T09:59:00Z").gated() for i in range(2)]
    pinned[0] = pinned[0].annotate(contract.ASSIGNED_NODE, "gpu-b1-s0-h2")
    return objects + [p.build() for p in pre + pinned]


def page_of(objects: list[dict]) -> dict:
    cluster = views.read([(f"item {i}", o["kind"], o) for i, o in enumerate(objects)], Config(),
                         sim.decision_time(NOW), source="test")
    return local.cluster_page(cluster, "nvidia.com/gpu", 5.0)


def nodes_of(tree: dict) -> dict[str, dict]:
    out = {n["name"]: n for n in tree.get("nodes", ())}
    for child in tree.get("children", ()):
        out.update(nodes_of(child))
    return out


def test_the_page_data_holds_the_tree_the_gangs_in_queue_order_and_the_marks():
    page = page_of(cluster_objects())
    assert (page["version"], page["source"], page["resource"], page["refreshSeconds"]) == (1, "test", "nvidia.com/gpu", 5.0)
    assert page["levels"] == list(Config().topology_levels)
    assert page["summary"]["nodes"] == 16 and page["summary"]["allocatable"] == 128
    nodes = nodes_of(page["tree"])
    assert [h["gang"] for h in nodes["gpu-b0-s0-h0"]["holders"]] == ["ml/running"]
    assert nodes["gpu-b0-s1-h0"]["cordoned"] and not nodes["gpu-b1-s0-h3"]["ready"]
    assert nodes["gpu-b1-s1-h0"]["nominated"] == ["ml/pre"] and nodes["gpu-b1-s1-h1"]["nominated"] == ["ml/pre"]
    assert {h["gang"] for h in nodes["gpu-b1-s1-h0"]["holders"]} == {"ml/batch", "ml/pre"}
    assert nodes["gpu-b1-s0-h2"]["reserved"] == ["ml/pinned"]
    assert "nominated" not in nodes["gpu-b0-s0-h0"] and "reserved" not in nodes["gpu-b0-s0-h0"]
    rows = page["gangs"]
    waiting = [r for r in rows if r["waiting"]]
    assert [r["queuePosition"] for r in waiting] == sorted(r["queuePosition"] for r in waiting)
    assert rows[:len(waiting)] == waiting  # waiting gangs first
    wide = next(r for r in rows if r["gang"] == "ml/wide")
    assert wide["phase"] == "Unschedulable" and wide["reason"].startswith("fits ")
    assert next(r for r in rows if r["gang"] == "ml/running")["waiting"] is False
    assert page["summary"]["waiting"] == len(waiting)


def test_the_data_is_computed_at_most_once_per_ttl_and_an_error_is_a_503():
    calls, clock = [], [100.0]

    def produce() -> dict:
        calls.append(clock[0])
        if len(calls) == 3:
            raise OSError("the cluster could not be read")
        return {"tree": {"n": len(calls)}}

    cached = server.CachedData(produce, ttl=3.0, clock=lambda: clock[0])
    first = cached.get()
    clock[0] += 2.9
    assert cached.get() == first and len(calls) == 1
    clock[0] += 0.2
    ok, body = cached.get()
    assert ok and json.loads(body)["tree"] == {"n": 2} and len(calls) == 2
    clock[0] += 3.1
    assert cached.get() == (False, b'{"error": "OSError: the cluster could not be read"}')


@pytest.fixture
def served():
    cached = server.CachedData(lambda: {"tree": {"name": "cluster"}, "gangs": []})
    httpd = make_server("127.0.0.1", 0, server.wsgi(cached), handler_class=local.QuietHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fetch(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_server_answers_the_page_its_files_and_its_data_read_only(served):
    status, headers, _ = fetch(served + "/topology")
    assert (status, headers["Location"]) == (301, "topology/")
    status, headers, body = fetch(served + "/topology/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'src="map.js"' in body and b'href="map.css"' in body  # relative: a proxy's prefix stays
    for name, ctype in (("map.css", "text/css"), ("map.js", "text/javascript")):
        status, headers, body = fetch(f"{served}/topology/{name}")
        assert status == 200 and headers["Content-Type"].startswith(ctype) and body
    status, headers, body = fetch(served + "/topology/data.json")
    data = json.loads(body)
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert data["tree"] == {"name": "cluster"} and re.fullmatch(r"[0-9a-f]{16}", data["mapDigest"])
    assert fetch(served + "/topology/data.json", "POST")[0] == 405
    assert fetch(served + "/topology/nothing")[0] == 404
    assert fetch(served + "/")[1]["Location"] == "topology/"


@pytest.mark.parametrize("ignored", [False, True], ids=["started-as-is", "started-with-sigint-ignored"])
def test_web_serves_a_snapshot_until_ctrl_c(tmp_path, ignored):
    """Ctrl-C stops the server however it was started: also with SIGINT ignored, as a
    non-interactive shell starts ``kubectl troupe topology --web &``."""
    path = write_list(tmp_path, cluster_objects())
    argv = [str(PLUGIN), "topology", "--web", "--no-browser", "--snapshot", path, "--now", NOW]
    proc = subprocess.Popen(started(argv, ignored), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/topology/\?token=[A-Za-z0-9_-]{32}", line)
        assert url, (line, proc.stderr.read() if proc.poll() is not None else "")
        assert f"Serving the topology map of snapshot {path} at" in line
        status, _, body = fetch(url.group(0).replace("/?token=", "/data.json?token="))
        assert status == 200
        assert nodes_of(json.loads(body)["tree"])["gpu-b1-s0-h2"]["reserved"] == ["ml/pinned"]
        assert json.loads(body) == {**page_of(cluster_objects()), "source": f"snapshot {path}",
                                    "mapDigest": json.loads(body)["mapDigest"]}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 130
    assert [line for line in proc.stderr.read().splitlines() if not line.startswith("note: ")] == []


def guarded_server(token: str = "s3cret") -> tuple[str, Any]:
    cached = server.CachedData(lambda: {"tree": {"name": "cluster"}, "gangs": []})
    httpd = make_server("127.0.0.1", 0, server.wsgi(cached), handler_class=local.QuietHandler)
    httpd.set_app(local.guarded(server.wsgi(cached), httpd.server_port, token))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"127.0.0.1:{httpd.server_port}", httpd


def ask(address: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(address, timeout=5)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_local_map_answers_only_its_own_address_and_the_holder_of_its_token():
    address, httpd = guarded_server()
    port = address.rsplit(":", 1)[1]
    try:
        # A page of another site that rebinds its name to 127.0.0.1 sends its own name in Host.
        rebound = ask(address, "/topology/data.json?token=s3cret", {"Host": f"evil.example:{port}"})
        assert rebound[0] == 403
        assert ask(address, "/topology/data.json", {"Host": address})[0] == 401
        assert ask(address, "/topology/data.json?token=wrong", {"Host": address})[0] == 401
        status, headers, _ = ask(address, "/topology/?token=s3cret", {"Host": f"localhost:{port}"})
        assert status == 200
        assert headers["Set-Cookie"] == "troupe-map-token=s3cret; Path=/topology; HttpOnly; SameSite=Strict"
        status, _, body = ask(address, "/topology/data.json", {"Host": address, "Cookie": "troupe-map-token=s3cret"})
        assert status == 200 and json.loads(body)["tree"] == {"name": "cluster"}
        assert ask(address, "/topology/data.json", {"Host": address, "Cookie": "troupe-map-token=other"})[0] == 401
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_idle_connection_is_closed_after_the_handlers_timeout():
    assert local.QuietHandler.timeout == 30
    address, httpd = guarded_server()
    host, port = address.split(":")
    local.QuietHandler.timeout = 0.5
    try:
        idle = socket.create_connection((host, int(port)), timeout=5)
        idle.settimeout(5)
        assert idle.recv(1) == b"", "the server closed the idle connection"
        idle.close()
    finally:
        local.QuietHandler.timeout = 30
        httpd.shutdown()
        httpd.server_close()


def test_web_refuses_a_bad_snapshot_before_serving(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = subprocess.run([str(PLUGIN), "topology", "--web", "--no-browser", "--snapshot", str(bad)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("kubectl-troupe: ")


def test_help_explains_web():
    done = subprocess.run([str(PLUGIN), "topology", "--help"], capture_output=True, text=True, timeout=30, check=False)
    text = " ".join(done.stdout.split())
    for flag in ("--web", "--port PORT", "--no-browser", "--refresh SECONDS"):
        assert flag in text
    assert "127.0.0.1" in text and "Ctrl-C" in text


def test_the_snapshot_file_is_read_again_only_when_it_changed(tmp_path):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_objects()}))
    reads = []

    def read() -> views.Cluster:
        reads.append(1)
        objects = read_objects(path.read_bytes(), str(path))
        return views.read(objects, Config(), sim.decision_time(NOW), source=str(path))

    produce = local.reader(read, "nvidia.com/gpu", 5.0, str(path))
    first = produce()
    assert produce() is first and len(reads) == 1
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_objects()[:4]}))
    assert produce()["summary"]["nodes"] == 4 and len(reads) == 2


def test_pods_outside_any_gang_make_a_node_look_used_only_for_a_meaningful_share():
    """From requests against allocatable (32 CPUs, 32 Gi, 8 GPUs a node): a DaemonSet pod
    and a static pod (its mirror owned by the Node) never do, even a large one; 5% of the
    CPUs does not; 25% of the memory does; one GPU does."""
    objects = cluster_objects()
    on = {"gpu-b0-s0-h0": "ml/running"}
    extra = [
        make_pod("agent-a", "kube-system").requests(cpu="30", memory="30Gi").owned_by("DaemonSet", "agent", "apps/v1")
        .on("gpu-b1-s0-h0"),
        make_pod("kube-proxy-a", "kube-system").requests(cpu="100m").owned_by("Node", "gpu-b1-s0-h0", "v1")
        .on("gpu-b1-s0-h0"),
        make_pod("agent-b", "kube-system").requests(cpu="100m").owned_by("DaemonSet", "agent", "apps/v1")
        .on("gpu-b1-s0-h1"),
        make_pod("web", "lab").requests(cpu="1600m").owned_by("ReplicaSet", "web", "apps/v1").on("gpu-b1-s0-h1"),
        make_pod("cache", "lab").requests(cpu="1", memory="8Gi").on("gpu-b1-s0-h2"),
    ]
    for name in on:
        extra.append(make_pod("agent-r", "kube-system").requests(cpu="100m").owned_by("DaemonSet", "agent", "apps/v1")
                     .on(name))
    nodes = nodes_of(page_of(objects + [p.build() for p in extra])["tree"])
    assert nodes["gpu-b1-s0-h0"]["nodePods"] == 2 and nodes["gpu-b1-s0-h0"]["otherShare"] == {}
    assert nodes["gpu-b1-s0-h0"]["otherUse"] is False and nodes["gpu-b0-s0-h0"]["otherUse"] is False
    assert nodes["gpu-b1-s0-h0"]["free"] == 8 and nodes["gpu-b1-s0-h0"]["otherPods"] == 2
    assert nodes["gpu-b1-s0-h1"]["otherShare"] == {"cpu": 0.05} and nodes["gpu-b1-s0-h1"]["otherUse"] is False
    assert nodes["gpu-b1-s0-h2"]["otherShare"] == {"cpu": 0.031, "memory": 0.25} and nodes["gpu-b1-s0-h2"]["otherUse"]
    notebook = nodes["gpu-b0-s1-h1"]  # the golden snapshot's notebook: 4 GPUs, 1 CPU
    assert notebook["otherUse"] and notebook["otherShare"]["nvidia.com/gpu"] == 0.5 and notebook["nodePods"] == 0
    assert nodes["gpu-b1-s1-h3"]["otherUse"] is False and "otherShare" not in nodes["gpu-b1-s1-h3"]


def test_a_decided_gangs_row_names_the_nodes_of_its_plan():
    rows = {r["gang"]: r for r in page_of(cluster_objects())["gangs"]}
    small = rows["team/small"]
    assert small["phase"] == "Placed" and len(small["nodes"]) == 2 and all(n.startswith("gpu-") for n in small["nodes"])
    assert "nodes" not in rows["ml/wide"] and "nodes" not in rows["ml/running"]


def test_a_tenant_sees_a_node_used_by_a_hidden_gang_as_used():
    page = page_of(cluster_objects())
    seen = data.visible(page, lambda namespace: namespace == "team")
    node = nodes_of(seen["tree"])["gpu-b0-s0-h0"]
    assert node["holders"] == [] and node["otherPods"] == 1 and node["otherUse"] is True
    assert nodes_of(page["tree"])["gpu-b0-s0-h0"]["otherUse"] is False


def test_the_map_shows_a_gang_declared_by_a_pod_group_and_why_it_waits():
    """A gang its members declare by naming a pod group (docs/decisions/056-pod-groups.md)
    is a row of the map as any other, named by its key, with its group's reason."""
    pods = [member("ml", "grouped", i, 5, "2026-03-01T09:59:00Z").gated().build() for i in range(4)]
    for pod in pods:
        for key in ("troupe.io/gang-name", "troupe.io/gang-size"):
            pod["metadata"]["annotations"].pop(key, None)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "grouped"}
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "grouped",
             "namespace": "ml"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}}
    page = page_of([*cluster_objects(), *pods, group])
    row = next(r for r in page["gangs"] if r["gang"] == "ml/workload:grouped")
    assert row["waiting"] and row["phase"] == "Waiting"
    assert row["reason"] == "4 of 5 members present (PodGroup ml/grouped (scheduling.k8s.io) " \
                            "spec.schedulingPolicy.gang.minCount)"


# --- capacity held for waiting gangs (docs/decisions/079-reservation-at-earliest-start-and-backfill.md)
def held_page(config: Config) -> dict:
    cluster = views.read([(f"item {i}", o["kind"], o) for i, o in enumerate(held.objects())], config,
                         sim.decision_time(held.NOW), source="test")
    return local.cluster_page(cluster, "nvidia.com/gpu", 5.0)


def test_a_backfill_reservation_marks_its_nodes_held_and_its_row_says_when_the_gang_starts():
    """Under ``Backfill`` ml/big reserves gpu-b0-s0 from 10:02:00 (its pods' deadlines) and
    team/big, behind it, gpu-b0-s1 with its start not known: the nodes carry ``held``, the
    rows ``held``, ``expectedStart`` and ``reserved`` as the simulator's JSON names them."""
    page = held_page(Config(queueing_strategy="Backfill"))
    nodes = nodes_of(page["tree"])
    assert {name: nodes[name].get("held") for name in held.S0 + held.S1} == held.reserved_under_backfill()
    assert all("reserved" not in nodes[name] for name in held.S0 + held.S1)
    rows = {r["gang"]: r for r in page["gangs"]}
    s0, s1 = f"{held.SUBBLOCK}=gpu-b0/gpu-b0-s0", f"{held.SUBBLOCK}=gpu-b0/gpu-b0-s1"
    big = rows["ml/big"]
    assert big["held"] == {"domain": s0, "nodes": 2, "reservation": True}
    assert big["expectedStart"] == "2026-03-01T10:02:00.000+00:00" and big["reserved"] == s0
    assert "from 10:02:00 (in 2m)" in big["reason"]
    team = rows["team/big"]
    assert team["held"] == {"domain": s1, "nodes": 2, "reservation": True}
    assert team["expectedStart"] is None and team["reserved"] == s1
    simulated = {f"{o.namespace}/{o.name}": o.to_json() for o in sim.simulate(
        views.read([(f"item {i}", o["kind"], o) for i, o in enumerate(held.objects())],
                   Config(queueing_strategy="Backfill"), sim.decision_time(held.NOW)).built.snapshot,
        Config(queueing_strategy="Backfill"), sim.decision_time(held.NOW))}
    for key in ("ml/big", "team/big"):
        assert (rows[key]["expectedStart"], rows[key]["reserved"]) == (
            simulated[key]["expectedStart"], simulated[key]["reserved"]), "the simulator's decision, its names"


def test_a_head_of_line_hold_marks_its_nodes_held_and_another_namespace_does_not_see_them():
    """Under ``BestEffortFIFO`` ml/big has waited past ``headOfLineSeconds``: gpu-b0-s0 is
    held for it at the head of the queue (and for team/big, which has too); a caller who
    sees only ``ml`` sees ml/big's marks, never team/big's (decision 049)."""
    page = held_page(Config())
    nodes = nodes_of(page["tree"])
    assert [nodes[name].get("held") for name in held.S0] == [["ml/big", "team/big"]] * 2
    assert all("held" not in nodes[name] for name in held.S1)
    big = {r["gang"]: r for r in page["gangs"]}["ml/big"]
    assert big["held"] == {"domain": f"{held.SUBBLOCK}=gpu-b0/gpu-b0-s0", "nodes": 2, "reservation": False}
    assert "expectedStart" not in big and "reserved" not in big
    seen = data.visible(page, lambda namespace: namespace == "ml")
    assert [nodes_of(seen["tree"])[name]["held"] for name in held.S0] == [["ml/big"]] * 2
    assert "team/" not in json.dumps(seen)
    alone = data.visible(page, lambda namespace: namespace == "other")
    assert all("held" not in n for n in nodes_of(alone["tree"]).values())


def test_a_hold_names_its_nodes_from_the_table_it_was_decided_on():
    """A hold's node indices are those of its own node table: on a map whose nodes were
    renumbered since (a node added that sorts first) it still names the nodes it holds; a
    hold whose table is not known names none."""
    levels = TopologyLevels.from_config(Config())
    before = NodeTable([NodeInfo.from_object(o) for o in held.nodes()], levels)
    added = make_node("gpu-a0-s0-h0").topology("gpu-a0", "gpu-a0-s0", "gpu-a0-s0-h0").allocatable(gpu=8).build()
    after = NodeTable([NodeInfo.from_object(o) for o in [*held.nodes(), added]], levels)
    indices = frozenset(before.index[name] for name in held.S0)
    hold = Hold("ml/big", (0, 0.0, "ml/big"), 0, 0.0, indices, "s0", True, 120.0, table=before)
    assert sorted(after.nodes[i].name for i in indices) != held.S0, "the indices name other nodes on the new table"
    assert data.held_marks([hold]) == {name: {"held": ["ml/big"]} for name in held.S0}
    assert data.held_marks([replace(hold, table=None)]) == {}
    assert replace(hold, table=after) == hold, "the table is not part of what a hold is"
