"""The demo's recovery scenario: a node lost under a running gang whose failure policy is
``RestartGang`` (issue 26; docs/guide/failures.md, docs/decisions/040-failure-policy.md).
The node is "lost" by a ``NoExecute`` taint, which kube-controller-manager's taint manager
acts on as it does for a node that stopped answering, and which the scenario removes
again, so the cluster (or the user's, with ``--kubeconfig``) keeps every node. Sizes follow
the cluster's layout as in :mod:`.scenarios`."""

from __future__ import annotations

from typing import Any

from devtools.demo.stage import Stage, indexed_job, pod, running
from troupe import contract
from troupe.policies import FAILURE_POLICY, RESTART_GANG

#: The taint that stands for the lost node (removed at the end of the scenario).
LOST = {"key": "demo.troupe.io/lost", "value": "true", "effect": "NoExecute"}


def _taint(stage: Stage, node: str, on: bool) -> None:
    taints = [t for t in (stage.core.read_node(node).spec.taints or []) if t.key != LOST["key"]]
    body = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints] + ([LOST] if on else [])
    stage.core.patch_node(node, {"spec": {"taints": body}})


def node_lost_under_a_running_gang(stage: Stage) -> str:
    """A gang of ``H / 2`` whole-node members (4 on the demo cluster), required in one
    subblock, ``RestartGang``. One member's node is lost (tainted ``NoExecute``): the gang
    is restarted once, whole: every member deleted with ``DisruptionTarget``, recreated by
    the Job, and placed again together, off the lost node."""
    ns = stage.namespace("demo-recovery")
    lay = stage.layout
    size, level = max(2, lay.hosts // 2), lay.subblock_label
    extra = {contract.TOPOLOGY_REQUIRED_LEVEL: level, FAILURE_POLICY: RESTART_GANG}
    template = pod("w", gpus=lay.gpus, labels={"gang": "recover"},
                   annotations=stage.gang("recover", size, timeout=30, extra=extra))
    stage.say(f"Job recover: {size} whole-node members in one {level.rsplit('/', 1)[-1]}, "
              f"{FAILURE_POLICY}: {RESTART_GANG} (a collective that hangs when a rank goes).")
    stage.batch.create_namespaced_job(ns, indexed_job("recover", size, template))
    first = stage.wait(f"the {size} members Running", lambda: running(stage.pods(ns, "gang=recover"), size))
    before = {p.metadata.uid for p in first}
    lost = sorted(first, key=lambda p: p.metadata.name)[0].spec.node_name
    stage.show("get", "pods", "-n", ns, "-o", "custom-columns=POD:.metadata.name,NODE:.spec.nodeName")
    stage.say(f"Node {lost} is lost under rank 0 (the demo taints it {LOST['key']}={LOST['value']}:NoExecute, "
              "as the node lifecycle controller does to a node that stops answering).")
    _taint(stage, lost, True)
    try:
        def restarted() -> list[Any] | None:
            pods = [p for p in stage.pods(ns, "gang=recover") if p.metadata.uid not in before
                    and not p.metadata.deletion_timestamp]
            return running(pods, size)

        again = stage.wait("the gang restarted whole, off the lost node", restarted, timeout=120)
    finally:
        _taint(stage, lost, False)
    stage.show("get", "events", "-n", ns, "--field-selector", "reason=GangMemberFailed",
               "-o", "custom-columns=POD:.involvedObject.name,MESSAGE:.message")
    events = [e for e in stage.core.list_namespaced_event(ns).items if e.reason == "GangMemberFailed"]
    stage.expect(len(events) == 1, f"one GangMemberFailed Event: restarted once (got {len(events)})")
    stage.expect(lost in events[0].message and "restarting the whole gang" in events[0].message,
                 "the Event names the lost node and the restart")
    stage.show("get", "pods", "-n", ns, "-o", "custom-columns=POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase")
    nodes = {p.spec.node_name for p in again}
    stage.expect(lost not in nodes, "the new members avoid the lost node")
    subblocks = {lay.subblock_of(n) for n in nodes}
    stage.expect(len(subblocks) == 1, f"placed again whole in one subblock (got {subblocks})")
    stage.say(f"Every member of the first run was deleted once and the Job recreated them; Troupe placed all "
              f"{size} together again in {next(iter(subblocks))}. The node's taint is removed.")
    return f"node {lost} lost under rank 0: gang of {size} restarted once (RestartGang), ran whole in " \
           f"{next(iter(subblocks))}"
