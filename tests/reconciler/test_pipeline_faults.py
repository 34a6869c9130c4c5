"""All-or-nothing under faults with releases in flight (docs/decisions/068-release-pipeline.md):
the state machine of test_controller_faults.py, with each gang's release written while the
next gangs are decided, writes held on their way, refused for sure (a 403) or of unknown
outcome (a 504), and reconcilers killed with writes in flight (those not yet sent never land).

After every step: no member is pinned to two nodes; no node is over-committed, neither by
what the cluster holds (bound, pinned, reserved by a plan record) nor in the snapshot the
next decision would plan on (the cache with its assumed members); the lifecycle refused no
move. Once the faults stop and time runs on, every gang is released whole or not at all.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from reconciler.daemon.cache import ClusterCache
from reconciler.daemon.controller import Outcome
from reconciler.daemon.writer import LostLeadership, Unsure, WriteError
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
#: Room for two of the three gangs: a decision that did not see a release in flight would
#: place a second gang on its nodes.
NODES = [make_node(f"n{i}").topology("b1", f"s{i // 2}", f"h{i}").gpus(4).build() for i in range(4)]


class Lease:
    """The fence of one reconciler's lifetime: closed when it is killed."""

    def __init__(self) -> None:
        self.held = True

    def check(self) -> None:
        if not self.held:
            raise LostLeadership("killed")

    def confirm(self) -> None:
        self.check()


class PipelineFaults(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uids = itertools.count()
        self.cluster = FakeCluster()
        self.wall = 1_800_000_000.0
        self.pins: dict[str, str] = {}
        self.in_flight: dict[str, Future[Outcome]] = {}
        for gang, size in GANGS.items():
            for i in range(size):
                self._create(gang, i)
        self._start()

    # --- the world ----------------------------------------------------------------------
    def _create(self, gang: str, i: int) -> None:
        pod = make_pod(f"{gang}-{i}").gang(gang, GANGS[gang]).index(i).gpus(2).gated().build()
        pod["metadata"]["uid"] = f"uid-{next(self.uids)}"
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": gang,
                                               "uid": f"job-{gang}", "controller": True}]
        self.cluster.pods.add(pod)

    def _start(self) -> None:
        self.lease = Lease()
        self.cluster.fence = self.lease
        for store in (self.cluster.pods, self.cluster.nodes, self.cluster.workloads, self.cluster.gang_objects,
                      self.cluster.groups, self.cluster.state):
            store.fence = self.lease
        self.cache = ClusterCache(CONFIG)
        self.cache.replace_nodes(NODES)
        self.cache.replace_pods(list(self.cluster.pods.objects.values()))
        self.controllers = compose(self.cache, self.cluster, CONFIG, wall_clock=lambda: self.wall)
        self.controller = self.controllers.gangs
        self.controllers.rollbacks.restore()

    def _drain(self) -> None:
        """Wait for every release in flight (the gate open)."""
        self.cluster.pods.gate.set()
        for future in self.in_flight.values():
            future.result(timeout=10)
        self.in_flight.clear()

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
    @rule(gang=st.sampled_from(sorted(GANGS)))
    def decide(self, gang: str) -> None:
        """The worker decides a gang whose key it does not hold (no release of it in flight)."""
        future = self.in_flight.get(gang)
        if future is not None and not future.done():
            return
        self.in_flight.pop(gang, None)
        decided: list[Outcome | None] = []
        worker = threading.Thread(target=lambda: decided.append(
            self.controller.reconcile(f"team-a/{gang}", wait=False)))
        worker.start()
        worker.join(2.0)
        if worker.is_alive():  # a handler that writes before it returns (a rollback): held writes go out
            self.cluster.pods.gate.set()
            worker.join()
        outcome = decided[0]
        if outcome is not None and outcome.pending is not None:
            self.in_flight[gang] = outcome.pending

    @rule()
    def hold_writes(self) -> None:
        self.cluster.pods.gate.clear()

    @rule()
    def let_writes_through(self) -> None:
        self.cluster.pods.gate.set()

    @rule(pods=st.sets(st.sampled_from([f"{g}-{i}" for g, n in GANGS.items() for i in range(n)]), max_size=3),
          error=st.sampled_from([WriteError("403 forbidden"), Unsure("504 timed out"), WriteError("500")]))
    def refuse_writes(self, pods: set[str], error: WriteError) -> None:
        self.cluster.pods.fail = dict.fromkeys(pods, error)

    @rule()
    def accept_writes(self) -> None:
        self.cluster.pods.fail = {}

    @rule()
    def kill(self) -> None:
        """The reconciler is killed: what it has not sent never lands; a new one starts."""
        self.lease.held = False
        self._drain()
        self.controllers.close()
        self._start()

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
    def no_node_is_over_committed_where_the_next_decision_plans(self) -> None:
        snapshot = self.cache.snapshot()
        for node in NODES:
            assert snapshot.free(node["metadata"]["name"])["nvidia.com/gpu"] >= 0

    @invariant()
    def no_move_was_refused(self) -> None:
        assert self.controller.illegal_moves == 0

    def teardown(self) -> None:
        """Faults stop, time runs on: every gang ends released whole or not at all."""
        self.cluster.pods.fail = {}
        self._drain()
        self.controllers.close()
        self._start()
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


PipelineFaults.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestPipelineFaults = PipelineFaults.TestCase
