"""``kubectl troupe`` against the live local cluster, and the metrics it leaves behind.

The installed ``kubectl-troupe`` executable runs ``status``, ``why``, ``topology`` and
``plan`` with the admin's kubeconfig while three gangs stand on the nodes of
examples/nodes.yaml (2 blocks x 2 subblocks x 4 hosts, 8 GPUs each)::

    ran       4 x 8 GPUs, released and Running (one subblock)
    partial   3 of 4 members present: waits for the fourth
    wide      5 x 8 GPUs required in one subblock (4 nodes): never fits

``status -w`` answers again when a member is created (a watch, not a timer), and ``--as``
reaches the API server. Then the reconciler's /metrics shows the release (counted and timed) and its API traffic, and
every metric the chart's dashboard queries is served by the reconciler or the webhook.
"""

from __future__ import annotations

import json
import queue
import signal
import ssl
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support.e2e import gang_annotations, pod_body, running_job_pods, wait_for
from tests.support.e2e import indexed_job as job_body
from tests.support.metrics import families, queried

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"


def troupe_cli(cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PLUGIN), *argv, "--kubeconfig", str(cluster.kubeconfig("admin"))],
                          capture_output=True, text=True, timeout=60, check=False)


def metrics_text(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        return str(r.read().decode())


def sample(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and (line[len(name)] in " {"))


def test_status_why_topology_and_plan_answer_on_the_live_cluster(cluster, troupe, admin_core, namespace, tmp_path):
    batch = client.BatchV1Api(cluster.api_client("admin"))
    batch.create_namespaced_job(namespace, job_body("ran", 4, gang_annotations("ran", 4), gpus=8))
    ran = running_job_pods(admin_core, namespace, "ran", 4)
    # The subblock ran runs in: the first free one, unless another test's last objects (a
    # Job's reservation while its namespace terminates) still hold a node of it.
    (ran_subblock,) = {admin_core.read_node(p.spec.node_name).metadata.labels[SUBBLOCK] for p in ran}
    for i in range(3):
        admin_core.create_namespaced_pod(namespace, pod_body(f"partial-{i}", gang_annotations("partial", 4), gpus=1))
    wide = {**gang_annotations("wide", 5), "troupe.io/topology-required-level": SUBBLOCK}
    for i in range(5):
        admin_core.create_namespaced_pod(namespace, pod_body(f"wide-{i}", wide, gpus=8))
    wait_for("the wide gang's members gated", lambda: len([
        p for p in admin_core.list_namespaced_pod(namespace).items
        if p.metadata.name.startswith("wide-") and p.spec.scheduling_gates]) == 5)

    status = troupe_cli(cluster, "status", "-n", namespace, "-o", "json")
    assert status.returncode == 0, status.stderr
    gangs = {g["spec"]["gangName"]: g["status"] for g in json.loads(status.stdout)["items"]}
    assert (gangs["ran"]["phase"], gangs["ran"]["members"]) == (
        "Released", {"present": 4, "gated": 0, "released": 4, "bound": 4, "running": 4})
    assert (gangs["partial"]["phase"], gangs["partial"]["reason"]) == ("Waiting", "3 of 4 members present")
    assert gangs["wide"]["phase"] == "Unschedulable"
    assert gangs["wide"]["reason"].startswith(f"fits 4 of 5 members in one {SUBBLOCK}")
    assert gangs["wide"]["waitingSeconds"] >= 0 and gangs["wide"]["queuePosition"] >= 1
    table = troupe_cli(cluster, "status", "-n", namespace)
    assert table.stdout.splitlines()[0].split() == [
        "NAMESPACE", "GANG", "PHASE", "MEMBERS", "RELEASED", "BOUND", "RUNNING", "WAITING", "QUEUE", "REASON"]

    why = troupe_cli(cluster, "why", "wide-2", "-n", namespace)
    assert why.returncode == 0, why.stderr
    assert f"Pod:      {namespace}/wide-2 (rank 2 of gang {namespace}/wide)" in why.stdout
    assert "Phase:    Unschedulable" in why.stdout
    assert "Domains:  5 gated member(s) at subblock (the gang's required level), best first:" in why.stdout
    lines = why.stdout.splitlines()
    best = next(line for line in lines if "subblock " in line and " fit" in line)
    assert "4 of 5 fit; at most 4 even when empty" in best and f"subblock {ran_subblock}:" not in best, why.stdout
    ran_line = next(line for line in lines if f"subblock {ran_subblock}:" in line)
    assert "0 of 5 fit (4 nodes full)" in ran_line and "free nvidia.com/gpu: 0" in ran_line, why.stdout

    topology = troupe_cli(cluster, "topology")
    assert topology.returncode == 0, topology.stderr
    holding = [line for line in topology.stdout.splitlines() if f"{namespace}/ran (8 nvidia.com/gpu, 1 pod)" in line]
    assert len(holding) == 4

    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps(job_body("next", 2, gang_annotations("next", 2), gpus=8)))
    before = len(admin_core.list_namespaced_pod(namespace).items)
    plan = troupe_cli(cluster, "plan", "-f", str(manifest), "-n", namespace)
    assert plan.returncode == 0, plan.stderr
    assert f"{namespace}/next  Placed" in plan.stdout
    assert f"{namespace}/next would be released now" in plan.stdout
    assert len(admin_core.list_namespaced_pod(namespace).items) == before  # nothing created
    assert not batch.list_namespaced_job(namespace, field_selector="metadata.name=next").items

    reconciler = metrics_text(f"http://127.0.0.1:{troupe.metrics_port}/metrics")
    assert sample(reconciler, "troupe_gang_releases_total") >= 1
    assert sample(reconciler, "troupe_gang_complete_to_released_seconds_count") >= 1
    wait_for("the release's binding timed", lambda: sample(
        metrics_text(f"http://127.0.0.1:{troupe.metrics_port}/metrics"), "troupe_gang_released_to_bound_seconds_count") >= 1)
    assert 'troupe_kube_api_requests_total{code="200",resource="pods",verb="list"}' in reconciler
    assert 'troupe_kube_api_requests_total{code="200",resource="pods",verb="patch"}' in reconciler
    assert 'troupe_informer_last_list_timestamp_seconds{resource="nodes"}' in reconciler
    context = ssl.create_default_context(cafile=str(troupe.dir / "ca.crt"))
    webhook = metrics_text(f"https://127.0.0.1:{troupe.webhook_port}/metrics", context)
    missing = sorted(queried() - families(reconciler) - families(webhook))
    assert not missing, f"the dashboard queries metrics the running reconciler and webhook do not serve: {missing}"


