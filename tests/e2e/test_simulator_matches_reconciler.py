"""The simulator decides as the reconciler does, on the live local cluster
(docs/decisions/047-one-snapshot-builder.md).

With a gang standing in every state, the cluster is dumped with the README's snapshot
command (:data:`reconciler.objects.kinds.SNAPSHOT_COMMAND`, the cluster's own kubectl);
``python -m reconciler simulate`` and ``kubectl troupe status --snapshot`` read the dump with
the reconciler's configuration, as of the time it was taken; every gang's phase, reason and
placement must be what the reconciler wrote in its Gang object (``gangs.troupe.io``).

A cluster and Troupe of this module's own (``gangPreemptionMode: minimal``, long timeouts so
that nothing turns on the clock while the states stand), on the 16 nodes of
examples/nodes.yaml (8 GPUs each, 4 per subblock) and 3 DRA nodes of 8 devices::

    ran        Job of 4 x 8 GPUs, priority 1000          Released, Running
    reserved   Job of 4 x 8 GPUs released as created,    Releasing: its reservation holds 4 nodes,
               a quota lets 2 of its pods exist          2 members run, 2 do not exist yet
    filler     Job of 6 x 8 GPUs, priority 1000          Released, Running (the GPU nodes full)
    low        2 x 8 GPUs, priority 10, each pod with    the victims: evicted, kept terminating
               a finalizer                               (a ValidatingAdmissionPolicy stops kwok
                                                         from ending them, as no kubelet would)
    urgent     2 x 8 GPUs, priority 1000                 Preempting: waits for its 2 victims
    partial    3 of 4 members                            Waiting
    wide       5 x 8 GPUs in one subblock                Unschedulable (a subblock has 4 nodes)
    dra-run    2 x 8 DRA devices (a claim template)      Released, Running on 2 DRA nodes
    dra-wait   2 x 8 DRA devices                         Unschedulable: 1 DRA node left
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from devtools.devcluster import Cluster
from devtools.devcluster.kuberay import ensure_kuberay_crds
from devtools.devcluster.rayoperator import install_kuberay_crds
from devtools.devcluster.stack import Stack
from devtools.devcluster.workloads import install_crds
from reconciler.engine.decision.gangobject import placed_domains
from reconciler.objects.kinds import SNAPSHOT_COMMAND
from reconciler.objects.snapshot_io import read_file, read_retained
from reconciler.tools import views
from tests.support.dra_e2e import H100, claim_spec, create, with_claim
from tests.support.e2e import (
    dra_nodes,
    gang_annotations,
    indexed_job,
    pod_body,
    quota,
    running_job_pods,
    temporary_namespace,
    wait_for,
)
from troupe import contract
from troupe.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
GROUP, VERSION, PLURAL = contract.GANG_API
#: Long enough that no timeout, nomination or head-of-line hold runs out while the states stand.
CONFIG = """\
gangScheduleTimeoutJitterSeconds: 1
gangScheduleTimeoutSecondsLimit: 900
gangPreemptionMode: minimal
headOfLineSeconds: 3600
nominationMaxSeconds: 900
"""
TIMEOUT = {"troupe.io/gang-schedule-timeout-seconds": "900"}
HIGH, LOW = "e2e-snapshot-high", "e2e-snapshot-low"
#: What keeps a victim terminating: its finalizer, and a policy that refuses it a terminal phase.
HOLD_LABEL, HOLD_FINALIZER, HOLD_POLICY = "e2e.troupe.io/hold", "e2e.troupe.io/hold", "e2e-hold-victims"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = tmp_path_factory.mktemp("snapshot") / "config.yaml"
    config.write_text(CONFIG)
    with Cluster(nodes=REPO / "examples" / "nodes.yaml") as cluster:
        install_crds(cluster)  # the snapshot command lists every workload kind's resource
        install_kuberay_crds(cluster, ensure_kuberay_crds())
        with Stack(cluster, config) as running:
            scheduling = client.SchedulingV1Api(cluster.api_client("admin"))
            for name, value in ((HIGH, 1000), (LOW, 10)):
                scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
            yield running


@contextlib.contextmanager
def victims_held(api: client.ApiClient) -> Iterator[None]:
    """While in the block, a pod labelled :data:`HOLD_LABEL` cannot be given a terminal phase:
    kwok, which plays the kubelet, ends a pod being deleted at once (devtools/devcluster/
    kwok-pod-stages.yaml), where a real kubelet takes the pod's grace period."""
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy({
        "metadata": {"name": HOLD_POLICY},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {
                     "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                                        "resources": ["pods/status"]}],
                     "objectSelector": {"matchLabels": {HOLD_LABEL: "true"}}},
                 "validations": [{"expression": "!(object.status.phase in ['Failed', 'Succeeded'])",
                                  "message": "held terminating by the test"}]}})
    admission.create_validating_admission_policy_binding({
        "metadata": {"name": HOLD_POLICY}, "spec": {"policyName": HOLD_POLICY, "validationActions": ["Deny"]}})
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(HOLD_POLICY)
        admission.delete_validating_admission_policy(HOLD_POLICY)


