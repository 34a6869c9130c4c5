"""Liveness and readiness over HTTP reflect the worker and the informers: a dead or stuck
worker and an informer stuck on 403s fail ``/healthz`` with the reason; ``/readyz`` names
the informers that have not listed yet."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from reconciler.run.probes import Health
from reconciler.run.reconciler import WORKER_STUCK_SECONDS, Reconciler
from tests.support.e2e import wait_for
from tests.support.probes import get, serving
from troupe.config import Config


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served() -> Iterator[tuple[Reconciler, Health, int, Clock]]:
    clock = Clock()
    reconciler = Reconciler(client.ApiClient(), Config(), clock=clock)  # no request is made: nothing is started
    with serving(reconciler) as (health, port):
        yield reconciler, health, port, clock


def test_readyz_names_the_informers_that_have_not_listed_yet(served):
    reconciler, _health, port, _clock = served
    reconciler.nodes.synced.set()
    status, body = get(port, "/readyz")
    assert status == 503
    assert json.loads(body) == {"ready": False, "role": "leader", "synced": False, "waiting_for": [
        "csinodes", "deviceclasses.resource.k8s.io", "jobs", "jobsets.jobset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io", "mpijobs.kubeflow.org", "namespaces", "persistentvolumeclaims", "persistentvolumes",
        "poddisruptionbudgets", "podgroups.v1alpha1.scheduling.x-k8s.io", "podgroups.v1alpha2.scheduling.k8s.io",
        "podgroups.v1alpha3.scheduling.k8s.io", "podgroups.v1beta1.scheduling.k8s.io",
        "podgroups.v1beta1.scheduling.volcano.sh", "podgroups.v2alpha2.scheduling.run.ai",
        "pods", "pytorchjobs.kubeflow.org", "rayclusters.ray.io", "rayjobs.ray.io", "resourceclaims.resource.k8s.io",
        "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io",
        "shareddevicegroups.deviceshare.io"]}
    for informer in reconciler.informers():
        informer.synced.set()
    reconciler.synced.set()
    status, body = get(port, "/readyz")
    assert (status, json.loads(body)["waiting_for"]) == (200, [])


def test_a_standby_is_ready_and_waits_for_nothing(served):
    _reconciler, health, port, _clock = served
    health.role = "standby"
    assert get(port, "/readyz") == (200, json.dumps({"ready": True, "role": "standby", "synced": False, "waiting_for": []}))


def test_healthz_is_ok_while_everything_works(served):
    _reconciler, _health, port, _clock = served
    assert get(port, "/healthz") == (200, "ok")


def test_an_informer_stuck_on_403s_fails_liveness_with_the_reason(served):
    reconciler, _health, port, clock = served
    reconciler.pods.clock = clock
    reconciler.pods._failed("API error 403 Forbidden")
    assert get(port, "/healthz") == (200, "ok"), "within a minute: an RBAC change may be on its way"
    clock.now += 90
    assert get(port, "/healthz") == (
        503, "pods: no list or watch has succeeded for 90s; last error: API error 403 Forbidden")
    reconciler.export_metrics()
    metrics = get(port, "/metrics")[1]
    assert 'troupe_informer_failing_seconds{resource="pods"} 90.0' in metrics
    assert 'troupe_informer_failing_seconds{resource="nodes"} 0.0' in metrics


def test_a_worker_stuck_on_one_gang_fails_liveness(served):
    reconciler, _health, port, clock = served
    reconciler._busy = ("team-a/train", clock.now)
    clock.now += WORKER_STUCK_SECONDS + 1
    assert get(port, "/healthz") == (503, "the gang worker has been on gang team-a/train for 301s")


def test_a_dead_worker_thread_fails_liveness(served, monkeypatch):
    reconciler, _health, port, _clock = served
    monkeypatch.setattr(threading, "excepthook", lambda args: None)

    def die(key: str, *args: object, **kwargs: object) -> None:
        raise SystemExit("a bug that escapes the worker's error handling")

    reconciler.controllers.gangs.reconcile = die
    reconciler._worker.start()
    reconciler.queue.add("team-a/train")
    wait_for("the worker to die", lambda: not reconciler._worker.is_alive(), timeout=10)
    assert get(port, "/healthz") == (503, "the gang worker thread has died")