def lines_of(stream: Any) -> queue.Queue[str]:
    """The lines ``stream`` gives, as they come, read by a thread (a read with a timeout)."""
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [out.put(line) for line in iter(stream.readline, "")], daemon=True).start()
    return out


def test_watch_answers_again_when_a_member_comes_and_impersonation_reaches_the_api(cluster, troupe, admin_core,
                                                                                   namespace):
    admin_core.create_namespaced_pod(namespace, pod_body("duo-0", gang_annotations("duo", 2), gpus=1))
    wait_for("duo-0 gated", lambda: bool(admin_core.read_namespaced_pod("duo-0", namespace).spec.scheduling_gates))
    proc = subprocess.Popen([str(PLUGIN), "status", "-n", namespace, "-o",
                             "custom-columns=GANG:.spec.gangName,PRESENT:.status.members.present", "--no-headers",
                             "-w", "--watch-interval", "0.5", "--kubeconfig", str(cluster.kubeconfig("admin"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = lines_of(proc.stdout)
        assert lines.get(timeout=60).split() == ["duo", "1"]
        # No re-listing on a timer: the next answer comes from the watch of the pod created.
        admin_core.create_namespaced_pod(namespace, pod_body("duo-1", gang_annotations("duo", 2), gpus=1))
        assert lines.get(timeout=60).split() == ["duo", "2"]
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 130

    # --as reaches the API server: a service account that may list nothing is refused.
    refused = troupe_cli(cluster, "status", "-n", namespace, "--as", f"system:serviceaccount:{namespace}:default")
    assert refused.returncode == 1 and "403" in refused.stderr, refused.stderr
