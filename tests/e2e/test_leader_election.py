"""Two reconciler replicas: only the one holding the Lease acts, and the other takes over
when it dies or freezes; a frozen leader, resumed, writes nothing. Clusters and Troupes of
this module's own, since replicas get killed and frozen."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.pki import DEFAULT_IDENTITIES, RECONCILER, Identity
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, indexed_job, new_namespace, pod_body, wait_for
from tests.support.release_ledger import Ledger, follow, members, runs_whole

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 4


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Stack, Path, Path]]:
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, lease_seconds=LEASE_SECONDS) as stack:
        second = stack.start_reconciler("troupe-reconciler-2")
        yield stack, cluster.logs_dir / "troupe-reconciler.log", Path(second.record.log)


def released_gang(core: client.CoreV1Api, namespace: str, name: str) -> None:
    for i in range(2):
        core.create_namespaced_pod(namespace, pod_body(f"{name}-{i}", gang_annotations(name, 2), gpus=1))
    wait_for(f"gang {name} bound", lambda: all(
        core.read_namespaced_pod(f"{name}-{i}", namespace).spec.node_name for i in range(2)), timeout=60)


def test_only_the_leader_acts_and_a_follower_takes_over_when_it_dies(pair):
    stack, first_log, second_log = pair
    core = client.CoreV1Api(stack.cluster.api_client("admin"))
    namespace = new_namespace(core, "le")
    released_gang(core, namespace, "one")
    assert "leads (Lease troupe-system/troupe-reconciler)" in first_log.read_text()
    second = second_log.read_text()
    assert "campaigns for the Lease" in second and " leads " not in second, "the follower waits"
    assert " released " not in second

    os.kill(stack.process("troupe-reconciler").record.pid, signal.SIGKILL)  # no chance to hand the Lease over
    wait_for("the follower to lead", lambda: " leads " in second_log.read_text(), timeout=5 * LEASE_SECONDS)
    released_gang(core, namespace, "two")
    assert f"gang {namespace}/two: released 2 member(s)" in second_log.read_text()


# --- a leader frozen mid-release ------------------------------------------------------------
#: Only the reconciler's writes are logged, one line each once answered (the response code).
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:troupe-system:troupe-reconciler"]
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
"""
#: Members of the frozen gang, 4 GPUs each: two per node on 64 nodes of 8.
BIG = 128
#: Slow writes (about 20 a second), so the freeze lands mid-release.
SLOW_CONFIG = "gangScheduleTimeoutJitterSeconds: 1\nreleaseConcurrency: 4\nkubeAPIQPS: 20\nkubeAPIBurst: 4\n"
#: The token identities of the two replicas: the same user (the webhook and RBAC see one
#: reconciler), told apart by the uid the API server's audit log records.
FIRST_UID, STANDBY_UID = "troupe-devcluster-reconciler", "troupe-devcluster-reconciler-b"


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    d = tmp_path_factory.mktemp("freeze")
    (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
    (d / "config.yaml").write_text(SLOW_CONFIG)
    (d / "nodes.yaml").write_text(yaml.safe_dump({
        "apiVersion": "troupe.dev/devcluster/v1", "kind": "FakeNodes",
        "groups": [{"name": "gpu", "topology": {"blocks": 2, "subblocksPerBlock": 4, "hostsPerSubblock": 8},
                    "resources": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}}],
    }))
    audit = d / "audit.log"
    standby = Identity("reconciler-b", RECONCILER.user, RECONCILER.groups)
    with Cluster(nodes=d / "nodes.yaml", identities=(*DEFAULT_IDENTITIES, standby),
                 apiserver_args=[f"--audit-log-path={audit}", f"--audit-policy-file={d / 'audit-policy.yaml'}"]) as cluster, \
            Stack(cluster, d / "config.yaml", lease_seconds=LEASE_SECONDS) as stack:
        yield stack, audit


def lease_holder(coordination: client.CoordinationV1Api) -> str | None:
    return coordination.read_namespaced_lease("troupe-reconciler", "troupe-system").spec.holder_identity


