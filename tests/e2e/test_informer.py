"""The reconciler's list+watch against a real kube-apiserver: events, and dead connections.

(``410 Gone`` cannot be provoked on demand on a fresh cluster, whose etcd has compacted
nothing yet: tests/reconciler/kube/test_informer.py drives it through a fake transport.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from reconciler import kube
from tests.support.e2e import pod_body, wait_for


class Recorder:
    def __init__(self):
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def on_list(self, items):
        self.lists.append(sorted(i["metadata"]["name"] for i in items))

    def on_event(self, kind, obj):
        self.events.append((kind, obj["metadata"]["name"]))


@pytest.fixture
def informer_for(cluster):
    started = []

    def make(api, **kwargs):
        rec = Recorder()
        inf = kube.Informer(kube.pods(api), rec.on_list, rec.on_event, **kwargs).start()
        started.append(inf)
        assert inf.synced.wait(30), "first list within 30 s"
        return inf, rec

    yield make
    for inf in started:
        inf.stop()


def test_a_watch_delivers_adds_updates_and_deletes_as_plain_dicts(cluster, admin_core, namespace, informer_for):
    inf, rec = informer_for(cluster.api_client("admin"))
    admin_core.create_namespaced_pod(namespace, pod_body("watched"))
    admin_core.patch_namespaced_pod("watched", namespace, {"metadata": {"labels": {"step": "two"}}})
    admin_core.delete_namespaced_pod("watched", namespace, grace_period_seconds=0)
    wait_for("ADDED, MODIFIED and DELETED of the pod", lambda: {"ADDED", "MODIFIED", "DELETED"} <= {
        k for k, name in rec.events if name == "watched"})
    assert inf.relists == 1


class FreezingProxy:
    """A TCP proxy to the API server that can stop passing bytes without closing anything:
    what a connection through a dead NAT or load balancer looks like."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            self._sockets += [conn, upstream]
            frozen_at_start = self.frozen.is_set()
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b, frozen_at_start), daemon=True).start()

    def _pipe(self, src, dst, frozen_at_start):
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if self.frozen.is_set() and not frozen_at_start:
                    continue  # swallow: the peer never hears of it
                dst.sendall(data)

    def close(self):
        self.listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


def test_a_silent_connection_is_noticed_and_replaced(cluster, admin_core, namespace, informer_for, tmp_path: Path):
    server = cluster.server.removeprefix("https://")
    host, port = server.rsplit(":", 1)
    proxy = FreezingProxy((host, int(port)))
    try:
        kubeconfig = yaml.safe_load(cluster.kubeconfig("admin").read_text())
        for c in kubeconfig["clusters"]:
            c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        path = tmp_path / "via-proxy.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        api = config.new_client_from_config(config_file=str(path))
        inf, rec = informer_for(api, watch_seconds=60, read_timeout=3)
        watches = inf.watches
        proxy.frozen.set()  # existing connections go silent; new ones work
        admin_core.create_namespaced_pod(namespace, pod_body("during-freeze"))
        wait_for("a new watch after the read timeout", lambda: inf.watches > watches, timeout=30)
        wait_for("the pod created while frozen", lambda: ("ADDED", "during-freeze") in rec.events, timeout=30)
    finally:
        proxy.close()
    assert isinstance(api, client.ApiClient)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_an_informer_refused_by_rbac_says_so_for_the_liveness_probe(cluster):
    clock = Clock()
    rec = Recorder()
    inf = kube.Informer(kube.pods(cluster.api_client("alice")), rec.on_list, rec.on_event, clock=clock).start()
    try:
        wait_for("a refused list", lambda: inf.last_error, timeout=30)
        assert not inf.synced.is_set()
        assert inf.problem() == ""
        clock.now += kube.UNHEALTHY_AFTER_SECONDS + 1
        assert inf.problem() == "pods: no list or watch has succeeded for 61s; last error: API error 403 Forbidden"
    finally:
        inf.stop()
