"""ProvisioningRequests on the local control plane, with cluster-autoscaler's CRD as it ships
(vendored: devtools/devcluster/crds/cluster-autoscaler/) and a test provisioner playing the
autoscaler: it watches the requests, accepts each, adds kwok nodes of the requested pool in
one new subblock, and says ``Provisioned`` (or ``Failed``) (docs/decisions/080-provisioning-requests.md).

A cluster and Troupe of this module's own, ``provisioning`` on. The gangs ask for nodes of
the pool ``dws`` (``cloud.google.com/gke-nodepool``), which no node of examples/nodes.yaml is
in: a gang of 8 whole nodes does not fit until the provisioner adds them.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools.devcluster import Cluster
from devtools.devcluster.stack import Stack
from reconciler.engine.gangs.capacity import request_name
from tests.support.e2e import (
    create_gpu_nodes,
    gang_annotations,
    indexed_job,
    job_pods,
    running_job_pods,
    temporary_namespace,
    wait_for,
)
from troupe import provisioning as pr

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "devtools" / "devcluster" / "crds" / "cluster-autoscaler" / "autoscaling.x-k8s.io_provisioningrequests.yaml"
POOL_LABEL, POOL = "cloud.google.com/gke-nodepool", "dws"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("provisioning") / "config.yaml"
    config.write_text(f"gangScheduleTimeoutJitterSeconds: 1\nprovisioning: {{className: {pr.QUEUED_PROVISIONING}}}\n")
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster:
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        f"crd/{pr.PLURAL}.{pr.GROUP}")
        with Stack(cluster, config, lease_seconds=4) as running:
            yield running


@pytest.fixture
def api(stack: Stack) -> Any:
    return stack.cluster.api_client("admin")


@pytest.fixture
def core(api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    with temporary_namespace(core, "prov", timeout=90) as name:
        yield name


class Provisioner:
    """The autoscaler's part, in a thread: every new request is ``Accepted``; once
    :attr:`proceed` is set, it is ``Failed`` with :attr:`fail` when that is set, else
    ``Provisioned`` after kwok nodes of its pods' count are added in one new subblock
    (``prov<n>-b0-s0-h<i>``, 8 GPUs each, in the pool); the first :attr:`expire` requests
    are ``BookingExpired`` instead, with no node added. :attr:`made` lists every request seen
    (namespace, name, uid), in order. Stops, and deletes the nodes it added, on exit."""

    def __init__(self, api: Any) -> None:
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.proceed, self.fail, self.expire = threading.Event(), "", 0
        self.made: list[tuple[str, str, str]] = []
        self.nodes: list[str] = []
        self._stop = threading.Event()
        self._done: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="provisioner", daemon=True)

    def __enter__(self) -> Provisioner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.proceed.set()
        self._thread.join(timeout=30)
        for name in self.nodes:
            try:
                self.core.delete_node(name)
            except client.ApiException as e:
                if e.status != 404:
                    raise

    def _status(self, request: dict[str, Any], *conditions: tuple[str, str]) -> None:
        meta = request["metadata"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"conditions": [{"type": c, "status": "True", "reason": c, "message": m,
                                            "lastTransitionTime": now} for c, m in conditions]}}
        try:
            self.custom.patch_namespaced_custom_object_status(pr.GROUP, pr.VERSION, meta["namespace"], pr.PLURAL,
                                                              meta["name"], body)
        except client.ApiException as e:
            if e.status != 404:  # deleted meanwhile: the gang is bound, or gone
                raise

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            items = self.custom.list_cluster_custom_object(pr.GROUP, pr.VERSION, pr.PLURAL)["items"]
            for request in items:
                uid = request["metadata"]["uid"]
                if uid in self._done:
                    continue
                self._done.add(uid)
                self.made.append((request["metadata"]["namespace"], request["metadata"]["name"], uid))
                self._status(request, ("Accepted", ""))
                self.proceed.wait()
                if self._stop.is_set():
                    return
                if self.fail:
                    self._status(request, ("Accepted", ""), ("Failed", self.fail))
                    continue
                if self.expire:  # booked, then expired before the gang came: no node added
                    self.expire -= 1
                    self._status(request, ("Accepted", ""), ("BookingExpired", ""))
                    continue
                count = sum(s["count"] for s in request["spec"]["podSets"])
                names = [f"prov{len(self.made)}-b0-s0-h{i}" for i in range(count)]
                create_gpu_nodes(self.core, names, {POOL_LABEL: POOL})
                self.nodes += names
                self._status(request, ("Accepted", ""), ("Provisioned", ""))


def pool_job(name: str, size: int) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node members (8 GPUs) that need the pool, in one subblock."""
    job = indexed_job(name, size, {**gang_annotations(name, size, timeout=60),
                                   "troupe.io/topology-required-level": SUBBLOCK}, gpus=8)
    job["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: POOL}
    return job


def gang_message(core: client.CoreV1Api, ns: str, job: str) -> str:
    """The ``troupe.io/Gang`` condition message of the Job's first gated member (``""``)."""
    for pod in job_pods(core, ns, job):
        for c in pod.status.conditions or []:
            if c.type == "troupe.io/Gang" and c.status == "False":
                return str(c.message or "")
    return ""


def requests_in(api: Any, ns: str) -> list[dict[str, Any]]:
    return list(client.CustomObjectsApi(api).list_namespaced_custom_object(pr.GROUP, pr.VERSION, ns, pr.PLURAL)["items"])


def test_a_gang_that_does_not_fit_asks_once_waits_and_runs_whole_on_the_added_nodes(api, core, ns):
    batch = client.BatchV1Api(api)
    name = request_name(f"{ns}/train")
    with Provisioner(api) as provisioner:
        batch.create_namespaced_job(ns, pool_job("train", 8))
        wait_for("the gang waits on its Accepted request",
                 lambda: f"ProvisioningRequest {name}: Accepted" in gang_message(core, ns, "train") or None, timeout=90)
        (request,) = requests_in(api, ns)
        assert request["spec"]["provisioningClassName"] == pr.QUEUED_PROVISIONING
        assert [s["count"] for s in request["spec"]["podSets"]] == [8]
        template = core.read_namespaced_pod_template(request["spec"]["podSets"][0]["podTemplateRef"]["name"], ns)
        assert template.template.spec.node_selector == {POOL_LABEL: POOL}
        provisioner.proceed.set()
        pods = running_job_pods(core, ns, "train", 8, timeout=120)
        assert {p.spec.node_name for p in pods} == set(provisioner.nodes), "whole, on the added nodes"
        assert all(p.metadata.annotations[pr.CONSUME_ANNOTATION] == name for p in pods)
        assert all(p.metadata.annotations[pr.CLASS_POD_ANNOTATION] == pr.QUEUED_PROVISIONING for p in pods)
        assert [m for m in provisioner.made if m[0] == ns] == [(ns, name, request["metadata"]["uid"])], "asked once"
        wait_for("the request deleted once the gang is bound", lambda: not requests_in(api, ns) or None, timeout=60)
        # Its templates are deleted after it, by the same action: a moment later.
        wait_for("its pod templates deleted", lambda: not core.list_namespaced_pod_template(ns).items, timeout=30)


def test_failed_leaves_the_gang_waiting_with_the_message_and_deleting_the_gang_deletes_the_request(api, core, ns):
    batch = client.BatchV1Api(api)
    name = request_name(f"{ns}/stuck")
    with Provisioner(api) as provisioner:
        provisioner.fail = "no a3-highgpu-8g capacity in us-central1-a"
        provisioner.proceed.set()
        batch.create_namespaced_job(ns, pool_job("stuck", 8))
        wait_for("the gang waits with the failure", lambda: f"ProvisioningRequest {name}: Failed: no a3-highgpu-8g "
                 "capacity in us-central1-a" in gang_message(core, ns, "stuck") or None, timeout=90)
        assert all(p.spec.scheduling_gates for p in job_pods(core, ns, "stuck")), "nothing released"
        batch.delete_namespaced_job("stuck", ns, propagation_policy="Foreground")
        wait_for("the request goes with its Job", lambda: not requests_in(api, ns) or None, timeout=90)
        wait_for("its templates too", lambda: not core.list_namespaced_pod_template(ns).items or None, timeout=60)


def test_a_gang_that_fits_asks_for_nothing(api, core, ns):
    batch = client.BatchV1Api(api)
    job = indexed_job("fits", 4, gang_annotations("fits", 4, timeout=60), gpus=8)
    batch.create_namespaced_job(ns, job)
    running_job_pods(core, ns, "fits", 4)
    assert requests_in(api, ns) == []


def test_an_expired_booking_makes_a_new_request_after_the_backoff(api, core, ns):
    batch = client.BatchV1Api(api)
    name = request_name(f"{ns}/late")
    with Provisioner(api) as provisioner:
        provisioner.expire = 1
        provisioner.proceed.set()
        batch.create_namespaced_job(ns, pool_job("late", 8))
        running_job_pods(core, ns, "late", 8, timeout=120)
        mine = [m for m in provisioner.made if m[0] == ns]
        assert [m[1] for m in mine] == [name, name] and mine[0][2] != mine[1][2], "one expired, one new"


RESTARTS = itertools.count()


def restart(stack: Stack, config: str) -> None:
    """Run the reconciler with the configuration ``config`` (a new replica takes over)."""
    stack.config_path.write_text(config)
    for started in list(stack._started):
        if started.record.name.startswith("troupe-reconciler") and started.popen.poll() is None:
            os.kill(started.record.pid, signal.SIGTERM)
            started.popen.wait(timeout=30)
    stack.start_reconciler(f"troupe-reconciler-next-{next(RESTARTS)}")


def test_a_leader_change_mid_request_neither_duplicates_nor_orphans_it(stack, api, core, ns):
    batch = client.BatchV1Api(api)
    name = request_name(f"{ns}/handover")
    with Provisioner(api) as provisioner:
        batch.create_namespaced_job(ns, pool_job("handover", 8))
        wait_for("the gang waits on its Accepted request", lambda: f"ProvisioningRequest {name}: Accepted"
                 in gang_message(core, ns, "handover") or None, timeout=90)
        restart(stack, stack.config_path.read_text())  # the leader goes; a new replica takes over
        time.sleep(3 * stack.lease_seconds)  # it takes the Lease over and decides the waiting gang again
        assert f"ProvisioningRequest {name}: Accepted" in gang_message(core, ns, "handover")
        assert len(requests_in(api, ns)) == 1
        provisioner.proceed.set()
        running_job_pods(core, ns, "handover", 8, timeout=120)
        assert [m[1] for m in provisioner.made if m[0] == ns] == [name], "asked once across the two leaders"
        wait_for("the request deleted once bound", lambda: not requests_in(api, ns) or None, timeout=60)


def test_a_request_another_wrote_in_the_gangs_name_is_not_consumed(api, core, ns):
    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
    name = request_name(f"{ns}/target")
    core.create_namespaced_pod_template(ns, {"metadata": {"name": "forged"}, "template": {"spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}})
    forged = custom.create_namespaced_custom_object(pr.GROUP, pr.VERSION, ns, pr.PLURAL, {
        "apiVersion": f"{pr.GROUP}/{pr.VERSION}", "kind": pr.KIND, "metadata": {"name": name},
        "spec": {"provisioningClassName": pr.QUEUED_PROVISIONING,
                 "podSets": [{"podTemplateRef": {"name": "forged"}, "count": 8}]}})
    with Provisioner(api) as provisioner:
        batch.create_namespaced_job(ns, pool_job("target", 8))
        wait_for("the gang says the request is not its own", lambda: f"ProvisioningRequest {name} is not this "
                 "gang's" in gang_message(core, ns, "target") or None, timeout=90)
        assert [r["metadata"]["uid"] for r in requests_in(api, ns)] == [forged["metadata"]["uid"]], "left alone"
        assert all(pr.CONSUME_ANNOTATION not in (p.metadata.annotations or {}) for p in job_pods(core, ns, "target"))
        custom.delete_namespaced_custom_object(pr.GROUP, pr.VERSION, ns, pr.PLURAL, name)
        provisioner.proceed.set()
        pods = running_job_pods(core, ns, "target", 8, timeout=120)
        assert all(p.metadata.annotations[pr.CONSUME_ANNOTATION] == name for p in pods), "its own, once asked"


def whole_node_job(name: str, size: int, priority: str) -> dict[str, Any]:
    """An Indexed Job of ``size`` whole-node members of PriorityClass ``priority``, any node."""
    job = indexed_job(name, size, gang_annotations(name, size, timeout=60), gpus=8)
    job["spec"]["template"]["spec"]["priorityClassName"] = priority
    return job


@pytest.mark.parametrize("prefer", [True, False])
def test_preemption_comes_first_or_second_as_configured(stack, api, core, ns, prefer):
    batch, scheduling = client.BatchV1Api(api), client.SchedulingV1Api(api)
    for name, value in (("prov-e2e-low", 10), ("prov-e2e-high", 1000)):
        try:
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        except client.ApiException as e:
            if e.status != 409:
                raise
    original = stack.config_path.read_text()
    restart(stack, f'{original}gangPreemptionMode: "atomic"\n'.replace(
        f"provisioning: {{className: {pr.QUEUED_PROVISIONING}}}",
        f"provisioning: {{className: {pr.QUEUED_PROVISIONING}, preferPreemption: {str(prefer).lower()}}}"))
    try:
        with Provisioner(api) as provisioner:
            provisioner.fail = "held for the test"  # no node is added: only eviction can make room
            provisioner.proceed.set()
            batch.create_namespaced_job(ns, whole_node_job("low", 16, "prov-e2e-low"))  # every node of the cluster
            running_job_pods(core, ns, "low", 16, timeout=120)
            batch.create_namespaced_job(ns, whole_node_job("high", 8, "prov-e2e-high"))
            if prefer:
                running_job_pods(core, ns, "high", 8, timeout=120)
                assert requests_in(api, ns) == [] and not [m for m in provisioner.made if m[0] == ns]
            else:
                name = request_name(f"{ns}/high")
                wait_for("the gang asks instead of evicting", lambda: f"ProvisioningRequest {name}:"
                         in gang_message(core, ns, "high") or None, timeout=90)
                time.sleep(3)
                low = job_pods(core, ns, "low")
                assert len(low) == 16 and all(p.status.phase == "Running" and not p.metadata.deletion_timestamp
                                              for p in low), "no eviction"
    finally:
        restart(stack, original)
