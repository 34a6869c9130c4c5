"""The world of the all-or-nothing state machines (tests/reconciler/daemon/test_controller_faults.py,
test_pipeline_faults.py): 4 nodes of 4 GPUs in two subblocks, three gangs of 4 Job-owned
members of 2 GPUs each (room for two of them) that their Jobs recreate when deleted,
kube-scheduler binding every released pod that fits its pinned node, and time passing; the
rules and invariants both machines share, and the check that ends them."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from reconciler.daemon.cache import ClusterCache
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.ports.fake import FakeCluster
from reconciler.run.controllers import Controllers, compose
from testbed.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0, release_concurrency=3)
GANGS = {"a": 4, "b": 4, "c": 4}
#: Room for two of the three gangs: a decision that did not see a release would place a
#: second gang on its nodes.
NODES = [make_node(f"n{i}").topology("b1", f"s{i // 2}", f"h{i}").gpus(4).build() for i in range(4)]
#: Every member's name, for rules that pick some.
MEMBERS = [f"{g}-{i}" for g, n in GANGS.items() for i in range(n)]


class GangWorld(RuleBasedStateMachine):
    """The cluster (a :class:`~reconciler.ports.fake.FakeCluster`), its pods and the
    wall clock; a subclass starts its reconciler in :meth:`_start` (``self.cache``,
    ``self.controllers``, ``self.controller``) and adds its faults."""

    def __init__(self) -> None:
        super().__init__()
        self.uids = itertools.count()
        self.cluster = FakeCluster()
        self.wall = 1_800_000_000.0
        self.pins: dict[str, str] = {}
        for gang, size in GANGS.items():
            for i in range(size):
                self._create(gang, i)
        self._start()

    def _start(self) -> None:
        raise NotImplementedError

    def _compose(self) -> None:
        """A reconciler started afresh: a cache listed from the cluster, its controllers, and
        the rollbacks it reads back when it starts."""
        self.cache = ClusterCache(CONFIG)
        self.cache.replace_nodes(NODES)
        self.cache.replace_pods(list(self.cluster.pods.objects.values()))
        self.controllers: Controllers = compose(self.cache, self.cluster, CONFIG, wall_clock=lambda: self.wall)
        self.controller = self.controllers.gangs
        self.controllers.rollbacks.restore()

    # --- the world ----------------------------------------------------------------------
    def _create(self, gang: str, i: int) -> None:
        pod = make_pod(f"{gang}-{i}").gang(gang, GANGS[gang]).index(i).gpus(2).gated().build()
        pod["metadata"]["uid"] = f"uid-{next(self.uids)}"
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": gang,
                                               "uid": f"job-{gang}", "controller": True}]
        self.cluster.pods.add(pod)

    def _sync(self) -> None:
        self.cache.replace_pods(list(self.cluster.pods.objects.values()))

    def _schedule(self) -> None:
        """kube-scheduler: bind each released, pinned pod whose node has room for it."""
        used = {n["metadata"]["name"]: 0 for n in NODES}
        for pod in self.cluster.pods.objects.values():
            if pod["spec"].get("nodeName"):
                used[pod["spec"]["nodeName"]] += 2
        for pod in sorted(self.cluster.pods.objects.values(), key=lambda p: p["metadata"]["name"]):
            node = (pod["spec"].get("nodeSelector") or {}).get(contract.HOSTNAME_LABEL)
            if node and not pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName") and used[node] + 2 <= 4:
                pod["spec"]["nodeName"], pod["status"]["phase"] = node, "Running"
                used[node] += 2

    # --- steps ----------------------------------------------------------------------------
    @rule()
    def accept_writes(self) -> None:
        self.cluster.pods.fail = {}

    @rule()
    def watch(self) -> None:
        self._sync()

    @rule()
    def schedule(self) -> None:
        self._schedule()
        self._sync()

    @rule(seconds=st.sampled_from([1, 5, 15, 31]))
    def time_passes(self, seconds: int) -> None:
        self.wall += seconds

    @rule()
    def jobs_recreate(self) -> None:
        for gang, size in GANGS.items():
            for i in range(size):
                if PodKey("team-a", f"{gang}-{i}") not in self.cluster.pods.objects:
                    self._create(gang, i)
        self._sync()

    # --- invariants -------------------------------------------------------------------------
    @invariant()
    def no_pod_is_pinned_twice(self) -> None:
        for pod in list(self.cluster.pods.objects.values()):
            node = (pod["spec"].get("nodeSelector") or {}).get(contract.HOSTNAME_LABEL)
            if node:
                uid = pod["metadata"]["uid"]
                assert self.pins.setdefault(uid, node) == node, f"{pod['metadata']['name']} pinned twice"

    @invariant()
    def no_node_is_over_committed_in_the_cluster(self) -> None:
        pods = [PodInfo.from_object(p) for p in list(self.cluster.pods.objects.values())]
        snapshot = Snapshot([NodeInfo.from_object(n) for n in NODES], pods, TopologyLevels.default())
        for node in NODES:
            assert snapshot.free(node["metadata"]["name"])["nvidia.com/gpu"] >= 0

    @invariant()
    def no_move_was_refused(self) -> None:
        assert self.controller.illegal_moves == 0

    def _every_gang_whole_or_not_at_all(self, restart: Callable[[], None]) -> None:
        """Faults stop (``restart``: a reconciler started afresh), time runs on: every gang
        ends released whole or not at all, and every released member bound."""
        self.cluster.pods.fail = {}
        restart()
        for _ in range(12):
            for gang in GANGS:
                self.controller.reconcile(f"team-a/{gang}")
            self._sync()
            self._schedule()
            self._sync()
            self.jobs_recreate()
            self.wall += 31
        for gang in GANGS:
            pods = [p for p in self.cluster.pods.objects.values() if p["metadata"]["name"].startswith(f"{gang}-")]
            released = [p for p in pods if not p["spec"].get("schedulingGates")]
            assert len(released) in (0, len(pods)), f"gang {gang} is partly released"
            assert all(p["spec"].get("nodeName") for p in released), f"gang {gang}: a released member is unbound"
        self.controllers.close()
