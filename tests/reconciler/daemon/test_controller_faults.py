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

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from reconciler.ports import WriteError
from tests.support.fault_world import GANGS, MEMBERS, GangWorld


class Faults(GangWorld):
    def _start(self) -> None:
        self._compose()

    # --- steps ----------------------------------------------------------------------------
    @rule(gang=st.sampled_from(sorted(GANGS)))
    def reconcile(self, gang: str) -> None:
        self.controller.reconcile(f"team-a/{gang}")

    @rule(pods=st.sets(st.sampled_from(MEMBERS), max_size=3), status=st.sampled_from([500, 403]))
    def refuse_writes(self, pods: set[str], status: int) -> None:
        self.cluster.pods.fail = {p: WriteError(f"{status} refused") for p in pods}

    @rule()
    def restart(self) -> None:
        self._start()

    def teardown(self) -> None:
        """Faults stop, time runs on: every gang ends released whole or not at all."""
        self._every_gang_whole_or_not_at_all(self._start)


Faults.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestFaults = Faults.TestCase
