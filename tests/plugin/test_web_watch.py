"""``kubectl troupe topology --web`` on a live cluster keeps it by watches
(reconciler/tools/web/watched.py), on a scripted API: the pods and nodes listed once and
then changed by watch events only, the page decided again only after a change, the other
kinds listed again only when due, and a collection that cannot be listed refused before
anything is served."""

from __future__ import annotations

import queue
import threading

import pytest
from kubernetes.client.rest import ApiException

from reconciler.kube import Informer, Resource
from reconciler.tools import simulate as sim
from reconciler.tools import views
from reconciler.tools.web import local
from reconciler.tools.web.watched import WatchedCluster
from tests.support.e2e import wait_for
from tests.support.fake_api import FakeResponse
from tests.support.snapshots import member, node
from troupe.config import Config

NOW = "2026-03-01T10:00:00Z"


class Collection:
    """A scripted collection of one kind: a list answers ``items``; a watch answers the next
    batch of events the test :meth:`send` s (or nothing within 50 ms)."""

    def __init__(self, items, error=None):
        self.items, self.error = list(items), error
        self.lists = self.watches = 0
        self.events: queue.Queue = queue.Queue()

    def send(self, *events):
        self.events.put(list(events))

    def __call__(self, watch=False, resource_version=None, **kwargs):
        if self.error is not None:
            raise self.error
        if not watch:
            self.lists += 1
            return FakeResponse({"items": self.items, "metadata": {"resourceVersion": "100"}})
        self.watches += 1
        try:
            return FakeResponse(events=self.events.get(timeout=0.05))
        except queue.Empty:
            return FakeResponse(events=[])


class QuickInformer(Informer):
    """The informer, its backoff made 10 ms (a scripted watch that ends empty is retried at once)."""

    def _backoff(self, delay: float) -> float:
        self._stop.wait(0.01)
        return delay


@pytest.fixture
def cluster():
    """Two nodes, ml/run's two members on them, and one Job listed with the other kinds."""
    nodes = Collection([node(0, 0, h).build() for h in range(2)])
    pods = Collection([member("ml", "run", i, 2, "2026-03-01T09:00:00Z").on(f"gpu-b0-s0-h{i}").build() for i in range(2)])
    rest_lists: list[int] = []
    clock = [1000.0]

    def rest():
        rest_lists.append(1)
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run", "namespace": "ml", "uid": "u"},
               "spec": {"parallelism": 2, "completions": 2}}
        return [("jobs item 0", "Job", job)]

    watched = WatchedCluster({"Pod": Resource("pods", pods), "Node": Resource("nodes", nodes)}, rest,
                             relist_seconds=60, informer=QuickInformer, clock=lambda: clock[0]).start(10)
    yield watched, pods, nodes, rest_lists, clock
    watched.stop()


def page_of(watched: WatchedCluster) -> dict:
    return local.cluster_page(views.read(watched.objects(), Config(), sim.decision_time(NOW), source="test"),
                              "nvidia.com/gpu", 5.0)


def holders(page: dict) -> dict[str, list[str]]:
    out = {}
    for block in page["tree"]["children"]:
        for sub in block["children"]:
            for host in sub["children"]:
                for n in host["nodes"]:
                    out[n["name"]] = [h["gang"] for h in n["holders"]]
    return out


def test_pods_and_nodes_are_listed_once_and_then_changed_by_events(cluster):
    watched, pods, nodes, _, _ = cluster
    assert [k for _, k, _ in watched.objects()] == ["Node", "Node", "Job", "Pod", "Pod"]  # read_cluster's order
    assert holders(page_of(watched)) == {"gpu-b0-s0-h0": ["ml/run"], "gpu-b0-s0-h1": ["ml/run"]}
    before = watched.version
    extra = node(0, 0, 2).build()
    nodes.send({"type": "ADDED", "object": {**extra, "metadata": {**extra["metadata"], "resourceVersion": "101"}}})
    late = member("ml", "late", 0, 1, "2026-03-01T09:30:00Z").on("gpu-b0-s0-h2").build()
    late["metadata"]["resourceVersion"] = "102"
    gone = {**pods.items[1], "metadata": {**pods.items[1]["metadata"], "resourceVersion": "103"}}
    pods.send({"type": "ADDED", "object": late}, {"type": "DELETED", "object": gone})
    wait_for("the events applied", lambda: watched.version >= before + 3, timeout=10)
    assert holders(page_of(watched)) == {"gpu-b0-s0-h0": ["ml/run"], "gpu-b0-s0-h1": [], "gpu-b0-s0-h2": ["ml/late"]}
    assert (pods.lists, nodes.lists) == (1, 1) and pods.watches > 0


def test_the_page_is_decided_again_only_after_a_change(cluster):
    watched, pods, _, rest_lists, clock = cluster
    reads = []

    def read():
        reads.append(1)
        return views.read(watched.objects(), Config(), sim.decision_time(NOW), source="test")

    produce = local.reader(read, "nvidia.com/gpu", 5.0, None, watched.stamp)
    first = produce()
    assert produce() is first and len(reads) == 1 and len(rest_lists) == 1
    late = member("ml", "late", 0, 1, "2026-03-01T09:30:00Z").on("gpu-b0-s0-h1").build()
    late["metadata"]["resourceVersion"] = "104"
    version = watched.version
    pods.send({"type": "ADDED", "object": late})
    wait_for("the event applied", lambda: watched.version > version, timeout=10)
    second = produce()
    assert second is not first and len(reads) == 2 and "ml/late" in holders(second)["gpu-b0-s0-h1"]
    assert produce() is second and len(reads) == 2
    clock[0] += 60  # the other kinds are due: listed again, and the page decided again
    assert produce() is not second and len(reads) == 3 and len(rest_lists) == 2
    assert pods.lists == 1


def test_a_collection_that_cannot_be_listed_is_refused_before_anything_is_served():
    forbidden = Collection([], ApiException(status=403, reason="Forbidden"))
    nodes = Collection([node(0, 0, 0).build()])
    watched = WatchedCluster({"Pod": Resource("pods", forbidden), "Node": Resource("nodes", nodes)}, list,
                             informer=QuickInformer)
    with pytest.raises(PermissionError, match=r"cannot list pods within 0.5s: API error 403 Forbidden"):
        watched.start(0.5)
    wait_for("the informers stopped", lambda: not any(t.name.startswith("informer-") for t in threading.enumerate()),
             timeout=10)
