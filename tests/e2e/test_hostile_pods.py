"""One tenant's pod cannot stop the others' releases (issue 22, finding 1;
docs/decisions/029-hostile-objects-hold-their-gang.md).

A bare gang pod whose ``batch.kubernetes.io/job-completion-index`` annotation holds 5,000
digits is admitted (it is not a Troupe key). Python's ``int()`` refuses it; before the
fix the exception crossed the pod, so the reconciler's pod list failed at every relist,
restart or failover and no gang was released anywhere. Now its own gang is held, its
condition naming the key and the value, and every other gang is released, also after
the reconciler is restarted and lists every pod again.

A cluster and Troupe of this module's own (the reconciler is killed and started again).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from tests.support.e2e import gang_annotations, new_namespace, pod_body, wait_for
from troupe import contract
from troupe.errors import quoted

REPO = Path(__file__).resolve().parents[2]
HUGE_INDEX = "9" * 5000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("hostile") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 0\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster, Stack(cluster, config, lease_seconds=4) as stack:
        yield stack


def create_gang(core: client.CoreV1Api, namespace: str, name: str, extra: dict[str, str] | None = None,
                memory: str = "64Mi") -> None:
    """Gang ``name`` of two bare pods, one GPU each; member 0 also carries the annotations
    ``extra`` and requests ``memory``."""
    for i in range(2):
        annotations = gang_annotations(name, 2) | ((extra or {}) if i == 0 else {})
        body = pod_body(f"{name}-{i}", annotations, gpus=1)
        if i == 0:
            body["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
        core.create_namespaced_pod(namespace, body)


def released(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    pods = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith(f"{name}-")]
    return len(pods) == 2 and all(p.spec.node_name and not p.spec.scheduling_gates for p in pods)


def held_condition(core: client.CoreV1Api, namespace: str, pod: str) -> client.V1PodCondition | None:
    conditions = core.read_namespaced_pod(pod, namespace).status.conditions or []
    return next((c for c in conditions if c.type == contract.GANG_CONDITION and c.reason == "Held"), None)


def test_a_pod_whose_object_cannot_be_read_holds_only_its_own_gang_also_after_a_restart(stack: Stack) -> None:
    """A memory request of 5,000 digits: the API server keeps it as it is, and Python's
    ``int()`` refuses it. Before the fix that ``ValueError`` crossed the pod: the pod list
    of a restarted reconciler failed, and no gang was released anywhere."""
    core = client.CoreV1Api(stack.cluster.api_client("admin"))
    namespace = new_namespace(core, "unreadable")
    create_gang(core, namespace, "heavy", memory=HUGE_INDEX)
    create_gang(core, namespace, "good")
    wait_for("gang good released beside the unreadable pod", lambda: released(core, namespace, "good"), timeout=60)

    restart(stack, "troupe-reconciler-after-heavy")
    create_gang(core, namespace, "after")
    wait_for("gang after released by the restarted reconciler", lambda: released(core, namespace, "after"),
             timeout=60)
    condition = wait_for("gang heavy held", lambda: held_condition(core, namespace, "heavy-1"), timeout=30)
    assert "the pod cannot be read: spec.containers[0].resources.requests.memory: invalid quantity" in condition.message
    assert "(5000 characters)" in condition.message
    assert not released(core, namespace, "heavy")
    core.delete_namespace(namespace, grace_period_seconds=0)


#: The name of the reconciler running now (the stack starts ``troupe-reconciler``).
RUNNING = ["troupe-reconciler"]


def restart(stack: Stack, name: str) -> None:
    """Kill the running reconciler and start another, ``name`` (it lists every object again)."""
    running = stack.process(RUNNING[-1])
    os.kill(running.record.pid, signal.SIGKILL)
    running.popen.wait()
    stack.start_reconciler(name)
    RUNNING.append(name)


def test_a_pod_with_a_5000_digit_rank_index_holds_only_its_own_gang_also_after_a_restart(stack: Stack) -> None:
    core = client.CoreV1Api(stack.cluster.api_client("admin"))
    namespace = new_namespace(core, "hostile")
    create_gang(core, namespace, "bad", {contract.JOB_COMPLETION_INDEX: HUGE_INDEX})
    create_gang(core, namespace, "good")
    wait_for("gang good released beside the hostile pod", lambda: released(core, namespace, "good"), timeout=60)

    condition = wait_for("gang bad held", lambda: held_condition(core, namespace, "bad-0"), timeout=30)
    assert f"annotation {contract.JOB_COMPLETION_INDEX}: must be an index of at most 9 digits" in condition.message
    assert f"{quoted(HUGE_INDEX)}" in condition.message, "the value, cut, with its length"
    assert "(5000 characters)" in condition.message
    assert [g.name for g in core.read_namespaced_pod("bad-1", namespace).spec.scheduling_gates] == [contract.GATE]

    # A restart lists every pod again, the hostile one among them: the new leader syncs.
    restart(stack, "troupe-reconciler-restarted")
    create_gang(core, namespace, "after")
    wait_for("gang after released by the restarted reconciler", lambda: released(core, namespace, "after"),
             timeout=60)
    assert held_condition(core, namespace, "bad-0") is not None
    assert not released(core, namespace, "bad")
    core.delete_namespace(namespace, grace_period_seconds=0)
