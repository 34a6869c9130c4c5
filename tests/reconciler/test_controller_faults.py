"""All-or-nothing under faults, as a hypothesis state machine over the pure controller.

The world: 4 nodes of 4 GPUs; three gangs of Job-owned members (2 GPUs each) that their
Jobs recreate when deleted; kube-scheduler binding every released pod that fits on its
pinned node; time passing. The faults: writes refused for chosen pods (a 500, a 403), and
reconcilers restarting at any moment (a new controller, a cache listed afresh). After
every step:

- no member is ever pinned to two nodes (a pod's pin never changes);
- no node is over-committed: what is bound, pinned or reserved fits its allocatable;
- the lifecycle refused no move;

and once the faults stop and time runs on, every gang is released whole or not at all,
and every released member is bound.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.writer import WriteError
from reconciler.daemon.writer.fake import FakeCluster
from reconciler.engine.ledger.snapshot import Snapshot
from reconciler.engine.ledger.topology import TopologyLevels
from reconciler.engine.model.keys import PodKey
from reconciler.engine.model.nodes import NodeInfo
from reconciler.engine.model.pods import PodInfo
from reconciler.run.controllers import compose
from tests.support.reconciler_builders import make_node, make_pod
from troupe import contract
from troupe.config import Config

CONFIG = Config(gang_schedule_timeout_jitter_seconds=0, release_concurrency=3)
GANGS = {"a": 4, "b": 4, "c": 4}
NODES = [make_node(f"n{i}").topology("b1", f"s{i // 2}", f"h{i}").gpus(4).build() for i in range(4)]


class Faults(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uids = itertools.count()
        self.cluster = FakeCluster()
        self.wall = 1_800_000_000.0
        self.pins: dict[str, str] = {}
        for gang, size in GANGS.items():
            for i in range(size):
                self._create(gang, i)
        self._restart()

    # --- the world ----------------------------------------------------------------------
    def _create(self, gang: str, i: int) -> None:
        pod = make_pod(f"{gang}-{i}").gang(gang, GANGS[gang]).index(i).gpus(2).gated().build()
        pod["metadata"]["uid"] = f"uid-{next(self.uids)}"
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": gang,
                                               "uid": f"job-{gang}", "controller": True}]
        self.cluster.pods.add(pod)

    def _restart(self) -> None:
        self.cache = ClusterCache(CONFIG)
        self.cache.replace_nodes(NODES)
        self.cache.replace_pods(list(self.cluster.pods.objects.values()))
        self.controllers = compose(self.cache, self.cluster, CONFIG, wall_clock=lambda: self.wall)
        self.controller = self.controllers.gangs
        self.controllers.rollbacks.restore()  # what a reconciler reads back when it starts (rollbacks)

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

    def _reconcile_all(self) -> None:
        for gang in GANGS:
            self.controller.reconcile(f"team-a/{gang}")

    # --- steps ----------------------------------------------------------------------------
    @rule(gang=st.sampled_from(sorted(GANGS)))
    def reconcile(self, gang: str) -> None:
        self.controller.reconcile(f"team-a/{gang}")

    @rule(pods=st.sets(st.sampled_from([f"{g}-{i}" for g, n in GANGS.items() for i in range(n)]), max_size=3),
          status=st.sampled_from([500, 403]))
    def refuse_writes(self, pods: set[str], status: int) -> None:
        self.cluster.pods.fail = {p: WriteError(f"{status} refused") for p in pods}

    @rule()
    def accept_writes(self) -> None:
        self.cluster.pods.fail = {}

    @rule()
    def restart(self) -> None:
        self._restart()

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
        for pod in self.cluster.pods.objects.values():
            node = (pod["spec"].get("nodeSelector") or {}).get(contract.HOSTNAME_LABEL)
            if node:
                uid = pod["metadata"]["uid"]
                assert self.pins.setdefault(uid, node) == node, f"{pod['metadata']['name']} pinned twice"

    @invariant()
    def no_node_is_over_committed(self) -> None:
        snapshot = Snapshot([NodeInfo.from_object(n) for n in NODES],
                            [PodInfo.from_object(p) for p in self.cluster.pods.objects.values()], TopologyLevels.default())
        for node in NODES:
            assert snapshot.free(node["metadata"]["name"])["nvidia.com/gpu"] >= 0

    @invariant()
    def no_move_was_refused(self) -> None:
        assert self.controller.illegal_moves == 0

    def teardown(self) -> None:
        """Faults stop, time runs on: every gang ends released whole or not at all."""
        self.cluster.pods.fail = {}
        self._restart()
        for _ in range(12):
            self._reconcile_all()
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


Faults.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestFaults = Faults.TestCase