def release_victims(core: client.CoreV1Api, namespace: str) -> None:
    """Remove the hold finalizer from every pod of ``namespace`` that has it."""
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{HOLD_LABEL}=true").items:
        with contextlib.suppress(ApiException):
            core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})


def job(name: str, size: int, annotations: dict[str, str], gpus: int = 8) -> dict[str, Any]:
    """An Indexed Job of ``size`` pods of ``gpus`` GPUs at priority :data:`HIGH`."""
    body = indexed_job(name, size, annotations, gpus=gpus)
    body["spec"]["template"]["spec"]["priorityClassName"] = HIGH
    return body


def pods(core: client.CoreV1Api, namespace: str, gang: str, size: int, count: int, gpus: int = 8,
         priority: str | None = None, extra: dict[str, str] | None = None, claim: str | None = None,
         victim: bool = False) -> None:
    """``count`` plain pods ``<gang>-<i>`` of a gang of ``size``, ``gpus`` GPUs each (or a
    claim from template ``claim``); a ``victim`` is labelled and finalized to be held
    terminating, with a grace period longer than the test."""
    for i in range(count):
        body = pod_body(f"{gang}-{i}", {**gang_annotations(gang, size), **TIMEOUT, **(extra or {})}, gpus=gpus,
                        labels={"gang": gang, **({HOLD_LABEL: "true"} if victim else {})})
        if priority:
            body["spec"]["priorityClassName"] = priority
        if victim:
            body["metadata"]["finalizers"] = [HOLD_FINALIZER]
            body["spec"]["terminationGracePeriodSeconds"] = 600
        core.create_namespaced_pod(namespace, with_claim(body, template=claim) if claim else body)


