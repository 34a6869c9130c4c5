"""The cache's assumed members (docs/decisions/068-release-pipeline.md): a release decided
counts in the snapshots from the moment it is decided until the cache sees its writes, and
an assumption ends exactly when its write is seen, refused, or of unknown outcome for too long."""

from __future__ import annotations

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.cache.assumed import UNKNOWN_OUTCOME_SECONDS
from reconciler.engine.decision.actions import MemberRelease
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.pods import PodInfo
from reconciler.engine.model.records import Plan
from reconciler.ports.fake import FakeCluster
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

REF = PodKey("team-a", "train-0")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cache_with(clock: Clock) -> ClusterCache:
    cache = ClusterCache(Config(), clock=clock)
    cache.replace_nodes([make_node(f"n{i}").topology("b1", "s1", f"h{i}").gpus(4).build() for i in (1, 2)])
    pod = make_pod("train-0").gang("train", 1).gpus(4).gated().build()
    pod["metadata"].update(uid="uid-0", resourceVersion="10")
    cache.replace_pods([pod])
    return cache


def assumed_on(cache: ClusterCache, node: str) -> MemberRelease:
    info = cache.pod_info(REF)
    assert info is not None
    m = MemberRelease(REF, info.uid, info.resource_version, node, node, 0, "2027-01-15T08:00:00.000+00:00")
    cache.assume_release([m.applied(info, "2027-01-15T08:00:00.000+00:00")])
    return m


def written(node: str, rv: str) -> dict:
    """The pod as its release's write leaves it."""
    pod = make_pod("train-0").gang("train", 1).gpus(4).build()
    pod["metadata"].update(uid="uid-0", resourceVersion=rv)
    pod["metadata"]["annotations"][contract.ASSIGNED_NODE] = node
    pod["spec"]["nodeSelector"] = {contract.HOSTNAME_LABEL: node}
    return pod


def gpus_free(cache: ClusterCache, node: str) -> int:
    return cache.snapshot().free(node)["nvidia.com/gpu"]


def test_an_assumed_member_uses_its_node_in_every_snapshot_until_its_write_is_seen():
    clock = Clock()
    cache = cache_with(clock)
    assert gpus_free(cache, "n1") == 4
    assumed_on(cache, "n1")
    assert gpus_free(cache, "n1") == 0, "counted the moment its release is decided"
    assert cache.assumed_count() == 1
    clock.now += 10 * UNKNOWN_OUTCOME_SECONDS
    assert gpus_free(cache, "n1") == 0, "a write in flight never expires"
    cache.assume(written("n1", "11"))
    assert cache.assumed_count() == 0 and gpus_free(cache, "n1") == 0, "the written pod takes its place"


def test_an_event_from_before_the_write_keeps_the_assumption():
    cache = cache_with(Clock())
    assumed_on(cache, "n1")
    older = make_pod("train-0").gang("train", 1).gpus(4).gated().label("x", "y").build()
    older["metadata"].update(uid="uid-0", resourceVersion="11")
    cache.pod_event("MODIFIED", older)  # someone else's update, still gated and unpinned
    assert cache.assumed_count() == 1 and gpus_free(cache, "n1") == 0


def test_a_write_refused_for_sure_frees_the_node_at_once():
    cache = cache_with(Clock())
    assumed_on(cache, "n1")
    cache.forget_assumed([REF])
    assert cache.assumed_count() == 0 and gpus_free(cache, "n1") == 4


def test_a_write_of_unknown_outcome_holds_its_node_until_the_pod_shows_or_the_time_is_up():
    clock = Clock()
    cache = cache_with(clock)
    assumed_on(cache, "n1")
    cache.assumed_unknown([REF])
    clock.now += UNKNOWN_OUTCOME_SECONDS - 1
    assert gpus_free(cache, "n1") == 0, "it may have landed"
    clock.now += 1
    assert gpus_free(cache, "n1") == 4 and cache.assumed_count() == 0, "never seen land: the cache's pod counts"


def test_a_write_of_unknown_outcome_that_landed_is_settled_by_the_watch():
    clock = Clock()
    cache = cache_with(clock)
    assumed_on(cache, "n1")
    cache.assumed_unknown([REF])
    cache.pod_event("MODIFIED", written("n1", "12"))
    assert cache.assumed_count() == 0 and gpus_free(cache, "n1") == 0


def test_a_deleted_member_ends_its_assumption():
    cache = cache_with(Clock())
    assumed_on(cache, "n1")
    cache.pod_event("DELETED", written("n1", "12"))
    assert cache.assumed_count() == 0 and gpus_free(cache, "n1") == 4


def test_a_response_the_watch_delivered_first_settles_the_assumption():
    cache = cache_with(Clock())
    assumed_on(cache, "n1")
    pod = written("n1", "13")
    cache.pod_event("MODIFIED", pod)  # the watch was first; the write's response is the same version
    assumed_on(cache, "n1")  # (assumed again, as a second release of the same pod would not be)
    cache.assume(pod)
    assert cache.assumed_count() == 0


def test_a_member_deleted_before_its_release_is_not_assumed():
    cache = cache_with(Clock())
    info = cache.pod_info(REF)
    cache.pod_event("DELETED", written("n1", "12"))
    m = MemberRelease(REF, "uid-0", "10", "n1", "n1", 0, "2027-01-15T08:00:00.000+00:00")
    cache.assume_release([m.applied(info, "2027-01-15T08:00:00.000+00:00")])
    assert cache.assumed_count() == 0 and gpus_free(cache, "n1") == 4


def test_the_assumed_form_is_the_written_pods():
    """What the snapshot assumes of a member is what its written pod parses to, field by
    field that a snapshot reads (the pin, the stamps, the plan record, the gates)."""
    cache = cache_with(Clock())
    info = cache.pod_info(REF)
    cluster = FakeCluster()
    pod = make_pod("train-0").gang("train", 1).gpus(4).gated().build()
    pod["metadata"]["uid"] = "uid-0"
    stored = cluster.pods.add(pod)
    m = MemberRelease(REF, "uid-0", stored["metadata"]["resourceVersion"], "n1", "n1", 0,
                      "2027-01-15T08:00:00.000+00:00")
    plan = Plan("2027-01-15T08:00:00.000+00:00", {"uid-0": "n1"})
    real = PodInfo.from_object(cluster.pods.release_member(m, [contract.GATE], "2027-01-15T08:00:01.000+00:00", plan))
    assumed = m.applied(info, "2027-01-15T08:00:01.000+00:00", plan)
    for name in ("assigned_node", "planned_at", "released_at", "plan", "nomination", "gates", "devices", "requests",
                 "node_name", "phase", "uid"):
        assert getattr(assumed, name) == getattr(real, name), name
