"""The chart's Grafana dashboard: it parses, the chart ships it when asked, and every metric it
queries exists on the /metrics of a running reconciler or webhook (both started here, scraped
over HTTP, compared)."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devtools.devcluster.build import built_helm
from tests.support.helm import NOT_BUILT, render
from tests.support.metrics import dashboard, families, queried
from tests.support.webhook_builders import free_port, start_server

REPO = Path(__file__).resolve().parents[2]



def test_the_dashboard_parses_with_unique_panel_ids_and_a_query_in_every_panel():
    d = dashboard()
    assert d["uid"] == "troupe-overview" and d["title"] == "Troupe"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for panel in d["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
    assert {"troupe_gangs", "troupe_gang_complete_to_released_seconds", "troupe_gang_released_to_bound_seconds",
            "troupe_gang_releases_total", "troupe_gang_rollbacks_total", "troupe_preemptions_total",
            "troupe_kube_api_requests_total", "troupe_informer_watch_restarts_total",
            "troupe_informer_last_list_timestamp_seconds"} <= queried()


def scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        return str(r.read().decode())


def reconciler_metrics(tmp: Path) -> str:
    """``python -m reconciler run`` pointed at an API server that is not there (its
    informers retry while it serves /metrics), scraped once, stopped by its pid."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{dead}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp / "reconciler.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "reconciler", "run", "--kubeconfig", str(kubeconfig),
                                 "--metrics-bind", f"127.0.0.1:{port}"], cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                text = scrape(f"http://127.0.0.1:{port}/metrics")
                if "troupe_kube_api_requests_total{" in text:  # the informers have tried
                    return text
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"reconciler /metrics not served:\n{(tmp / 'reconciler.log').read_text()}")
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def webhook_metrics(tmp: Path) -> str:
    """``python -m webhook serve`` after one admission review and one malformed request."""
    server = start_server(tmp)
    try:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "1", "operation": "CREATE", "namespace": "ml",
            "object": {"metadata": {"name": "p", "annotations": {"troupe.io/gang-name": "g", "troupe.io/gang-size": "2"}},
                       "spec": {"containers": [{"name": "c"}]}}}}
        conn = server.connection()
        conn.request("POST", "/mutate", json.dumps(review), {"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
                server.tls.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            tls.recv(1024)
        return scrape(f"https://127.0.0.1:{server.port}/metrics", server.tls.client_context())
    finally:
        server.stop()


def test_every_metric_the_dashboard_queries_is_served_by_the_reconciler_or_the_webhook(tmp_path):
    served = families(reconciler_metrics(tmp_path)) | families(webhook_metrics(tmp_path / "webhook"))
    missing = sorted(queried() - served)
    assert not missing, f"the dashboard queries metrics nobody serves: {missing}"


@pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)
@pytest.mark.parametrize(("values", "shipped"), [
    ((), False),
    (("--set", "grafanaDashboard.enabled=true"), True),
    (("--set", "serviceMonitor.enabled=true", "--set", "networkPolicy.metricsFrom[0].podSelector.matchLabels.a=b"),
     True),
])
def test_the_chart_ships_the_dashboard_as_a_configmap_for_grafanas_sidecar(values, shipped):
    objects = render(*values)
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    assert bool(maps) == shipped
    if shipped:
        (cm,) = maps
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"]["troupe.json"]) == dashboard()
