"""The reconciler's topology map (``/topology/`` on ``--metrics-bind``): its data is the
reconciler's own cache and last decisions, made on request and kept while nothing changes;
the probes around it answer as before; a standby says the leader serves it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from reconciler.ports.fake import FakeCluster
from reconciler.run import topology as reconciler_map
from reconciler.run.probes import Health
from reconciler.run.reconciler import Reconciler
from testbed.engine_builders import make_node
from tests.support import held
from tests.support.probes import ADMIN, Reviews, get, serving
from tests.support.snapshots import snapshot
from troupe.config import Config

NOW = 1_772_359_200.0  # 2026-03-01T10:00:00Z


def nodes_of(tree: dict) -> dict[str, dict]:
    out = {n["name"]: n for n in tree.get("nodes", ())}
    for child in tree.get("children", ()):
        out.update(nodes_of(child))
    return out


@pytest.fixture
def served() -> Iterator[tuple[Reconciler, Health, int]]:
    reconciler = Reconciler(client.ApiClient(), Config(), writes=FakeCluster(),
                            wall_clock=lambda: NOW)  # no request is made: nothing is started
    objects = snapshot()["items"]
    reconciler.cache.replace_nodes([reconciler.cache.retain_node(o) for o in objects if o["kind"] == "Node"])
    reconciler.cache.replace_pods([reconciler.cache.retain_pod(o) for o in objects if o["kind"] == "Pod"])
    with serving(reconciler) as (health, port):
        yield reconciler, health, port


def test_the_map_shows_the_cache_and_the_last_decisions(served):
    reconciler, _health, port = served
    for key in ("ml/wide", "ml/partial", "ml/running"):
        reconciler.controllers.gangs.reconcile(key)
    status, body = get(port, "/topology/data.json")
    assert status == 200
    page = json.loads(body)
    assert page["source"] == "reconciler" and page["at"].startswith("2026-03-01T10:00:00")
    nodes = nodes_of(page["tree"])
    assert len(nodes) == 16
    assert [h["gang"] for h in nodes["gpu-b0-s0-h2"]["holders"]] == ["ml/running"]
    assert nodes["gpu-b0-s1-h0"]["cordoned"]
    rows = {r["gang"]: r for r in page["gangs"]}
    assert rows["ml/wide"]["phase"] == "Unschedulable" and rows["ml/wide"]["reason"].startswith("fits ")
    assert rows["ml/wide"]["waiting"] and rows["ml/wide"]["size"] == 8
    assert rows["ml/wide"]["members"] == {"present": 8, "gated": 8, "released": 0, "bound": 0, "running": 0}
    assert rows["ml/partial"]["reason"] == "3 of 4 members present"
    assert rows["ml/running"]["phase"] == "Released" and not rows["ml/running"]["waiting"]
    assert rows["team/small"] == {**rows["team/small"], "phase": "", "reason": reconciler_map.UNDECIDED, "waiting": True}
    assert get(port, "/topology/")[0] == 200 and get(port, "/healthz") == (200, "ok")
    assert get(port, "/nothing")[0] == 404


def test_what_depends_on_the_snapshot_is_kept_until_the_cache_changes(served):
    reconciler, _health, _port = served
    first = reconciler_map.page(reconciler)
    again = reconciler_map.page(reconciler)
    assert again["tree"] == first["tree"]
    base = reconciler.cache.snapshot()
    kept = [v for k, v in base._memo.items() if k.startswith("topology-map")]
    assert len(kept) == 1
    reconciler.cache.pod_event("DELETED", {"metadata": {"namespace": "ml", "name": "running-0"}})
    after = nodes_of(reconciler_map.page(reconciler)["tree"])
    assert after["gpu-b0-s0-h0"]["holders"] == [] and after["gpu-b0-s0-h0"]["free"] == 8


def test_a_standby_says_the_leader_serves_the_map(served):
    _reconciler, health, port = served
    health.role = "standby"
    status, body = get(port, "/topology/data.json")
    assert status == 503 and "standby" in json.loads(body)["error"]


def test_the_gangs_pages_answer_only_an_authenticated_caller_and_show_it_only_its_namespaces():
    """``/topology/data.json`` and ``/debug/gangs`` name every namespace's gangs: without a
    bearer token, or with one that authenticates no one, 401; a caller who may list pods
    only in ``team`` sees ``team``'s gangs, ``ml``'s holders counted among other pods and
    their marks gone; the page's static files hold no data and answer anyone
    (docs/decisions/049-hostile-tenants-third-round.md)."""
    reviews = Reviews(tokens={ADMIN: "admin", "team-token": "alice", "nobody-token": "bob"},
                      pods={"admin": {""}, "alice": {"team"}, "bob": set()})
    reconciler = Reconciler(client.ApiClient(), Config(), writes=FakeCluster(), wall_clock=lambda: NOW)
    objects = snapshot()["items"]
    reconciler.cache.replace_nodes([reconciler.cache.retain_node(o) for o in objects if o["kind"] == "Node"])
    reconciler.cache.replace_pods([reconciler.cache.retain_pod(o) for o in objects if o["kind"] == "Pod"])
    with serving(reconciler, reviews) as (_health, port):
        for key in ("ml/wide", "ml/running", "team/small"):
            reconciler.controllers.gangs.reconcile(key)
        for path in ("/topology/data.json", "/debug/gangs"):
            assert get(port, path, token=None)[0] == 401
            assert get(port, path, token="stolen")[0] == 401
        assert get(port, "/topology/", token=None)[0] == 200 and get(port, "/topology/map.js", token=None)[0] == 200
        assert get(port, "/healthz", token=None) == (200, "ok")

        everything = json.loads(get(port, "/topology/data.json")[1])
        assert {r["gang"].partition("/")[0] for r in everything["gangs"]} == {"ml", "team"}
        status, body = get(port, "/topology/data.json", token="team-token")
        assert status == 200
        seen = json.loads(body)
        team = {r["gang"] for r in everything["gangs"] if r["gang"].startswith("team/")}
        assert {r["gang"] for r in seen["gangs"]} == team and "team/small" in team and seen["visibleNamespaces"] == ["team"]
        assert seen["summary"]["gangs"] == len(team) and seen["summary"]["nodes"] == everything["summary"]["nodes"]
        node = nodes_of(seen["tree"])["gpu-b0-s0-h2"]
        assert node["holders"] == [] and node["otherPods"] == nodes_of(everything["tree"])["gpu-b0-s0-h2"]["otherPods"] + 1
        assert node["free"] == nodes_of(everything["tree"])["gpu-b0-s0-h2"]["free"]
        assert "ml/" not in body and seen["mapDigest"] != everything["mapDigest"]
        assert [g["gang"] for g in json.loads(get(port, "/debug/gangs", token="team-token")[1])] == ["team/small"]
        assert json.loads(get(port, "/debug/gangs", token="nobody-token")[1]) == []

        asked = len(reviews.asked)
        get(port, "/topology/data.json", token="team-token")
        assert len(reviews.asked) == asked, "the answers are kept: a page that reads every 5 s asks nothing"


def test_a_connection_that_sends_nothing_is_closed(served, monkeypatch):
    """A client that opens connections and sends nothing holds no thread for long."""
    import socket

    from reconciler.run import probes

    _reconciler, _health, port = served
    assert probes._Quiet.timeout == probes.IDLE_SECONDS == 30.0
    monkeypatch.setattr(probes._Quiet, "timeout", 0.3)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        assert s.recv(1) == b"", "closed by the server after its idle timeout"


def held_reconciler(config: Config) -> Reconciler:
    """A reconciler whose cache holds tests/support/held.py's cluster, nothing decided yet."""
    reconciler = Reconciler(client.ApiClient(), config, writes=FakeCluster(), wall_clock=lambda: HELD_NOW)
    objects = held.objects()
    for job in held.jobs():
        reconciler.cache.workload_event("Job", "ADDED", reconciler.cache.retain_job(job))
    reconciler.cache.replace_nodes([reconciler.cache.retain_node(o) for o in objects if o["kind"] == "Node"])
    reconciler.cache.replace_pods([reconciler.cache.retain_pod(o) for o in objects if o["kind"] == "Pod"])
    return reconciler


