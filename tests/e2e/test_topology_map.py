"""The topology map on the live local cluster, in headless Chromium (tests/support/browser.py):
the reconciler's page (``/topology/`` on its metrics port) and ``kubectl troupe topology --web``.

While two gangs stand on the nodes of examples/nodes.yaml (2 blocks x 2 subblocks x 4 hosts,
8 GPUs each)::

    ran    4 x 8 GPUs, released and Running (one subblock)
    wide   5 x 8 GPUs required in one subblock (4 nodes): never fits

the reconciler's page shows ran's cells on the nodes its pods run on and wide among the
waiting gangs with the reconciler's reason, and then, without being reloaded, the cell of a
gang created after it was drawn. ``kubectl troupe topology --web`` serves the same cluster,
reads it again when asked after a change, and stops on Ctrl-C.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from kubernetes import client

from tests.support.browser import Browser
from tests.support.e2e import gang_annotations, pod_body, running_job_pods, wait_for
from tests.support.e2e import indexed_job as job_body

SUBBLOCK = "cloud.google.com/gce-topology-subblock"
PLUGIN = Path(sys.executable).parent / "kubectl-troupe"
DRAWN = "document.body.dataset.state === 'drawn'"


def cells_of(browser: Browser, gang: str) -> list[str]:
    return list(browser.evaluate(f"""Array.from(document.querySelectorAll('#map .c'))
        .filter(c => c.title.split(' · ')[1] !== undefined && c.title.split(' · ')[1].split(', ').includes({json.dumps(gang)}))
        .map(c => c.dataset.node).sort()"""))


def start_gangs(cluster, admin_core, namespace: str) -> list[str]:
    """``ran`` running and ``wide`` waiting; the nodes ran's pods run on."""
    batch = client.BatchV1Api(cluster.api_client("admin"))
    batch.create_namespaced_job(namespace, job_body("ran", 4, gang_annotations("ran", 4), gpus=8))
    nodes = sorted(p.spec.node_name for p in running_job_pods(admin_core, namespace, "ran", 4))
    wide = {**gang_annotations("wide", 5), "troupe.io/topology-required-level": SUBBLOCK}
    for i in range(5):
        admin_core.create_namespaced_pod(namespace, pod_body(f"wide-{i}", wide, gpus=8))
    wait_for("the wide gang's members gated", lambda: len([
        p for p in admin_core.list_namespaced_pod(namespace).items
        if p.metadata.name.startswith("wide-") and p.spec.scheduling_gates]) == 5)
    return nodes


def test_the_reconcilers_map_shows_the_cluster_and_updates_itself(cluster, troupe, admin_core, namespace):
    ran_nodes = start_gangs(cluster, admin_core, namespace)
    with Browser() as browser:
        # Redirected to /topology/; the bearer token rides in the fragment, never sent to a server.
        browser.open(f"http://127.0.0.1:{troupe.metrics_port}/topology#token={cluster.token('admin')}")
        browser.wait_for(DRAWN)
        browser.wait_for(f"document.getElementById('waiting').innerText.includes({json.dumps(namespace + '/wide')})",
                         timeout=30)  # read again every 5 s until the reconciler has decided it
        assert cells_of(browser, f"{namespace}/ran") == ran_nodes
        wide = browser.evaluate(f"""document.querySelector('#waiting li[data-gang="{namespace}/wide"]').innerText""")
        assert "Unschedulable" in wide and f"fits 4 of 5 members in one {SUBBLOCK}" in wide
        assert "reconciler" in browser.evaluate("document.getElementById('summary').textContent")
        draws = int(browser.evaluate("document.body.dataset.draws"))

        admin_core.create_namespaced_pod(namespace, pod_body("late-0", gang_annotations("late", 1), gpus=8))
        browser.wait_for(f"""Array.from(document.querySelectorAll('#map .c'))
            .some(c => c.title.includes({json.dumps(namespace + '/late')}))""", timeout=40)
        assert int(browser.evaluate("document.body.dataset.draws")) > draws  # drawn again, not reloaded
        late = cells_of(browser, f"{namespace}/late")
        node = admin_core.read_namespaced_pod("late-0", namespace).spec.node_name
        assert late == [node] and node not in ran_nodes


def test_kubectl_troupe_topology_web_serves_the_live_cluster(cluster, troupe, admin_core, namespace):
    ran_nodes = start_gangs(cluster, admin_core, namespace)
    proc = subprocess.Popen([str(PLUGIN), "topology", "--web", "--no-browser", "--refresh", "1",
                             "--kubeconfig", str(cluster.kubeconfig("admin"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        found = re.search(r"http://127\.0\.0\.1:\d+/topology/\?token=[A-Za-z0-9_-]+", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        with Browser() as browser:
            browser.open(found.group(0))
            browser.wait_for(DRAWN)
            assert cells_of(browser, f"{namespace}/ran") == ran_nodes
            wide = browser.evaluate(f"""document.querySelector('#waiting li[data-gang="{namespace}/wide"]').innerText""")
            assert f"fits 4 of 5 members in one {SUBBLOCK}" in wide

        admin_core.delete_namespaced_pod("wide-4", namespace)  # read again on a later request

        def wide_members() -> int | None:
            with urllib.request.urlopen(found.group(0).replace("/?token=", "/data.json?token="), timeout=30) as r:
                rows = {g["gang"]: g for g in json.load(r)["gangs"]}
            present = rows[f"{namespace}/wide"]["members"]["present"]
            return present if present == 4 else None

        assert wait_for("the deleted member gone from the page's data", wide_members, timeout=30) == 4
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=15)
    assert code == 130