def audit_events(path: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for e in events:
        e["at"] = dt.datetime.fromisoformat(e["requestReceivedTimestamp"])
    return events


def test_a_leader_frozen_mid_release_writes_nothing_once_the_standby_has_taken_over(audited):
    stack, audit = audited
    api = stack.cluster.api_client("admin")
    core, batch, coordination = client.CoreV1Api(api), client.BatchV1Api(api), client.CoordinationV1Api(api)
    leader = stack.process("troupe-reconciler")
    stack.start_reconciler("troupe-reconciler-b", identity="reconciler-b")
    first_holder = lease_holder(coordination)
    namespace = new_namespace(core, "freeze")
    ledger, stop = Ledger(), threading.Event()
    watcher = threading.Thread(target=follow, args=(core, namespace, ledger, stop), daemon=True)
    watcher.start()
    try:
        batch.create_namespaced_job(namespace, indexed_job("big", BIG, gang_annotations("big", BIG, timeout=100), gpus=4))

        def ungated() -> int:
            return sum(1 for p in members(ledger, ["big"]) if not p.spec.scheduling_gates)

        wait_for("the release under way", lambda: ungated() >= 16, timeout=120, interval=0.05)
        os.kill(leader.record.pid, signal.SIGSTOP)
        at_freeze = ungated()
        try:
            wait_for("the standby to take the Lease", lambda: lease_holder(coordination) not in (first_holder, None),
                     timeout=10 * LEASE_SECONDS)
        finally:
            os.kill(leader.record.pid, signal.SIGCONT)
        wait_for(f"the gang of {BIG} Running whole", lambda: runs_whole(ledger, ["big"], BIG), timeout=180)
        code = leader.popen.wait(timeout=60)
    finally:
        stop.set()
        watcher.join(10)
    events = audit_events(audit)
    takeover = min(e["at"] for e in events if e["user"].get("uid") == STANDBY_UID
                   and e["objectRef"]["resource"] == "leases" and e["responseStatus"]["code"] < 300)
    old = [e for e in events if e["user"].get("uid") == FIRST_UID]
    old_after = [e for e in old if e["at"] >= takeover]
    accepted = [f"{e['verb']} {e['objectRef']['resource']}/{e['objectRef'].get('name')} "
                f"-> {e['responseStatus']['code']}" for e in old_after if e["responseStatus"]["code"] < 400]
    pod_writes = {uid: sum(1 for e in events if e["user"].get("uid") == uid and e["objectRef"]["resource"] == "pods")
                  for uid in (FIRST_UID, STANDBY_UID)}
    print(f"\nSIGSTOP failover: frozen with {at_freeze}/{BIG} members released; pod writes: "
          f"{pod_writes[FIRST_UID]} by the frozen leader, {pod_writes[STANDBY_UID]} by the standby; "
          f"writes of the frozen leader after the takeover: {len(old_after)} "
          f"({len(old_after) - len(accepted)} refused, {len(accepted)} accepted); it exited with code {code}; "
          f"{len(ledger.violations)} violations")
    assert 0 < at_freeze < BIG, "frozen mid-release"
    assert accepted == [], "the frozen leader wrote after the takeover"
    assert pod_writes[FIRST_UID] > 0 and pod_writes[STANDBY_UID] > 0, "each replica released part of the gang"
    assert code == 1, "it noticed it lost the Lease and exited"
    assert ledger.violations == [], "no node over-committed, no pod pinned twice"
    assert all(len(pins) == 1 for pins in ledger.pins.values())


def test_a_leader_stopped_cleanly_releases_the_lease_and_the_standby_takes_over_at_its_next_retry(audited):
    stack, _audit = audited
    coordination = client.CoordinationV1Api(stack.cluster.api_client("admin"))
    wait_for("a leader", lambda: lease_holder(coordination), timeout=10 * LEASE_SECONDS)
    leader = stack.process("troupe-reconciler-b")  # it took over from the frozen one
    assert leader.popen.poll() is None
    stack.start_reconciler("troupe-reconciler-c")
    holder = lease_holder(coordination)
    os.kill(leader.record.pid, signal.SIGTERM)
    assert leader.popen.wait(timeout=60) == 0
    exited = time.monotonic()
    new = wait_for("the standby to take the Lease", lambda: lease_holder(coordination) not in (holder, None) and
                   lease_holder(coordination), timeout=10 * LEASE_SECONDS, interval=0.05)
    took = time.monotonic() - exited
    print(f"\nclean shutdown: the Lease went from {holder} to {new} {took:.1f}s after the leader exited")
    assert "released the Lease" in Path(leader.record.log).read_text()
    assert took < LEASE_SECONDS - 1, "not a whole lease: the Lease was released, not left to expire"
