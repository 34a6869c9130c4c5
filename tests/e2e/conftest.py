"""Fixtures for end-to-end tests on the local control plane (devtools.devcluster).

Every test under tests/e2e is marked ``e2e`` (deselect with ``-m "not e2e"``). The
session-scoped ``cluster`` fixture starts etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (building them first if the cache is cold, ~8 min) with the 16
fake nodes of examples/nodes.yaml, and always stops them at the end of the session.

Under pytest-xdist (``make test``: three workers) a session is a worker's: each worker that
runs a test on the shared cluster starts one of its own, so tests that expect every node's
capacity free never meet another worker's pods. One control plane shared by the workers
would need those tests serialized, which is most of them; each more costs 15 to 30 s of
start-up. Modules that kill, freeze or restart components, or flood the reconciler, start
a cluster of their own (module-scoped), as before. Under xdist a cold build runs in a
worker, whose output pytest does not show: ``make test`` and ``make e2e`` build first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.build import built_binaries, ensure_built
from devtools.devcluster.kuberay import built_kuberay, ensure_kuberay, ensure_kuberay_crds
from devtools.devcluster.rayoperator import KubeRayOperator, install_kuberay_crds
from devtools.devcluster.stack import Stack
from devtools.devcluster.trainer import Trainer
from devtools.devcluster.workloads import WorkloadControllers, install_crds
from tests.support.e2e import temporary_namespace

REPO = Path(__file__).resolve().parents[2]
E2E_DIR = Path(__file__).resolve().parent
NODES_FILE = REPO / "examples" / "nodes.yaml"


#: The end-to-end modules that start first, longest first: seconds of a serial run on two
#: loaded cores in 2026-11, teardowns as they are now (``make test`` prints the slowest tests).
#: The others start after these, before the unit tests.
LONGEST_FIRST = (
    "test_preemption.py",        # 210: a cluster of its own, a reconciler per mode and case
    "test_chart_install.py",     # 190: a CA rotation and five serving certificates
    "test_release_kills.py",     # 190: 8 SIGKILLs mid-release, a cluster of its own
    "test_leader_election.py",   # 80: two clusters of its own
    "test_backfill.py",          # 80: a cluster of its own, Job deadlines of 30 to 50 s run out
    "test_failover_state.py",    # 60: a cluster of its own, a leader killed
    "test_admission_e2e.py",     # 45
    "test_hostile_pods.py",      # 45: a cluster of its own, the reconciler restarted twice
    "test_chart_e2e.py",         # 35
    "test_simulator_matches_reconciler.py",  # 35: a cluster of its own, a gang in every state
    "test_device_groups.py",     # 25: a cluster of its own
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/e2e with ``e2e``, and run the e2e modules first,
    longest first (:data:`LONGEST_FIRST`), then every other module in collection order.

    With pytest-xdist (``make test``: ``--dist loadscope --no-loadscope-reorder``), workers
    take whole modules in this order, so the long end-to-end modules, which mostly wait on
    the control plane, start at once and the unit modules, short and busy, fill the end.
    """
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        if E2E_DIR not in item.path.resolve().parents:
            return len(rank) + 1
        return rank.get(item.path.name, len(rank))

    for item in items:
        if E2E_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=order)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before the first test when e2e tests will run and the cache is cold,
    and KubeRay's operator when a test that runs it will (``kuberay``, ~7 minutes cold).

    Done here, not in the fixtures, so the cold builds count against no test's timeout and
    their progress lines reach the terminal instead of pytest's capture.
    """
    if session.config.option.collectonly:
        return
    e2e_items = [item for item in session.items if item.get_closest_marker("e2e")]
    binaries = bool(e2e_items) and built_binaries() is None
    kuberay = built_kuberay() is None and any("kuberay" in getattr(item, "fixturenames", ()) for item in e2e_items)
    if not (binaries or kuberay):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        if binaries:
            ensure_built()
        if kuberay:
            ensure_kuberay()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A running local control plane with the nodes of examples/nodes.yaml, all Ready (one per
    xdist worker that needs it).

    Identities: ``admin`` (system:masters), ``reconciler``
    (system:serviceaccount:troupe-system:troupe-reconciler, no RBAC) and ``alice``.
    """
    with Cluster(nodes=NODES_FILE) as running:
        yield running


@pytest.fixture(scope="session")
def admin_api(cluster: Cluster) -> Any:
    """An API client authenticated as the cluster admin."""
    return cluster.api_client("admin")


@pytest.fixture(scope="session")
def admin_core(admin_api: Any) -> client.CoreV1Api:
    """CoreV1Api as the cluster admin."""
    return client.CoreV1Api(admin_api)


@pytest.fixture(scope="session")
def troupe(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Troupe's webhook and reconciler running on ``cluster``, the reconciler as its own
    identity with the chart's ClusterRole. The configuration is the default but for a
    1 s timeout jitter (default 30 s), so that a timeout test waits seconds, not a minute."""
    config = tmp_path_factory.mktemp("troupe") / "config.yaml"
    config.write_text("gangScheduleTimeoutJitterSeconds: 1\n")
    install_crds(cluster)  # the workload kinds the reconciler sizes gangs from
    install_kuberay_crds(cluster, ensure_kuberay_crds())  # RayClusters too, served before its informers start
    with Stack(cluster, config) as stack:
        yield stack


@pytest.fixture(scope="session")
def workload_controllers(cluster: Cluster) -> Iterator[WorkloadControllers]:
    """The JobSet and LeaderWorkerSet controllers, built from their modules, running on
    ``cluster`` with their CRDs and admission webhooks (devtools/devcluster/workloads.py)."""
    with WorkloadControllers(cluster) as running:
        yield running


@pytest.fixture(scope="module")
def trainer(cluster: Cluster, workload_controllers: WorkloadControllers) -> Iterator[Trainer]:
    """Kubeflow Trainer v2's controller manager, built from its module, running on ``cluster``
    beside the JobSet controller its TrainJobs need, with its CRDs, webhooks and the
    ``torch-distributed`` ClusterTrainingRuntime (devtools/devcluster/trainer.py); stopped
    by its pid after the module."""
    with Trainer(cluster) as running:
        yield running


@pytest.fixture(scope="module")
def kuberay(cluster: Cluster) -> Iterator[KubeRayOperator]:
    """KubeRay's operator (v1.5.0, built from its module; batch scheduler off) running on
    ``cluster`` with its CRDs, for one module (devtools/devcluster/rayoperator.py)."""
    with KubeRayOperator(cluster) as running:
        yield running


@pytest.fixture(autouse=True)
def _everything_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test, with the dead process's log tail, if a control-plane component, the
    webhook, the reconciler, a workload controller, the trainer or KubeRay's operator exits around it."""
    running = [request.getfixturevalue(f) for f in ("cluster", "troupe", "workload_controllers", "trainer", "kuberay")
               if f in request.fixturenames]
    for r in running:
        r.check()
    yield
    for r in running:
        r.check()


@pytest.fixture
def namespace(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace for one test; teardown deletes it and waits until its pods are gone,
    so the next test starts with every node's capacity free again (not for the namespace
    itself, which nothing reads: see :func:`tests.support.e2e.delete_namespace`)."""
    with temporary_namespace(admin_core, "e2e") as name:
        yield name