def running(core: client.CoreV1Api, namespace: str, gang: str, count: int) -> list[Any] | None:
    found = [p for p in core.list_namespaced_pod(namespace, label_selector=f"gang={gang}").items
             if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return found if len(found) == count else None


def gang_objects(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Gang key -> the Gang object, as ``kubectl get gangs -A -o json`` lists them."""
    listed = json.loads(cluster.kubectl("get", "gangs", "-A", "-o", "json").stdout)["items"]
    return {o["metadata"]["annotations"][contract.GANG_KEY_ANNOTATION]: o for o in listed}


def snapshot_command() -> list[str]:
    """The README's snapshot command as the arguments of kubectl (no redirection)."""
    words = SNAPSHOT_COMMAND.split()
    assert words[0] == "kubectl" and words[-2:] == [">", "snapshot.json"], SNAPSHOT_COMMAND
    # The default local cluster serves no pod group API: left out, as the README says.
    words[2] = ",".join(r for r in words[2].split(",") if not r.startswith("podgroups."))
    return words[1:-2]


def fingerprint(dump: dict[str, Any]) -> dict[str, Any]:
    """What must not change while the cluster is dumped: every object's resourceVersion, but
    a Node's (kwok's heartbeats write its status), for which what decisions read of it."""
    out: dict[str, Any] = {}
    for obj in dump["items"]:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        spec = obj.get("spec", {})
        out[str(key)] = ((meta.get("labels"), spec.get("taints"), spec.get("unschedulable"))
                         if obj["kind"] == "Node" else meta.get("resourceVersion"))
    return out


def stable_dump(cluster: Cluster, path: Path, attempts: int = 10) -> tuple[str, dict[str, dict[str, Any]]]:
    """Dump the cluster to ``path`` while nothing changes: the Gang objects and every object
    of the dump the same before and after it, and again after a pause in which the
    reconciler could have acted on anything it had not yet. Returns the time the dump was
    begun (RFC 3339, the ``--now`` the reconciler's decisions stand at) and the Gang objects."""
    for _ in range(attempts):
        before = gang_objects(cluster)
        begun = datetime.now(UTC)
        first = json.loads(cluster.kubectl(*snapshot_command(), timeout=120).stdout)
        time.sleep(3)
        second = json.loads(cluster.kubectl(*snapshot_command(), timeout=120).stdout)
        after = gang_objects(cluster)
        if before == after and fingerprint(first) == fingerprint(second):
            path.write_text(json.dumps(first))
            return begun.isoformat(timespec="milliseconds").replace("+00:00", "Z"), after
        time.sleep(2)
    raise AssertionError(f"the cluster did not stand still for a dump in {attempts} attempts")


def decided(argv: list[str]) -> dict[str, Any]:
    """The JSON a command of this repository prints (run as the user runs it)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def recorded_placement(dump: dict[str, Any], namespace: str, names: set[str]) -> dict[str, str]:
    """Pod name -> node of the pods ``names`` of ``namespace`` in the dump, as the reconciler
    recorded them: bound there, pinned there, or nominated there by their gang's nomination."""
    found = {p["metadata"]["name"]: p for p in dump["items"]
             if p["kind"] == "Pod" and p["metadata"]["namespace"] == namespace and p["metadata"]["name"] in names}
    nominated: dict[str, str] = {}
    for pod in found.values():
        raw = (pod["metadata"].get("annotations") or {}).get(contract.NOMINATION)
        nominated.update(json.loads(raw)["nodes"] if raw else {})
    out = {}
    for name, pod in found.items():
        node = (pod["spec"].get("nodeName") or (pod["metadata"].get("annotations") or {}).get(contract.ASSIGNED_NODE)
                or nominated.get(pod["metadata"]["uid"]))
        if node:
            out[name] = node
    return out


def gang_members(dump: dict[str, Any], namespace: str, prefix: str) -> set[str]:
    """The names of the pods of ``namespace`` named ``<prefix>-...``, not being deleted."""
    return {p["metadata"]["name"] for p in dump["items"] if p["kind"] == "Pod" and p["metadata"]["namespace"] == namespace
            and p["metadata"]["name"].startswith(f"{prefix}-") and not p["metadata"].get("deletionTimestamp")}


def dumped_reservation(dump: dict[str, Any], namespace: str, job_name: str) -> list[str] | None:
    """The nodes of the reservation Job ``job_name`` carries in the dump, by rank (None without one)."""
    for obj in dump["items"]:
        meta = obj["metadata"]
        if obj["kind"] == "Job" and (meta.get("namespace"), meta["name"]) == (namespace, job_name):
            raw = (meta.get("annotations") or {}).get(contract.RESERVATION)
            return json.loads(raw)["nodes"] if raw else None
    return None


def disagreements(keys: Iterable[str], objects: dict[str, dict[str, Any]], dump: dict[str, Any],
                  simulated: dict[str, dict[str, Any]], statuses: dict[str, Any], dump_path: Path,
                  config: Config) -> list[str]:
    """Where the simulator (``simulated``: its gangs by key) or ``kubectl troupe status``
    (``statuses``: its JSON) decide a gang of ``keys`` otherwise than the reconciler did (its
    Gang ``objects`` by key), on the ``dump``: the phase and the reason (the object's
    message); for the gangs the simulator decides, where it would put members against where
    the reconciler put, nominated or reserved them; the domains of the placed members in
    the simulator's snapshot against the object's; and that a gang the simulator does not
    decide (it decides every gang with a gated member or a reservation) is Released."""
    told = {f"{g['metadata']['namespace']}/{g['spec']['gangName']}": g["status"] for g in statuses["items"]}
    read = views.read(read_retained(read_file(str(dump_path)), str(dump_path)), config, 0.0)
    gangs = {s.key: s.gang for s in views.status(read)}
    report = []
    for key in keys:
        status = objects[key]["status"]
        reconciled = (status["phase"], status["message"])
        by_tool = told.get(key)
        if by_tool is None or (by_tool["phase"], by_tool["reason"]) != reconciled:
            report.append(f"{key}: kubectl troupe says {by_tool and (by_tool['phase'], by_tool['reason'])}, "
                          f"the reconciler {reconciled}")
        domain, domains = placed_domains(gangs[key], read.snapshot)
        if (domain, list(domains)) != (status.get("domain", ""), status.get("domains", [])):
            report.append(f"{key}: the members are in {domain or '-'} {list(domains)} of the simulator's snapshot, "
                          f"the Gang object says {status.get('domain')} {status.get('domains')}")
        gang = simulated.get(key)
        if gang is None:
            if status["gated"] or status["phase"] != "Released":
                report.append(f"{key}: not decided by the simulator, the reconciler has it {status['phase']} "
                              f"with {status['gated']} gated")
            continue
        if (gang["phase"], gang["reason"]) != reconciled:
            report.append(f"{key}: the simulator says {(gang['phase'], gang['reason'])}, the reconciler {reconciled}")
        namespace, name = key.split("/", 1)
        members = gang_members(dump, namespace, name.removeprefix("job:"))
        recorded = recorded_placement(dump, namespace, members)
        planned = {p["pod"]: p["node"] for p in gang["placements"]}
        if any(recorded.get(pod) != node for pod, node in planned.items()):
            report.append(f"{key}: the simulator places {planned}, the reconciler {recorded}")
        nominated = sorted(set(recorded.values())) if status["phase"] == "Preempting" else []
        if status.get("nominatedNodes", []) != nominated:
            report.append(f"{key}: the Gang object nominates {status.get('nominatedNodes')}, its members {nominated}")
        if "reservation" in gang:
            held = dumped_reservation(dump, namespace, name.removeprefix("job:"))
            if gang["reservation"]["nodes"] != held:
                report.append(f"{key}: the simulator reserves {gang['reservation']['nodes']}, the Job {held}")
            elif any(node != held[int(pod.split("-")[1])] for pod, node in recorded.items()):
                report.append(f"{key}: members {recorded} are not on their ranks' nodes {held}")
    return report


def test_the_simulator_and_kubectl_troupe_decide_every_gang_as_the_reconciler_did(stack, tmp_path):
    cluster = stack.cluster
    api = cluster.api_client("admin")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    with contextlib.ExitStack() as cleanup:
        ns = cleanup.enter_context(temporary_namespace(core, "sim", timeout=120))
        held_ns = cleanup.enter_context(temporary_namespace(core, "sim-held", timeout=120))
        dra = cleanup.enter_context(dra_nodes(api, ns, 3, H100))
        cleanup.enter_context(victims_held(api))
        cleanup.callback(release_victims, core, ns)  # first of all on the way out

        batch.create_namespaced_job(ns, job("ran", 4, {**gang_annotations("ran", 4), **TIMEOUT}))
        running_job_pods(core, ns, "ran", 4, timeout=180)
        quota(core, held_ns, 2)
        batch.create_namespaced_job(held_ns, job("reserved", 4, {"troupe.io/gang-size": "auto", **TIMEOUT}))
        wait_for("2 members of the reserved Job running", lambda: running_job_pods(core, held_ns, "reserved", 2),
                 timeout=180)
        batch.create_namespaced_job(ns, job("filler", 6, {**gang_annotations("filler", 6), **TIMEOUT}))
        running_job_pods(core, ns, "filler", 6, timeout=180)
        pods(core, ns, "low", 2, 2, priority=LOW, victim=True)
        wait_for("gang low running", lambda: running(core, ns, "low", 2), timeout=180)
        create(api, ns, "resourceclaimtemplates", "eight", claim_spec(8))
        pods(core, ns, "dra-run", 2, 2, gpus=0, claim="eight")
        wait_for("gang dra-run running", lambda: running(core, ns, "dra-run", 2), timeout=180)
        pods(core, ns, "dra-wait", 2, 2, gpus=0, claim="eight")
        pods(core, ns, "partial", 4, 3, gpus=1)
        pods(core, ns, "wide", 5, 5, extra={contract.TOPOLOGY_REQUIRED_LEVEL: SUBBLOCK})
        pods(core, ns, "urgent", 2, 2, priority=HIGH)

        expected = {f"{ns}/ran": "Released", f"{held_ns}/job:reserved": "Releasing", f"{ns}/filler": "Released",
                    f"{ns}/urgent": "Preempting", f"{ns}/partial": "Waiting", f"{ns}/wide": "Unschedulable",
                    f"{ns}/dra-run": "Released", f"{ns}/dra-wait": "Unschedulable"}

        def standing() -> dict[str, dict[str, Any]] | None:
            objects = gang_objects(cluster)
            phases = {key: objects[key].get("status", {}).get("phase") for key in expected if key in objects}
            # The preemptor's Gang object tells the evictions first and then, at its next
            # status write (at most one a second, decision 043), the wait for its victims.
            waiting = "to terminate" in objects.get(f"{ns}/urgent", {}).get("status", {}).get("message", "")
            return objects if phases == expected and waiting else None

        wait_for(f"the Gang objects in their phases {expected}", standing, timeout=240)
        assert len([p for p in core.list_namespaced_pod(ns, label_selector="gang=low").items
                    if p.metadata.deletion_timestamp and p.status.phase == "Running"]) == 2, "the victims terminate"

        dump_path = tmp_path / "snapshot.json"
        now, objects = stable_dump(cluster, dump_path)
        dump = json.loads(dump_path.read_text())
        config = str(stack.config_path)
        simulated = decided([sys.executable, "-m", "reconciler", "simulate", str(dump_path), "--output", "json",
                             "--now", now, "--config", config])
        statuses = decided([str(PLUGIN), "status", "-A", "--snapshot", str(dump_path), "-o", "json", "--now", now,
                            "--config", config])

        sim = {f"{g['namespace']}/{g['name']}": g for g in simulated["gangs"]}
        report = disagreements(expected, objects, dump, sim, statuses, dump_path, load_config(config))
        assert not report, "\n".join(report) + f"\n--now {now}\nsimulated: {json.dumps(simulated, indent=1)}"
        # The dump is the decisions' input: the states are in it as the Gang objects say.
        assert {v["kind"] for v in dump["items"]} >= {"ResourceSlice", "ResourceClaim", "ResourceClaimTemplate",
                                                       "DeviceClass", "Job", "Namespace", "PriorityClass"}
        assert sim[f"{ns}/urgent"]["phase"] == "Preempting" and "victim" in sim[f"{ns}/urgent"]["reason"]
        assert "devices/gpu.troupe.dev" in sim[f"{ns}/dra-wait"]["reason"], sim[f"{ns}/dra-wait"]["reason"]
        assert len(sim[f"{held_ns}/job:reserved"]["reservation"]["nodes"]) == 4
        assert objects[f"{ns}/dra-run"]["status"]["domain"] == f"{SUBBLOCK}={dra[0].rsplit('-', 1)[0]}"
