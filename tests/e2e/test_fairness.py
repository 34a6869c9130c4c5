"""One tenant's flood of gangs that cannot run does not make another tenant's gang wait.

500 one-pod gangs that fit nowhere (9 GPUs on 8-GPU nodes) are created in one namespace
while, in another, a gang of 2 that fits arrives: it is released within 2 seconds of its
last member's creation, however many of the flood's gangs are still queued.

A cluster and Troupe of this module's own: the reconciler works through the flood's Events
and condition writes for many seconds after the test, which would delay the Events and
releases of the tests after it on a shared cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, new_namespace, pod_body, wait_for

REPO = Path(__file__).resolve().parents[2]
FLOOD = 500


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The session's ``troupe`` set-up (the nodes of examples/nodes.yaml, a 1 s timeout
    jitter) on a cluster of its own."""
    config = tmp_path_factory.mktemp("fairness") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 1\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, config) as running:
        yield running


@pytest.fixture
def admin_core(stack: Stack) -> client.CoreV1Api:
    return client.CoreV1Api(stack.cluster.api_client("admin"))


def test_a_fitting_gang_is_released_within_2s_behind_500_unschedulable_gangs_of_another_namespace(stack, admin_core):
    flood_ns, quiet_ns = new_namespace(admin_core, "flood"), new_namespace(admin_core, "quiet")
    def one(i: int) -> None:
        admin_core.create_namespaced_pod(flood_ns, pod_body(f"x-{i}", gang_annotations(f"x-{i}", 1), gpus=9))

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, i) for i in range(FLOOD)]
        # Halfway through the flood, the quiet namespace's gang arrives.
        while sum(f.done() for f in futures) < FLOOD // 2:
            time.sleep(0.05)
        for i in range(2):
            admin_core.create_namespaced_pod(quiet_ns, pod_body(f"w-{i}", gang_annotations("fits", 2), gpus=1))
        arrived = time.monotonic()

        def released():
            pods = admin_core.list_namespaced_pod(quiet_ns).items
            return len(pods) == 2 and not any(p.spec.scheduling_gates for p in pods)

        wait_for("the quiet gang released", released, timeout=30, interval=0.05)
        took = time.monotonic() - arrived
        for f in futures:
            f.result()
    flood = admin_core.list_namespaced_pod(flood_ns).items
    print(f"quiet gang released {took:.2f}s after its last member, during a flood of {FLOOD} "
          f"unschedulable one-pod gangs ({sum(1 for p in flood if p.spec.scheduling_gates)} gated)")
    assert took < 2.0
    assert all(p.spec.scheduling_gates for p in flood), "none of the flood was released"
