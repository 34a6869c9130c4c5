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

import threading
from concurrent.futures import Future

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from reconciler.daemon.controller import Outcome
from reconciler.ports import LostLeadership, Unsure, WriteError
from tests.support.fault_world import GANGS, MEMBERS, NODES, GangWorld


class Lease:
    """The fence of one reconciler's lifetime: closed when it is killed."""

    def __init__(self) -> None:
        self.held = True

    def check(self) -> None:
        if not self.held:
            raise LostLeadership("killed")

    def confirm(self) -> None:
        self.check()


class PipelineFaults(GangWorld):
    def __init__(self) -> None:
        self.in_flight: dict[str, Future[Outcome]] = {}
        super().__init__()

    def _start(self) -> None:
        self.lease = Lease()
        self.cluster.fence = self.lease
        for store in (self.cluster.pods, self.cluster.nodes, self.cluster.workloads, self.cluster.gang_objects,
                      self.cluster.groups, self.cluster.state):
            store.fence = self.lease
        self._compose()

    def _drain(self) -> None:
        """Wait for every release in flight (the gate open)."""
        self.cluster.pods.gate.set()
        for future in self.in_flight.values():
            future.result(timeout=10)
        self.in_flight.clear()

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

    @rule(pods=st.sets(st.sampled_from(MEMBERS), max_size=3),
          error=st.sampled_from([WriteError("403 forbidden"), Unsure("504 timed out"), WriteError("500")]))
    def refuse_writes(self, pods: set[str], error: WriteError) -> None:
        self.cluster.pods.fail = dict.fromkeys(pods, error)

    @rule()
    def kill(self) -> None:
        """The reconciler is killed: what it has not sent never lands; a new one starts."""
        self.lease.held = False
        self._drain()
        self.controllers.close()
        self._start()

    # --- invariants -------------------------------------------------------------------------
    @invariant()
    def no_node_is_over_committed_where_the_next_decision_plans(self) -> None:
        snapshot = self.cache.snapshot()
        for node in NODES:
            assert snapshot.free(node["metadata"]["name"])["nvidia.com/gpu"] >= 0

    def teardown(self) -> None:
        """Faults stop, time runs on: every gang ends released whole or not at all."""
        def restart() -> None:
            self._drain()
            self.controllers.close()
            self._start()
        self._every_gang_whole_or_not_at_all(restart)


PipelineFaults.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestPipelineFaults = PipelineFaults.TestCase
