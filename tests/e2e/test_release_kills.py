"""All-or-nothing under SIGKILL: the reconciler is killed at random moments while gangs of
32 to 64 members are being released, and restarted each time.

A cluster and Troupe of this module's own (a reconciler gets killed, which the shared
fixtures would report as a failure). The reconciler writes slowly on purpose
(``releaseConcurrency: 4``, ``kubeAPIQPS: 30``): a release of 48 members takes about
1.5 s, so most kills land in the middle of one.

A watch follows every pod throughout and checks, on every event:

- no pod is ever pinned (``spec.nodeSelector[kubernetes.io/hostname]``) to two nodes;
- no node is over-committed: the GPUs of the pods committed to it (pinned, or reserved by
  a plan record while still gated) never exceed its 8.

At the end of each round every gang runs whole: all members Running, none gated. A second
test kills it with twenty releases of small gangs in flight at once
(docs/decisions/068-release-pipeline.md), checked the same way.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, indexed_job, new_namespace, wait_for
from tests.support.release_ledger import Ledger, follow, members, runs_whole
from troupe.policies import RELEASE_MODE, WHEN_COMPLETE

REPO = Path(__file__).resolve().parents[2]
#: Two gangs and one kill per round. The suite runs 8 (16 releases, about 3 minutes);
#: ``make bench-kills`` runs 20 (40 releases, about 7 minutes).
ROUNDS = int(os.environ.get("TROUPE_KILL_ROUNDS", "8"))
GPUS_PER_NODE = 8
CONFIG = "gangScheduleTimeoutJitterSeconds: 1\nreleaseConcurrency: 4\nkubeAPIQPS: 30\nkubeAPIBurst: 8\n"


@pytest.fixture(scope="module")
def killable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("kills") / "config.yaml"
    config.write_text(CONFIG)
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, config, lease_seconds=4) as stack:
        yield stack


def test_sigkill_mid_release_never_leaves_a_gang_partly_running(killable: Stack) -> None:
    stack = killable
    api = stack.cluster.api_client("admin")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace = new_namespace(core, "kills")
    ledger, stop = Ledger(), threading.Event()
    watcher = threading.Thread(target=follow, args=(core, namespace, ledger, stop), daemon=True)
    watcher.start()
    rng = random.Random(20261123)
    counts = {"releases": 0, "members": 0, "kills": 0, "mid_release": 0, "before_release": 0, "after_release": 0}
    reconciler = stack.process("troupe-reconciler")
    try:
        for round_ in range(ROUNDS):
            sizes = [rng.randint(32, 64) for _ in range(2)]
            names = [f"r{round_}-{k}" for k in range(2)]
            for name, n in zip(names, sizes, strict=True):
                batch.create_namespaced_job(namespace, indexed_job(name, n, {**gang_annotations(name, n, timeout=60),
                                                                  RELEASE_MODE: WHEN_COMPLETE}))
            total = sum(sizes)
            wait_for(f"round {round_}: {total} members created",
                     lambda: len(members(ledger, names)) >= total or None, timeout=60)  # noqa: B023
            time.sleep(rng.uniform(0.0, 1.5))
            os.kill(reconciler.record.pid, signal.SIGKILL)
            reconciler.popen.wait()
            counts["kills"] += 1
            pods = members(ledger, names)
            for name in names:
                gang = [p for p in pods if p.metadata.labels.get("job-name") == name]
                ungated = sum(1 for p in gang if not p.spec.scheduling_gates)
                key = "before_release" if ungated == 0 else "after_release" if ungated == len(gang) else "mid_release"
                counts[key] += 1
            time.sleep(rng.uniform(0.0, 1.0))
            reconciler = stack.start_reconciler(f"troupe-reconciler-{round_ + 1}")
            wait_for(f"round {round_}: gangs of {sizes} Running whole",
                     lambda: runs_whole(ledger, names, total) or None, timeout=120)  # noqa: B023
            counts["releases"] += 2
            counts["members"] += sum(sizes)
            for name in names:
                batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
            wait_for(f"round {round_}: pods gone", lambda: not members(ledger, names) or None, timeout=60)  # noqa: B023
    finally:
        stop.set()
        watcher.join(10)
    print(f"\nkill test: {counts['releases']} gang releases ({counts['members']} members), "
          f"{counts['kills']} SIGKILLs: gangs at the kill {counts['before_release']} before release, "
          f"{counts['mid_release']} mid-release, {counts['after_release']} released; "
          f"{len(ledger.pins)} pods pinned, {ledger.events} watch events, {len(ledger.violations)} violations")
    assert ledger.violations == []
    assert all(len(pins) == 1 for pins in ledger.pins.values())
    assert counts["releases"] == 2 * ROUNDS and counts["kills"] == ROUNDS
    assert counts["mid_release"] >= 3, f"too few kills landed mid-release to test anything: {counts}"
    core.delete_namespace(namespace, grace_period_seconds=0)


#: Gangs created at once in each round of the pipeline's kill test, their members, and rounds.
PIPELINE_GANGS, PIPELINE_MEMBERS, PIPELINE_ROUNDS = 20, 4, 3


def test_sigkill_with_twenty_releases_in_flight_leaves_every_gang_whole(killable: Stack) -> None:
    """20 gangs of 4, complete before the reconciler starts, are decided in one pass and
    written together (docs/decisions/068-release-pipeline.md); the reconciler is killed
    while their releases are in flight, and after the restart every gang runs whole, no pod
    pinned twice, no node over-committed at any moment."""
    stack = killable
    api = stack.cluster.api_client("admin")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace = new_namespace(core, "pipeline-kills")
    ledger, stop = Ledger(), threading.Event()
    watcher = threading.Thread(target=follow, args=(core, namespace, ledger, stop), daemon=True)
    watcher.start()
    rng = random.Random(20261128)
    in_flight = []  # per round: gangs with a release cut short by the kill
    reconciler = stack.running("troupe-reconciler")  # the first test of the module restarts it
    try:
        for round_ in range(PIPELINE_ROUNDS):
            os.kill(reconciler.record.pid, signal.SIGKILL)  # the gangs come complete while no reconciler runs
            reconciler.popen.wait()
            names = [f"p{round_}-{k}" for k in range(PIPELINE_GANGS)]
            for name in names:
                batch.create_namespaced_job(namespace, indexed_job(
                    name, PIPELINE_MEMBERS, {**gang_annotations(name, PIPELINE_MEMBERS, timeout=60),
                                             RELEASE_MODE: WHEN_COMPLETE}, gpus=1))
            total = PIPELINE_GANGS * PIPELINE_MEMBERS
            wait_for(f"round {round_}: {total} members created",
                     lambda: len(members(ledger, names)) >= total or None, timeout=60)  # noqa: B023
            reconciler = stack.start_reconciler(f"troupe-reconciler-pipeline-{round_}")
            wait_for(f"round {round_}: the first release written", lambda: any(
                not p.spec.scheduling_gates for p in members(ledger, names)) or None, timeout=60)  # noqa: B023
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(reconciler.record.pid, signal.SIGKILL)
            reconciler.popen.wait()
            partly = 0
            for name in names:  # as the kill left them
                gang = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
                ungated = sum(1 for p in gang if not p.spec.scheduling_gates)
                planned = any((p.metadata.annotations or {}).get("reconciler.troupe.io/plan") for p in gang)
                partly += 0 < ungated < len(gang) or (ungated == 0 and planned)
            in_flight.append(partly)
            reconciler = stack.start_reconciler(f"troupe-reconciler-pipeline-{round_}-after")
            wait_for(f"round {round_}: {PIPELINE_GANGS} gangs Running whole",
                     lambda: runs_whole(ledger, names, total) or None, timeout=120)  # noqa: B023
            for name in names:
                batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
            wait_for(f"round {round_}: pods gone", lambda: not members(ledger, names) or None, timeout=60)  # noqa: B023
    finally:
        stop.set()
        watcher.join(10)
    print(f"\npipeline kill test: {PIPELINE_ROUNDS} rounds of {PIPELINE_GANGS} gangs of {PIPELINE_MEMBERS}; "
          f"gangs with a release cut short at each kill: {in_flight}; {len(ledger.pins)} pods pinned, "
          f"{len(ledger.violations)} violations")
    assert ledger.violations == []
    assert all(len(pins) == 1 for pins in ledger.pins.values())
    assert sum(in_flight) >= 2, f"too few releases were in flight at the kills to test anything: {in_flight}"
    core.delete_namespace(namespace, grace_period_seconds=0)