HELD_NOW = 1_772_359_200.0  # held.NOW


def test_the_map_shows_the_nodes_a_backfill_reservation_holds_and_when_its_gang_starts():
    """The reconciler's own decisions under ``Backfill`` (docs/decisions/079): ml/big
    reserves gpu-b0-s0 from 10:02:00, team/big gpu-b0-s1 (start not known); the page reads
    them from the controller's queue, on the HTTP server's thread."""
    reconciler = held_reconciler(Config(queueing_strategy="Backfill"))
    with serving(reconciler) as (_health, port):
        for key in ("ml/big", "team/big"):
            reconciler.controllers.gangs.reconcile(key)
        status, body = get(port, "/topology/data.json")
    assert status == 200
    page = json.loads(body)
    nodes = nodes_of(page["tree"])
    assert {name: nodes[name].get("held") for name in held.S0 + held.S1} == held.reserved_under_backfill()
    rows = {r["gang"]: r for r in page["gangs"]}
    s0 = f"{held.SUBBLOCK}=gpu-b0/gpu-b0-s0"
    assert rows["ml/big"]["held"] == {"domain": s0, "nodes": 2, "reservation": True}
    assert rows["ml/big"]["expectedStart"] == "2026-03-01T10:02:00.000+00:00" and rows["ml/big"]["reserved"] == s0
    assert "from 10:02:00 (in 2m)" in rows["ml/big"]["reason"]
    assert rows["team/big"]["expectedStart"] is None and rows["team/big"]["held"]["reservation"] is True
    assert "held" not in rows.get("web/a", {})


def test_a_hold_decided_on_other_nodes_still_names_the_nodes_it_holds():
    """Nodes added since the last decision renumber the snapshot's node table: the page
    names each held node from the table its hold was decided on, never by its index on the
    new one; a head-of-line hold (BestEffortFIFO, waited past ``headOfLineSeconds``) reads
    as one."""
    reconciler = held_reconciler(Config())
    reconciler.controllers.gangs.reconcile("ml/big")
    hold = reconciler.controllers.gangs.queue.holds()["ml/big"]
    assert hold.table is reconciler.cache.snapshot().table and not hold.reservation
    added = make_node("gpu-a0-s0-h0").topology("gpu-a0", "gpu-a0-s0", "gpu-a0-s0-h0").allocatable(gpu=8, cpu="32")
    objects = [*held.nodes(), added.build()]
    reconciler.cache.replace_nodes([reconciler.cache.retain_node(o) for o in objects])
    base = reconciler.cache.snapshot()
    assert base.table is not hold.table
    assert sorted(base.nodes[i].name for i in hold.nodes) != held.S0, "on the new table the indices name others"
    page = reconciler_map.page(reconciler)
    nodes = nodes_of(page["tree"])
    assert sorted(name for name, n in nodes.items() if "held" in n) == held.S0
    assert nodes["gpu-a0-s0-h0"].get("held") is None
    row = {r["gang"]: r for r in page["gangs"]}["ml/big"]
    assert row["held"] == {"domain": f"{held.SUBBLOCK}=gpu-b0/gpu-b0-s0", "nodes": 2, "reservation": False}
    assert "expectedStart" not in row
