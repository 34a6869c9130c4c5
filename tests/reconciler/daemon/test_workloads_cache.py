"""Workload kinds in the reconciler: an absent CRD is skipped (its gangs wait saying so),
and the cache sizes gangs from the workload objects its informers deliver."""

from __future__ import annotations

import threading

from kubernetes.client.rest import ApiException

from reconciler.daemon.cache import ClusterCache
from reconciler.kube import Informer, Resource
from tests.support.e2e import wait_for
from tests.support.fake_api import FakeResponse
from troupe import contract
from troupe.config import Config


class CrdAppears:
    """A custom resource whose CRD is missing for the first ``absent`` lists, then served."""

    def __init__(self, absent: int) -> None:
        self.absent, self.lists = absent, 0
        self.watching = threading.Event()

    def __call__(self, watch=False, **kwargs):
        if watch:
            self.watching.set()
            return FakeResponse(events=[])
        self.lists += 1
        if self.lists <= self.absent:
            raise ApiException(status=404, reason="Not Found")
        js = {"metadata": {"name": "js", "namespace": "ml", "resourceVersion": "7"}, "spec": {}}
        return FakeResponse({"items": [js], "metadata": {"resourceVersion": "7"}})


def test_an_absent_crd_is_synced_empty_reported_and_looked_for_again_until_it_appears():
    server = CrdAppears(absent=2)
    lists, absent = [], []
    inf = Informer(Resource("jobsets.jobset.x-k8s.io", server, optional=True, on_absent=absent.append),
                   lists.append, lambda k, o: None)
    waits = []
    inf._stop.wait = lambda delay: waits.append(delay) or False  # no real sleeps
    inf.start()
    wait_for("the CRD to be found", server.watching.is_set, timeout=10)
    inf.stop()
    assert inf.synced.is_set()
    assert lists[:2] == [[], []] and [i["metadata"]["name"] for i in lists[2]] == ["js"]
    assert absent == ["the resource jobsets.jobset.x-k8s.io is not served (its CustomResourceDefinition is not installed)"] * 2
    assert waits[:2] == [60.0, 60.0]


def auto_pod(name: str, job: str, index: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}", "resourceVersion": "1",
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         "annotations": {"troupe.io/gang-size": "auto"},
                         "labels": {contract.JOB_COMPLETION_INDEX: str(index)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j",
                                              "controller": True}]},
            "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": contract.GATE}]},
            "status": {"phase": "Pending"}}


def test_the_cache_sizes_a_gang_from_its_job_and_follows_the_job_as_it_changes():
    cache = ClusterCache(Config())
    cache.replace_pods([auto_pod(f"t-{i}", "t", i) for i in range(3)])
    assert cache.gang("ml/job:t").workload_missing == "Job ml/t not found (deleted, or not readable by the reconciler)"
    job = {"metadata": {"name": "t", "namespace": "ml"}, "spec": {"parallelism": 4, "completions": 4}}
    cache.replace_jobs([job])
    assert (cache.gang("ml/job:t").size, cache.gang("ml/job:t").workload_missing) == (4, "")
    cache.job_event("MODIFIED", {**job, "spec": {"parallelism": 3, "completions": 4}})
    assert cache.gang("ml/job:t").size == 3
    cache.job_event("DELETED", job)
    assert cache.gang("ml/job:t").size is None


def test_a_kind_whose_crd_is_absent_leaves_its_gangs_waiting_with_that_reason():
    cache = ClusterCache(Config())
    pod = auto_pod("p", "js-w-0", 0)
    pod["metadata"]["labels"][contract.JOBSET_NAME_LABEL] = "js"
    cache.replace_pods([pod])
    cache.workload_unavailable("JobSet", "its CRD is not installed")
    assert cache.gang("ml/jobset:js:0").workload_missing == "JobSet ml/js cannot be read: its CRD is not installed"
    cache.replace_workloads("JobSet", [{"metadata": {"name": "js", "namespace": "ml"},
                                        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2}]}}])
    gang = cache.gang("ml/jobset:js:0")
    assert (gang.size, gang.workload_missing, gang.size_from) == (2, "", "JobSet js: w 2x1")
