"""Two reconciler replicas: only the one holding the Lease acts, and the other takes over
when it dies. A cluster and Troupe of this module's own, since a replica gets killed."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.e2e.helpers import gang_annotations, new_namespace, pod_body, wait_for

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
